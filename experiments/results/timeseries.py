"""A job's per-step records binned on simulated time: what the figures and W&B history plot.

A replay has up to hundreds of thousands of steps; a line chart needs a few hundred points and
must not hide what happened between them. `bin_steps` cuts the job's span of simulated time
into equal bins and gives, per bin, the time-weighted mean and the maximum of every gauge
(KV slots used and cached, running and waiting requests, tokens and requests in the batch)
and the total of every count (evictions, swaps, finished requests). A bin in which no step
ran is idle: its gauges are NaN (a line chart shows a gap, not the last value carried across)
and `busy_share` is 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

# step column -> name in the binned series (gauges: mean and max per bin)
GAUGES: dict[str, str] = {
    "kv_used_tokens": "kv_used_tokens",
    "kv_cached_tokens": "kv_cached_tokens",
    "num_running": "running_requests",
    "num_waiting": "waiting_requests",
    "num_tokens": "batch_tokens",
    "num_scheduled_reqs": "batch_requests",
}
# step column -> name in the binned series (counts: total per bin)
COUNTS: dict[str, str] = {
    "num_preempted": "evictions",
    "num_swap_out": "swap_outs",
    "num_swap_in": "swap_ins",
    "num_finished": "finished_requests",
}


@dataclass(frozen=True, slots=True)
class Binned:
    """Per-bin values of one job. `edges` has one more entry than every array."""

    edges: np.ndarray
    busy_share: np.ndarray
    mean: dict[str, np.ndarray]
    max: dict[str, np.ndarray]
    total: dict[str, np.ndarray]

    @property
    def centers(self) -> np.ndarray:
        """The middle of each bin (seconds of simulated time)."""
        return (self.edges[:-1] + self.edges[1:]) / 2.0

    @property
    def idle(self) -> np.ndarray:
        """True for the bins in which no step ran."""
        return self.busy_share <= 0.0

    def __len__(self) -> int:
        return int(self.busy_share.size)


def _column(steps: pa.Table, name: str) -> np.ndarray:
    if name not in steps.column_names:
        return np.zeros(steps.num_rows)
    return np.asarray(steps.column(name).to_numpy(), dtype=np.float64)


def bin_steps(steps: pa.Table, num_bins: int = 300, start: float | None = None,
              end: float | None = None) -> Binned:
    """Bin `steps` (the `engines.records` step schema) on simulated time into `num_bins` equal
    bins from `start` (default: the first step's start) to `end` (default: the last step's
    end). A step's values count in the bin where it starts (weighted by its duration); a bin
    that a long step runs through without starting there shows that step's values. Steps are
    expected in start order (as recorded)."""
    if num_bins < 1:
        raise ValueError(f"bin_steps: num_bins={num_bins}: must be >= 1")
    t0 = _column(steps, "start_time")
    dur = _column(steps, "duration_s")
    if t0.size == 0:
        edges = np.array([0.0, 1.0]) if start is None else np.array([start, start + 1.0])
        nan = np.full(1, np.nan)
        return Binned(edges, np.zeros(1), {v: nan for v in GAUGES.values()},
                      {v: nan for v in GAUGES.values()},
                      {v: np.zeros(1) for v in COUNTS.values()})
    lo = float(t0.min()) if start is None else float(start)
    hi = float((t0 + dur).max()) if end is None else float(end)
    hi = max(hi, lo + 1e-9)
    edges = np.linspace(lo, hi, num_bins + 1)
    idx = np.clip(((t0 - lo) / (hi - lo) * num_bins).astype(np.int64), 0, num_bins - 1)
    busy = np.diff(_busy_until(t0, dur, edges))
    steps_per_bin = np.bincount(idx, minlength=num_bins)
    # a bin in which no step starts but one runs through shows that step's values
    through = (steps_per_bin == 0) & (busy > 0)
    covering = np.clip(np.searchsorted(t0, edges[:-1], side="right") - 1, 0, t0.size - 1)
    ran = (steps_per_bin > 0) | through
    # a zero-duration step still shows its bin as busy; weigh such bins equally
    weight = np.where(busy[idx] > 0, dur, 1.0)
    wsum = np.bincount(idx, weights=weight, minlength=num_bins)
    mean: dict[str, np.ndarray] = {}
    peak: dict[str, np.ndarray] = {}
    for col, name in GAUGES.items():
        v = _column(steps, col)
        with np.errstate(invalid="ignore", divide="ignore"):
            m = np.bincount(idx, weights=v * weight, minlength=num_bins) / wsum
        mx = np.full(num_bins, -np.inf)
        np.maximum.at(mx, idx, v)
        m = np.where(through, v[covering], m)
        mx = np.where(through, v[covering], mx)
        mean[name] = np.where(ran, m, np.nan)
        peak[name] = np.where(ran, mx, np.nan)
    total = {name: np.bincount(idx, weights=_column(steps, col), minlength=num_bins)
             for col, name in COUNTS.items()}
    width = (hi - lo) / num_bins
    share = np.where(ran, np.maximum(busy / width, 1e-12), 0.0)
    return Binned(edges, np.minimum(share, 1.0), mean, peak, total)


def _busy_until(start: np.ndarray, dur: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Step time before each edge. Steps run one after another (sorted, not overlapping),
    so at most one step straddles an edge: the whole steps that ended, plus its part."""
    order = np.argsort(start, kind="stable")
    s, d = start[order], dur[order]
    end = s + d
    done = np.concatenate([[0.0], np.cumsum(d)])
    k = np.searchsorted(end, edges, side="right")  # steps ended by each edge
    part = np.zeros(edges.size)
    open_ = k < s.size
    part[open_] = np.clip(edges[open_] - s[k[open_]], 0.0, d[k[open_]])
    return done[k] + part
