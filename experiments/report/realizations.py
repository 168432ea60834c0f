"""Statistics across realisations (README, "Statistics").

A sweep with `repeats=N` (or `workload.realization=range(N)`) runs every config N times on
independent draws of its workload. Here each config (every varied parameter but
`workload.realization`) becomes one row: per metric the mean over its realisations and a
95 % confidence interval of that mean by the percentile bootstrap over realisations
(`bootstrap_ci`: resample the N per-realisation values with replacement, seeded, and take
the 2.5th and 97.5th percentiles of the resampled means). Victim statistics carry the
number of victims they rest on (`n`, over all realisations of the config) and are flagged
when that is under `FEW_VICTIMS`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

REALIZATION = "workload.realization"
CI_LEVEL = 0.95
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0
FEW_VICTIMS = 30
FLAG = "*"
CI_NOTE = (f"mean over realisations [{CI_LEVEL:.0%} CI: percentile bootstrap over "
           f"realisations, {BOOTSTRAP_RESAMPLES:,} resamples, seed {BOOTSTRAP_SEED}]; "
           f"n: victims the statistic rests on, over all realisations; {FLAG}: fewer than "
           f"{FEW_VICTIMS} victims")

# Victim statistics -> the column holding how many victims each rests on (per job).
VICTIM_COUNTS: dict[str, str] = {
    "median_e2el_victim_ms": "num_victims",
    "p99_e2el_victim_ms": "num_victims",
    "victim_e2el_median_ratio": "num_victims",
    "victim_e2el_p99_ratio": "num_victims",
    "prefix_recovery_on_resume": "num_victims",
    "paired_victim_e2el_ratio": "paired_victims",
    "matched_victim_ratio": "matched_victims",
    "victim_queued_ms": "num_victims",
    "victim_evicted_ms": "num_victims",
    "victim_recompute_ms": "num_victims",
    "victim_prefill_ms": "num_victims",
    "victim_decode_ms": "num_victims",
}


def bootstrap_ci(values: Sequence[float] | np.ndarray, level: float = CI_LEVEL,
                 resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
                 ) -> tuple[float, float]:
    """The percentile-bootstrap `level` confidence interval of the mean of `values` (NaNs
    left out): `resamples` resamples with replacement drawn by `np.random.default_rng(seed)`
    as one (resamples, n) index array, the (1 - level) / 2 and (1 + level) / 2 quantiles of
    their means (numpy's default, linear, quantile). (nan, nan) with fewer than 2 values."""
    x = np.asarray(values, dtype=np.float64)
    x = x[~np.isnan(x)]
    if x.size < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def ratio_ci(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray,
             paired: bool, level: float = CI_LEVEL, resamples: int = BOOTSTRAP_RESAMPLES,
             seed: int = BOOTSTRAP_SEED) -> tuple[float, float, float]:
    """The ratio of means mean(b) / mean(a) and its percentile-bootstrap `level` interval
    over realisations: `paired` (a[i] and b[i] are the same realisation) resamples the
    realisation indices once for both sides (pairs with a NaN left out); otherwise each side
    is resampled on its own (NaNs left out; a's resamples drawn first, then b's, from one
    generator). A resample whose mean of a is 0 is left out. (ratio, nan, nan) with fewer than
    2 values a side; (nan, nan, nan) when mean(a) is 0 or no value."""
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if paired:
        if x.shape != y.shape:
            raise ValueError(f"ratio_ci: paired sides differ in length ({x.size} vs {y.size})")
        keep = ~(np.isnan(x) | np.isnan(y))
        x, y = x[keep], y[keep]
    else:
        x, y = x[~np.isnan(x)], y[~np.isnan(y)]
    if x.size == 0 or y.size == 0 or x.mean() == 0:
        return math.nan, math.nan, math.nan
    ratio = float(y.mean() / x.mean())
    if x.size < 2 or y.size < 2:
        return ratio, math.nan, math.nan
    rng = np.random.default_rng(seed)
    if paired:
        idx = rng.integers(0, x.size, size=(resamples, x.size))
        num, den = y[idx].mean(axis=1), x[idx].mean(axis=1)
    else:
        den = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
        num = y[rng.integers(0, y.size, size=(resamples, y.size))].mean(axis=1)
    ok = den != 0
    if not ok.any():
        return ratio, math.nan, math.nan
    lo, hi = np.quantile(num[ok] / den[ok], [(1 - level) / 2, (1 + level) / 2])
    return ratio, float(lo), float(hi)


def aggregate(frame: pd.DataFrame, params: Sequence[str], metrics: Sequence[str]
              ) -> pd.DataFrame:
    """One row per config of `frame` (one row per ok job; configs: `params` but the
    realisation, and the scheduler): `n_realizations`, then per metric `<m>` (the mean),
    `<m>_ci_lo`, `<m>_ci_hi` and, for a victim statistic, `<m>_n` (victims summed over the
    realisations whose value is defined)."""
    ok = frame[frame["status"] == "ok"] if "status" in frame else frame
    keys = [p for p in params if p != REALIZATION]
    if "scheduler" not in keys:
        keys.append("scheduler")
    rows = []
    for key, group in ok.groupby(keys, sort=False, dropna=False):
        row: dict[str, Any] = dict(zip(keys, key if isinstance(key, tuple) else (key,),
                                       strict=True))
        row["n_realizations"] = len(group)
        for m in metrics:
            if m not in group:
                continue
            vals = pd.to_numeric(group[m], errors="coerce").to_numpy(dtype=np.float64)
            defined = ~np.isnan(vals)
            row[m] = float(vals[defined].mean()) if defined.any() else math.nan
            row[f"{m}_ci_lo"], row[f"{m}_ci_hi"] = bootstrap_ci(vals)
            count = VICTIM_COUNTS.get(m)
            if count is not None and count in group:
                n = pd.to_numeric(group[count], errors="coerce").to_numpy(dtype=np.float64)
                row[f"{m}_n"] = int(np.nansum(n[defined]))
        rows.append(row)
    return pd.DataFrame(rows)


def victim_counts(frame: pd.DataFrame, metric: str) -> pd.Series | None:
    """The number of victims each row's `metric` rests on: the aggregated `<metric>_n`, else
    (one row per job) its `VICTIM_COUNTS` column; None for a statistic not about victims."""
    for column in (f"{metric}_n", VICTIM_COUNTS.get(metric)):
        if column is not None and column in frame:
            return pd.to_numeric(frame[column], errors="coerce")
    return None


def few_victims(n: Any) -> bool:
    """Whether a victim statistic from `n` victims is flagged."""
    return n is not None and not (isinstance(n, float) and math.isnan(n)) and n < FEW_VICTIMS


def ci_cell(mean: str, lo: str, hi: str, n: Any = None) -> str:
    """`mean [lo, hi]`, then `n=…` (flagged when few) for a victim statistic."""
    text = mean if lo == "n/a" or hi == "n/a" else f"{mean} [{lo}, {hi}]"
    if n is None:
        return text
    return f"{text} n={int(n)}{FLAG if few_victims(n) else ''}"


CURVE_RESAMPLES = 2_000


def curve_band(curves: np.ndarray, level: float = CI_LEVEL, resamples: int = CURVE_RESAMPLES,
               seed: int = BOOTSTRAP_SEED) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The mean of `curves` (one row per realisation, one column per grid point: e.g. each
    realisation's CDF on a common grid) and its pointwise percentile-bootstrap `level`
    interval over realisations (the rows resampled with replacement, the same draws at
    every point). With fewer than 2 rows the interval is NaN."""
    c = np.asarray(curves, dtype=np.float64)
    mean = c.mean(axis=0)
    if c.shape[0] < 2:
        nan = np.full_like(mean, math.nan)
        return mean, nan, nan
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, c.shape[0], size=(resamples, c.shape[0]))
    # a resample's mean curve is its rows' counts times the curves, over the rows
    weights = np.stack([np.bincount(row, minlength=c.shape[0]) for row in idx]) / c.shape[0]
    means = weights @ c
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2], axis=0)
    return mean, lo, hi
