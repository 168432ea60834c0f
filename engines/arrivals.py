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
        assert r is not None
        self._pull()
        return r
