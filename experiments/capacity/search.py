"""The capacity search itself: the highest rate at which a monotone test still passes.

`find_capacity(passes, start, tolerance)` brackets the boundary geometrically from `start`
(doubling while the test passes, halving while it fails) and then bisects the bracket
[lo passes, hi fails] until hi - lo <= tolerance x lo. The capacity is lo: the highest rate
shown to pass. The test is assumed monotone (passes at every rate below one that passes);
the probes are recorded in the order they ran, so a non-monotone test shows in them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field


class BracketError(ValueError):
    """The test passed at every rate tried up (or failed at every rate tried down) within
    the search's range: no boundary to bisect."""


@dataclass(frozen=True, slots=True)
class CapacitySearch:
    """The result: `capacity` (= `lo`, the highest rate that passed), the final bracket
    [`lo`, `hi`] (hi failed), and every rate probed, in order, with its outcome."""

    capacity: float
    lo: float
    hi: float
    probes: list[tuple[float, bool]] = field(default_factory=list)


def find_capacity(passes: Callable[[float], bool], start: float, tolerance: float = 0.02,
                  growth: float = 2.0, max_expansions: int = 16,
                  low: float = 1e-4, high: float = 1e9) -> CapacitySearch:
    """Bracket then bisect (see the module docstring). `growth` (> 1) is the factor of each
    bracketing step; at most `max_expansions` of them, within [`low`, `high`]; a
    `BracketError` when the boundary is not found there."""
    if not (math.isfinite(start) and start > 0):
        raise ValueError(f"capacity search: start rate {start!r} must be finite and > 0")
    if not tolerance > 0:
        raise ValueError(f"capacity search: tolerance {tolerance!r} must be > 0")
    if not growth > 1:
        raise ValueError(f"capacity search: growth {growth!r} must be > 1")
    probes: list[tuple[float, bool]] = []

    def probe(rate: float) -> bool:
        ok = bool(passes(rate))
        probes.append((rate, ok))
        return ok

    def walk(up: bool) -> tuple[float, float | None]:
        """From `start` (already probed), step the rate by `growth` up (or down), clamped
        at `high` (`low`), while the test gives what it gave at `start`: the last rate that
        gave it and the first that did not (None: not within the range or the steps)."""
        last = start
        for _ in range(max_expansions):
            rate = min(last * growth, high) if up else max(last / growth, low)
            if rate == last:
                break
            if probe(rate) != up:
                return last, rate
            last = rate
        return last, None

    if probe(start):
        lo, found_hi = walk(up=True)
        if found_hi is None:
            raise BracketError(f"attainment held up to rate {lo:g} (start {start:g}, "
                               f"x{growth:g} per step, {len(probes)} probes): no saturation "
                               "found")
        hi = found_hi
    else:
        hi, found_lo = walk(up=False)
        if found_lo is None:
            raise BracketError(f"attainment failed down to rate {hi:g} (start {start:g}, "
                               f"/{growth:g} per step, {len(probes)} probes): the target is "
                               "not met even at a low rate")
        lo = found_lo
    while hi - lo > tolerance * lo:
        mid = 0.5 * (lo + hi)
        if probe(mid):
            lo = mid
        else:
            hi = mid
    return CapacitySearch(capacity=lo, lo=lo, hi=hi, probes=probes)
