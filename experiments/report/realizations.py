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


def few_victims(n: Any) -> bool:
    """Whether a victim statistic from `n` victims is flagged."""
    return n is not None and not (isinstance(n, float) and math.isnan(n)) and n < FEW_VICTIMS


def ci_cell(mean: str, lo: str, hi: str, n: Any = None) -> str:
    """`mean [lo, hi]`, then `n=…` (flagged when few) for a victim statistic."""
    text = mean if lo == "n/a" or hi == "n/a" else f"{mean} [{lo}, {hi}]"
    if n is None:
        return text
    return f"{text} n={int(n)}{FLAG if few_victims(n) else ''}"
