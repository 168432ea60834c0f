"""What the engine needs from an executor (real or simulated)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from schedulers.contract import Request, StepPlan, StepResult


@runtime_checkable
class Executor(Protocol):
    """Runs one `StepPlan` and returns the sampled tokens and the step's duration.

    An executor that keeps per-request state may also define `release(request_id)`: the
    engine calls it once the request has ended, so that state need not outlive it.
    """

    def register(self, request: Request) -> None:
        """Learn a request at its arrival (before any plan names it)."""
        ...

    def execute(self, plan: StepPlan) -> StepResult:
        """Compute the plan's chunks; sample a token for every chunk with `sample` set."""
        ...
