"""What the engine needs from an executor (real or simulated)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from schedulers.contract import DecodeRun, Request, StepPlan, StepResult


@runtime_checkable
class Executor(Protocol):
    """Runs one `StepPlan` and returns the sampled tokens and the step's duration.

    An executor that keeps per-request state may also define `release(request_id)`
    (`ReleasingExecutor`): the engine calls it once the request has ended, so that state need
    not outlive it.
    """

    def register(self, request: Request) -> None:
        """Learn a request at its arrival (before any plan names it)."""
        ...

    def execute(self, plan: StepPlan) -> StepResult:
        """Compute the plan's chunks; sample a token for every chunk with `sample` set."""
        ...


@runtime_checkable
class DecodeRunExecutor(Protocol):
    """Capability: an executor that runs a scheduler's decode run (DESIGN.md, "Decode runs")
    without a plan per step: the sim executor has it, the real one does not."""

    def decode_run_limit(self, run: DecodeRun) -> int:
        """The steps of `run` this executor allows (it ends with the first stop token)."""
        ...

    def decode_run_tokens(self, run: DecodeRun, num_steps: int) -> list[list[int]]:
        """The tokens of the run's first `num_steps` steps, one list per request."""
        ...

    def decode_step_seconds(self, num_seqs: int, seq_len_sum: int, seq_len_max: int) -> float:
        """The duration of one decode step of `num_seqs` sequences of `seq_len_sum` tokens,
        the longest `seq_len_max` (a padded kernel's cost depends on it)."""
        ...


@runtime_checkable
class ReleasingExecutor(Protocol):
    """Capability: an executor with per-request state, released once the request has ended."""

    def release(self, request_id: str) -> None:
        """Forget an ended request."""
        ...


@runtime_checkable
class DetokenizingExecutor(Protocol):
    """Capability: an executor whose checkpoint has a tokenizer (outputs as text)."""

    def decode(self, token_ids: list[int]) -> str | None:
        """The text of `token_ids` (None: no tokenizer)."""
        ...
