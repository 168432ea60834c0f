"""No-progress detection: a run whose steps compute nothing new stops with an error.

The engine's deadlock check only sees plans that schedule nothing. A scheduler can also keep
scheduling without ever getting anywhere: two requests that evict each other and recompute
the same positions forever (issue 15). `ProgressWatch` counts the steps since the last
progress, where progress is a request that ends (finished, aborted) or a chunk that computes
a position its request never reached before (a new prompt position or a new output token;
recomputing positions after an eviction is not progress). It raises `NoProgressError` after
more than `min_steps + factor * H` such steps, H being the positions the live requests have
reached in all: a live scheduler recomputes each of them at most a few times before it must
reach a new one, so the bound never fires on a slow run, only on one that cannot end.
"""

from __future__ import annotations

from collections.abc import Iterable

from engines.errors import NoProgressError
from schedulers.contract import StepPlan

DEFAULT_MIN_STEPS = 1000
DEFAULT_FACTOR = 4
_SHOW_IDS = 20  # request ids shown in an error message; the rest are counted


def format_ids(ids: list[str]) -> str:
    """The first request ids of `ids` for an error message, and how many there are in all."""
    shown = ", ".join(ids[:_SHOW_IDS])
    return shown + (f", ... ({len(ids)} in all)" if len(ids) > _SHOW_IDS else "")


class ProgressWatch:
    """Counts steps without progress (see the module docstring); `observe` raises
    `NoProgressError` when they exceed the bound."""

    def __init__(self, min_steps: int = DEFAULT_MIN_STEPS, factor: int = DEFAULT_FACTOR
                 ) -> None:
        if min_steps < 1 or factor < 0:
            raise ValueError(f"ProgressWatch: min_steps={min_steps} must be >= 1 and "
                             f"factor={factor} >= 0")
        self.min_steps = min_steps
        self.factor = factor
        self._reached: dict[str, int] = {}  # request id -> highest position end computed
        self._total = 0
        self.stalled_steps = 0
        self._evicted: set[str] = set()  # preempted since the last progress
        self._scheduled: set[str] = set()

    @property
    def limit(self) -> int:
        """The number of steps without progress tolerated now."""
        return self.min_steps + self.factor * self._total

    def progressed(self) -> None:
        """Something moved on outside `observe` (e.g. a committed decode run)."""
        self.stalled_steps = 0
        self._evicted.clear()
        self._scheduled.clear()

    def forget(self, request_id: str) -> None:
        """`request_id` has ended and left the engine."""
        self._total -= self._reached.pop(request_id, 0)

    def observe(self, plan: StepPlan, ended: Iterable[str]) -> None:
        """One step: `plan` and the requests that ended in it (finished or aborted)."""
        progress = any(True for _ in ended) or bool(plan.aborted)
        reached = self._reached
        for c in plan.chunks:
            end = c.start_pos + c.num_tokens
            before = reached.get(c.request_id, 0)
            if end > before:
                reached[c.request_id] = end
                self._total += end - before
                progress = True
        if progress:
            self.progressed()
            return
        self.stalled_steps += 1
        self._evicted.update(plan.preempted)
        self._scheduled.update(c.request_id for c in plan.chunks)
        if self.stalled_steps > self.limit:
            stuck = sorted(self._evicted | self._scheduled)
            raise NoProgressError(
                f"no progress for {self.stalled_steps} steps (no request ended and "
                f"none computed a new position; the limit is {self.min_steps} + "
                f"{self.factor} x {self._total} positions reached): a livelock. Requests "
                f"scheduled or evicted meanwhile: {format_ids(stuck) or '-'}; evicted: "
                f"{format_ids(sorted(self._evicted)) or '-'}", stuck)
