"""The simulator's step times against a real run's (scripts/real_vs_sim.py): predicted against
measured step time, a panel per scheduler, in the report's visual language (`figures`: the
scheduler's colour, text at `FONT_FLOOR_PT` or more at the width it is made for, one legend,
log axes labelled as plain milliseconds with only as many ticks as the axis has room for).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D

from experiments.report.figures import (
    COLUMN_IN,
    PAGE_IN,
    SCHEDULER_NAMES,
    LegendGroup,
    _save,
    fig_legend,
    log_ticks,
    scheduler_color,
    shade,
    style,
    suptitle,
)

# (prefill, legend words, marker, shade): decode-only steps light circles, steps with
# prefill dark triangles
_KINDS = ((False, "decode-only steps", "o", 0.35), (True, "steps with prefill", "^", 1.0))


@dataclass(frozen=True)
class StepTimes:
    """One scheduler's steps: measured and predicted seconds, and which had prefill."""

    measured_s: np.ndarray
    predicted_s: np.ndarray
    prefill: np.ndarray


def step_time_figure(panels: dict[str, StepTimes], path: str | Path, title: str = "",
                     pdf: bool = True) -> Path:
    """Predicted against measured step time (ms, log-log), a panel per scheduler (in the
    order of `panels`), the diagonal where they agree; PNG (and PDF with `pdf`)."""
    n = max(len(panels), 1)
    width = COLUMN_IN if n == 1 else PAGE_IN
    with style():
        fig, axes = plt.subplots(1, n, figsize=(width, 0.9 + width / n), squeeze=False,
                                 layout="constrained")
        for ax, (sched, steps) in zip(axes[0], panels.items(), strict=False):
            measured = np.asarray(steps.measured_s, dtype=float) * 1e3
            predicted = np.asarray(steps.predicted_s, dtype=float) * 1e3
            prefill = np.asarray(steps.prefill, dtype=bool)
            for with_prefill, _words, marker, tone in _KINDS:
                pick = prefill == with_prefill
                ax.plot(measured[pick], predicted[pick], ls="", marker=marker, ms=2.2,
                        mew=0, color=shade(scheduler_color(sched), tone))
            both = np.concatenate([measured, predicted])
            both = both[np.isfinite(both) & (both > 0)]
            if both.size:
                lo, hi = float(both.min()) / 1.15, float(both.max()) * 1.15
                ax.plot([lo, hi], [lo, hi], color="0.3", ls="--", lw=0.7)
                ax.set_xlim(lo, hi)
                ax.set_ylim(lo, hi)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_aspect("equal", adjustable="box")
            ax.set_title(SCHEDULER_NAMES.get(sched, sched))
            ax.set_xlabel("measured step time (ms)")
            ax.set_ylabel("predicted step time (ms)")
        fig.canvas.draw()  # place the axes: the ticks follow each axis' length
        for ax in axes[0]:
            log_ticks(ax, "x")
            log_ticks(ax, "y")
        # each swatch in the colours it labels: one marker per scheduler
        fig_legend(fig, [LegendGroup(tuple(Line2D([], [], ls="", marker=marker, mew=0,
                                                  color=shade(scheduler_color(s), tone))
                                           for s in panels), words)
                         for _p, words, marker, tone in _KINDS]
                   + [Line2D([], [], color="0.3", ls="--", lw=0.7,
                             label="predicted = measured")])
        suptitle(fig, title or "Step time: the simulator's profile against the real run")
        return _save(fig, path, pdf)
