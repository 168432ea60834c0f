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

from experiments.report.figures import _save, scheduler_color, shade, style
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


_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}


def _load_shade(sched: str, k: int, n: int) -> tuple[float, float, float]:
    """The scheduler's colour (the shared figures' one), light at the lowest load."""
    return shade(scheduler_color(sched), 0.35 + 0.65 * k / max(n - 1, 1))


def _bars(ax: plt.Axes, g: pd.DataFrame, metric: str, loads: Sequence[float],
          sched: str) -> None:
    x = np.arange(len(POLICIES))
    w = 0.8 / max(len(loads), 1)
    for k, load in enumerate(loads):
        s = g[g["load"] == load].set_index("policy")[metric].reindex(list(POLICIES))
        ax.bar(x + (k - (len(loads) - 1) / 2) * w, s.to_numpy(dtype=float), w,
               color=_load_shade(sched, k, len(loads)), label=f"{load:g}x recorded rate")
    ax.set_xticks(x, [p.replace("_", " ") for p in POLICIES], fontsize=5.5, rotation=40,
                  ha="right", rotation_mode="anchor")
    ax.grid(axis="y", alpha=0.3)


def policy_figure(runs: pd.DataFrame, trace: str, path: Path) -> Path:
    """Evictions, victims' p99 E2E latency and SLO attainment against the policy, one column
    per scheduler and mode, one bar per load."""
    df = runs[runs["trace"] == trace]
    loads = sorted(df["load"].unique())
    panels = [(s, m) for s in registry.names() for m in MODES
              if len(df[(df["scheduler"] == s) & (df["mode"] == m)])]
    metrics = [("num_preemptions", "evictions (count)"),
               ("p99_e2el_victim_ms", "victims' p99 E2E latency (ms)"),
               ("slo_attainment", "SLO attainment (share)")]
    with style():
        fig, axes = plt.subplots(len(metrics), len(panels), figsize=(1.9 * len(panels), 5.4),
                                 squeeze=False, sharey="row")
        for c, (sched, mode) in enumerate(panels):
            g = df[(df["scheduler"] == sched) & (df["mode"] == mode)]
            for r, (metric, label) in enumerate(metrics):
                ax = axes[r][c]
                _bars(ax, g, metric, loads, sched)
                if r == 0:
                    ax.set_title(f"{_NAMES.get(sched, sched)}, {mode}")
                if c == 0:
                    ax.set_ylabel(label)
        handles = [h for c in range(len(panels)) if c % len(MODES) == 0
                   for h in axes[0][c].get_legend_handles_labels()[0]]
        labels = [f"{_NAMES.get(sched, sched)}, {load:g}x recorded rate"
                  for sched in dict.fromkeys(s for s, _ in panels) for load in loads]
        fig.legend(handles, labels, loc="lower center", ncol=len(loads) * 2, fontsize=6,
                   frameon=False, bbox_to_anchor=(0.5, -0.03))
        if _positive(df["p99_e2el_victim_ms"]):
            axes[1][0].set_yscale("log")
        fig.suptitle(f"Evictions, victims' tail latency and SLO attainment per victim policy "
                     f"({trace}; bars: load, light to dark)")
        fig.tight_layout(rect=(0, 0.03, 1, 1))
        return _save(fig, path)


def swap_figure(runs: pd.DataFrame, trace: str, path: Path) -> Path:
    """p99 E2E latency (all requests) against the policy, recompute (solid) against swap
    (dashed), one line per load, one panel per scheduler; below, swap time share."""
    df = runs[runs["trace"] == trace]
    loads = sorted(df["load"].unique())
    scheds = [s for s in registry.names() if s in set(df["scheduler"])]
    x = np.arange(len(POLICIES))
    with style():
        fig, axes = plt.subplots(2, len(scheds), figsize=(3.4 * len(scheds), 4.2),
                                 squeeze=False)
        for c, sched in enumerate(scheds):
            for k, load in enumerate(loads):
                color = _load_shade(sched, k, len(loads))
                for mode, ls, marker in (("recompute", "-", "o"), ("swap", "--", "s")):
                    s = df[(df["scheduler"] == sched) & (df["mode"] == mode)
                           & (df["load"] == load)]
                    s = s.set_index("policy").reindex(list(POLICIES))
                    axes[0][c].plot(x, s["p99_e2el_ms"].to_numpy(dtype=float), ls,
                                    marker=marker, ms=3, mfc="white" if mode == "swap" else None,
                                    color=color, label=f"{load:g}x, {mode}")
                    if mode == "swap":
                        axes[1][c].plot(x, 100 * s["swap_time_share"].to_numpy(dtype=float),
                                        ls, marker=marker, ms=3, mfc="white", color=color,
                                        label=f"{load:g}x")
            for r, label in enumerate(("p99 E2E latency, all requests (ms)",
                                       "copy time (% of busy time)")):
                ax = axes[r][c]
                ax.set_xticks(x, [p.replace("_", " ") for p in POLICIES], fontsize=5.5,
                              rotation=40, ha="right", rotation_mode="anchor")
                ax.grid(alpha=0.3)
                if c == 0:
                    ax.set_ylabel(label)
            axes[0][c].set_title(_NAMES.get(sched, sched))
            if _positive(df["p99_e2el_ms"]):
                axes[0][c].set_yscale("log")
        grey = "#555555"
        proxies = [Line2D([], [], color=grey, ls="-", marker="o", ms=3, label="recompute"),
                   Line2D([], [], color=grey, ls="--", marker="s", ms=3, mfc="white",
                          label="swap")]
        proxies += [Line2D([], [], color=shade(grey, 0.35 + 0.65 * k / max(len(loads) - 1, 1)),
                           lw=2.5, label=f"{load:g}x recorded rate")
                    for k, load in enumerate(loads)]
        fig.legend(handles=proxies, loc="lower center", ncol=len(proxies), fontsize=6,
                   frameon=False, bbox_to_anchor=(0.5, -0.03))
        fig.suptitle(f"Recompute against swap: tail latency and copy cost per victim policy "
                     f"({trace}; colour: scheduler, shade: load)")
        fig.tight_layout(rect=(0, 0.03, 1, 1))
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
