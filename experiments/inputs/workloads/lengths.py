"""Token-length distributions for generated workloads.

`LengthDist` is a frozen dataclass that config mappings turn into (`LengthDist.from_mapping`);
`sample(rng, n)` draws `n` integer lengths. `dist: file` draws from the lengths recorded in a
trace file (an Azure CSV, a Mooncake JSONL or a length-only CSV or parquet file; `column`
picks prompt or output lengths), so a generator can take a real length mix with synthetic
arrivals.
"""

from __future__ import annotations

import csv
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from experiments.inputs.traces import read_trace
from schedulers.config_range import MAX_GEN_TOKENS, ranged

DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    # name: required parameters (min / max are optional clips for every distribution)
    "fixed": ("value",),
    "uniform": ("low", "high"),
    "lognormal": ("mean", "sigma"),
    "file": ("path", "column"),
}
FILE_COLUMNS = ("input_length", "output_length")


def trace_kind_of(path: str | Path) -> str:
    """The reader a trace file needs, from its name and header: `mooncake` for JSON lines,
    `lengths` for parquet, `azure` for a CSV whose header names TIMESTAMP, else `lengths`."""
    p = Path(path)
    if p.suffix == ".jsonl":
        return "mooncake"
    if p.suffix == ".parquet":
        return "lengths"
    with open(p, "rb") as f:  # bytes: a bad one is for the reader to report, with its line
        head = f.readline().decode("utf-8", errors="replace")
    header = next(csv.reader([head]), [])
    return "azure" if "TIMESTAMP" in [h.strip() for h in header] else "lengths"


@functools.lru_cache(maxsize=16)
def _file_lengths(path: str, column: str, mtime_ns: int) -> np.ndarray:
    del mtime_ns  # part of the cache key only: an edited file is read again
    recs = read_trace(trace_kind_of(path), path)
    attr = "input_length" if column == "input_length" else "output_length"
    return np.fromiter((getattr(r, attr) for r in recs), dtype=np.int64)


def file_lengths(path: str | Path, column: str) -> np.ndarray:
    """Every `column` value of a trace file, validated (a bad row raises `TraceError`)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"length file {p} does not exist")
    return _file_lengths(str(p.resolve()), column, p.stat().st_mtime_ns)


@dataclass(frozen=True, slots=True)
class LengthDist:
    """A token-length distribution.

    fixed: always `value`. uniform: integers in [low, high]. lognormal: mean `mean` and
    log-space standard deviation `sigma` (the underlying normal has mu = ln(mean) - sigma^2/2).
    file: uniform draws, with replacement, from column `column` ("input_length" or
    "output_length") of the trace file `path`. Draws are rounded, then clipped to [min, max]
    (min defaults to 1).
    """

    dist: str
    value: int | None = ranged(None, low=1, high=MAX_GEN_TOKENS)
    low: int | None = ranged(None, low=1, high=MAX_GEN_TOKENS)
    high: int | None = ranged(None, low=1, high=MAX_GEN_TOKENS)
    mean: float | None = ranged(None, low=0.0, low_open=True, high=float(MAX_GEN_TOKENS))
    sigma: float | None = ranged(None, low=0.0, high=5.0)
    min: int = ranged(1, low=1, high=MAX_GEN_TOKENS)
    max: int | None = ranged(None, low=1, high=MAX_GEN_TOKENS)
    path: str | None = None
    column: str | None = None

    def __post_init__(self) -> None:
        if self.dist not in DISTRIBUTIONS:
            raise ValueError(f"length distribution: dist={self.dist!r}: unknown; valid: "
                             f"{', '.join(DISTRIBUTIONS)}")
        for p in DISTRIBUTIONS[self.dist]:
            if getattr(self, p) is None:
                raise ValueError(f"length distribution {self.dist!r}: parameter {p!r} is "
                                 f"required (needs {', '.join(DISTRIBUTIONS[self.dist])})")
        if self.min < 1:
            raise ValueError(f"length distribution: min={self.min!r}: must be at least 1")
        if self.max is not None and self.max < self.min:
            raise ValueError(f"length distribution: max={self.max!r} is below min={self.min!r}")
        if self.dist == "uniform" and (self.low is None or self.high is None
                                       or self.high < self.low):
            raise ValueError(f"length distribution 'uniform': high={self.high!r} is below "
                             f"low={self.low!r}")
        if self.dist == "lognormal" and not (self.mean is not None and self.mean > 0
                                             and self.sigma is not None and self.sigma >= 0):
            raise ValueError(f"length distribution 'lognormal': mean={self.mean!r} must be "
                             f"positive and sigma={self.sigma!r} non-negative")
        if self.dist == "file" and self.column not in FILE_COLUMNS:
            raise ValueError(f"length distribution 'file': column={self.column!r}: valid: "
                             f"{', '.join(FILE_COLUMNS)}")

    @classmethod
    def from_mapping(cls, where: str, cfg: Mapping[str, Any]) -> LengthDist:
        """Build from a config mapping; `where` names it in error messages."""
        valid = {f.name for f in fields(cls)}
        unknown = sorted(set(cfg) - valid)
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}; valid: "
                             f"{', '.join(sorted(valid))}")
        if "dist" not in cfg:
            raise ValueError(f"{where}: field 'dist' is required; valid: "
                             f"{', '.join(DISTRIBUTIONS)}")
        try:
            return cls(**dict(cfg))
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """`n` integer lengths."""
        if self.dist == "fixed":
            x = np.full(n, float(self.value or 0))
        elif self.dist == "uniform":
            x = rng.integers(int(self.low or 0), int(self.high or 0) + 1, size=n).astype(float)
        elif self.dist == "lognormal":
            sigma = float(self.sigma or 0.0)
            mu = math.log(float(self.mean or 1.0)) - sigma * sigma / 2
            x = rng.lognormal(mu, sigma, size=n)
        else:
            values = file_lengths(str(self.path), str(self.column))
            x = values[rng.integers(0, values.size, size=n)].astype(float)
        out = np.rint(x).astype(np.int64)
        return np.clip(out, self.min, self.max if self.max is not None else None)
