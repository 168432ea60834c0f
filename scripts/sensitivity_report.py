"""The cross-setting summary of the sensitivity study (scripts/reproduce_sensitivity.sh).

    python scripts/sensitivity_report.py results/sensitivity

reads, for every setting of `SETTINGS` present under the study folder, its per-job table
(`<setting>/comparison.csv`, written by `python -m experiments.report`; the paired victim
ratio from its `aggregated.csv`) and its capacity
search (`runs/<setting>/capacity/capacity.json`, written by `python -m experiments.capacity`),
and writes into the study folder:
- `summary.csv`: one row per setting x scheduler x load x statistic: the mean over the
  realisations, its 95 % bootstrap CI (`experiments.report.realizations.aggregate`, the same
  statistics as every study's aggregated.md) and, for a victim statistic, the victims it
  rests on;
- `summary.md`: one table per statistic (a row per setting, a column per scheduler and load,
  `mean [lo, hi]` and `n=` victims), and the capacity of every setting, pooled and, for a
  search per window, each window's own with the rate each load meant there;
- `sensitivity_vs_load.png/.pdf`: the headline statistics against load, one line per
  setting (mean over the realisations with its 95 % CI; a victim ratio from fewer than 30
  victims hollow, its n beside it) and the victims the ratio rests on, a block of panels per
  scheduler that evicted in some setting (one that never did is said in the legend);
  `capacity_by_setting.png/.pdf`: every setting's capacity in req/s, pooled over the windows
  (whisker: the upper end of the search's bracket, value at the right) and each window's own.
Everything written is a function of those inputs (no dates, no paths), so a rerun rewrites
it byte for byte.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments.report.realizations import CI_NOTE, REALIZATION, aggregate, ci_cell
from experiments.report.tables import format_metric

LOAD = "workload.load"


@dataclass(frozen=True)
class Setting:
    """One setting of the study: its folder and how the summary names it."""

    folder: str
    label: str


SETTINGS: tuple[Setting, ...] = (
    Setting("a100_llama2_7b", "Llama-2-7B, A100, measured (main)"),
    Setting("a100_llama2_7b_fitted", "Llama-2-7B, A100, fitted"),
    Setting("a100_llama3_8b", "Llama-3-8B, A100, fitted"),
    Setting("h100_llama2_7b", "Llama-2-7B, H100, fitted"),
    Setting("h100_llama3_8b", "Llama-3-8B, H100, fitted"),
    Setting("vllm_block1", "main, vLLM block_size 1"),
    Setting("sglang_page16", "main, SGLang page_size 16"),
)
# (metric of comparison.csv, label): the headline statistics of Q1
STATISTICS: tuple[tuple[str, str], ...] = (
    ("preemptions_per_1k_requests", "Evictions per 1,000 requests"),
    ("preempted_request_share", "Requests evicted (%)"),
    ("recomputed_token_share", "Prefill recomputed (%)"),
    ("victim_e2el_median_ratio", "Victims' / others' median E2E latency (ratio)"),
    ("matched_victim_ratio", "Victims' / length-matched others' E2E latency per token (ratio)"),
    ("paired_victim_e2el_ratio", "Victims' E2E latency / the same request's under the other "
     "scheduler (ratio)"),
    ("slo_attainment", "SLO attainment (%)"),
)
# statistics read from the setting's aggregated.csv (the report pairs requests across the
# schedulers; comparison.csv has no per-job column of it)
FROM_AGGREGATED = ("paired_victim_e2el_ratio",)
PLOTTED = ("preemptions_per_1k_requests", "recomputed_token_share", "victim_e2el_median_ratio")
SCHEDULERS = ("vllm", "sglang")
SCHEDULER_LABELS = {"vllm": "vLLM", "sglang": "SGLang"}


def load_setting(study: Path, setting: Setting) -> tuple[pd.DataFrame, dict[str, Any]] | None:
    """A setting's statistics aggregated over realisations (one row per scheduler x load) and
    its capacity file; None when the setting has not been run."""
    table = study / setting.folder / "comparison.csv"
    capacity = study / "runs" / setting.folder / "capacity" / "capacity.json"
    if not table.is_file():
        return None
    if not capacity.is_file():
        raise SystemExit(f"{capacity}: missing (scripts/_study.sh writes it with the table "
                         f"{table}); rerun the setting")
    jobs = pd.read_csv(table)
    agg = aggregate(jobs, ["scheduler", LOAD, REALIZATION],
                    [m for m, _ in STATISTICS if m not in FROM_AGGREGATED])
    aggregated = study / setting.folder / "aggregated.csv"
    if aggregated.is_file():  # the statistics only the report's pairing computes
        cols = [f"{m}{suffix}" for m in FROM_AGGREGATED
                for suffix in ("", "_ci_lo", "_ci_hi", "_n")]
        extra = pd.read_csv(aggregated)
        agg = agg.merge(extra[["scheduler", LOAD, *[c for c in cols if c in extra]]],
                        on=["scheduler", LOAD], how="left")
    agg.insert(0, "setting", setting.folder)
    return agg, json.loads(capacity.read_text())


def long_rows(agg: pd.DataFrame) -> list[dict[str, Any]]:
    """summary.csv's rows of one setting: setting, scheduler, load, statistic, mean, CI, n."""
    rows = []
    for _, r in agg.iterrows():
        for m, _ in STATISTICS:
            n = r.get(f"{m}_n")
            rows.append({"setting": r["setting"], "scheduler": r["scheduler"], "load": r[LOAD],
                         "realizations": int(r["n_realizations"]), "statistic": m,
                         "mean": r.get(m), "ci_lo": r.get(f"{m}_ci_lo"),
                         "ci_hi": r.get(f"{m}_ci_hi"),
                         "victims": None if n is None or pd.isna(n) else int(n)})
    return rows


def cell(row: pd.Series, metric: str) -> str:
    """`mean [lo, hi]` (and `n=` victims) of one statistic, as every aggregated.md writes it."""
    n = row.get(f"{metric}_n")
    return ci_cell(format_metric(metric, row.get(metric)),
                   format_metric(metric, row.get(f"{metric}_ci_lo")),
                   format_metric(metric, row.get(f"{metric}_ci_hi")),
                   None if n is None or pd.isna(n) else int(n))


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def capacity_rows(settings: list[tuple[Setting, pd.DataFrame, dict[str, Any]]]
                  ) -> list[list[str]]:
    """Per setting and scheduler: the capacity found (rate_scale and req/s), its bracket,
    the probes, the KV pool and context of its jobs."""
    rows = []
    for s, _agg, cap in settings:
        for sched, entry in cap["schedulers"].items():
            value = entry.get("capacity")
            bracket = entry.get("bracket") or [None, None]
            req = entry.get("capacity_request_rate")
            rows.append([s.label, SCHEDULER_LABELS.get(sched, sched),
                         "n/a" if value is None else f"{value:.4g}",
                         "n/a" if req is None else f"{req:.2f}",
                         f"[{bracket[0]:.4g}, {bracket[1]:.4g})"
                         if None not in bracket else "n/a",
                         str(len(entry.get("probes") or []))])
    return rows


def window_capacity_rows(settings: list[tuple[Setting, pd.DataFrame, dict[str, Any]]],
                         loads: list[float]) -> list[list[str]]:
    """Per setting, scheduler and window of a per-window search: the window's own capacity
    (rate_scale, req/s) and the rate_scale each load meant in it (load x that capacity)."""
    rows = []
    for s, _agg, cap in settings:
        for sched, entry in cap["schedulers"].items():
            for k, w in sorted((entry.get("per_realization") or {}).items(),
                               key=lambda kv: int(kv[0])):
                value, req = w.get("capacity"), w.get("capacity_request_rate")
                rows.append([s.label, SCHEDULER_LABELS.get(sched, sched), str(k),
                             "n/a" if value is None else f"{value:.4g}",
                             "n/a" if req is None else f"{req:.2f}",
                             *("n/a" if value is None else f"{load * value:.4g}"
                               for load in loads)])
    return rows


def _windows_text(settings: list[tuple[Setting, pd.DataFrame, dict[str, Any]]]) -> str:
    """The windows the capacities were searched on, as the capacity files record them."""
    found = {tuple(cap.get("realization_ids") or range(int(cap.get("realizations") or 0)))
             for _s, _agg, cap in settings}
    if len(found) == 1 and all(found):
        (ids,) = found
        return f"windows {', '.join(map(str, ids))}"
    return "each setting's windows"


def first_summaries(study: Path, setting: Setting) -> dict[str, dict[str, Any]]:
    """Per scheduler, the summary.json of the setting's first job (the lowest job number):
    what every job of the setting shares (timing source, loop, limits, pool, context)."""
    found: dict[str, dict[str, Any]] = {}
    sweep = study / "runs" / setting.folder / "sweep"
    jobs = sorted((p for p in sweep.glob("*/summary.json") if p.parent.name.isdigit()),
                  key=lambda p: int(p.parent.name))
    for path in jobs:
        summary = json.loads(path.read_text())
        found.setdefault(str(summary["scheduler"]), summary)
    return found


def setting_rows(study: Path, settings: list[tuple[Setting, pd.DataFrame, dict[str, Any]]]
                 ) -> list[list[str]]:
    """Per setting and scheduler, from its jobs' summary.json and its capacity file: model,
    GPU, step-time source, engine loop, batch limits, KV pool, context, block / page size."""
    rows = []
    for s, _agg, cap in settings:
        for sched, summary in first_summaries(study, s).items():
            limits = summary.get("scheduler_limits") or {}
            config = cap["schedulers"].get(sched, {}).get("scheduler_config", {})
            page = config.get("block_size", config.get("page_size"))
            rows.append([s.label, SCHEDULER_LABELS.get(sched, sched), str(summary["model"]),
                         str(summary["hardware"]), str(summary["step_time_source"]),
                         str(summary["engine_loop"]),
                         ", ".join(f"{k}={v['value']}" for k, v in sorted(limits.items())),
                         f"{int(summary['kv_capacity_tokens']):,}",
                         f"{int(summary['max_model_len']):,}", str(page)])
    return rows


def window_rows(settings: list[tuple[Setting, pd.DataFrame, dict[str, Any]]],
                jobs: dict[str, pd.DataFrame]) -> list[list[str]]:
    """Per realisation (trace window), the requests offered after the prompt filter, from the
    first setting's jobs (the filter and the windows are the same in every setting)."""
    s, _agg, cap = settings[0]
    window = int(cap.get("config", {}).get("workload", {}).get("max_requests") or 0)
    frame = jobs[s.folder]
    rows = []
    for k, group in frame.groupby(REALIZATION, sort=True):
        offered = sorted({int(x) for x in group["offered"]})
        rows.append([str(k), str(window), ", ".join(str(o) for o in offered),
                     ", ".join(str(window - o) for o in offered)])
    return rows


def write_markdown(study: Path, settings: list[tuple[Setting, pd.DataFrame, dict[str, Any]]],
                   jobs: dict[str, pd.DataFrame]) -> None:
    loads = sorted({float(x) for _, agg, _ in settings for x in agg[LOAD]})
    per_window = any(e.get("per_realization") for _s, _a, cap in settings
                     for e in cap["schedulers"].values())
    out = ["# Sensitivity of Q1: the headline statistics in every setting", "",
           "Each setting's own tables (aggregated.md, by_scheduler.md, victims_*.csv) and "
           "figures are in its folder; this summary is written by "
           "`python scripts/sensitivity_report.py results/sensitivity`. Loads are fractions of "
           "each scheduler's own capacity in that setting"
           + (", window by window (a job of window k at load L ran at L x window k's own "
              "capacity; tables at the end)." if per_window else " (table at the end)."),
           "",
           f"{CI_NOTE}.", ""]
    header = ["setting"] + [f"{SCHEDULER_LABELS[s]} {load:g}x" for s in SCHEDULERS
                            for load in loads]
    for metric, label in STATISTICS:
        rows = []
        for s, agg, _ in settings:
            cells = []
            for sched in SCHEDULERS:
                for load in loads:
                    match = agg[(agg["scheduler"] == sched) & (agg[LOAD].astype(float) == load)]
                    cells.append("-" if match.empty else cell(match.iloc[0], metric))
            rows.append([s.label, *cells])
        out += [f"## {label}", "", markdown_table(header, rows), ""]
    out += ["## Settings (from each setting's summary.json and capacity.json)", "",
            markdown_table(["setting", "scheduler", "model", "GPU", "step time", "loop",
                            "batch limits", "KV pool (slots)", "context", "block / page"],
                           setting_rows(study, settings)), "",
            "## Trace windows (Azure 2023 conv; realisation k: the k-th block of requests)",
            "", markdown_table(["realisation", "requests in the window", "offered",
                                "dropped (prompt over max_input_len)"],
                               window_rows(settings, jobs)), ""]
    out += ["## Capacity (the highest workload.rate_scale with mean SLO attainment >= 0.9 over "
            f"{_windows_text(settings)})", "",
            markdown_table(["setting", "scheduler", "rate_scale", "req/s", "bracket", "probes"],
                           capacity_rows(settings)), ""]
    if per_window:
        out += ["## Capacity per window (each window's own search, SLO attainment >= 0.9 on "
                "that window alone) and the rate_scale of each load there", "",
                markdown_table(["setting", "scheduler", "window", "rate_scale", "req/s",
                                *(f"at {load:g}x" for load in loads)],
                               window_capacity_rows(settings, loads)), ""]
    (study / "summary.md").write_text("\n".join(out))


# Each setting's colour and marker in the figures (the main setting black; no scheduler's
# colour, which the figures keep for the schedulers), in `SETTINGS` order.
SETTING_COLORS = ("#1a1a1a", "#2b9348", "#c9184a", "#8e44ad", "#7f5539", "#d4a017", "#0f7c8c")
SETTING_MARKERS = "osD^vPX"
# The statistics against load: per scheduler a block of panels, two a row; the last panel
# the victims the ratio rests on.
VICTIMS_N = "victims_n"
RATIO = "victim_e2el_median_ratio"
FIGURE_ROW_IN = 1.9


def _setting_style(k: int) -> dict[str, Any]:
    return {"color": SETTING_COLORS[k % len(SETTING_COLORS)],
            "marker": SETTING_MARKERS[k % len(SETTING_MARKERS)], "ls": "-"}


def _victims(rows: pd.DataFrame) -> np.ndarray:
    """The victims each row's victim ratio rests on (NaN where the table has no count)."""
    column = f"{RATIO}_n"
    if column not in rows:
        return np.full(len(rows), np.nan)
    return pd.to_numeric(rows[column], errors="coerce").to_numpy(dtype=float)


def _drawn(settings: list[tuple[Setting, pd.DataFrame, dict[str, Any]]], sched: str) -> bool:
    """Whether the scheduler has a non-zero value of a plotted statistic in some setting (a
    scheduler at 0 everywhere gets no panels: the figure says so)."""
    for _s, agg, _cap in settings:
        rows = agg[agg["scheduler"] == sched]
        for metric in PLOTTED:
            if metric in rows:
                v = pd.to_numeric(rows[metric], errors="coerce").dropna()
                if (v != 0).any():
                    return True
    return False


def _ran(settings: list[tuple[Setting, pd.DataFrame, dict[str, Any]]], sched: str) -> bool:
    return any((agg["scheduler"] == sched).any() for _s, agg, _cap in settings)


def _window_text(settings: list[tuple[Setting, pd.DataFrame, dict[str, Any]]]) -> str:
    sizes = {int(cap.get("config", {}).get("workload", {}).get("max_requests") or 0)
             for _s, _agg, cap in settings}
    return f", windows of {sizes.pop()} requests" if len(sizes) == 1 and 0 not in sizes else ""


def sensitivity_figure(settings: list[tuple[Setting, pd.DataFrame, dict[str, Any]]],
                       path: Path) -> Path:
    """The headline statistics against load, one line per setting (mean over the windows,
    95 % CI; a victim ratio from fewer than 30 victims hollow) and the victims behind the
    ratio, a block of panels per scheduler with a non-zero statistic."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from experiments.report.figures import (
        CAPACITY_LINE,
        FONT_FLOOR_PT,
        PAGE_IN,
        ZERO_ZORDER,
        LegendMarks,
        _save,
        capacity_handle,
        capacity_outside,
        ci_points,
        fig_legend,
        style,
        suptitle,
        wrapped,
    )
    from experiments.report.realizations import FEW_VICTIMS

    labels = dict(STATISTICS)
    scale = {"preempted_request_share": 100.0, "recomputed_token_share": 100.0}
    panels = [*PLOTTED, VICTIMS_N]
    scheds = [s for s in SCHEDULERS if _drawn(settings, s)]
    quiet = [s for s in SCHEDULERS if _ran(settings, s) and s not in scheds]
    loads = sorted({float(x) for _s, agg, _c in settings for x in agg[LOAD]})
    ncol = 2
    nrow = max(1, len(scheds)) * -(-len(panels) // ncol)
    marks = LegendMarks()
    shown: dict[int, str] = {}
    with style():
        fig, axes = plt.subplots(nrow, ncol, figsize=(PAGE_IN, 0.9 + FIGURE_ROW_IN * nrow),
                                 squeeze=False, sharex=True, layout="constrained")
        for i, sched in enumerate(scheds):
            for j, metric in enumerate(panels):
                ax = axes[i * (nrow // len(scheds)) + j // ncol][j % ncol]
                if not capacity_outside(loads):  # figures.mark_capacity's rule
                    ax.axvline(1.0, zorder=1, **CAPACITY_LINE)
                has_data = nonzero = False
                noted: dict[float, int] = {}
                for k, (s, agg, _) in enumerate(settings):
                    rows = agg[agg["scheduler"] == sched].sort_values(LOAD).reset_index(
                        drop=True)
                    if rows.empty:
                        continue
                    # a small offset per setting, centred on the load, so that the error
                    # bars of the settings stand apart
                    x = (rows[LOAD].astype(float).to_numpy()
                         + (k - (len(settings) - 1) / 2) * 0.018)
                    draw = _setting_style(k)
                    if metric == VICTIMS_N:
                        y = _victims(rows)
                        has_data = has_data or bool(np.isfinite(y).any())
                        nonzero = nonzero or bool((np.nan_to_num(y) > 0).any())
                        ax.plot(x, y, ls=draw["ls"], marker=draw["marker"], color=draw["color"])
                    else:
                        y = pd.to_numeric(rows[metric], errors="coerce").to_numpy(dtype=float)
                        has_data = has_data or bool(np.isfinite(y).any())
                        nonzero = nonzero or bool((np.nan_to_num(y) != 0).any())
                        ci_points(ax, rows, metric, scale.get(metric, 1.0), x, draw, marks,
                                  line=True)
                    if np.isfinite(y).any():
                        shown[k] = s.label
                    if metric == RATIO:  # the victims of a hollow point, beside it
                        n = _victims(rows)
                        for load, xi, yi, ni in zip(rows[LOAD], x, y, n, strict=True):
                            if np.isfinite(yi) and ni < FEW_VICTIMS:
                                # above it (clear of the line at 1); several at one load:
                                # one above the other
                                below = noted.get(float(load), 0)
                                noted[float(load)] = below + 1
                                ax.annotate(f"n={int(ni)}", (xi, yi), xytext=(0, 5 + 8 * below),
                                            textcoords="offset points", ha="center",
                                            va="bottom", fontsize=FONT_FLOOR_PT,
                                            color=draw["color"])
                title = ("Victims behind the ratio (n)" if metric == VICTIMS_N
                         else labels[metric])
                ax.set_title(wrapped(f"{SCHEDULER_LABELS.get(sched, sched)}: {title}",
                                     PAGE_IN / ncol - 0.3))
                if metric == RATIO:
                    ax.axhline(1.0, color="0.5", lw=0.8, zorder=1)
                if metric == VICTIMS_N:
                    ax.axhline(FEW_VICTIMS, color="0.5", lw=0.8, ls="--", zorder=1)
                    ax.set_ylim(bottom=0)
                if has_data and not nonzero:
                    for line in ax.get_lines():  # drawn on top, unclipped at the axis
                        line.set(zorder=ZERO_ZORDER, clip_on=False)
                    ax.text(0.5, 0.85, "0 in every setting at every load",
                            transform=ax.transAxes, ha="center", va="center",
                            fontsize=FONT_FLOOR_PT, color="0.35")
                if not has_data:
                    ax.text(0.5, 0.85, "no victims in any run", transform=ax.transAxes,
                            ha="center", va="center", fontsize=FONT_FLOOR_PT, color="0.35")
        for ax in axes[-1]:
            ax.set_xticks(loads, [f"{x:g}" for x in loads])
            ax.set_xlabel("load (× capacity)")
        for ax in axes.flat[len(scheds) * len(panels):]:
            ax.set_visible(False)
        handles: list[Any] = [Line2D([], [], label=shown[k], **_setting_style(k))
                              for k in sorted(shown)]
        handles += [*marks.handles(), capacity_handle(capacity_outside(loads)),
                    Line2D([], [], color="0.5", lw=0.8, ls="--",
                           label=f"{FEW_VICTIMS} victims")]
        note = ("; ".join(f"{SCHEDULER_LABELS.get(s, s)}: no eviction in any setting at "
                          "any load (no panels)" for s in quiet))
        fig_legend(fig, handles, wrapped(note, PAGE_IN) if note else "")
        suptitle(fig, "Q1 across settings, against load (Azure conv"
                 + _window_text(settings) + ")")
        return _save(fig, path)


def capacity_figure(settings: list[tuple[Setting, pd.DataFrame, dict[str, Any]]],
                    path: Path) -> Path:
    """The SLO capacity of every setting and scheduler in req/s: the pooled one (over the
    windows; whisker: the upper end of the search's bracket) and, for a search per window,
    each window's own; the pooled value written at the right."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.transforms import blended_transform_factory

    from experiments.report.figures import (
        FONT_FLOOR_PT,
        PAGE_IN,
        _save,
        log_ticks,
        scheduler_color,
        scheduler_marker,
        shade,
        style,
        suptitle,
    )

    scheds = [s for s in SCHEDULERS if _ran(settings, s)]
    row_dy = 0.36 / max(len(scheds) - 1, 1) if len(scheds) > 1 else 0.0
    windowed = False
    with style():
        fig, ax = plt.subplots(figsize=(PAGE_IN, 1.3 + 0.42 * len(settings)),
                               layout="constrained")
        right = blended_transform_factory(ax.transAxes, ax.transData)
        for k, (_s, _agg, cap) in enumerate(settings):
            for i, sched in enumerate(scheds):
                entry = cap["schedulers"].get(sched)
                if not entry or entry.get("capacity_request_rate") is None:
                    continue
                color = scheduler_color(sched)
                y = k + (i - (len(scheds) - 1) / 2) * row_dy
                req = float(entry["capacity_request_rate"])
                # the bracket in rate_scale, as req/s at the same ratio
                hi = (entry.get("bracket") or [None, None])[1]
                per = req / float(entry["capacity"])
                xerr = [[0.0], [max(float(hi) * per - req, 0.0) if hi is not None else 0.0]]
                windows = [float(w["capacity_request_rate"]) for _key, w in sorted(
                    (entry.get("per_realization") or {}).items(), key=lambda kv: int(kv[0]))
                    if w.get("capacity_request_rate") is not None]
                if windows:
                    windowed = True
                    # each window a little apart in height, so that close ones all show
                    dys = (np.arange(len(windows)) - (len(windows) - 1) / 2) * 0.035
                    ax.plot(windows, y + dys, ls="", marker="o", ms=3.2, mew=0.6,
                            color=shade(color, 0.45), mec=color, zorder=2)
                ax.errorbar([req], [y], xerr=xerr, ls="", marker=scheduler_marker(sched),
                            ms=5.5, color=color, ecolor=color, elinewidth=1.0, capsize=2.5,
                            zorder=3)
                ax.text(1.01, y, f"{req:.2f}", transform=right, ha="left", va="center",
                        fontsize=FONT_FLOOR_PT, color=color)
        ax.text(1.01, -0.6, "pooled\n(req/s)", transform=right, ha="left", va="bottom",
                fontsize=FONT_FLOOR_PT, color="0.3")
        ax.set_yticks(range(len(settings)), [s.label for s, _a, _c in settings])
        ax.set_ylim(len(settings) - 0.5, -0.6)
        for edge in np.arange(len(settings) - 1) + 0.5:
            ax.axhline(edge, color="0.85", lw=0.5)
        ax.grid(axis="y", visible=False)
        log_ticks(ax, "x")
        ax.set_xlabel("capacity (req/s at mean SLO attainment ≥ 0.9; log scale)")
        handles: list[Any] = [
            Line2D([], [], ls="", marker=scheduler_marker(s), ms=5.5, color=scheduler_color(s),
                   label=f"{SCHEDULER_LABELS.get(s, s)}, pooled: the windows' mean rate at "
                         "one shared rate_scale")
            for s in scheds]
        if windowed:
            handles += [Line2D([], [], ls="", marker="o", ms=3.2, mew=0.6,
                               color=shade(scheduler_color(s), 0.45), mec=scheduler_color(s),
                               label=f"{SCHEDULER_LABELS.get(s, s)}, each window's own")
                        for s in scheds]
        # a column of pooled values, one of windows (fig_legend would set 3, unevenly)
        fig.legend(handles=handles, loc="outside lower center", ncol=2 if windowed else 1,
                   title="whisker: the upper end of the pooled search's bracket;\nthe "
                         "fastest window saturates first, so the pooled rate can lie below "
                         "every window's own",
                   title_fontsize=FONT_FLOOR_PT)
        suptitle(fig, "SLO capacity per setting (Azure conv" + _window_text(settings) + ")")
        return _save(fig, path)


def write_figures(study: Path, settings: list[tuple[Setting, pd.DataFrame, dict[str, Any]]]
                  ) -> None:
    """sensitivity_vs_load.png and capacity_by_setting.png (each with its PDF)."""
    sensitivity_figure(settings, study / "sensitivity_vs_load.png")
    capacity_figure(settings, study / "capacity_by_setting.png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("study", type=Path, help="the study folder (results/sensitivity)")
    parser.add_argument("--no-figures", action="store_true")
    args = parser.parse_args(argv)
    settings = []
    for s in SETTINGS:
        loaded = load_setting(args.study, s)
        if loaded is not None:
            settings.append((s, *loaded))
    if not settings:
        raise SystemExit(f"{args.study}: no setting folder with a comparison.csv "
                         f"(expected some of {', '.join(s.folder for s in SETTINGS)})")
    rows = [r for _, agg, _ in settings for r in long_rows(agg)]
    pd.DataFrame(rows).to_csv(args.study / "summary.csv", index=False)
    jobs = {s.folder: pd.read_csv(args.study / s.folder / "comparison.csv")
            for s, _, _ in settings}
    write_markdown(args.study, settings, jobs)
    if not args.no_figures:
        write_figures(args.study, settings)
    print(f"wrote {args.study}/summary.md, summary.csv"
          + ("" if args.no_figures else ", sensitivity_vs_load.png, capacity_by_setting.png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
