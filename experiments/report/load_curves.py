"""Load curves: a sweep over `workload.load` (a fraction of each scheduler's measured
capacity, experiments/run/load.py) drawn as SLO attainment, goodput, p99 TTFT and p99 TPOT
against load, one series per scheduler (and setting), with the 95 % bootstrap CI across
realisations as a band (`experiments.report.realizations.bootstrap_ci`) around the mean.
Saturation is marked: load 1.0 is each scheduler's own capacity (a vertical line, where it
lies within the loads run; else the legend says that it lies below or above them), and the
attainment target of the capacity search a horizontal line on the attainment panel. The x
ticks are the loads run (load 1 named when within them, run or not), as on the sweep's
other figures (`figures._x_axis`, `figures.mark_capacity`); p99 TTFT is in seconds on a
log axis (under a second below capacity, minutes past it); the title is wrapped to the
figure's width.

Series are told apart by colour (the scheduler's), line style and marker (greyscale), at
most `MAX_SERIES` per panel: further settings are fixed at their first value, said in the
title.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from experiments.report.figures import (
    COLUMN_IN,
    LOAD_KEY,
    SCHEDULER_NAMES,
    SERIES_STYLES,
    LegendGroup,
    _save,
    _title_in,
    _x_axis,
    fig_legend,
    legend_height,
    log_ticks,
    mark_capacity,
    scheduler_color,
    style,
    suptitle,
    thin_x_labels,
    value_label,
)
from experiments.report.realizations import REALIZATION, bootstrap_ci

LOAD = LOAD_KEY
MAX_SERIES = 4
# (column, axis label, scale, log axis): TTFT grows from under a second below capacity to
# minutes past it, so in seconds on a log axis, where both ends are read
PANELS = (
    ("slo_attainment", "SLO attainment (%)", 100.0, False),
    ("request_goodput", "goodput (req/s)", 1.0, False),
    ("p99_ttft_ms", "p99 TTFT (s)", 1e-3, True),
    ("p99_tpot_ms", "p99 TPOT (ms)", 1.0, False),
)
# The height of a row of panels (7 pt tick labels, a y label beside them).
CURVE_ROW_IN = 1.5
# Text at 7 pt or more at the width the figure is drawn for (one column).
_RC: Any = {"font.size": 7.5, "axes.labelsize": 7.5, "axes.titlesize": 8,
                       "legend.fontsize": 7, "xtick.labelsize": 7, "ytick.labelsize": 7}


def curve_points(frame: pd.DataFrame, series: Sequence[str], column: str
                 ) -> pd.DataFrame:
    """Per series and load: the mean of `column` over realisations, its 95 % CI
    (`bootstrap_ci`; NaN with one realisation) and the number of realisations."""
    rows = []
    for key, g in frame.groupby([*series, LOAD], sort=True, dropna=False):
        values = pd.to_numeric(g[column], errors="coerce").to_numpy(dtype=np.float64)
        defined = values[~np.isnan(values)]
        lo, hi = bootstrap_ci(defined)
        rows.append({**dict(zip([*series, LOAD], key, strict=True)),
                     "mean": float(defined.mean()) if defined.size else np.nan,
                     "lo": lo, "hi": hi, "n": int(defined.size)})
    return pd.DataFrame(rows)


def _select(frame: pd.DataFrame, others: Sequence[str]) -> tuple[pd.DataFrame, list[str], str]:
    """The jobs drawn: every series when at most `MAX_SERIES`, else the further settings
    fixed at their first value (the series keys kept, and a note for the title)."""
    kept = list(others)
    fixed: list[str] = []
    while kept and frame.groupby(["scheduler", *kept]).ngroups > MAX_SERIES:
        last = kept.pop()
        first = frame[last].iloc[0]
        frame = frame[frame[last] == first]
        fixed.append(value_label(last, first))
    return frame, ["scheduler", *kept], ", ".join(fixed)


def load_curves(frame: pd.DataFrame, path: str | Path, target: float | None = None,
                title: str = "") -> Path:
    """The load-curve figure of a sweep's comparison frame (one row per job, with `LOAD`,
    `scheduler`, the other varied parameters and the metrics); ok jobs only. `target`: the
    attainment target (a share) drawn on the attainment panel. PNG and PDF."""
    df = frame[frame["status"] == "ok"] if "status" in frame else frame
    df = df[pd.to_numeric(df[LOAD], errors="coerce").notna()].copy()
    df[LOAD] = pd.to_numeric(df[LOAD])
    others = [c for c in df.columns if c not in (LOAD, REALIZATION, "scheduler", "status",
                                                  "job", "error")
              and c.startswith(("workload.", "scheduler.", "executor.", "slo.", "model",
                                "hardware", "kv_capacity_tokens", "max_model_len"))
              and df[c].nunique(dropna=False) > 1]
    df, series, fixed = _select(df, others)
    n_real = int(df.groupby([*series, LOAD]).size().max()) if len(df) else 0
    keys = list(dict.fromkeys(map(tuple, df[series].astype(str).values.tolist())))
    styles = {k: SERIES_STYLES[i % len(SERIES_STYLES)] for i, k in enumerate(keys)}
    loads = sorted(set(df[LOAD].tolist()))
    capacity: Line2D | None = None
    with style(), plt.rc_context(_RC):
        fig, axes = plt.subplots(2, 2, figsize=(COLUMN_IN, 3.5), layout="constrained",
                                 sharex=True)
        for ax, (column, label, scale, log) in zip(axes.flat, PANELS, strict=True):
            ax.set_ylabel(label)
            # ticks at the loads run, load 1 named (within them): as the sweep's other
            # figures
            _x_axis(ax, LOAD, loads, None)
            capacity = mark_capacity(ax, LOAD, loads, None)
            if column == "slo_attainment" and target is not None:
                ax.axhline(100.0 * target, color="0.35", lw=0.8, ls=":", zorder=1)
            if column not in df or pd.to_numeric(df[column], errors="coerce").isna().all():
                ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center",
                        va="center", color="0.35")
                continue
            points = curve_points(df, series, column)
            for key, g in points.groupby(series, sort=False):
                k = tuple(str(v) for v in (key if isinstance(key, tuple) else (key,)))
                ls, marker = styles[k]
                color = scheduler_color(k[0])
                g = g.sort_values(LOAD)
                # filled markers: a hollow one means a statistic of few victims elsewhere
                ax.plot(g[LOAD], g["mean"] * scale, ls=ls, marker=marker, color=color,
                        zorder=3)
                band = g.dropna(subset=["lo", "hi"])
                if len(band):
                    ax.fill_between(band[LOAD], band["lo"] * scale, band["hi"] * scale,
                                    color=color, alpha=0.22, lw=0, zorder=2)
            if log and (pd.to_numeric(df[column], errors="coerce") > 0).any():
                log_ticks(ax, "y")
            else:
                ax.set_ylim(bottom=0)
            if column == "slo_attainment":
                ax.set_ylim(0, 102)
        for ax in axes[0]:
            ax.set_xlabel("")
        handles: list[Any] = []
        for k in keys:
            ls, marker = styles[k]
            color = scheduler_color(k[0])
            name = ", ".join([SCHEDULER_NAMES.get(k[0], k[0])]
                             + [value_label(s, v) for s, v in zip(series[1:], k[1:],
                                                                    strict=True)])
            handles.append(Line2D([], [], color=color, ls=ls, marker=marker, label=name))
        if n_real > 1:  # a swatch per scheduler, in the colour of its band, set apart
            scheds = list(dict.fromkeys(k[0] for k in keys))
            handles.append(LegendGroup(tuple(Patch(color=scheduler_color(s), alpha=0.22, lw=0)
                                             for s in scheds), f"95 % CI ({n_real} real.)",
                                       apart=True))
        if capacity is not None:
            handles.append(capacity)
        if target is not None:
            handles.append(Line2D([], [], color="0.35", lw=0.8, ls=":",
                                  label=f"target {target:.0%}"))
        fig_legend(fig, handles)
        heading = "Load relative to each scheduler's capacity"
        if title and title != "default":  # the experiment's name, when it has one
            heading = f"{title}:\n{heading[0].lower()}{heading[1:]}"
        if fixed:
            heading += f" ({fixed})"
        suptitle(fig, heading)  # wrapped to the figure's width
        fig.set_figheight(_title_in(fig) + 2 * CURVE_ROW_IN
                          + legend_height(COLUMN_IN, handles))
        thin_x_labels(fig)
        return _save(fig, path)


def load_target(summaries: Sequence[dict[str, Any]]) -> float | None:
    """The attainment target of the capacity file the jobs' loads were resolved against
    (summary.json `load_target`), when they agree."""
    targets = {float(s["load_target"]) for s in summaries
               if s.get("load_target") is not None}
    return targets.pop() if len(targets) == 1 else None
