"""The errors that stop an engine run.

They live apart from the step loop so that the loop's modules can be compiled
(`make compiled`, DESIGN.md "Compiled core"): a compiled class cannot subclass RuntimeError.
`engines.engine` and `engines.livelock` re-export them.
"""

from __future__ import annotations

__all__ = ["ClockError", "DeadlockError", "InvariantViolation", "NoProgressError",
           "StepLimitError"]


class DeadlockError(RuntimeError):
    """Work is pending, nothing can be scheduled, and no arrival is due."""

    def __init__(self, message: str, stuck_ids: list[str]) -> None:
        super().__init__(message)
        self.stuck_ids = stuck_ids


class StepLimitError(RuntimeError):
    """The run reached the engine's `max_steps` with work still pending."""


class InvariantViolation(RuntimeError):
    """The scheduler's state failed the engine's per-step `check`."""


class NoProgressError(RuntimeError):
    """Steps keep coming but no request ends and none reaches a new position (a livelock)."""

    def __init__(self, message: str, stuck_ids: list[str]) -> None:
        super().__init__(message)
        self.stuck_ids = stuck_ids


class ClockError(RuntimeError):
    """The virtual clock stopped being a finite, non-decreasing number of seconds (a step
    duration that is NaN, infinite or negative, or a clock that overflowed): the loop could
    never reach the next arrival."""
