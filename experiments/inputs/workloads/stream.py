"""Workloads as lazy streams: requests built one at a time, in arrival order.

A `RequestStream` knows how many requests it holds (`len`, for progress bars) without building
any; iterating it builds them one by one, each prompt only when its request is pulled, so an
engine that pulls requests as its clock reaches them holds only the live ones. Each iteration
starts afresh from the seed and yields new `Request` objects with the same contents.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from schedulers.contract import Request


@dataclass(frozen=True, slots=True)
class RequestStream:
    """`count` requests, built by `make()` in arrival order (see the module docstring).
    `dropped` (reason -> count) and `clipped` say what the workload's transforms left out or
    cut (`transforms.Selection`; empty for generators that drop nothing)."""

    count: int
    make: Callable[[], Iterator[Request]]
    dropped: dict[str, int] = field(default_factory=dict)
    clipped: int = 0

    def __iter__(self) -> Iterator[Request]:
        return self.make()

    def __len__(self) -> int:
        return self.count


def ordered_stream(count: int, make: Callable[[], Iterator[Request]],
                   arrivals: np.ndarray) -> RequestStream:
    """A stream of `make()`'s requests, whose arrival times are `arrivals` in yield order.

    Lazy when `arrivals` never decreases; otherwise each iteration builds every request and
    yields them sorted by arrival (stable), as the engine sorts a list: the same requests, in
    the same order, but no longer lazy.
    """
    if arrivals.size < 2 or bool(np.all(arrivals[1:] >= arrivals[:-1])):
        return RequestStream(count, make)

    def sorted_make() -> Iterator[Request]:
        return iter(sorted(make(), key=lambda r: r.arrival_time))

    return RequestStream(count, sorted_make)


def list_stream(make: Callable[[], list[Request]]) -> RequestStream:
    """A stream over a generator that can only build its whole list (in arrival order):
    not lazy; the count is known once the first list is built."""
    first = make()
    state = {"first": first}

    def again() -> Iterator[Request]:
        reqs = state.pop("first", None)
        return iter(reqs if reqs is not None else make())

    return RequestStream(len(first), again)
