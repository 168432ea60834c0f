"""Matplotlib figures of runs and sweeps (PNG, written atomically).

Every function takes plain data (numpy arrays, a pandas frame of per-job metrics) so that the
sweep report and the per-job W&B logging share them:
- `latency_cdfs`: TTFT and E2E latency CDFs, one panel per scheduler, one line per job;
- `metric_vs_load`: metrics (e.g. preemptions per 1,000 requests) against a load parameter,
  one line per scheduler (and per setting of the other varied parameters);
- `victims_vs_others`: victims' and the others' median / p99 E2E latency against load;
- `kv_over_time`: KV slots in use (fraction of capacity) against time, one panel per
  scheduler, one line per job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import NullFormatter

from experiments.sinks import atomic_path

DPI = 110


@dataclass(frozen=True, slots=True)
class JobSeries:
    """One job's per-request latencies (ms) and KV use over time, for plotting."""

    scheduler: str
    label: str
    ttft_ms: np.ndarray
    e2el_ms: np.ndarray
    time_s: np.ndarray
    kv_used_tokens: np.ndarray
    kv_capacity_tokens: int

    @classmethod
    def from_tables(cls, requests: Any, steps: Any, scheduler: str, label: str,
                    kv_capacity_tokens: int) -> JobSeries:
        """From a job's record tables (`engines.records` schemas): completed requests only."""
        from experiments.metrics import step_series

        reason = np.asarray(requests.column("finish_reason").to_pylist(), dtype=object)
        done = (reason == "stop") | (reason == "length")

        def col(name: str) -> np.ndarray:
            return np.asarray(requests.column(name).to_numpy(), dtype=float)[done]

        s = step_series(steps)
        arrival = col("arrival_time")
        return cls(scheduler, label, (col("first_token_time") - arrival) * 1000.0,
                   (col("finish_time") - arrival) * 1000.0, s["time_s"], s["kv_used_tokens"],
                   kv_capacity_tokens)


def _save(fig: Any, path: str | Path) -> Path:
    p = Path(path)
    with atomic_path(p) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return p


def _by_scheduler(jobs: Sequence[JobSeries]) -> dict[str, list[JobSeries]]:
    out: dict[str, list[JobSeries]] = {}
    for j in jobs:
        out.setdefault(j.scheduler, []).append(j)
    return out


def _cdf(ax: Any, x: np.ndarray, label: str) -> None:
    x = np.sort(x[np.isfinite(x)])
    if x.size:
        ax.plot(x, np.arange(1, x.size + 1) / x.size, label=label, lw=1.3)


def latency_cdfs(jobs: Sequence[JobSeries], path: str | Path, title: str = "") -> Path:
    """TTFT (top) and E2E latency (bottom) CDFs: a column per scheduler, a line per job."""
    groups = _by_scheduler(jobs)
    ncol = max(len(groups), 1)
    fig, axes = plt.subplots(2, ncol, figsize=(4.6 * ncol, 6.4), squeeze=False,
                             sharey=True, layout="constrained")
    for c, (sched, js) in enumerate(groups.items()):
        for j in js:
            _cdf(axes[0][c], j.ttft_ms, j.label or sched)
            _cdf(axes[1][c], j.e2el_ms, j.label or sched)
        axes[0][c].set_title(sched)
        for r, what in enumerate(("TTFT (ms)", "E2E latency (ms)")):
            ax = axes[r][c]
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xlabel(what)
            ax.grid(alpha=0.3)
            if c == 0:
                ax.set_ylabel("fraction of requests")
        axes[1][c].legend(fontsize=7, loc="lower right")
    if title:
        fig.suptitle(title)
    return _save(fig, path)


def _numeric(values: pd.Series) -> pd.Series | None:
    try:
        return pd.to_numeric(values)
    except (TypeError, ValueError):
        return None


def _lines(frame: pd.DataFrame, x: str | None, series: Sequence[str]
           ) -> tuple[list[tuple[str, pd.DataFrame]], list[Any], list[str] | None]:
    """Rows grouped into lines (one per combination of `series` columns), sorted by x; the
    x values (numeric, or positions with tick labels when x is missing or not numeric)."""
    df = frame.copy()
    ticks: list[str] | None = None
    if x is not None and x in df and _numeric(df[x]) is not None:
        df["_x"] = _numeric(df[x])
    else:
        cat = x if x is not None and x in df else "scheduler" if "scheduler" in df else "job"
        labels = df[cat].astype(str)
        ticks = list(dict.fromkeys(labels))
        df["_x"] = [ticks.index(v) for v in labels]
    keys = [s for s in series if s in df]
    groups: list[tuple[str, pd.DataFrame]] = []
    if keys:
        for key, g in df.groupby(keys, sort=False):
            values = key if isinstance(key, tuple) else (key,)
            name = ", ".join(str(v) if k == "scheduler" else f"{k.split('.')[-1]}={v}"
                             for k, v in zip(keys, values, strict=True))
            groups.append((name, g.sort_values("_x")))
    else:
        groups.append(("", df.sort_values("_x")))
    return groups, sorted(set(df["_x"])), ticks


def _legend(fig: Any, ax: Any) -> None:
    """One legend for the figure, under the panels (many series would hide the data)."""
    handles, labels = ax.get_legend_handles_labels()
    if len(labels) > 1 or (labels and labels[0]):
        fig.legend(handles, labels, loc="outside lower center", fontsize=7,
                   ncol=min(len(labels), 2 if max(len(x) for x in labels) > 30 else 4))


def _xscale(ax: Any, xs: list[Any], ticks: list[str] | None) -> None:
    """A log2 x axis for values spanning a factor of 4 or more (e.g. KV capacities)."""
    if ticks is None and xs and min(xs) > 0 and max(xs) / min(xs) >= 4:
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.xaxis.set_minor_formatter(NullFormatter())


def _x_axis(ax: Any, label: str | None, xs: list[Any], ticks: list[str] | None) -> None:
    """Label, scale, grid and categorical ticks of a load panel's x axis."""
    ax.set_xlabel(label or "")
    _xscale(ax, xs, ticks)
    ax.grid(alpha=0.3)
    if ticks is not None:
        ax.set_xticks(range(len(ticks)), ticks, rotation=30, fontsize=7)


def metric_vs_load(frame: pd.DataFrame, x: str | None, metrics: Sequence[tuple[str, str]],
                   path: str | Path, series: Sequence[str] = ("scheduler",),
                   title: str = "") -> Path:
    """One panel per (column, axis label) in `metrics` against `x`, a line per series."""
    groups, xs, ticks = _lines(frame, x, series)
    ncol = min(len(metrics), 2 if len(metrics) == 4 else 3)
    nrow = -(-len(metrics) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.6 * ncol, 3.5 * nrow), squeeze=False,
                             layout="constrained")
    flat = [ax for row in axes for ax in row]
    for ax in flat[len(metrics):]:
        ax.set_visible(False)
    for ax, (col, label) in zip(flat, metrics, strict=False):
        for name, g in groups:
            ax.plot(g["_x"], pd.to_numeric(g[col], errors="coerce"), marker="o", lw=1.3,
                    label=name)
        ax.set_ylabel(label)
        _x_axis(ax, x, xs, ticks)
    _legend(fig, axes[0][0])
    if title:
        fig.suptitle(title)
    return _save(fig, path)


def victims_vs_others(frame: pd.DataFrame, x: str | None, path: str | Path,
                      series: Sequence[str] = ("scheduler",), title: str = "") -> Path:
    """Median and p99 E2E latency of victims (solid) and of the others (dashed)."""
    groups, xs, ticks = _lines(frame, x, series)
    fig, axes = plt.subplots(1, 2, figsize=(9.6, 3.8), squeeze=False, layout="constrained")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, stat in zip(axes[0], ("median", "p99"), strict=True):
        for k, (name, g) in enumerate(groups):
            color = colors[k % len(colors)]
            for who, style in (("victim", "-"), ("nonvictim", "--")):
                y = pd.to_numeric(g[f"{stat}_e2el_{who}_ms"], errors="coerce") / 1000.0
                label = f"{name} {'victims' if who == 'victim' else 'others'}".strip()
                ax.plot(g["_x"], y, style, marker="o", color=color, lw=1.3, label=label)
        ax.set_ylabel(f"{stat} E2E latency (s)")
        _x_axis(ax, x, xs, ticks)
    _legend(fig, axes[0][0])
    if title:
        fig.suptitle(title)
    return _save(fig, path)


def kv_over_time(jobs: Sequence[JobSeries], path: str | Path, title: str = "") -> Path:
    """KV slots in use as a fraction of capacity against time, a panel per scheduler."""
    groups = _by_scheduler(jobs)
    ncol = max(len(groups), 1)
    fig, axes = plt.subplots(1, ncol, figsize=(4.8 * ncol, 3.4), squeeze=False, sharey=True,
                             layout="constrained")
    for c, (sched, js) in enumerate(groups.items()):
        ax = axes[0][c]
        for j in js:
            cap = max(j.kv_capacity_tokens, 1)
            ax.plot(j.time_s, j.kv_used_tokens / cap, lw=0.8, label=j.label or sched)
        ax.set_title(sched)
        ax.set_xlabel("simulated time (s)")
        ax.set_ylim(0, 1.05)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    axes[0][0].set_ylabel("KV slots used / capacity")
    if title:
        fig.suptitle(title)
    return _save(fig, path)
