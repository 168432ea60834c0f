"""Exact order statistics of a stream of float64 values in bounded memory.

`exact_ranks` finds the values of given ranks by radix selection on an order-preserving
64-bit key: four passes over the stream, each a 65,536-bucket histogram of the next 16 bits
among values that share the prefix found so far. `stats_ms` then gives the same numbers as
`np.mean` / `np.median` / `np.std` / `np.percentile` (linear) of the values in ms, up to the
rounding of a chunked sum for the mean and the standard deviation. Both read the stream
several times (six passes for `stats_ms`); `replayable` keeps the first pass in memory when it
fits a budget, so that a stream read from a file is read once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator

import numpy as np

_SIGN = np.uint64(1 << 63)
_BITS = 16
_LEVELS = 64 // _BITS


# What `replayable` may keep of a stream by default: 8 Mi float64 values.
REPLAY_BUDGET_BYTES = 64 << 20


def replayable(chunks: Callable[[], Iterable[np.ndarray]],
               budget_bytes: int = REPLAY_BUDGET_BYTES) -> Callable[[], Iterator[np.ndarray]]:
    """`chunks`, but the first complete pass is kept while its arrays total at most
    `budget_bytes`, and later passes yield the kept arrays instead of calling `chunks` again
    (the same arrays in the same order). Over the budget, every pass calls `chunks`."""
    kept: list[np.ndarray] | None = None

    def passes() -> Iterator[np.ndarray]:
        nonlocal kept
        if kept is not None:
            yield from kept
            return
        pending: list[np.ndarray] | None = []
        size = 0
        for chunk in chunks():
            if pending is not None:
                size += chunk.nbytes
                if size <= budget_bytes:
                    pending.append(chunk)
                else:
                    pending = None
            yield chunk
        if pending is not None:
            kept = pending

    return passes


def _keys(x: np.ndarray) -> np.ndarray:
    """Unsigned keys that sort like the floats (negative floats flipped, others signed)."""
    u = np.ascontiguousarray(x, dtype=np.float64).view(np.uint64)
    return np.where(u & _SIGN, ~u, u | _SIGN)


def _value(key: int) -> float:
    k = np.uint64(key)
    u = k & ~_SIGN if k & _SIGN else ~k
    return float(np.array([u], dtype=np.uint64).view(np.float64)[0])


def exact_ranks(chunks: Callable[[], Iterable[np.ndarray]], ranks: Iterable[int],
                num_values: int | None = None) -> dict[int, float]:
    """The value of each 0-based rank (ascending) among all values `chunks()` yields;
    `chunks` is called once per pass and must yield the same values each time. Given their
    number, `num_values`, and at most `REPLAY_BUDGET_BYTES` of them, one pass gathers them
    and a partition of their keys selects the ranks (the same values: one order)."""
    want = sorted(set(ranks))
    if num_values is not None and num_values * 8 <= REPLAY_BUDGET_BYTES:
        keys = np.empty(num_values, dtype=np.uint64)
        at = 0
        for c in chunks():
            if at + c.size > num_values:
                raise ValueError(f"exact_ranks: num_values={num_values} but the stream "
                                 "holds more")
            keys[at:at + c.size] = _keys(c)
            at += c.size
        if at != num_values:
            raise ValueError(f"exact_ranks: num_values={num_values} but the stream holds {at}")
        keys.partition(want)  # in place: one array of keys beside the values
        return {k: _value(int(keys[k])) for k in want}
    prefix = dict.fromkeys(want, 0)
    below = dict.fromkeys(want, 0)  # values under the current prefix's range
    for level in range(_LEVELS):
        shift = np.uint64(64 - _BITS * (level + 1))
        groups = set(prefix.values())
        hists = {p: np.zeros(1 << _BITS, dtype=np.int64) for p in groups}
        for chunk in chunks():
            if chunk.size == 0:
                continue
            keys = _keys(chunk)
            top = keys >> np.uint64(64 - _BITS * level) if level else None
            for p in groups:
                sel = keys if top is None else keys[top == np.uint64(p)]
                digits = ((sel >> shift) & np.uint64((1 << _BITS) - 1)).astype(np.int64)
                hists[p] += np.bincount(digits, minlength=1 << _BITS)
        for k in want:
            cum = np.cumsum(hists[prefix[k]])
            b = int(np.searchsorted(cum, k - below[k], side="right"))
            below[k] += int(cum[b - 1]) if b else 0
            prefix[k] = (prefix[k] << _BITS) | b
    return {k: _value(prefix[k]) for k in want}


def _lerp(a: float, b: float, t: float) -> float:
    # numpy's percentile interpolation, term for term
    d = b - a
    return b - d * (1 - t) if t >= 0.5 else a + d * t


def stats_ms(prefix: str, chunks: Callable[[], Iterator[np.ndarray]],
             percentiles: Iterable[int]) -> dict[str, float]:
    """mean/median/std/p.. of every value `chunks()` yields (seconds), in ms, as
    `experiments.results.metrics` names them (all NaN when there is none)."""
    pcts = list(percentiles)
    n = 0
    total = 0.0
    for c in chunks():
        n += c.size
        total += float((c * 1000.0).sum())
    if n == 0:
        out = {f"mean_{prefix}_ms": math.nan, f"median_{prefix}_ms": math.nan,
               f"std_{prefix}_ms": math.nan}
        out.update({f"p{p}_{prefix}_ms": math.nan for p in pcts})
        return out
    mean = total / n
    sq = 0.0
    for c in chunks():
        sq += float(((c * 1000.0 - mean) ** 2).sum())
    positions: dict[str, tuple[int, int, float]] = {}
    mid = (n - 1) // 2
    positions["median"] = (mid, mid + (1 - n % 2), 0.5)
    for p in pcts:
        v = (n - 1) * (p / 100)
        lo = math.floor(v)
        positions[f"p{p}"] = (lo, min(lo + 1, n - 1), v - lo)
    vals = exact_ranks(chunks, [r for lo, hi, _ in positions.values() for r in (lo, hi)], n)
    out = {f"mean_{prefix}_ms": mean, f"std_{prefix}_ms": math.sqrt(sq / n)}
    lo, hi, _ = positions.pop("median")
    a, b = vals[lo] * 1000.0, vals[hi] * 1000.0
    out[f"median_{prefix}_ms"] = a if lo == hi else (a + b) / 2
    for name, (lo, hi, t) in positions.items():
        out[f"{name}_{prefix}_ms"] = _lerp(vals[lo] * 1000.0, vals[hi] * 1000.0, t)
    return out
