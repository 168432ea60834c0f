#!/usr/bin/env python3
"""The victim-policy study's summary (scripts/reproduce_victim_policies.sh).

    python scripts/policy_report.py OUT PART [PART ...] --capacity CAPACITY_JSON [--load L]

reads `OUT/<PART>/comparison.csv` (written by `experiments.report` for each part's
multirun, one per scheduler, which sweeps `scheduler.preemption_mode`,
`scheduler.victim_policy`, `workload.load` and `workload.realization`), takes each run's load
(a fraction of its scheduler's capacity under the default policy in recompute mode, in
CAPACITY_JSON, `python -m experiments.capacity`: the window's own for a file searched per
window) from `workload.load`, or from `workload.rate_scale` over that capacity for a sweep of
rates, or `--load` for a part that ran one load, and writes into OUT:
- `runs.csv`: one row per run (scheduler, mode, load, policy, realisation) with the capacity
  it ran against (`capacity`: its window's own, per window), the rate that load meant
  (`rate_scale`) and the study's metrics (`STUDY_METRICS`);
- `capacity.md`: per scheduler and window, the capacity and the rate each load meant;
- `policies.csv` / `policies.md`: per scheduler, mode, load and policy, each metric's mean
  over the realisations with its 95 % bootstrap CI (`experiments.report.realizations`) and,
  for victims' statistics, the victims n;
- `vs_default.csv` / `vs_default.md`: per scheduler, mode, load and policy, the paired
  difference from the default policy in the same realisation (the same requests and
  arrivals) of `VERSUS_METRICS`, its mean and 95 % bootstrap CI over realisations; `+`/`-`
  marks a CI that excludes 0;
- `policies.png`: evictions, SLO attainment and p99 E2E latency against the policy, one
  panel per scheduler and mode, one bar per load, with 95 % CIs (error bars in a darker
  shade of their bar); each scheduler on its own y scale (its modes share it);
- `swap_vs_recompute.png`: p99 E2E latency of all requests against the policy, recompute
  (circles) against swap (squares), side by side within each policy, a shade of the
  scheduler's colour per load, and below the swap copy time (% of busy time), with 95 % CIs
  over realisations in the colour of their series; a column per scheduler, each on its own
  y scale;
- `vs_default.png`: the paired differences of `vs_default.csv` (SLO attainment, p99 E2E
  latency, evictions) against the policy, with their 95 % CIs; each scheduler on its own y
  scale.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import to_rgb
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from experiments.report.figures import (
    COLUMN_IN,
    PAGE_IN,
    SCHEDULER_NAMES,
    LegendGroup,
    _save,
    fig_legend,
    scheduler_color,
    shade,
    style,
    suptitle,
    wrapped,
)
from experiments.report.realizations import (
    CI_NOTE,
    REALIZATION,
    aggregate,
    bootstrap_ci,
    ci_cell,
)
from experiments.report.tables import format_metric, markdown
from experiments.results.sinks import write_text
from schedulers import registry

POLICIES: tuple[str, ...] = ("default", "latest_arrival", "fewest_outputs", "least_progress",
                             "most_kv", "shortest_remaining", "random")
MODES: tuple[str, ...] = ("recompute", "swap")
KEYS: tuple[str, ...] = ("scheduler", "mode", "load", "policy")
STUDY_METRICS: tuple[str, ...] = (
    "completed", "num_preemptions", "num_victims", "preempted_request_share",
    "recomputed_token_share", "p99_e2el_victim_ms", "p99_e2el_nonvictim_ms", "p99_e2el_ms",
    "median_e2el_ms", "request_goodput", "slo_attainment", "num_swap_out",
    "num_swap_fallbacks", "swap_time_share",
)
# the metrics compared with the default policy, realisation by realisation
VERSUS_METRICS: tuple[str, ...] = ("slo_attainment", "request_goodput", "p99_e2el_ms",
                                   "num_preemptions", "recomputed_token_share")
_RENAME = {"scheduler.preemption_mode": "mode", "scheduler.victim_policy": "policy",
           REALIZATION: "realization"}


@dataclass(frozen=True)
class Capacity:
    """A scheduler's capacity in a capacity.json: the pooled one, each window's own
    (`windows`, realisation -> capacity; empty unless searched per window) and the same in
    requests/s (None where the file has none)."""

    pooled: float
    windows: dict[int, float] = field(default_factory=dict)
    request_rate: float | None = None
    window_request_rates: dict[int, float | None] = field(default_factory=dict)

    def of(self, realization: int) -> float:
        """The capacity a run of `realization` ran against: its window's own when the file
        has windows (a window it lacks is an error, as for a job), else the pooled one."""
        if not self.windows:
            return self.pooled
        if realization not in self.windows:
            raise ValueError(f"realisation {realization}: the capacity file has windows "
                             f"{sorted(self.windows)} only")
        return self.windows[realization]


def read_capacity(path: str | Path) -> dict[str, Capacity]:
    """Per scheduler, its capacity (the searched rate parameter's value) in a capacity.json,
    with each window's own when it was searched per window (`per_realization`)."""
    data = json.loads(Path(path).read_text())
    out: dict[str, Capacity] = {}
    missing = []
    for name, e in (data.get("schedulers") or {}).items():
        if e.get("capacity") is None:
            missing.append(name)
            continue
        per = e.get("per_realization") or {}
        lost = [k for k, w in per.items() if w.get("capacity") is None]
        if lost:
            raise ValueError(f"{path}: no capacity for {name} in window(s) {', '.join(lost)}")
        req = e.get("capacity_request_rate")
        out[name] = Capacity(
            float(e["capacity"]), {int(k): float(w["capacity"]) for k, w in per.items()},
            None if req is None else float(req),
            {int(k): (None if w.get("capacity_request_rate") is None
                      else float(w["capacity_request_rate"])) for k, w in per.items()})
    if missing:
        raise ValueError(f"{path}: no capacity for {', '.join(missing)}")
    return out


def capacity_table(runs: pd.DataFrame, capacity: dict[str, Capacity]) -> str:
    """capacity.md: per scheduler and window the runs used, the capacity they ran against
    (rate_scale and requests/s) and the rate_scale of each load."""
    loads = sorted(runs["load"].unique())
    rows = []
    for sched in dict.fromkeys(runs["scheduler"]):
        cap = capacity[sched]
        for k in sorted(set(runs.loc[runs["scheduler"] == sched, "realization"])):
            k = int(k)
            rate = cap.of(k)
            req = cap.window_request_rates.get(k) if cap.windows else cap.request_rate
            row = {"scheduler": SCHEDULER_NAMES.get(sched, sched),
                   "window": k if cap.windows else f"{k} (pooled)",
                   "capacity (rate_scale)": f"{rate:.4g}",
                   "capacity (req/s)": "n/a" if req is None else f"{req:.3g}"}
            row.update({f"rate_scale at load {load:g}": f"{load * rate:.4g}"
                        for load in loads})
            rows.append(row)
    return ("# Victim policies: the capacity each run's load is a fraction of\n\n"
            "The capacity of the scheduler under its default policy in recompute mode "
            "(every policy and mode ran at the same arrivals); with per-window capacities, "
            "each window's own (a run of window k at load L ran at L x window k's "
            "capacity).\n\n" + markdown(pd.DataFrame(rows)) + "\n")


def load_runs(out: Path, parts: Sequence[str], capacity: dict[str, Capacity],
              load: float | None = None) -> pd.DataFrame:
    """One row per run of every part's comparison.csv: `KEYS`, the realisation, the status,
    the capacity it ran against and its rate_scale, then `STUDY_METRICS`; `load` = the run's
    `workload.load`, else its `workload.rate_scale` over its scheduler's capacity (its
    window's, per window) rounded to 0.01, else `load` itself for a part whose sweep did not
    vary the load (comparison.csv has neither column)."""
    frames = []
    for part in parts:
        df = pd.read_csv(out / part / "comparison.csv").rename(columns=_RENAME)
        for key, default in (("mode", "recompute"), ("policy", "default"), ("realization", 0)):
            if key not in df:
                df[key] = default  # a sweep that did not vary it
        unknown = sorted(set(df["scheduler"]) - set(capacity))
        if unknown:
            raise ValueError(f"{part}: no capacity for scheduler(s) {', '.join(unknown)}")
        df["capacity"] = [capacity[s].of(int(k))
                          for s, k in zip(df["scheduler"], df["realization"], strict=True)]
        if "workload.load" in df:
            df["load"] = df["workload.load"].astype(float)
        elif "workload.rate_scale" in df:
            df["load"] = [round(float(r) / c, 2) for r, c in
                          zip(df["workload.rate_scale"], df["capacity"], strict=True)]
        elif load is not None:
            df["load"] = float(load)
        else:
            raise ValueError(f"{part}/comparison.csv has no workload.load or "
                             "workload.rate_scale column (its sweep ran one load): give that "
                             "load with --load")
        df["rate_scale"] = (df["workload.rate_scale"].astype(float)
                            if "workload.rate_scale" in df and "workload.load" not in df
                            else df["load"] * df["capacity"])
        frames.append(df)
    df = pd.concat(frames, ignore_index=True)
    order = {p: i for i, p in enumerate(POLICIES)}
    df["_p"] = df["policy"].map(order).fillna(len(order))
    df["_m"] = df["mode"].map({m: i for i, m in enumerate(MODES)}).fillna(len(MODES))
    df["_s"] = df["scheduler"].map({"vllm": 0, "sglang": 1}).fillna(2)
    df = df.sort_values(["_s", "_m", "load", "_p", "realization"]).drop(
        columns=["_p", "_m", "_s"])
    cols = [*KEYS, "realization", "status", "capacity", "rate_scale",
            *[m for m in STUDY_METRICS if m in df]]
    return df[cols].reset_index(drop=True)


def policy_stats(runs: pd.DataFrame) -> pd.DataFrame:
    """Per scheduler, mode, load and policy: each metric's mean over realisations, its CI
    (`<m>_ci_lo`, `<m>_ci_hi`) and, for victims' statistics, `<m>_n`."""
    frame = runs.rename(columns={"realization": REALIZATION})
    return aggregate(frame, ["mode", "load", "policy", REALIZATION, "scheduler"],
                     [m for m in STUDY_METRICS if m in runs])


def versus_default(runs: pd.DataFrame) -> pd.DataFrame:
    """Per scheduler, mode, load and policy (the default left out): for each of
    `VERSUS_METRICS`, the mean over realisations of (policy - default) in the same
    realisation, and its bootstrap CI (`<m>_ci_lo`, `<m>_ci_hi`)."""
    ok = runs[runs["status"] == "ok"]
    rows = []
    for (sched, mode, load), g in ok.groupby(["scheduler", "mode", "load"], sort=False):
        base = g[g["policy"] == "default"].set_index("realization")
        for policy in [p for p in POLICIES if p != "default" and p in set(g["policy"])]:
            mine = g[g["policy"] == policy].set_index("realization")
            common = sorted(set(mine.index) & set(base.index))
            row: dict[str, Any] = {"scheduler": sched, "mode": mode, "load": load,
                                   "policy": policy, "n_realizations": len(common)}
            for m in VERSUS_METRICS:
                diff = (mine.loc[common, m].astype(float)
                        - base.loc[common, m].astype(float)).to_numpy()
                row[m] = float(np.nanmean(diff)) if len(diff) else math.nan
                row[f"{m}_ci_lo"], row[f"{m}_ci_hi"] = bootstrap_ci(diff)
            rows.append(row)
    return pd.DataFrame(rows)


def _fmt(metric: str, x: Any) -> str:
    return format_metric(metric, x)


def policies_table(stats: pd.DataFrame) -> pd.DataFrame:
    """`policy_stats` as markdown cells, `mean [lo, hi]` (and n for victims' statistics)."""
    shown = ("num_preemptions", "preempted_request_share", "recomputed_token_share",
             "slo_attainment", "request_goodput", "p99_e2el_ms", "p99_e2el_victim_ms",
             "swap_time_share", "num_swap_fallbacks")

    def cell(m: str, r: dict[Any, Any]) -> str:
        if m not in r:
            return "n/a"
        n = r.get(f"{m}_n")
        return ci_cell(_fmt(m, r[m]), _fmt(m, r[f"{m}_ci_lo"]), _fmt(m, r[f"{m}_ci_hi"]),
                       None if n is None or pd.isna(n) else int(n))

    return _cells_table(stats, shown, cell)


def _cells_table(frame: pd.DataFrame, metrics: Sequence[str],
                 cell: Callable[[str, dict[Any, Any]], str]) -> pd.DataFrame:
    """One row per row of `frame`: its `KEYS` (the scheduler by its display name), then
    `cell(metric, row)` for each of `metrics`."""
    cells: dict[str, list[Any]] = {k: [] for k in (*KEYS, *metrics)}
    for r in frame.to_dict("records"):
        for k in KEYS:
            cells[k].append(SCHEDULER_NAMES.get(r[k], r[k]) if k == "scheduler" else r[k])
        for m in metrics:
            cells[m].append(cell(m, r))
    return pd.DataFrame(cells)


def _signed(metric: str, x: float) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    text = _fmt(metric, abs(x))
    return ("-" if x < 0 else "+") + text


def versus_table(vs: pd.DataFrame) -> pd.DataFrame:
    """`versus_default` as markdown cells: `+d [lo, hi]`, with a trailing `+` / `-` when the
    CI excludes 0 (above / below the default)."""

    def cell(m: str, r: dict[Any, Any]) -> str:
        lo, hi = r[f"{m}_ci_lo"], r[f"{m}_ci_hi"]
        text = _signed(m, r[m])
        if not (math.isnan(lo) or math.isnan(hi)):
            text += f" [{_signed(m, lo)}, {_signed(m, hi)}]"
            if lo > 0:
                text += " (+)"
            elif hi < 0:
                text += " (-)"
        return text

    return _cells_table(vs, VERSUS_METRICS, cell)


def _load_shade(sched: str, k: int, n: int) -> tuple[float, float, float]:
    """The scheduler's colour (the shared figures' one), light at the lowest load (the
    colour itself when there is one load)."""
    return shade(scheduler_color(sched), 0.35 + 0.65 * k / (n - 1) if n > 1 else 1.0)


def _series(g: pd.DataFrame, metric: str, scale: float = 1.0
            ) -> tuple[np.ndarray, np.ndarray]:
    """Per policy (in `POLICIES` order) the mean of `metric` and its CI as error-bar
    extents (2 x n, below and above), times `scale`."""
    s = g.set_index("policy").reindex(list(POLICIES))
    mean = scale * s[metric].to_numpy(dtype=float)
    lo = scale * s[f"{metric}_ci_lo"].to_numpy(dtype=float)
    hi = scale * s[f"{metric}_ci_hi"].to_numpy(dtype=float)
    err = np.vstack([np.where(np.isnan(lo), 0.0, mean - lo),
                     np.where(np.isnan(hi), 0.0, hi - mean)])
    return mean, np.clip(err, 0.0, None)


def _policy_axis(ax: plt.Axes, labelled: bool) -> None:
    """The policies on x, their names (vertical, so they never run into each other) only on
    the bottom row of panels."""
    x = np.arange(len(POLICIES))
    ax.set_xticks(x, [p.replace("_", " ") for p in POLICIES] if labelled else [],
                  rotation=90)
    ax.set_xlim(-0.6, len(POLICIES) - 0.4)


def _load_handles(scheds: Sequence[str], loads: Sequence[float], patch: bool) -> list[Any]:
    """One legend entry per load, a swatch per scheduler in the shade its bars or lines
    have at that load."""
    def part(sched: str, k: int) -> Any:
        color = _load_shade(sched, k, len(loads))
        return Patch(color=color, lw=0) if patch else Line2D([], [], color=color, lw=2.0)

    return [LegendGroup(tuple(part(s, k) for s in scheds), f"load {load:g} x capacity")
            for k, load in enumerate(loads)]


def _err(color: Any) -> dict[str, Any]:
    """Error bars in `color`: their series' own colour (a bar's: a darker shade of it, so
    the part over the bar shows)."""
    return {"elinewidth": 0.8, "capsize": 1.5, "capthick": 0.8, "ecolor": color}


def _darker(color: Any, by: float = 0.45) -> tuple[float, float, float]:
    """`color` darkened towards black (`by`: 0 the colour itself, 1 black)."""
    r, g, b = to_rgb(color)
    return (r * (1 - by), g * (1 - by), b * (1 - by))


def _scheduler_mode_panels(frame: pd.DataFrame, n_rows: int
                           ) -> tuple[list[tuple[str, str]], list[str], float, Any, Any]:
    """The (scheduler, mode) columns that `frame` has rows for, the schedulers among them in
    order, and a figure of `n_rows` rows by those columns (one column wide when there is one,
    a page wide otherwise; columns share x; in each row the modes of one scheduler share
    their y scale, each scheduler its own: `_share_y_per_scheduler`)."""
    panels = [(s, m) for s in registry.names() for m in MODES
              if len(frame[(frame["scheduler"] == s) & (frame["mode"] == m)])]
    scheds = list(dict.fromkeys(s for s, _ in panels))
    width = COLUMN_IN if len(panels) == 1 else PAGE_IN
    fig, axes = plt.subplots(n_rows, len(panels), figsize=(width, 6.2), squeeze=False,
                             sharex=True, layout="constrained")
    _share_y_per_scheduler(axes, [s for s, _ in panels])
    return panels, scheds, width, fig, axes


def _share_y_per_scheduler(axes: Any, columns: Sequence[str]) -> None:
    """In each row, the columns of one scheduler share its first column's y scale (and show
    its tick labels only there): a scheduler with few evictions is not drawn on another's
    scale, where its bars would not show."""
    for row in axes:
        first: dict[str, Any] = {}
        for ax, sched in zip(row, columns, strict=True):
            if sched in first:
                ax.sharey(first[sched])
                ax.tick_params(labelleft=False)
            else:
                first[sched] = ax


def policy_figure(stats: pd.DataFrame, path: Path) -> Path:
    """Evictions, SLO attainment and p99 E2E latency against the policy, one column per
    scheduler and mode, one bar per load, with 95 % CIs over realisations (`policy_stats`)."""
    loads = sorted(stats["load"].unique())
    metrics = [("num_preemptions", "evictions per run", 1.0),
               ("slo_attainment", "SLO attainment (%)", 100.0),
               ("p99_e2el_ms", "p99 E2E latency (s)", 1e-3)]
    x = np.arange(len(POLICIES))
    w = 0.8 / max(len(loads), 1)
    with style():
        panels, scheds, width, fig, axes = _scheduler_mode_panels(stats, len(metrics))
        for c, (sched, mode) in enumerate(panels):
            g = stats[(stats["scheduler"] == sched) & (stats["mode"] == mode)]
            for r, (metric, label, scale) in enumerate(metrics):
                ax = axes[r][c]
                for k, load in enumerate(loads):
                    mean, err = _series(g[g["load"] == load], metric, scale)
                    color = _load_shade(sched, k, len(loads))
                    ax.bar(x + (k - (len(loads) - 1) / 2) * w, mean, w, yerr=err,
                           color=color, error_kw=_err(_darker(color)))
                ax.grid(axis="x", visible=False)
                _policy_axis(ax, labelled=r == len(metrics) - 1)
                if r == 0:
                    ax.set_title(wrapped(f"{SCHEDULER_NAMES.get(sched, sched)}, {mode}",
                                         width / len(panels)))
                if c == 0:
                    ax.set_ylabel(wrapped(label, 1.6))
        fig_legend(fig, _load_handles(scheds, loads, patch=True),
                   ("bars: load, light to dark; " if len(loads) > 1 else "")
                   + "error bars: 95 % CI over realisations"
                   + ("; each scheduler on its own y scale" if len(scheds) > 1 else ""))
        suptitle(fig, "Evictions, SLO attainment and tail latency per victim policy")
        return _save(fig, path)


# recompute and swap: marker (both filled: hollow marks a statistic from few victims in
# the shared figures)
_MODE_MARKERS = {"recompute": "o", "swap": "s"}


def _dodge(n: int) -> list[float]:
    """The sideways offsets of n series within a policy's category (most of its width)."""
    step = 0.7 / max(n, 1)
    return [(i - (n - 1) / 2) * step for i in range(n)]


def swap_figure(stats: pd.DataFrame, path: Path) -> Path:
    """p99 E2E latency against the policy, recompute (circles) against swap (squares), a
    shade per load, side by side within each policy; below, the swap copy time share; a
    column per scheduler, each on its own y scale; 95 % CIs."""
    loads = sorted(stats["load"].unique())
    scheds = [s for s in registry.names() if s in set(stats["scheduler"])]
    modes = [m for m in MODES if m in set(stats["mode"])]
    x = np.arange(len(POLICIES))
    # every (load, mode) series its own place in the category: recompute and swap of a load
    # side by side, so that neither hides the other where they are alike
    series = [(load, mode) for load in loads for mode in modes]
    offset = dict(zip(series, _dodge(len(series)), strict=True))
    width = COLUMN_IN if len(scheds) == 1 else PAGE_IN
    with style():
        fig, axes = plt.subplots(2, len(scheds), figsize=(width, 4.6), squeeze=False,
                                 sharex=True, layout="constrained")
        for c, sched in enumerate(scheds):
            for k, load in enumerate(loads):
                color = _load_shade(sched, k, len(loads))
                for mode in modes:
                    g = stats[(stats["scheduler"] == sched) & (stats["mode"] == mode)
                              & (stats["load"] == load)]
                    if g.empty:
                        continue
                    at = x + offset[(load, mode)]
                    mean, err = _series(g, "p99_e2el_ms", 1e-3)
                    axes[0][c].errorbar(at, mean, yerr=err, ls="none",
                                        marker=_MODE_MARKERS[mode], color=color,
                                        **_err(color))
                    if mode == "swap":
                        mean, err = _series(g, "swap_time_share", 100.0)
                        axes[1][c].errorbar(at, mean, yerr=err, ls="none",
                                            marker=_MODE_MARKERS[mode], color=color,
                                            **_err(color))
            for r, label in enumerate(("p99 E2E latency, all requests (s)",
                                       "swap copy time (% of busy time)")):
                ax = axes[r][c]
                _policy_axis(ax, labelled=r == 1)
                ax.grid(axis="x", visible=False)
                for edge in np.arange(len(POLICIES) - 1) + 0.5:  # the policies' categories
                    ax.axvline(edge, color="0.9", lw=0.5, zorder=0)
                if c == 0:
                    ax.set_ylabel(wrapped(label, 1.6))
            axes[0][c].set_title(SCHEDULER_NAMES.get(sched, sched))
        handles: list[Any] = [
            LegendGroup(tuple(Line2D([], [], color=scheduler_color(s), ls="",
                                     marker=_MODE_MARKERS[m]) for s in scheds), m)
            for m in modes]
        fig_legend(fig, handles + _load_handles(scheds, loads, patch=False),
                   wrapped("error bars: 95 % CI over realisations"
                           + ("; shade: load" if len(loads) > 1 else ""), width))
        suptitle(fig, "Recompute against swap per victim policy")
        return _save(fig, path)


def versus_figure(vs: pd.DataFrame, path: Path) -> Path:
    """The paired differences from the default policy (`versus_default`) of SLO attainment,
    p99 E2E latency and evictions against the policy, one column per scheduler and mode,
    one marker per load, with 95 % CIs; a line at 0 (the default)."""
    loads = sorted(vs["load"].unique())
    metrics = [("slo_attainment", "SLO attainment, policy - default (points)", 100.0),
               ("p99_e2el_ms", "p99 E2E latency, policy - default (s)", 1e-3),
               ("num_preemptions", "evictions per run, policy - default", 1.0)]
    others = [p for p in POLICIES if p != "default"]
    x = np.arange(len(others))
    with style():
        panels, scheds, width, fig, axes = _scheduler_mode_panels(vs, len(metrics))
        for c, (sched, mode) in enumerate(panels):
            for r, (metric, label, scale) in enumerate(metrics):
                ax = axes[r][c]
                ax.axhline(0.0, color="0.4", lw=0.8)
                for k, load in enumerate(loads):
                    g = vs[(vs["scheduler"] == sched) & (vs["mode"] == mode)
                           & (vs["load"] == load)].set_index("policy").reindex(others)
                    mean = scale * g[metric].to_numpy(dtype=float)
                    lo = scale * g[f"{metric}_ci_lo"].to_numpy(dtype=float)
                    hi = scale * g[f"{metric}_ci_hi"].to_numpy(dtype=float)
                    err = np.clip(np.vstack([np.nan_to_num(mean - lo), np.nan_to_num(hi - mean)]),
                                  0.0, None)
                    dx = (k - (len(loads) - 1) / 2) * 0.15
                    color = _load_shade(sched, k, len(loads))
                    ax.errorbar(x + dx, mean, yerr=err, ls="none", marker="o", color=color,
                                **_err(color))
                ax.set_xticks(x, [p.replace("_", " ") for p in others]
                              if r == len(metrics) - 1 else [], rotation=90)
                ax.set_xlim(-0.6, len(others) - 0.4)
                if r == 0:
                    ax.set_title(wrapped(f"{SCHEDULER_NAMES.get(sched, sched)}, {mode}",
                                         width / len(panels)))
                if c == 0:
                    ax.set_ylabel(wrapped(label, 1.6))
        fig_legend(fig, _load_handles(scheds, loads, patch=False),
                   "paired by realisation (same requests and arrivals); error bars: 95 % CI"
                   + ("; each scheduler on its own y scale" if len(scheds) > 1 else ""))
        suptitle(fig, "Each victim policy against the default, realisation by realisation")
        return _save(fig, path)


def write_policy_report(out: str | Path, parts: Sequence[str], capacity_file: str | Path,
                        figures: bool = True, load: float | None = None) -> dict[str, Path]:
    """Write the study's summary tables and figures into `out` (see the module docstring);
    `load`: the load of parts that ran one rate (`load_runs`)."""
    root = Path(out)
    capacity = read_capacity(capacity_file)
    runs = load_runs(root, parts, capacity, load)
    stats = policy_stats(runs)
    vs = versus_default(runs)
    n_real = int(stats["n_realizations"].max()) if len(stats) else 0
    head = (f"# Victim policies: {len(runs)} runs, {len(stats)} configs x {n_real} "
            "realisations\n\nload: the run's arrival rate (workload.rate_scale) over its "
            "scheduler's capacity under the default policy in recompute mode"
            + (", its window's own (per window: capacity.md)" if any(
                c.windows for c in capacity.values()) else " (capacity.md)") + ".\n\n")
    shares = ("shares (evicted, recomputed, SLO attainment, swap time) in %, differences "
              "in percentage points; latencies in ms; goodput in req/s")
    paths = {
        "runs.csv": write_text(runs.to_csv(index=False), root / "runs.csv"),
        "capacity.md": write_text(capacity_table(runs, capacity), root / "capacity.md"),
        "policies.csv": write_text(stats.to_csv(index=False), root / "policies.csv"),
        "policies.md": write_text(head + markdown(policies_table(stats)) + "\n" + CI_NOTE
                                  + "; " + shares + ".\n", root / "policies.md"),
        "vs_default.csv": write_text(vs.to_csv(index=False), root / "vs_default.csv"),
        "vs_default.md": write_text(
            head + "Each cell: the mean over realisations of (policy - default) in the same "
            "realisation, [95 % CI: percentile bootstrap over realisations]; (+) / (-): the CI "
            "lies above / below 0.\n\n" + markdown(versus_table(vs)) + "\n" + shares + ".\n",
            root / "vs_default.md"),
    }
    if figures:
        paths["policies.png"] = policy_figure(stats, root / "policies.png")
        paths["swap_vs_recompute.png"] = swap_figure(stats, root / "swap_vs_recompute.png")
        paths["vs_default.png"] = versus_figure(vs, root / "vs_default.png")
    return paths


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: the study's summary of the parts' comparison tables."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("parts", nargs="+")
    ap.add_argument("--capacity", required=True,
                    help="capacity.json of the default policy in recompute mode")
    ap.add_argument("--load", type=float, default=None,
                    help="the load of parts whose sweep ran one load (x capacity)")
    ap.add_argument("--no-figures", action="store_true")
    args = ap.parse_args(argv)
    paths = write_policy_report(args.out, args.parts, args.capacity, not args.no_figures,
                                args.load)
    print("wrote " + ", ".join(str(p) for p in paths.values()))


if __name__ == "__main__":
    main()
