"""The engine's intake: requests pulled one at a time, in arrival order.

A list (any `Sequence`) is validated and sorted up front (stable: equal arrival times keep the
given order), as a list is already in memory. Any other iterable is pulled lazily, one
request ahead of the clock, and must already be in arrival order: a request that arrives
before the one pulled just ahead of it is refused, naming both. Either way every request
needs a finite `arrival_time` and no output tokens (requests are consumed by a run).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence, Sized

from engines.errors import ClockError
from schedulers.contract import Request


def _check(r: Request) -> None:
    if not math.isfinite(r.arrival_time):
        raise ValueError(f"engine: request {r.request_id!r} has arrival_time={r.arrival_time!r}")
    if r.output_token_ids:
        raise ValueError(
            f"engine: request {r.request_id!r} already has {len(r.output_token_ids)} output "
            "tokens (requests are consumed by a run; build fresh ones)")


class ArrivalQueue:
    """Requests in arrival order; `peek_time()` is the next arrival (inf when none is left)."""

    def __init__(self, requests: Iterable[Request]) -> None:
        self.total: int | None
        if isinstance(requests, Sequence):
            reqs = list(requests)
            for r in reqs:
                _check(r)
            counts = Counter(r.request_id for r in reqs)
            if len(counts) != len(reqs):
                dups = sorted(rid for rid, k in counts.items() if k > 1)
                raise ValueError(f"records: duplicate request ids: {', '.join(dups[:10])}")
            self._it: Iterator[Request] = iter(sorted(reqs, key=lambda r: r.arrival_time))
            self.total = len(reqs)
        else:
            self._it = iter(requests)
            self.total = len(requests) if isinstance(requests, Sized) else None
        self._last: Request | None = None
        self._next: Request | None = None
        self._pull()

    def _pull(self) -> None:
        r = next(self._it, None)
        if r is not None:
            _check(r)
            last = self._next
            if last is not None and r.arrival_time < last.arrival_time:
                raise ValueError(
                    f"engine: requests must come in arrival order: {r.request_id!r} arrives "
                    f"at t={r.arrival_time!r}, before {last.request_id!r} pulled ahead of it "
                    f"(t={last.arrival_time!r})")
        self._next = r

    def peek_time(self) -> float:
        """The next request's arrival time; inf when none is left."""
        return self._next.arrival_time if self._next is not None else math.inf

    def pending(self) -> bool:
        """Whether a request is left to pull."""
        return self._next is not None

    def pop(self) -> Request:
        """The next request (call only when `pending()`)."""
        r = self._next
        if r is None:
            raise IndexError("engine: no request left to pull (pop() called when none is "
                             "pending)")
        self._pull()
        return r


def check_clock(clock: float, before: float, what: str) -> None:
    """Raise `ClockError` unless `clock` is a finite number of seconds not below `before`
    (the clock before `what`, e.g. "step 12"): a NaN or infinite clock never reaches the
    next arrival, so the loop could not end."""
    if not before <= clock < math.inf:
        raise ClockError(
            f"engine: the clock went from t={before!r} s to t={clock!r} s after {what}: a step "
            "must take a finite, non-negative number of seconds (a cost model or executor "
            "setting such as executor.step_overhead_s out of range?)")


def next_arrival_clock(clock: float, arrivals: ArrivalQueue) -> float:
    """The clock jumped to the next arrival (nothing runs); `ClockError` when that does not
    reach it (a NaN clock), which would otherwise spin the loop without ever admitting it."""
    jumped = max(clock, arrivals.peek_time())
    if not arrivals.peek_time() <= jumped < math.inf:
        raise ClockError(
            f"engine: the clock t={clock!r} s cannot reach the next arrival at "
            f"t={arrivals.peek_time()!r} s (a step took a number of seconds that is not finite)")
    return jumped
