"""Prefix-cache recovery per readmission: what an evicted request finds cached when it is
scheduled again, one row per readmission rather than the job's token-weighted total.

The request records hold it (engines/records.py): `prefix_hit_tokens` is the prefix-cache hit
of each admission (the first, then one per readmission) and `computed_at_preemption` the
tokens the request had computed when each eviction happened. Readmission k (k >= 1) pairs
`prefix_hit_tokens[k]` with `computed_at_preemption[k - 1]`; a victim evicted and never
readmitted (unfinished when the run ended) has no readmission for that eviction. The
recovered tokens are capped at what the victim had computed, as the summary's
`prefix_recovery_on_resume` caps them (experiments/results/metrics.py: `_recovered`): a
shared prefix can return more than the victim lost, and only what it lost is recovered.

    from experiments.report.analysis import load_requests
    from experiments.report.recovery import readmissions
    readm = readmissions(load_requests(sweep, list_columns=True))
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

HITS = "prefix_hit_tokens"
LOST = "computed_at_preemption"
READMISSION_COLUMNS = ("readmission", "computed", "hit", "recovered", "recovered_share")


def readmissions(requests: pd.DataFrame) -> pd.DataFrame:
    """One row per readmission of every request in `requests` (a frame of request records
    with the list columns `prefix_hit_tokens` and `computed_at_preemption`, e.g.
    `analysis.load_requests(path, list_columns=True)`): the request's `job`, `scheduler`,
    `request_id`, `prompt_len` and every other non-list column it has (the sweep's parameters
    among them), then `readmission` (1 for the return after the first eviction), `computed`
    (tokens computed when that eviction happened), `hit` (the prefix-cache hit when it came
    back), `recovered` (min(hit, computed)) and `recovered_share` (recovered / computed; NaN
    when it had computed nothing). Raises KeyError naming a missing list column."""
    for column in (HITS, LOST):
        if column not in requests:
            raise KeyError(f"readmissions: the request records have no {column!r} column "
                           "(load them with list_columns=True)")
    head = [c for c in requests.columns
            if c not in (HITS, LOST) and not _is_list_column(requests[c])]
    evicted = requests[requests[LOST].map(lambda x: x is not None and len(x) > 0)]
    rows: list[dict[str, object]] = []
    for record, hits, lost in zip(evicted[head].to_dict("records"), evicted[HITS],
                                  evicted[LOST], strict=True):
        hits = [] if hits is None else list(hits)
        lost = [] if lost is None else list(lost)
        for k, (hit, computed) in enumerate(zip(hits[1:], lost, strict=False), start=1):
            recovered = min(int(hit), int(computed))
            rows.append({**{str(c): v for c, v in record.items()}, "readmission": k,
                         "computed": int(computed), "hit": int(hit), "recovered": recovered,
                         "recovered_share": recovered / computed if computed else math.nan})
    columns = [*head, *READMISSION_COLUMNS]
    out = pd.DataFrame(rows, columns=columns)
    for c in ("readmission", "computed", "hit", "recovered"):
        out[c] = out[c].astype(np.int64)
    out["recovered_share"] = out["recovered_share"].astype(np.float64)
    return out


def _is_list_column(column: pd.Series) -> bool:
    first = column.dropna()
    return bool(len(first)) and isinstance(first.iloc[0], list | tuple | np.ndarray)


def share_cdf(shares: np.ndarray | pd.Series, grid: np.ndarray) -> np.ndarray:
    """The empirical CDF of `shares` (NaNs left out) at each point of `grid`: the fraction
    of readmissions that recovered at most that share. NaN everywhere when no share is
    defined."""
    x = np.asarray(shares, dtype=np.float64)
    x = np.sort(x[~np.isnan(x)])
    if x.size == 0:
        return np.full(len(grid), math.nan)
    return np.searchsorted(x, np.asarray(grid, dtype=np.float64), side="right") / x.size
