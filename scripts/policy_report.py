#!/usr/bin/env python3
"""The victim-policy study's summary (scripts/reproduce_victim_policies.sh).

    python scripts/policy_report.py OUT TRACE [TRACE ...]

reads `OUT/<TRACE>/comparison.csv` (written by `experiments.report` for each trace's
multirun, which sweeps `scheduler`, `scheduler.preemption_mode`, `scheduler.victim_policy`
and `workload.rate_scale`) and writes into OUT:
- `runs.csv` / `runs.md`: one row per run of every trace (trace, scheduler, mode, load,
  policy) with the study's metrics (`STUDY_METRICS`);
- `best.csv` / `best.md`: per trace, scheduler, mode and load, the policy with the lowest
  victims' p99 E2E latency, the one with the lowest p99 E2E latency of all requests, the one
  with the fewest evictions and the one with the highest SLO attainment, each with its value
  and the default policy's;
- `<TRACE>_policies.png`: per trace, evictions, victims' p99 E2E latency and SLO attainment
  (rows) against the policy (x), one panel per scheduler and mode, one bar per load;
- `<TRACE>_swap_vs_recompute.png`: per trace, p99 E2E latency (all requests) and swap time
  share against the policy, recompute against swap, per scheduler, at each load.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from experiments.report.figures import (
    COLUMN_IN,
    HOLLOW_FACE,
    PAGE_IN,
    SCHEDULER_NAMES,
    VALUE_LABELS,
    LegendGroup,
    _save,
    fig_legend,
    log_ticks,
    scheduler_color,
    shade,
    style,
    suptitle,
    wrapped,
)
from experiments.report.tables import markdown
from experiments.results.sinks import write_text
from schedulers import registry

POLICIES: tuple[str, ...] = ("default", "latest_arrival", "fewest_outputs", "least_progress",
                             "most_kv", "shortest_remaining", "random")
MODES: tuple[str, ...] = ("recompute", "swap")
KEYS: tuple[str, ...] = ("trace", "scheduler", "mode", "load", "policy")
STUDY_METRICS: tuple[str, ...] = (
    "completed", "num_preemptions", "preempted_request_share", "recomputed_token_share",
    "p99_e2el_victim_ms", "p99_e2el_nonvictim_ms", "p99_e2el_ms", "median_e2el_ms",
    "request_goodput", "slo_attainment", "num_swap_out", "num_swap_fallbacks",
    "swap_time_share",
)
_RENAME = {"scheduler.preemption_mode": "mode", "scheduler.victim_policy": "policy",
           "workload.rate_scale": "load"}


def load_runs(out: Path, traces: Sequence[str]) -> pd.DataFrame:
    """One row per run of every trace's comparison.csv, keys first, then `STUDY_METRICS`."""
    frames = []
    for trace in traces:
        df = pd.read_csv(out / trace / "comparison.csv").rename(columns=_RENAME)
        df.insert(0, "trace", trace)
        for key, default in (("mode", "recompute"), ("policy", "default"), ("load", 1.0)):
            if key not in df:
                df[key] = default  # a sweep that did not vary it
        frames.append(df)
    df = pd.concat(frames, ignore_index=True)
    order = {p: i for i, p in enumerate(POLICIES)}
    df["_p"] = df["policy"].map(order).fillna(len(order))
    df["_m"] = df["mode"].map({m: i for i, m in enumerate(MODES)}).fillna(len(MODES))
    df["_s"] = df["scheduler"].map({"vllm": 0, "sglang": 1}).fillna(2)
    df = df.sort_values(["trace", "_s", "_m", "load", "_p"]).drop(columns=["_p", "_m", "_s"])
    cols = [*KEYS, "status", *[m for m in STUDY_METRICS if m in df]]
    return df[cols].reset_index(drop=True)


def best_policies(runs: pd.DataFrame) -> pd.DataFrame:
    """Per trace, scheduler, mode and load: the best policy by victims' p99 E2E latency
    (lowest; runs without victims left out), by all requests' p99 E2E latency (lowest), by
    evictions (fewest) and by SLO attainment (highest), with the default policy's value
    beside each. Ties: the first in `POLICIES`."""
    rows = []
    for key, g in runs.groupby(["trace", "scheduler", "mode", "load"], sort=False):
        row: dict[str, Any] = dict(zip(("trace", "scheduler", "mode", "load"), key,
                                       strict=True))
        dflt = g[g["policy"] == "default"]
        for metric, name, lowest in (("p99_e2el_victim_ms", "victim_p99_ms", True),
                                     ("p99_e2el_ms", "p99_ms", True),
                                     ("num_preemptions", "evictions", True),
                                     ("slo_attainment", "slo_attainment", False)):
            v = g.dropna(subset=[metric])
            if v.empty:
                row.update({f"best_{name}": None, name: None, f"default_{name}": None})
                continue
            values = v[metric].to_numpy(dtype=float)
            i = int(np.argmin(values) if lowest else np.argmax(values))  # first on ties
            row[f"best_{name}"] = v["policy"].iloc[i]
            row[name] = values[i]
            row[f"default_{name}"] = dflt[metric].iloc[0] if len(dflt) else None
        rows.append(row)
    out = pd.DataFrame(rows)
    for col in ("evictions", "default_evictions"):
        if col in out:
            out[col] = pd.to_numeric(out[col]).astype("Int64")
    return out


def _positive(values: pd.Series) -> bool:
    """Whether a log axis can show `values` (some finite value above zero)."""
    x = values.to_numpy(dtype=float)
    return bool((np.isfinite(x) & (x > 0)).any())


def _load_shade(sched: str, k: int, n: int) -> tuple[float, float, float]:
    """The scheduler's colour (the shared figures' one), light at the lowest load."""
    return shade(scheduler_color(sched), 0.35 + 0.65 * k / max(n - 1, 1))


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

    return [LegendGroup(tuple(part(s, k) for s in scheds), f"{load:g}x recorded rate")
            for k, load in enumerate(loads)]


def _bars(ax: plt.Axes, g: pd.DataFrame, metric: str, loads: Sequence[float],
          sched: str, scale: float) -> None:
    x = np.arange(len(POLICIES))
    w = 0.8 / max(len(loads), 1)
    for k, load in enumerate(loads):
        s = g[g["load"] == load].set_index("policy")[metric].reindex(list(POLICIES))
        ax.bar(x + (k - (len(loads) - 1) / 2) * w, s.to_numpy(dtype=float) * scale, w,
               color=_load_shade(sched, k, len(loads)))
    ax.grid(axis="x", visible=False)


def policy_figure(runs: pd.DataFrame, trace: str, path: Path) -> Path:
    """Evictions, victims' p99 E2E latency and SLO attainment against the policy, one column
    per scheduler and mode, one bar per load."""
    df = runs[runs["trace"] == trace]
    loads = sorted(df["load"].unique())
    panels = [(s, m) for s in registry.names() for m in MODES
              if len(df[(df["scheduler"] == s) & (df["mode"] == m)])]
    scheds = list(dict.fromkeys(s for s, _ in panels))
    metrics = [("num_preemptions", "evictions (count)", 1.0),
               ("p99_e2el_victim_ms", "victims' p99 E2E latency (s)", 1e-3),
               ("slo_attainment", "SLO attainment (%)", 100.0)]
    width = COLUMN_IN if len(panels) == 1 else PAGE_IN
    with style():
        fig, axes = plt.subplots(len(metrics), len(panels), figsize=(width, 6.2),
                                 squeeze=False, sharey="row", sharex=True,
                                 layout="constrained")
        for c, (sched, mode) in enumerate(panels):
            g = df[(df["scheduler"] == sched) & (df["mode"] == mode)]
            for r, (metric, label, scale) in enumerate(metrics):
                ax = axes[r][c]
                _bars(ax, g, metric, loads, sched, scale)
                _policy_axis(ax, labelled=r == len(metrics) - 1)
                if r == 0:
                    ax.set_title(wrapped(f"{SCHEDULER_NAMES.get(sched, sched)}, {mode}",
                                         width / len(panels)))
                if c == 0:
                    ax.set_ylabel(wrapped(label, 1.6))
        if _positive(df["p99_e2el_victim_ms"]):
            log_ticks(axes[1][0], "y", inches=1.6)
        fig_legend(fig, _load_handles(scheds, loads, patch=True),
                   "bars: load, light to dark")
        suptitle(fig, f"Evictions, victims' tail latency and SLO attainment per victim "
                      f"policy ({VALUE_LABELS.get(trace, trace)})")
        return _save(fig, path)


def swap_figure(runs: pd.DataFrame, trace: str, path: Path) -> Path:
    """p99 E2E latency (all requests) against the policy, recompute (solid) against swap
    (dashed), one line per load, one panel per scheduler; below, swap time share."""
    df = runs[runs["trace"] == trace]
    loads = sorted(df["load"].unique())
    scheds = [s for s in registry.names() if s in set(df["scheduler"])]
    x = np.arange(len(POLICIES))
    modes = (("recompute", "-", "o", None), ("swap", "--", "s", HOLLOW_FACE))
    width = COLUMN_IN if len(scheds) == 1 else PAGE_IN
    with style():
        fig, axes = plt.subplots(2, len(scheds), figsize=(width, 4.6), squeeze=False,
                                 sharex=True, layout="constrained")
        for c, sched in enumerate(scheds):
            for k, load in enumerate(loads):
                color = _load_shade(sched, k, len(loads))
                for mode, ls, marker, face in modes:
                    s = df[(df["scheduler"] == sched) & (df["mode"] == mode)
                           & (df["load"] == load)]
                    s = s.set_index("policy").reindex(list(POLICIES))
                    axes[0][c].plot(x, 1e-3 * s["p99_e2el_ms"].to_numpy(dtype=float), ls=ls,
                                    marker=marker, mfc=face, color=color)
                    if mode == "swap":
                        axes[1][c].plot(x, 100 * s["swap_time_share"].to_numpy(dtype=float),
                                        ls=ls, marker=marker, mfc=face, color=color)
            for r, label in enumerate(("p99 E2E latency, all requests (s)",
                                       "copy time (% of busy time)")):
                ax = axes[r][c]
                _policy_axis(ax, labelled=r == 1)
                if c == 0:
                    ax.set_ylabel(wrapped(label, 1.6))
            axes[0][c].set_title(SCHEDULER_NAMES.get(sched, sched))
            if _positive(df["p99_e2el_ms"]):
                log_ticks(axes[0][c], "y", inches=1.6)
        handles: list[Any] = [
            LegendGroup(tuple(Line2D([], [], color=scheduler_color(s), ls=ls, marker=marker,
                                     mfc=face) for s in scheds), mode)
            for mode, ls, marker, face in modes]
        fig_legend(fig, handles + _load_handles(scheds, loads, patch=False))
        suptitle(fig, f"Recompute against swap: tail latency and copy cost per victim policy "
                      f"({VALUE_LABELS.get(trace, trace)}; colour: scheduler, shade: load)")
        return _save(fig, path)


def write_policy_report(out: str | Path, traces: Sequence[str], figures: bool = True
                        ) -> dict[str, Path]:
    """Write the study's summary tables and figures into `out` (see the module docstring)."""
    root = Path(out)
    runs = load_runs(root, traces)
    best = best_policies(runs)
    head = (f"# Victim policies: {len(runs)} runs "
            f"({', '.join(traces)})\n\n")
    paths = {
        "runs.csv": write_text(runs.to_csv(index=False), root / "runs.csv"),
        "runs.md": write_text(head + markdown(runs), root / "runs.md"),
        "best.csv": write_text(best.to_csv(index=False), root / "best.csv"),
        "best.md": write_text(head + markdown(best), root / "best.md"),
    }
    if figures:
        for trace in traces:
            paths[f"{trace}_policies.png"] = policy_figure(
                runs, trace, root / f"{trace}_policies.png")
            paths[f"{trace}_swap_vs_recompute.png"] = swap_figure(
                runs, trace, root / f"{trace}_swap_vs_recompute.png")
    return paths


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: the study's summary of the traces' comparison tables."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--no-figures", action="store_true")
    args = ap.parse_args(argv)
    paths = write_policy_report(args.out, args.traces, not args.no_figures)
    print("wrote " + ", ".join(str(p) for p in paths.values()))


if __name__ == "__main__":
    main()
