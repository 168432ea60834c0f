"""Errors in what a user gave (a config value, a command line, an input file), and how the
command-line entry points show them.

A `UserError` is shown as one line, `error: <what, where, how to fix>`, and the command exits
non-zero; its traceback only with `SCHEDBENCH_DEBUG=1` in the environment (which also lets
Hydra print its full stack, as `HYDRA_FULL_ERROR=1` does). Any other exception is an
internal error and keeps its traceback.
"""

from __future__ import annotations

import os

DEBUG_ENV = "SCHEDBENCH_DEBUG"


class UserError(ValueError):
    """A config, command line or input file that cannot run; the message says what is wrong,
    where, and how to fix it, on one line."""


class ConfigError(UserError):
    """A config or command line that cannot run; the message says why and what to type."""


class JobConfigError(UserError):
    """An error raised while a job is built from its config (a value its object refuses, an
    input file that cannot be read): a user error that keeps the original as `original`."""

    def __init__(self, original: Exception) -> None:
        super().__init__(str(original))
        self.original = original


def debug_enabled() -> bool:
    """Whether `SCHEDBENCH_DEBUG` asks for tracebacks of user errors."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


def one_line(error: BaseException | str) -> str:
    """`error: <message>` on one line (the message's lines joined)."""
    text = " ".join(str(error).split()) if not isinstance(error, str) else " ".join(
        error.split())
    return f"error: {text}"
