"""Declared ranges of numeric config fields.

A dataclass field declares the values it accepts beside its default:

    block_size: int = ranged(16, low=1, high=MAX_PAGE_SIZE)
    watermark: float = ranged(0.0, low=0.0, high=1.0, high_open=True)
    chunked_prefill_size: int | None = ranged(8192, low=1, high=MAX_TOKENS, special={-1: "off"})

The range lives in the field's metadata (`Range`), which the structured config schemas copy
(experiments/run/config.py: `mirror`); one checker walks a composed run config and refuses
the first value out of its range, naming the key (experiments/run/ranges.py), and
docs/CONFIG.md shows each range (`Range.text`). Every float must be finite unless `special`
names inf; null passes wherever the type allows it. Upper bounds stand where memory or time
would explode beyond them (`why` says which).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# The metadata key of a field's range.
RANGE_KEY = "schedbench_range"

# Shared bounds. The schedulers keep up to ~120 bytes of bookkeeping per page (a vLLM block;
# an SGLang slot ~40), and a page can be one slot: 2**26 slots stay within ~8 GiB.
MAX_KV_SLOTS = 2**26
MAX_PAGE_SIZE = 2**16
# A context, prompt or output length in tokens (no model reads more than a few million).
MAX_TOKENS = 2**24
# A generated length: every token is a Python int held while its request lives.
MAX_GEN_TOKENS = 2**20
# Requests held at once (a request-row pool is allocated for each).
MAX_RUNNING = 2**20
# Requests of one generated workload (the run's time grows with them).
MAX_REQUESTS = 10**7
# Integers end up in int64 columns (parquet, numpy).
INT64_MAX = 2**63 - 1
# Arrival rates, requests (or conversations) per second: below the low end the arrivals
# spread over more seconds than a float clock resolves; inf means all at t=0.
MIN_RATE = 1e-4
MAX_RATE = 1e9
# The special value of a rate: every arrival at t=0.
ALL_AT_ONCE: Mapping[float | str, str] = {math.inf: "all at t=0"}
MEMORY_WHY = ("the bound of host memory: the schedulers keep up to ~128 bytes per page, and a "
              "page may be one slot: 2^26 slots take up to 8 GiB")


@dataclass(frozen=True, slots=True)
class Range:
    """The values a numeric field accepts: [low, high] (each end open when `low_open` /
    `high_open`; `high` may name a sibling field, e.g. "vocab_size"), plus the `special`
    values outside it, each with its meaning (e.g. {-1: "off"}, {inf: "all at t=0"})."""

    low: float | None = None
    high: float | str | None = None
    low_open: bool = False
    high_open: bool = False
    special: Mapping[float | str, str] = field(default_factory=dict)
    why: str = ""  # why the upper bound (memory, time)

    def _high(self, siblings: Mapping[str, Any] | None) -> float | None:
        if isinstance(self.high, str):
            value = (siblings or {}).get(self.high)
            return float(value) if isinstance(value, int | float) else None
        return self.high

    def problem(self, value: Any, integer: bool,
                siblings: Mapping[str, Any] | None = None) -> str | None:
        """Why `value` is outside the range (None when it is inside, or null); `integer`:
        the field's type is int; `siblings`: the other fields' values (a named bound)."""
        if value is None:
            return None
        if isinstance(value, str) and value.strip().lower() in self.special:
            return None  # a word with a meaning, e.g. kv_capacity_tokens=auto
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"must be {'an integer' if integer else 'a number'}, not " \
                   f"{type(value).__name__}"
        if value in self.special:
            return None
        if integer and (isinstance(value, float) and not value.is_integer()):
            return "must be an integer"
        if isinstance(value, float) and not math.isfinite(value):
            return f"must be a finite number; valid: {self.text()}"
        if integer and abs(value) > INT64_MAX:
            return f"beyond a 64-bit integer; valid: {self.text()}"
        low, high = self.low, self._high(siblings)
        if low is not None and (value <= low if self.low_open else value < low):
            return f"out of range; valid: {self.text()}"
        if high is not None and (value >= high if self.high_open else value > high):
            if isinstance(self.high, str):
                return f"must be below {self.high}={_num(high)}; valid: {self.text()}"
            why = f" ({self.why})" if self.why else ""
            return f"too large; valid: {self.text()}{why}"
        return None

    def text(self) -> str:
        """The range as docs/CONFIG.md shows it: `[1, 65536]`, `(0, 1]`, `≥ 0`, `-1 (off) or
        [1, 16777216]`."""
        low = None if self.low is None else _num(self.low)
        high = None if self.high is None else (
            self.high if isinstance(self.high, str) else _num(self.high))
        if low is not None and high is not None:
            body = f"{'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"
        elif low is not None:
            body = f"{'>' if self.low_open else '≥'} {low}"
        elif high is not None:
            body = f"{'<' if self.high_open else '≤'} {high}"
        else:
            body = "finite"
        extra = [f"{v if isinstance(v, str) else _num(v)} ({meaning})"
                 for v, meaning in self.special.items()]
        return " or ".join([*extra, body])


def _num(v: float) -> str:
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e300:
        v = int(v)
    if v == INT64_MAX:
        return "2^63-1"
    if isinstance(v, int) and abs(v) >= 2**16 and v & (v - 1) == 0:
        return f"2^{v.bit_length() - 1}"
    if isinstance(v, int) and abs(v) >= 10**6 and str(v).rstrip("0") == "1":
        return f"1e{len(str(v)) - 1}"
    return f"{v:g}" if isinstance(v, float) else str(v)


def ranged(default: Any = dataclasses.MISSING, *, low: float | None = None,
           high: float | str | None = None, low_open: bool = False, high_open: bool = False,
           special: Mapping[float | str, str] | None = None, why: str = "") -> Any:
    """A dataclass field with `default` (none: required) and a declared `Range`."""
    rng = Range(low, high, low_open, high_open, dict(special or {}), why)
    return field(default=default, metadata={RANGE_KEY: rng})


def field_range(f: dataclasses.Field[Any]) -> Range | None:
    """The range a dataclass field declares (None: none)."""
    rng = f.metadata.get(RANGE_KEY)
    return rng if isinstance(rng, Range) else None
