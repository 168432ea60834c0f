"""Paper-style figures of runs and sweeps: PNG and a vector PDF beside it, written atomically.

One visual language for every figure:
- a fixed colour per scheduler (`SCHEDULER_COLORS`, from each registry entry: vLLM blue,
  SGLang orange), the same in every figure, file and W&B run; jobs of one scheduler at
  several loads are shades of it (light: low load, dark: high load);
  each scheduler also has its own marker (`scheduler_marker`) and, on CDFs, line style
  (`scheduler_linestyle`), so a figure reads in greyscale;
- victims solid, the other requests dashed; further series (e.g. a second workload,
  recompute vs swap) by line style, then shade (`SERIES_STYLES`); at most `MAX_SERIES`
  curves per CDF panel (more: a row of panels per scheduler, at most four loads of it);
- across realisations (a sweep with `workload.realization`): each point is the mean over
  the realisations with its 95 % CI (percentile bootstrap over realisations,
  `experiments.report.realizations`) as an error bar, each CDF the mean of the
  realisations' CDFs with a pointwise 95 % band; the legend says so;
- a victim statistic from fewer than 30 victims (`realizations.FEW_VICTIMS`) is drawn with
  a hollow marker (white face), said in the legend (`hollow: n < 30 victims`); every
  panel of a victim statistic writes the victims behind each point under its x axis, a row
  per series in its colour (`CountStrip`; staggered over two lines where the numbers
  would touch), said in the legend;
- categorical x axes (schedulers, policies) get points and error bars, never connecting
  lines, side by side within a category;
- sized for one column of a two-column paper (`COLUMN_IN` wide; `PAGE_IN` for figures with
  several panels), no text under `FONT_FLOOR_PT` (7 pt) at that size, titles wrapped to the
  width, axes named in words with units (`param_label`), one legend per figure naming only
  what varies, its swatches in the colours of what they label (`LegendGroup`: one swatch
  per scheduler), missing data written on the panel (a statistic without events, e.g.
  recovery with no readmission, is n/a: not drawn, said), a series at 0 everywhere drawn on
  top of the others and unclipped at the axis, its markers beside the others' (dodged),
  and said on its panel (`SGLang: 0 at every load`); two or more series at 0 everywhere
  drawn by their markers side by side, no line (one line would hide the other), a panel
  of zeros only with its y axis at 0 alone (`vLLM and SGLang: 0 at every load`); a
  legend entry with a swatch per scheduler sets them apart where touching swatches would
  read as one two-coloured one (`LegendGroup.apart`); log axes in plain numbers, with
  1-2-5 ticks only where they fit (`log_ticks`),
  x tick labels that would touch blanked (`thin_x_labels`), each row of panels its own
  height (the legend's rows added to it: `legend_height`);
- against the load as a fraction of capacity (`LOAD_KEY`), saturation (load 1) marked by
  a vertical line and its legend entry (`mark_capacity`, `capacity_handle`), as
  load_curves.py marks it, where load 1 lies within the loads run; a sweep wholly above
  it (or below) gets no line, which would sit at the panel's edge, and its legend says
  `capacity (load 1) below the loads run` instead;
- the legend names only what was drawn (no `victims` entry where no scheduler had a
  victim: its panels say `no victims: …`).
Shared by any figure module (import them from here): `style`, `scheduler_color`,
`scheduler_marker`, `scheduler_linestyle`, `shade`, `param_label`, `value_label`, `wrapped`,
`suptitle`, `fig_legend`, `legend_height`, `LegendGroup`, `log_ticks`, `mark_capacity`,
`capacity_handle`, `thin_x_labels`, `ci_points` (a series with its CI
error bars and hollow markers) with `LegendMarks` (the legend entries that explain them),
`count_row` / `CountStrip` / `count_strips` / `strip_in` (the victims behind each point), the
constants `FONT_FLOOR_PT`, `HOLLOW_FACE`, `MAX_SERIES`, `COLUMN_IN`, `PAGE_IN`, `LOAD_KEY`,
`CAPACITY_LINE`, `CAPACITY_LABEL`, and `_save`
(PNG and PDF).
Figures:
- `latency_cdfs`: TTFT and end-to-end latency CDFs, schedulers overlaid on one log-x axis;
- `metric_vs_load`: sweep metrics (e.g. evictions per 1,000 requests) against a parameter;
- `victims_vs_others`: victims' and the other requests' median / p99 E2E latency;
- `kv_use_over_time`: KV pool use binned on the run's time (mean and max per bin; bins in
  which no step ran are idle, shaded, not bridged), a panel per scheduler, a legend entry
  per scheduler and thing drawn, each one colour; the time axis
  names the clock the run used (`clock_words`): simulated, or the real executor's measured
  wall-clock, CPU or GPU time.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import to_rgb
from matplotlib.legend_handler import HandlerTuple
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from experiments.report.realizations import CI_LEVEL, FEW_VICTIMS, curve_band, victim_counts
from experiments.results.sinks import atomic_path
from experiments.results.timeseries import Binned, bin_steps
from schedulers import registry

COLUMN_IN = 3.4   # one column of a two-column paper
PAGE_IN = 7.0     # both columns
DPI = 200

# Each scheduler's colour and display name, as its registry entry declares them.
SCHEDULER_COLORS = {e.name: e.color for e in registry.entries() if e.color is not None}
_OTHER_COLORS = ("#2b9348", "#8e44ad", "#7f5539", "#c9184a", "#555555")
SCHEDULER_NAMES = {e.name: e.display_name for e in registry.entries()}
# (line style, marker) per series of a further varied parameter, in order of appearance
SERIES_STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (5, 1, 1, 1)), "v"))
# Each scheduler's marker and CDF line style, in registry order (vLLM circles and solid,
# SGLang squares and dashed): the scheduler reads without its colour.
SCHEDULER_MARKERS = {e.name: SERIES_STYLES[i % len(SERIES_STYLES)][1]
                     for i, e in enumerate(registry.entries())}
SCHEDULER_LINESTYLES = {e.name: SERIES_STYLES[i % len(SERIES_STYLES)][0]
                        for i, e in enumerate(registry.entries())}
VICTIM_LS, OTHERS_LS = "-", "--"
OTHERS_MARKER = "D"     # the other requests on a categorical axis (no lines to tell them)
HOLLOW_FACE = "white"   # the marker face of a statistic from fewer than FEW_VICTIMS victims
MAX_SERIES = 4          # curves per CDF panel
FONT_FLOOR_PT = 7.0     # no text smaller, at the size the figure is made for
SMALL_PT = 7.0          # notes on panels, legend titles

# A sweep over load as a fraction of each scheduler's measured capacity (experiments/run/
# load.py): load 1 is saturation, marked on every figure against it by a vertical line
# (`mark_capacity`; where it lies within the loads run), the same in load_curves.py.
LOAD_KEY = "workload.load"
CAPACITY_LABEL = "capacity (load 1)"
# A wide light-grey solid line: unlike any series (thin, dark, solid or dashed by setting).
CAPACITY_LINE: Any = {"color": "0.82", "lw": 3.0, "ls": "-", "solid_capstyle": "butt"}

# Axis labels of config keys (words with units); others: the last key part in words.
PARAM_LABELS = {
    LOAD_KEY: "load (× capacity)",
    "workload.rate_scale": "load (× recorded rate)",
    "workload.request_rate": "request rate (req/s)",
    "kv_capacity_tokens": "KV pool (tokens)",
    "max_model_len": "context length (tokens)",
    "scheduler.max_num_seqs": "max running requests",
    "scheduler.max_num_batched_tokens": "token budget per step (tokens)",
    "scheduler.chunked_prefill_size": "chunked prefill size (tokens)",
    "scheduler.host_kv_capacity_tokens": "host KV pool (tokens)",
    "workload.num_requests": "requests",
    "workload.max_requests": "requests",
    "workload.num_prefixes": "shared prefixes",
    "workload.prefix_len": "shared prefix (tokens)",
    "scheduler.scheduler_reserve_full_isl": "full-prompt reservation",
    "workload.share_prefixes": "shared prefixes",
    "scheduler.enable_prefix_caching": "prefix caching",
    "scheduler.preemption_mode": "preemption mode",
    "scheduler.victim_policy": "victim policy",
}
# Display names of config values (legends, panel titles)
VALUE_LABELS = {
    **SCHEDULER_NAMES,
    "azure_conv": "Azure conversation", "azure_code": "Azure code",
    "mooncake": "Mooncake", "mooncake_conversation": "Mooncake conversation",
    "synthetic": "synthetic", "shared_prefix": "shared prefix", "multi_turn": "multi-turn",
    "recompute": "recompute", "swap": "swap",
}

# PDF font subsetting logs every table it drops at INFO (Hydra's job logging shows INFO)
logging.getLogger("fontTools").setLevel(logging.WARNING)

_RC: Any = {
    "font.size": 8, "axes.labelsize": 8, "axes.titlesize": 8, "figure.titlesize": 8.5,
    "legend.fontsize": 7, "legend.title_fontsize": 7, "xtick.labelsize": 7,
    "ytick.labelsize": 7, "lines.linewidth": 1.2,
    "lines.markersize": 3.5, "axes.spines.top": False, "axes.spines.right": False,
    "axes.grid": True, "grid.alpha": 0.3, "grid.linewidth": 0.5, "axes.linewidth": 0.6,
    "legend.frameon": False, "pdf.fonttype": 42, "ps.fonttype": 42, "figure.dpi": 100,
}


@contextmanager
def style() -> Iterator[None]:
    """The figures' shared matplotlib settings."""
    with plt.rc_context(_RC):
        yield


def scheduler_color(name: str) -> str:
    """The fixed colour of a scheduler (an unknown one gets a stable colour from its name)."""
    if name in SCHEDULER_COLORS:
        return SCHEDULER_COLORS[name]
    return _OTHER_COLORS[sum(name.encode()) % len(_OTHER_COLORS)]


def scheduler_marker(name: str) -> str:
    """The fixed marker of a scheduler (an unknown one: a triangle)."""
    return SCHEDULER_MARKERS.get(name, "^")


def scheduler_linestyle(name: str) -> Any:
    """The fixed CDF line style of a scheduler (an unknown one: dotted)."""
    return SCHEDULER_LINESTYLES.get(name, ":")


def shade(color: str, t: float) -> tuple[float, float, float]:
    """`color` lightened towards white: t=1 the colour itself, t=0 the lightest shade."""
    r, g, b = to_rgb(color)
    mix = 0.6 * (1.0 - min(max(t, 0.0), 1.0))
    return (r + (1 - r) * mix, g + (1 - g) * mix, b + (1 - b) * mix)


def param_label(key: str | None) -> str:
    """A config key as an axis label in words with its unit."""
    if not key:
        return ""
    return PARAM_LABELS.get(key, key.split(".")[-1].replace("_", " "))


def value_label(key: str, value: Any) -> str:
    """A config value for a legend or panel title: names for categories, key and number
    for numbers."""
    text = str(value)
    if text.lower() in ("true", "false"):
        return f"{param_label(key)} {'on' if text.lower() == 'true' else 'off'}"
    if key in ("scheduler", "workload") or not _is_number(value):
        return VALUE_LABELS.get(text, text)
    return f"{param_label(key)}: {_num(float(value))}"


def _is_number(v: Any) -> bool:
    try:
        float(v)
    except (TypeError, ValueError):
        return False
    return True


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 10000 else f"{x:g}"


def _save(fig: Any, path: str | Path, pdf: bool = True) -> Path:
    """Write `path` (PNG) and, with `pdf`, the same figure as PDF beside it; close it."""
    p = Path(path)
    formats = ((p, "png"), (p.with_suffix(".pdf"), "pdf")) if pdf else ((p, "png"),)
    for target, fmt in formats:
        # no creation date in the PDF: the same figure is the same file (curated results)
        meta = {"CreationDate": None} if fmt == "pdf" else {}
        with atomic_path(target) as tmp:
            fig.savefig(tmp, format=fmt, dpi=DPI, bbox_inches="tight", pad_inches=0.02,
                        metadata=meta)
    plt.close(fig)
    return p


# The height of a row of panels with its tick labels and axis label (a y label up to about
# 16 characters at 8 pt fits beside it), and of a line of the figure's title.
PANEL_ROW_IN = 1.75
METRIC_ROW_IN = 1.95  # metric_vs_load's, whose labels run to 28 characters
TITLE_LINE_IN = 0.17


def _title_in(fig: Any) -> float:
    """The inches the figure's title (`suptitle`) takes above the panels."""
    text = fig._suptitle.get_text() if fig._suptitle is not None else ""
    return 0.08 + TITLE_LINE_IN * (text.count("\n") + 1) if text.strip() else 0.05


def suptitle(fig: Any, text: str) -> None:
    """The figure's title, each line wrapped to the figure's width."""
    fig.suptitle(wrapped(text, fig.get_figwidth()))


def wrapped(text: str, inches: float) -> str:
    """`text` with each line wrapped to `inches` (about 13 characters per inch at 8.5 pt,
    so a title never runs past the figure's edge)."""
    import textwrap

    chars = max(12, int(inches * 13))
    return "\n".join(w for line in text.split("\n") for w in textwrap.wrap(line, chars) or [""])


def _note(ax: Any, text: str, y: float = 0.5) -> None:
    """Write why a panel (or part of it) has no data, on the panel."""
    ax.text(0.5, y, text, transform=ax.transAxes, ha="center", va="center", fontsize=SMALL_PT,
            color="0.35", wrap=True)


def _seconds_axis(ax: Any) -> None:
    """A log-x axis in seconds labelled as plain numbers: ticks at 1, 2, 5 x 10^k over up to
    two decades, at powers of ten beyond (call after plotting)."""
    ax.set_xscale("log")
    lo, hi = ax.get_xlim()
    subs = (1.0, 2.0, 5.0) if lo > 0 and math.log10(hi / lo) <= 2.5 else (1.0,)
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


# The room a tick label of a log axis needs along it: x, a plain number of up to four digits
# at 7 pt (about 0.25 in) and a gap; y, a line of 7 pt text (labels stack) and a gap.
LOG_LABEL_IN = {"x": 0.4, "y": 0.2}
# The tick sets a log axis may get, sparsest first (multiples of each power of ten).
LOG_SUBS: tuple[tuple[float, ...], ...] = (
    (1.0,), (1.0, 2.0, 5.0), (1.0, 2.0, 3.0, 5.0), (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0))


def log_subs(lo: float, hi: float, inches: float, label_in: float) -> tuple[float, ...]:
    """The tick set of `LOG_SUBS` for a log axis from `lo` to `hi`, `inches` long: the
    sparsest that puts three ticks in view, or else the densest whose neighbouring ticks are
    still `label_in` apart (powers of ten when no set is)."""
    if not (lo > 0 and hi > lo):
        return LOG_SUBS[0]
    decades = math.log10(hi / lo)
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    best = LOG_SUBS[0]
    for subs in LOG_SUBS:
        ticks = sorted(m * 10.0 ** k for k in range(first, last + 1) for m in subs)
        shown = [t for t in ticks if lo <= t <= hi]
        gaps = [math.log10(b / a) for a, b in itertools.pairwise(shown)]
        if gaps and min(gaps) / decades * inches < label_in:
            break  # this set's labels would collide: keep the sparser one
        best = subs
        if len(shown) >= 3:
            break
    return best


class _RoomyLogLocator(LogLocator):
    """A log axis' ticks from `log_subs`, decided when the ticks are drawn (from the view
    and the axis' length)."""

    def __init__(self, ax: Any, which: str, inches: float | None = None) -> None:
        super().__init__(base=10, subs=(1.0,), numticks=30)  # numticks: no thinning
        self._ax, self._which, self._inches = ax, which, inches

    def tick_values(self, vmin: float, vmax: float) -> Any:
        lo, hi = sorted((vmin, vmax))
        inches = self._inches
        if inches is None:
            box, fig = self._ax.get_position(), self._ax.get_figure(root=True)
            inches = (box.width * fig.get_figwidth() if self._which == "x"
                      else box.height * fig.get_figheight())
        subs = log_subs(lo, hi, inches, LOG_LABEL_IN[self._which])
        self.set_params(subs=subs)
        return super().tick_values(vmin, vmax)


def log_ticks(ax: Any, which: str = "x", inches: float | None = None) -> None:
    """A log axis (`which`: "x" or "y") labelled as plain numbers (`500`, not `5 x 10^2`),
    with as many ticks as its length has room for (`log_subs`: e.g. 1, 2 and 5 x 10^k over
    a decade or two, powers of ten over many), no minor labels; `inches`: the axis' length
    (default: as the figure places it when drawn)."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    axis.set_major_locator(_RoomyLogLocator(ax, which, inches))
    axis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


# --- per-job series ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class JobSeries:
    """One job's per-request latencies (s) and binned KV use, with how to draw it: `label`
    names what varies besides the scheduler and the panel ("" when nothing), `panel` the
    panel it belongs to ("" for one panel), `shade` its place in the load order (0 light,
    1 dark), `clock` the clock its times are on (summary.json `clock`, `job_clock`)."""

    scheduler: str
    label: str
    ttft_s: np.ndarray
    e2el_s: np.ndarray
    kv: Binned
    kv_capacity_tokens: int
    panel: str = ""
    shade: float = 1.0
    clock: str = "simulated"
    # one array per realisation when this series pools a config's realisations (`pooled`)
    ttft_parts: tuple[np.ndarray, ...] = ()
    e2el_parts: tuple[np.ndarray, ...] = ()

    @classmethod
    def pooled(cls, series: Sequence[JobSeries]) -> JobSeries:
        """One config's realisations (jobs alike but for the realisation) as one series:
        every request of them, each realisation's latencies kept apart (the CDF figure
        draws their mean CDF with a band); KV use and clock of the first."""
        first = series[0]
        return cls(first.scheduler, first.label,
                   np.concatenate([s.ttft_s for s in series]),
                   np.concatenate([s.e2el_s for s in series]), first.kv,
                   first.kv_capacity_tokens, first.panel, first.shade, first.clock,
                   tuple(s.ttft_s for s in series), tuple(s.e2el_s for s in series))

    @classmethod
    def from_tables(cls, requests: Any, steps: Any, scheduler: str, label: str,
                    kv_capacity_tokens: int, panel: str = "", shade: float = 1.0,
                    num_bins: int = 200, clock: str = "simulated") -> JobSeries:
        """From a job's record tables (`engines.records` schemas): completed requests only."""
        reason = np.asarray(requests.column("finish_reason").to_pylist(), dtype=object)
        done = (reason == "stop") | (reason == "length")

        def col(name: str) -> np.ndarray:
            return np.asarray(requests.column(name).to_numpy(), dtype=float)[done]

        arrival = col("arrival_time")
        bins = max(1, min(num_bins, steps.num_rows))  # no finer than the steps
        return cls(scheduler, label, col("first_token_time") - arrival,
                   col("finish_time") - arrival, bin_steps(steps, bins),
                   kv_capacity_tokens, panel, shade, clock)

    @property
    def color(self) -> tuple[float, float, float]:
        """The scheduler's colour in this job's shade."""
        return shade(scheduler_color(self.scheduler), self.shade)

    @property
    def name(self) -> str:
        """The legend entry: scheduler, then what else varies."""
        sched = SCHEDULER_NAMES.get(self.scheduler, self.scheduler)
        return f"{sched}, {self.label}" if self.label else sched


# summary.json `clock` -> the time it names (`clock_words`); `measured`: a real run's summary
# written before the key existed.
CLOCK_WORDS = {
    "simulated": "simulated time",
    "wall": "measured wall-clock time",
    "cpu": "measured CPU time",
    "cuda_events": "measured GPU time",
    "measured": "measured time",
}


def job_clock(summary: dict[str, Any]) -> str:
    """The clock a job's times are on: its summary's `clock`, else (a summary written
    before the key) `simulated` for the sim executor and `measured` for the real one."""
    clock = summary.get("clock")
    if clock:
        return str(clock)
    return "measured" if summary.get("executor") == "real" else "simulated"


def clock_words(clocks: Sequence[str]) -> str:
    """The time a figure's axis is on, in words: `simulated time`, `measured CPU time`...;
    jobs on different clocks: `simulated and measured time`."""
    found = list(dict.fromkeys(clocks)) or ["simulated"]
    if len(found) > 1:
        return ("simulated and measured time" if "simulated" in found
                else "measured time")
    return CLOCK_WORDS.get(found[0], f"measured time ({found[0]})")


def _panels(jobs: Sequence[JobSeries]) -> list[str]:
    return list(dict.fromkeys(j.panel for j in jobs)) or [""]


# A legend entry's width: its text at 7 pt (about 0.05 in a character) and its handle with
# the spacing around it.
LEGEND_CHAR_IN = 0.05
LEGEND_HANDLE_IN = 0.55


# A legend row's height (7 pt text, its handle and the spacing) and the legend's own margin.
LEGEND_ROW_IN = 0.17
LEGEND_PAD_IN = 0.12
# The gap between the swatches of a `LegendGroup` drawn apart (a share of the font size).
GROUP_GAP = 0.6


def legend_columns(width: float, labels: Sequence[str]) -> int:
    """The columns `fig_legend` sets its entries in across a figure `width` inches wide: as
    many as the widest entry allows (4 at most)."""
    if not labels:
        return 1
    widest = max(len(text) for text in labels) * LEGEND_CHAR_IN + LEGEND_HANDLE_IN
    return min(len(labels), max(1, min(4, int(width // widest))))


def legend_height(width: float, handles: Sequence[Any], note: str = "") -> float:
    """The inches `fig_legend` takes below the panels of a figure `width` inches wide."""
    labels = [h.get_label() for h in handles]
    if not labels:
        return 0.0
    rows = -(-len(labels) // legend_columns(width, labels)) + bool(note)
    return LEGEND_PAD_IN + LEGEND_ROW_IN * rows


def fig_legend(fig: Any, handles: list[Any], note: str = "", columns: int | None = None
               ) -> None:
    """The figure's one legend, below the panels (`note` as its title), in columns that fit
    the figure's width (`legend_columns`; `columns`, when it fits, instead: entries fill
    the columns top to bottom, so e.g. a column per scheduler)."""
    if handles:
        parts = [h.parts if isinstance(h, LegendGroup) else h for h in handles]
        labels = [h.get_label() for h in handles]
        fit = legend_columns(fig.get_figwidth(), labels)
        ncol = columns if columns is not None and columns <= fit else fit
        handler_map: dict[Any, Any] = {tuple: HandlerTuple(ndivide=None, pad=0.0)}
        for h in handles:  # swatches set apart: one per scheduler, not one two-coloured
            if isinstance(h, LegendGroup) and h.apart:
                handler_map[h.parts] = HandlerTuple(ndivide=None, pad=GROUP_GAP)
        fig.legend(parts, labels, loc="outside lower center", ncol=ncol,
                   title=note or None, title_fontsize=SMALL_PT, handler_map=handler_map)
    elif note:
        fig.text(0.5, 0.0, note, ha="center", va="top", fontsize=SMALL_PT)


def _spread(items: Sequence[Any], k: int) -> list[Any]:
    """At most `k` of `items`, evenly spread, the first and the last kept."""
    if len(items) <= k:
        return list(items)
    picks = sorted({round(i * (len(items) - 1) / (k - 1)) for i in range(k)})
    return [items[i] for i in picks]


@dataclass(frozen=True)
class _CdfLayout:
    """Which jobs a CDF figure draws, in which row, and how each curve is told apart: rows
    are the jobs' panels, split per scheduler when a panel would hold more than
    `MAX_SERIES` curves (then at most `MAX_SERIES` loads a scheduler, evenly spread); a
    curve's line style is its scheduler's when each scheduler has one curve in its row,
    else its load's rank."""

    rows: list[tuple[str, str | None, list[JobSeries]]]  # panel, scheduler or None, jobs
    split: bool
    dropped: int

    @classmethod
    def of(cls, jobs: Sequence[JobSeries]) -> _CdfLayout:
        panels = _panels(jobs)
        split = any(sum(1 for j in jobs if j.panel == p) > MAX_SERIES for p in panels)
        rows: list[tuple[str, str | None, list[JobSeries]]] = []
        dropped = 0
        for p in panels:
            mine = [j for j in jobs if j.panel == p]
            if not split:
                rows.append((p, None, mine))
                continue
            for sched in dict.fromkeys(j.scheduler for j in mine):
                theirs = sorted((j for j in mine if j.scheduler == sched), key=lambda j: j.shade)
                kept = _spread(theirs, MAX_SERIES)
                dropped = max(dropped, len(theirs) - len(kept))
                rows.append((p, sched, kept))
        return cls(rows, split, dropped)

    def linestyle(self, job: JobSeries, row: list[JobSeries]) -> Any:
        if len({j.scheduler for j in row}) == len(row):
            return scheduler_linestyle(job.scheduler)
        ranks = sorted(dict.fromkeys(j.shade for j in row))
        return SERIES_STYLES[ranks.index(job.shade) % len(SERIES_STYLES)][0]

    def handles(self, shade_note: str) -> list[Any]:
        """One entry per curve when the curves are few and alike across rows; else the
        schedulers by colour and the loads by line style and shade, in grey."""
        drawn = [(j, self.linestyle(j, row)) for _, _, row in self.rows for j in row]
        entries = list(dict.fromkeys((j.name, j.color, ls) for j, ls in drawn))
        names = {name for name, _, _ in entries}
        if len(entries) <= MAX_SERIES and len(names) == len(entries):
            return [Line2D([], [], color=c, ls=ls, label=name) for name, c, ls in entries]
        scheds = list(dict.fromkeys(j.scheduler for j, _ in drawn))
        out: list[Any] = [Line2D([], [], color=scheduler_color(s),
                                 ls=scheduler_linestyle(s) if not self.split else "-",
                                 label=SCHEDULER_NAMES.get(s, s)) for s in scheds]
        loads = list(dict.fromkeys((j.shade, j.label, ls) for j, ls in drawn
                                   if not (ls == scheduler_linestyle(j.scheduler)
                                           and not self.split)))
        out += [Line2D([], [], color=shade("#404040", t), ls=ls,
                       label=lab or shade_note or "job")
                for t, lab, ls in sorted(loads, key=lambda e: e[0])]
        return out


def _ecdf_on(grid: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The share of `values` at or below each grid point."""
    v = np.sort(values[np.isfinite(values)])
    return np.searchsorted(v, grid, side="right") / max(v.size, 1)


def _draw_cdf(ax: Any, values: np.ndarray, parts: tuple[np.ndarray, ...], color: Any,
              ls: Any) -> bool:
    """One curve: the CDF of `values`; with realisations (`parts`), the mean of their CDFs
    and its pointwise 95 % band. False when there is nothing to draw."""
    x = np.sort(np.asarray(values)[np.isfinite(values)])
    if x.size == 0:
        return False
    x = np.maximum(x, 1e-4)  # log axis: a zero latency sits at 0.1 ms
    usable = [np.maximum(p[np.isfinite(p)], 1e-4) for p in parts if np.isfinite(p).any()]
    if len(usable) < 2:
        ax.step(x, np.arange(1, x.size + 1) / x.size, where="post", color=color, ls=ls)
        return True
    grid = np.unique(np.quantile(x, np.linspace(0.0, 1.0, 400)))
    mean, lo, hi = curve_band(np.stack([_ecdf_on(grid, p) for p in usable]))
    ax.fill_between(grid, lo, hi, step="post", color=color, alpha=0.2, lw=0)
    ax.step(grid, mean, where="post", color=color, ls=ls)
    return True


def latency_cdfs(jobs: Sequence[JobSeries], path: str | Path, title: str = "",
                 shade_note: str = "", pdf: bool = True) -> Path:
    """TTFT (left) and E2E latency (right) CDFs in seconds on log-x axes, every scheduler on
    the same axes (its colour and line style; shades for its jobs at several loads,
    explained by `shade_note`), a row of panels per `panel`, split per scheduler when a
    panel would hold more than `MAX_SERIES` curves (`_CdfLayout`). A series pooling
    realisations (`JobSeries.pooled`) is drawn as the mean of their CDFs with a pointwise
    95 % bootstrap band over realisations."""
    layout = _CdfLayout.of(jobs)
    nrow = len(layout.rows)
    banded = any(len(j.ttft_parts) > 1 for j in jobs)
    with style():
        fig, axes = plt.subplots(nrow, 2, figsize=(PAGE_IN, 0.6 + 1.9 * nrow),
                                 squeeze=False, sharey=True, layout="constrained")
        for r, (panel, sched, js) in enumerate(layout.rows):
            for c, (what, attr) in enumerate((("time to first token (s)", "ttft_s"),
                                              ("end-to-end latency (s)", "e2el_s"))):
                ax = axes[r][c]
                missing = []
                for j in js:
                    parts = j.ttft_parts if attr == "ttft_s" else j.e2el_parts
                    if not _draw_cdf(ax, getattr(j, attr), parts, j.color,
                                     layout.linestyle(j, js)):
                        missing.append(j.name)
                if len(missing) == len(js):
                    _note(ax, "no completed requests")
                    continue
                if missing:
                    _note(ax, "no completed requests: " + "; ".join(missing), 0.1)
                _seconds_axis(ax)
                ax.set_xlabel(what)
                ax.set_ylim(0, 1.02)
            head = ", ".join(([SCHEDULER_NAMES.get(sched, sched)] if sched else [])
                             + [panel] * bool(panel))
            axes[r][0].set_ylabel(f"{wrapped(head, 1.6)}\nshare of requests" if head else
                                  "share of requests")
        note = shade_note if len(jobs) > MAX_SERIES else ""
        if banded:
            runs = max(len(j.ttft_parts) for j in jobs)
            note = "; ".join([note] * bool(note) + [
                f"mean CDF of {runs} realisations, band: pointwise {CI_LEVEL:.0%} CI "
                "(bootstrap over realisations)"])
        if layout.dropped:
            note = "; ".join([note] * bool(note) + [
                f"{MAX_SERIES} loads per scheduler shown, {layout.dropped} left out"])
        fig_legend(fig, layout.handles(shade_note), wrapped(note, PAGE_IN) if note else "")
        suptitle(fig, title or "Latency per completed request (CDF)")
        return _save(fig, path, pdf)


# --- sweep metrics against a parameter ------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Metric:
    """A column of the comparison frame on a y axis: label (words and unit), the factor to
    apply (100 for a share shown in %), and what to write when no job has a value."""

    column: str
    label: str
    scale: float = 1.0
    missing: str = "no data"


def _x_values(frame: pd.DataFrame, x: str | None) -> tuple[pd.Series, list[str] | None]:
    """Numeric x values, or positions with tick labels when x is missing or not numeric."""
    if x is not None and x in frame:
        num = pd.to_numeric(frame[x], errors="coerce")
        if num.notna().all():
            return num, None
    cat = x if x is not None and x in frame else "scheduler" if "scheduler" in frame else "job"
    labels = [value_label(cat, v) for v in frame[cat]]
    ticks = list(dict.fromkeys(labels))
    return pd.Series([ticks.index(v) for v in labels], index=frame.index, dtype=float), ticks


def _cat_key(frame: pd.DataFrame, x: str | None) -> str:
    """The column a categorical x axis names (`_x_values`)."""
    return x if x is not None and x in frame else "scheduler" if "scheduler" in frame else "job"


def _x_axis(ax: Any, x: str | None, xs: Sequence[float], ticks: list[str] | None) -> None:
    ax.set_xlabel(param_label(x) if ticks is None else "")
    if ticks is not None:
        ax.set_xticks(range(len(ticks)), ticks)
        ax.set_xlim(-0.5, len(ticks) - 0.5)
        return
    if xs and min(xs) > 0 and max(xs) / min(xs) >= 8:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(list(xs), [_num(v) for v in xs])


def capacity_outside(xs: Sequence[float]) -> str:
    """Where load 1 lies against the loads run `xs`: "" within them (from the least to the
    most, both included), else "below" or "above"."""
    if not xs or min(xs) <= 1.0 <= max(xs) or any(math.isclose(v, 1.0) for v in xs):
        return ""
    return "below" if min(xs) > 1.0 else "above"


def mark_capacity(ax: Any, x: str | None, xs: Sequence[float], ticks: list[str] | None
                  ) -> Line2D | None:
    """Draw saturation (load 1: each scheduler's own capacity) as a vertical line under the
    series when `x` is the load as a fraction of capacity (`LOAD_KEY`) on a numeric axis
    and load 1 lies within the loads run `xs` (`_x_axis`'s), so that it sits inside the
    panel (a margin beside it where it is the least or the most load run); a sweep that
    starts above load 1 (or ends below it) gets no line, which would sit at the panel's
    edge, its axis kept to the loads run, and its legend says where capacity lies. The
    legend entry (`capacity_handle`), None where `x` is not the load."""
    if x != LOAD_KEY or ticks is not None or not xs:
        return None
    outside = capacity_outside(xs)
    if outside:
        return capacity_handle(outside)
    ax.axvline(1.0, zorder=1, **CAPACITY_LINE)
    if any(math.isclose(v, 1.0) for v in (min(xs), max(xs))):
        # at an end of the loads run: margins beside it, even where a band drawn to the
        # ends (`fill_between`, load_curves.py) would hold the axis to them, the line on
        # the spine, half of it clipped
        ax.use_sticky_edges = False
    locs = [float(v) for v in ax.get_xticks()]
    if not any(math.isclose(v, 1.0) for v in locs):  # the line's load named on the axis
        locs = sorted([*locs, 1.0])
        ax.set_xticks(locs, [_num(v) for v in locs])  # labelled as `_x_axis` labels them
    return capacity_handle()


def capacity_handle(outside: str = "") -> Line2D:
    """The legend entry of `mark_capacity`'s line; where load 1 lies outside the loads run
    (`outside`: "below" or "above", `capacity_outside`), words alone: no line was drawn."""
    if outside:
        return Line2D([], [], ls="", marker="",
                      label=f"{CAPACITY_LABEL} {outside} the loads run")
    return Line2D([], [], label=CAPACITY_LABEL, **CAPACITY_LINE)


def thin_x_labels(fig: Any) -> None:
    """Blank the x tick labels that would touch the one before them (left to right; the
    last label is kept, its neighbour blanked instead), so close loads such as 1, 1.25 and
    1.5 on a narrow panel never collide. Call when everything is drawn."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        lo, hi = sorted(ax.get_xlim())
        ticks = [t for t in ax.xaxis.get_major_ticks()
                 if lo <= t.get_loc() <= hi and t.label1.get_visible()
                 and t.label1.get_text().strip()]
        if len(ticks) < 3:
            continue
        boxes = [t.label1.get_window_extent(renderer) for t in ticks]
        order = sorted(range(len(ticks)), key=lambda i: boxes[i].x0)
        kept = [order[0]]
        for i in order[1:]:
            if boxes[i].x0 - boxes[kept[-1]].x1 >= 2:
                kept.append(i)
            elif i == order[-1] and len(kept) > 1:
                kept[-1] = i  # the last load stays named
        locs = [t.get_loc() for t in ticks]
        texts = [t.label1.get_text() if i in kept else "" for i, t in enumerate(ticks)]
        ax.set_xticks(locs, texts)


def _series_keys(frame: pd.DataFrame, series: Sequence[str]) -> list[str]:
    return [s for s in series if s in frame and s != "scheduler"]


def _series_name(keys: Sequence[str], values: Sequence[Any]) -> str:
    return ", ".join(value_label(k, v) for k, v in zip(keys, values, strict=True))


def _levels(df: pd.DataFrame, key: str) -> list[str]:
    """The distinct values of a column as text, numbers in ascending order."""
    values = list(dict.fromkeys(df[key].astype(str)))
    with suppress(TypeError, ValueError):
        values.sort(key=float)
    return values


@dataclass(frozen=True)
class _Encoding:
    """How the series of a sweep are told apart besides the scheduler's colour: the first
    other parameter by line style, the second by marker, the rest together by shade."""

    style_key: str | None
    marker_key: str | None
    shade_keys: tuple[str, ...]
    styles: dict[str, Any]
    markers: dict[str, str]
    tones: dict[tuple[str, ...], float]

    @classmethod
    def of(cls, df: pd.DataFrame, keys: Sequence[str], use_style: bool = True,
           use_marker: bool = True) -> _Encoding:
        keys = list(keys)
        style_key = keys.pop(0) if keys and use_style else None
        marker_key = keys.pop(0) if keys and use_marker else None
        styles = {v: SERIES_STYLES[i % len(SERIES_STYLES)][0]
                  for i, v in enumerate(_levels(df, style_key))} if style_key else {}
        markers = {v: SERIES_STYLES[i % len(SERIES_STYLES)][1]
                   for i, v in enumerate(_levels(df, marker_key))} if marker_key else {}
        combos: list[tuple[str, ...]] = list(dict.fromkeys(
            map(tuple, df[keys].astype(str).values.tolist()))) if keys else [()]
        with suppress(TypeError, ValueError):
            combos.sort(key=lambda c: tuple(float(text) for text in c))
        tones = {c: (1.0 if len(combos) == 1 else 0.25 + 0.75 * i / (len(combos) - 1))
                 for i, c in enumerate(combos)}
        return cls(style_key, marker_key, tuple(keys), styles, markers, tones)

    def key(self, row: Any) -> tuple[str, ...]:
        """The series a row belongs to (besides the scheduler)."""
        out = []
        if self.style_key:
            out.append(str(row[self.style_key]))
        if self.marker_key:
            out.append(str(row[self.marker_key]))
        out.extend(str(row[k]) for k in self.shade_keys)
        return tuple(out)

    def draw(self, key: tuple[str, ...], color: str) -> dict[str, Any]:
        """Line style, marker and colour of a series."""
        i = 0
        ls, marker = "-", "o"
        if self.style_key:
            ls, i = self.styles[key[0]], 1
        if self.marker_key:
            marker, i = self.markers[key[i]], i + 1
        return {"ls": ls, "marker": marker, "color": shade(color, self.tones[key[i:]])}

    def names(self, key: tuple[str, ...]) -> list[str]:
        """A series' settings in words (`key` as `key` returns it)."""
        params = [p for p in (self.style_key, self.marker_key) if p] + list(self.shade_keys)
        return [value_label(p, v) for p, v in zip(params, key, strict=True)]

    def handles(self) -> list[Any]:
        """Legend entries of every encoded parameter, in grey."""
        out: list[Any] = []
        if self.style_key and len(self.styles) > 1:
            out += [Line2D([], [], color="0.3", ls=ls, label=value_label(self.style_key, v))
                    for v, ls in self.styles.items()]
        if self.marker_key and len(self.markers) > 1:
            out += [Line2D([], [], color="0.3", ls="", marker=m,
                           label=value_label(self.marker_key, v))
                    for v, m in self.markers.items()]
        if len(self.tones) > 1:
            out += [Line2D([], [], color=shade("#404040", t),
                           label=_series_name(self.shade_keys, c))
                    for c, t in self.tones.items()]
        return out


def _scheduler_handles(scheds: Sequence[str]) -> list[Any]:
    return [Line2D([], [], color=scheduler_color(s), lw=1.6, marker=scheduler_marker(s),
                   label=SCHEDULER_NAMES.get(s, s)) for s in scheds]


def _log_x(xs: Sequence[float], ticks: list[str] | None) -> bool:
    """Whether `_x_axis` draws x on a log scale."""
    return ticks is None and bool(xs) and min(xs) > 0 and max(xs) / min(xs) >= 8


def _span(xs: Sequence[float], ticks: list[str] | None) -> float:
    """The room the series at one x value may spread over: most of a category, else a
    share of the smallest gap between values."""
    if ticks is not None:
        return 0.35
    return 0.25 * min((b - a for a, b in itertools.pairwise(xs)), default=1.0)


def _dodged(x: np.ndarray, k: int, n: int, span: float, log: bool) -> np.ndarray:
    """x moved sideways for the k-th of n series, so their error bars stand apart: by a
    share of a category (categorical), of the axis' range or, on a log axis, a factor."""
    if n <= 1:
        return x
    step = (k - (n - 1) / 2) / n
    if log:
        return x * 2.0 ** (0.12 * step)
    return x + span * step


@dataclass
class LegendMarks:
    """What a figure drew that its legend must explain (`ci_points` fills it in; its
    `handles` go into the figure's one legend)."""

    intervals: set[int] = field(default_factory=set)   # realisations behind an error bar
    hollow: bool = False
    counts: bool = False  # victims written under a panel (`CountStrip`)

    def handles(self) -> list[Any]:
        out: list[Any] = []
        if self.intervals:
            runs = "/".join(str(n) for n in sorted(self.intervals))
            out.append(Line2D([], [], color="0.3", ls="", marker="|", markersize=8,
                              label=f"mean of {runs} realisations, bar: {CI_LEVEL:.0%} CI"))
        if self.counts:
            over = ", all realisations" if self.intervals else ""
            out.append(Line2D([], [], color="0.3", ls="", marker="$n$", markersize=6,
                              label=f"victims per point (under the axis{over})"))
        if self.hollow:
            out.append(Line2D([], [], color="0.3", ls="", marker="o", mfc=HOLLOW_FACE,
                              label=HOLLOW_LABEL))
        return out


HOLLOW_LABEL = f"hollow: n < {FEW_VICTIMS} victims"


def ci_points(ax: Any, df: pd.DataFrame, column: str, scale: float, x: np.ndarray,
              draw: dict[str, Any], marks: LegendMarks, line: bool) -> None:
    """A series of `column` (times `scale`) at `x`: its line (unless categorical), its 95 %
    CI as error bars when the frame has `<column>_ci_lo` / `_ci_hi` (means over
    realisations), and its markers, hollow where the statistic rests on fewer than
    `FEW_VICTIMS` victims (`realizations.victim_counts`). `draw` may carry `zorder` and
    `clip_on` for the series' line and markers (a zero series on top, unclipped by the axis
    at 0: `metric_vs_load`)."""
    y = pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=float) * scale
    color, marker = draw["color"], draw["marker"]
    layer = {k: draw[k] for k in ("zorder", "clip_on") if k in draw}
    if line:
        ax.plot(x, y, ls=draw["ls"], color=color, marker="", **layer)
    lo_col, hi_col = f"{column}_ci_lo", f"{column}_ci_hi"
    if lo_col in df and hi_col in df:
        lo = pd.to_numeric(df[lo_col], errors="coerce").to_numpy(dtype=float) * scale
        hi = pd.to_numeric(df[hi_col], errors="coerce").to_numpy(dtype=float) * scale
        has = np.isfinite(lo) & np.isfinite(hi) & np.isfinite(y)
        if has.any():
            err = np.vstack([np.clip(y - lo, 0, None), np.clip(hi - y, 0, None)])[:, has]
            ax.errorbar(x[has], y[has], yerr=err, fmt="none", ecolor=color, elinewidth=0.8,
                        capsize=2.0, capthick=0.8)
            if "n_realizations" in df:
                marks.intervals.update(int(n) for n in df["n_realizations"][has])
    counts = victim_counts(df, column)
    few = (np.zeros(len(df), dtype=bool) if counts is None
           else (counts.fillna(0) < FEW_VICTIMS).to_numpy())
    for hollow in (False, True):
        pick = (few == hollow) & np.isfinite(y)
        if pick.any():  # markers whole at the axis' ends (a point at 0 on the x axis)
            ax.plot(x[pick], y[pick], ls="", marker=marker, color=color, mec=color,
                    mfc=HOLLOW_FACE if hollow else color, **{"clip_on": False, **layer})
            marks.hollow |= hollow


# --- the victims behind each point ---------------------------------------------------------

# A line of victim counts under a panel (7 pt text and its gap), and where the first sits
# below the axis: under the tick labels (tick, pad and a 7 pt label).
COUNT_LINE_PT = 9.5
COUNT_TOP_PT = 16.5


def count_text(n: int) -> str:
    """A victim count as written under a panel: `830`, `1.2k`, `15k`."""
    if n < 1000:
        return f"{n}"
    return f"{n / 1000:.1f}k" if n < 10_000 else f"{n / 1000:.0f}k"


@dataclass(frozen=True)
class CountRow:
    """A row of victim counts under a panel: its label (the series), its colour, and per x
    value drawn the victims behind the point there (`cells`: x, n, colour)."""

    label: str
    color: Any
    cells: tuple[tuple[float, int, Any], ...]


def count_row(df: pd.DataFrame, column: str, label: str, color: Any) -> CountRow | None:
    """The victims behind each point of a series (`df` with `_x`, the undodged x) of a victim
    statistic `column` (`realizations.victim_counts`; a point without victims: 0); None for
    a statistic not about victims or a series without any victim."""
    counts = victim_counts(df, column)
    if counts is None:
        return None
    values = pd.to_numeric(df[column], errors="coerce") if column in df else None
    cells = []
    for i, (x, n) in enumerate(zip(df["_x"], counts.fillna(0), strict=True)):
        defined = values is not None and np.isfinite(values.iloc[i])
        cells.append((float(x), int(n) if defined else 0, color))
    if not any(n for _, n, _ in cells):
        return None
    return CountRow(label, color, tuple(sorted(cells, key=lambda c: c[0])))


def merged_rows(rows: Sequence[CountRow]) -> list[CountRow]:
    """`rows` as they are, or one row `n` when no two of them share an x value (a
    categorical axis of schedulers: each series at its own category)."""
    xs = [x for r in rows for x, _, _ in r.cells]
    if len(rows) < 2 or len(xs) != len(set(xs)):
        return list(rows)
    cells = tuple(sorted((c for r in rows for c in r.cells), key=lambda c: c[0]))
    return [CountRow("n", "0.3", cells)]


@dataclass
class CountStrip:
    """The victims behind each point of a panel, as rows of numbers under its x axis (one
    per series, in its colour, labelled on the left), above the axis label; a row whose
    numbers would touch is staggered over two lines (`settle`)."""

    ax: Any
    rows: list[CountRow]
    cells: list[list[Any]] = field(default_factory=list)
    labels: list[Any] = field(default_factory=list)
    staggered: set[int] = field(default_factory=set)
    labelpad: float = 4.0

    def __post_init__(self) -> None:
        self.labelpad = float(self.ax.xaxis.labelpad)
        trans = self.ax.get_xaxis_transform()
        for row in self.rows:
            self.cells.append([
                self.ax.annotate(count_text(n), (x, 0.0), xycoords=trans, xytext=(0, 0),
                                 textcoords="offset points", ha="center", va="top",
                                 fontsize=SMALL_PT, color=color, annotation_clip=False)
                for x, n, color in row.cells])
            self.labels.append(self.ax.annotate(
                row.label, (0.0, 0.0), xycoords="axes fraction", xytext=(0, 0),
                textcoords="offset points", ha="right", va="top", fontsize=SMALL_PT,
                color=row.color, annotation_clip=False))
        self.place()

    def lines(self) -> int:
        """The text lines the strip takes."""
        return len(self.rows) + len(self.staggered)

    def place(self) -> None:
        """Put every number on its line and the axis label under the last."""
        line = 0
        for r, texts in enumerate(self.cells):
            for i, t in enumerate(texts):
                down = line + (i % 2 if r in self.staggered else 0)
                t.xyann = (0, -(COUNT_TOP_PT + COUNT_LINE_PT * down))
            self.labels[r].xyann = (-4, -(COUNT_TOP_PT + COUNT_LINE_PT * line))
            line += 1 + (r in self.staggered)
        self.ax.xaxis.labelpad = self.labelpad + COUNT_LINE_PT * line

    def settle(self, renderer: Any) -> bool:
        """Stagger each row whose neighbouring numbers touch; whether any was."""
        changed = False
        for r, texts in enumerate(self.cells):
            if r in self.staggered or len(texts) < 2:
                continue
            boxes = sorted((t.get_window_extent(renderer) for t in texts), key=lambda b: b.x0)
            if any(b.x0 - a.x1 < 2 for a, b in itertools.pairwise(boxes)):
                self.staggered.add(r)
                changed = True
        if changed:
            self.place()
        return changed


def count_strips(fig: Any, strips: Sequence[CountStrip]) -> None:
    """Lay the figure out and stagger the strips' rows whose numbers would touch."""
    if not strips:
        return
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    if any([s.settle(renderer) for s in strips]):
        fig.canvas.draw()


def strip_in(strips: Sequence[CountStrip]) -> float:
    """The inches the strips take under their panels, each row of panels its tallest."""
    rows: dict[Any, int] = {}
    for s in strips:
        spec = s.ax.get_subplotspec()
        key = spec.rowspan.start if spec is not None else id(s.ax)
        rows[key] = max(rows.get(key, 0), s.lines())
    return sum(rows.values()) * COUNT_LINE_PT / 72.0


# A series that is 0 everywhere lies on the x axis, under any other series near 0: drawn
# above them and the spines (lines 2, spines 2.5), its markers not clipped at the axis.
ZERO_ZORDER = 3.5


def _all_zero(values: pd.Series) -> bool:
    """Whether a series has values and every one of them is 0."""
    y = pd.to_numeric(values, errors="coerce").dropna()
    return bool(len(y)) and bool((y == 0).all())


def _zero_notes(groups: Sequence[tuple[Any, pd.DataFrame]], zero: set[Any], enc: _Encoding,
                x: str | None, n_x: int) -> list[str]:
    """The panel's words for its series that are 0 at every x (`SGLang: 0 at every load`):
    a scheduler by its name when all its series are, else each series by its setting."""
    where = f" at every {param_label(x).split(' (')[0]}" if x and n_x > 1 else ""
    names: list[str] = []
    for sched in dict.fromkeys(str(sc) for (sc, _), _g in groups):
        mine = [key for (sc, key), _g in groups if str(sc) == sched]
        name = SCHEDULER_NAMES.get(sched, sched)
        if all((sched, key) in zero for key in mine):
            names.append(name)
        else:
            names += [", ".join([name, *enc.names(tuple(key))]) for key in mine
                      if (sched, key) in zero]
    if not names:
        return []
    joined = (" and ".join(names) if len(names) == 2 and not any("," in n for n in names)
              else "; ".join(names))
    return [f"{joined}: 0{where}"]


def _x_limits(axes: Sequence[Any], drawn: Sequence[Any]) -> None:
    """Every panel of `axes` over the same x range: the one the panels that drew a series
    (`drawn`) span, each panel's own when none did (a panel without data keeps matplotlib's
    default 0..1 view, which is no load range)."""
    source = list(drawn) or list(axes)
    lo = min(ax.get_xlim()[0] for ax in source)
    hi = max(ax.get_xlim()[1] for ax in source)
    for ax in axes:
        ax.set_xlim(lo, hi)


def _all_zero_axis(ax: Any) -> None:
    """A panel whose every series is 0 everywhere: the axis from 0 with its one tick at 0,
    not a range of hundredths that no value fills."""
    ax.set_ylim(0, 1)
    ax.set_yticks([0])


def metric_vs_load(frame: pd.DataFrame, x: str | None,
                   metrics: Sequence[Metric | tuple[Any, ...]],
                   path: str | Path, series: Sequence[str] = ("scheduler",),
                   title: str = "") -> Path:
    """A panel per metric (a `Metric`, or its fields as a tuple) against `x`: colour and
    marker per scheduler; the other `series` columns by line style, then shade
    (`_Encoding`). `frame` is one row per job, or one per config across realisations
    (`realizations.aggregate`: then each point is the mean with its 95 % CI as an error
    bar). A victim statistic from fewer than `FEW_VICTIMS` victims gets a hollow marker,
    and the victims behind each point are written under its panel (`CountStrip`); a
    categorical x gets no connecting lines, the series side by side. A metric without data
    is said so on its panel, nothing is drawn at 0; a series at 0 everywhere is said so,
    drawn on top, its markers beside the others' (two or more such: markers only, side by
    side)."""
    specs = [m if isinstance(m, Metric) else Metric(*m) for m in metrics]
    df = frame.copy()
    df["_x"], ticks = _x_values(df, x)
    xs = sorted(set(df["_x"].tolist()))
    log = _log_x(xs, ticks)
    enc = _Encoding.of(df, _series_keys(df, series), use_marker=False)
    df["_series"] = [enc.key(r) for _, r in df.iterrows()]
    scheds = list(dict.fromkeys(df["scheduler"]))
    groups = list(df.groupby(["scheduler", "_series"], sort=False))
    # series side by side only where they share x values (not when x is the scheduler)
    lanes = 1 if ticks is not None and _cat_key(df, x) == "scheduler" else len(groups)
    span = _span(xs, ticks)
    ncol = 1 if len(metrics) == 1 else 2
    nrow = -(-len(metrics) // ncol)
    width = COLUMN_IN if ncol == 1 else PAGE_IN
    marks = LegendMarks()
    with style():
        fig, axes = plt.subplots(nrow, ncol, figsize=(width, 0.6 + METRIC_ROW_IN * nrow),
                                 squeeze=False,
                                 layout="constrained")
        flat = [ax for row in axes for ax in row]
        for ax in flat[len(metrics):]:
            ax.set_visible(False)
        capacity: Line2D | None = None
        drawn: list[Any] = []
        strips: list[CountStrip] = []
        for ax, m in zip(flat, specs, strict=False):
            ax.set_ylabel(m.label)
            _x_axis(ax, x, xs, ticks)
            capacity = mark_capacity(ax, x, xs, ticks)
            y_all = pd.to_numeric(df[m.column], errors="coerce") if m.column in df else None
            if y_all is None or y_all.isna().all():
                _note(ax, m.missing)
                continue
            drawn.append(ax)
            absent = [SCHEDULER_NAMES.get(str(sc), str(sc)) for sc in scheds
                      if y_all[df["scheduler"] == sc].isna().all()]
            zero = [gk for gk, g in groups if _all_zero(g[m.column])]
            notes = [f"{', '.join(absent)}: {m.missing}"] * bool(absent)
            notes += _zero_notes(groups, set(zero), enc, x, len(xs))
            if notes:  # above the panel, where no point can sit
                ax.set_title(wrapped("\n".join(notes), width / ncol),
                             loc="left", fontsize=SMALL_PT, color="0.35")
            rows: list[CountRow] = []
            for k, ((sched, key), g) in enumerate(groups):
                g = g.sort_values("_x")
                draw = enc.draw(tuple(key), scheduler_color(str(sched)))  # type: ignore[arg-type]
                draw["marker"] = scheduler_marker(str(sched))
                if (sched, key) in zero:  # on top of the others' lines and the axis at 0
                    draw.update(zorder=ZERO_ZORDER, clip_on=False)
                # side by side where error bars, categories or points at 0 would overlap
                apart = lanes if (ticks is not None or f"{m.column}_ci_lo" in df
                                  or zero) else 1
                at = _dodged(g["_x"].to_numpy(dtype=float), k, apart, span, log)
                # two series at 0 everywhere: their lines would lie on one another, the
                # one drawn last hiding the other; their markers, side by side, show both
                line = ticks is None and not ((sched, key) in zero and len(zero) > 1)
                ci_points(ax, g, m.column, m.scale, at, draw, marks, line=line)
                row = count_row(g, m.column, ", ".join(
                    [SCHEDULER_NAMES.get(str(sched), str(sched)),
                     *enc.names(tuple(key))]), draw["color"])  # type: ignore[arg-type]
                if row is not None:
                    rows.append(row)
            ax.set_ylim(bottom=0)
            if len(zero) == len(groups):
                _all_zero_axis(ax)
            if rows:
                strips.append(CountStrip(ax, merged_rows(rows)))
                marks.counts = True
        if ticks is None:  # every panel over the same loads, drawn or not
            _x_limits(flat[:len(metrics)], drawn)
        handles = _scheduler_handles(scheds) + enc.handles() + marks.handles()
        handles += [capacity] if capacity is not None else []
        fig_legend(fig, handles)
        suptitle(fig, title)
        count_strips(fig, strips)
        fig.set_figheight(_title_in(fig) + METRIC_ROW_IN * nrow + strip_in(strips)
                          + legend_height(width, handles))
        thin_x_labels(fig)
        return _save(fig, path)


def victims_vs_others(frame: pd.DataFrame, x: str | None, path: str | Path,
                      series: Sequence[str] = ("scheduler",), title: str = "") -> Path:
    """Median (top) and p99 (bottom) E2E latency of victims (solid) and of the other
    requests (dashed), colour and marker per scheduler; a column of panels per value of the
    first other `series` column, the rest by shade. With realisations (`frame` aggregated,
    `realizations.aggregate`) each point is the mean with its 95 % CI as an error bar; a
    victims' point from fewer than `FEW_VICTIMS` victims is hollow, and the victims behind
    each point are written under the column's bottom panel (`CountStrip`; under the top
    one too where the median's differ from the p99's). A scheduler without victims is said
    so."""
    df = frame.copy()
    df["_x"], ticks = _x_values(df, x)
    xs = sorted(set(df["_x"].tolist()))
    log = _log_x(xs, ticks)
    span = _span(xs, ticks)
    keys = _series_keys(df, series)
    facet = keys[0] if keys else None
    columns = _levels(df, facet) if facet else [""]
    enc = _Encoding.of(df, keys[1:], use_style=False, use_marker=False)
    df["_series"] = [enc.key(r) for _, r in df.iterrows()]
    scheds = list(dict.fromkeys(df["scheduler"]))
    ncol = len(columns)
    width = COLUMN_IN if ncol == 1 else PAGE_IN
    marks = LegendMarks()
    with style():
        fig, axes = plt.subplots(2, ncol, figsize=(width, 3.8), squeeze=False, sharex=True,
                                 layout="constrained")
        capacity: Line2D | None = None
        kinds: set[str] = set()  # what was drawn: "victim", "nonvictim"
        counted: dict[tuple[int, int], list[CountRow]] = {}
        for c, level in enumerate(columns):
            part = df[df[facet].astype(str) == level] if facet else df
            for r, stat in enumerate(("median", "p99")):
                ax = axes[r][c]
                no_victims = []
                rows: list[CountRow] = []
                curves = [(sched, key, g) for sched in scheds
                          for key, g in part[part["scheduler"] == sched].groupby(
                              "_series", sort=False)]
                n = 2 * (1 if ticks is not None and _cat_key(df, x) == "scheduler"
                         else len(curves))
                if ticks is None and f"{stat}_e2el_victim_ms_ci_lo" not in df:
                    n = 0  # no error bars to keep apart: every point at its own x
                for i, (sched, key, g) in enumerate(curves):
                    g = g.sort_values("_x")
                    draw = {"color": enc.draw(key, scheduler_color(sched))["color"],
                            "marker": scheduler_marker(sched)}
                    victims = f"{stat}_e2el_victim_ms"
                    if victims not in g or pd.to_numeric(
                            g[victims], errors="coerce").isna().all():
                        no_victims.append(SCHEDULER_NAMES.get(sched, sched))
                    row = count_row(g, victims, ", ".join(
                        [SCHEDULER_NAMES.get(sched, sched), *enc.names(key)]), draw["color"])
                    if row is not None:
                        rows.append(row)
                    for w, (who, ls) in enumerate((("victim", VICTIM_LS),
                                                   ("nonvictim", OTHERS_LS))):
                        column = f"{stat}_e2el_{who}_ms"
                        if column not in g or pd.to_numeric(
                                g[column], errors="coerce").isna().all():
                            continue
                        lane = w if n <= 2 else 2 * i + w
                        at = _dodged(g["_x"].to_numpy(dtype=float), lane, n, span, log)
                        shape = draw["marker"] if ticks is None or who == "victim" else \
                            OTHERS_MARKER  # no lines: the others by their marker
                        ci_points(ax, g, column, 1e-3, at, {**draw, "ls": ls, "marker": shape},
                                  marks, line=ticks is None)
                        kinds.add(who)
                head = [value_label(facet, level)] if facet and r == 0 else []
                if no_victims:  # above the panel, where no point can sit
                    head.append(f"no victims: {', '.join(dict.fromkeys(no_victims))}")
                if head:
                    ax.set_title(wrapped("\n".join(head), width / ncol),
                                 fontsize=SMALL_PT if not (facet and r == 0) else None)
                _x_axis(ax, x, xs, ticks)
                capacity = mark_capacity(ax, x, xs, ticks)
                if r == 0:
                    ax.set_xlabel("")
                if c == 0:  # short: it must fit beside a panel (the title says latency)
                    ax.set_ylabel(f"{stat} E2E (s)")
                ax.set_ylim(bottom=0)
                counted[(r, c)] = merged_rows(rows)
        # the victims behind each point under the panel; once per column when the median's
        # and the p99's rest on the same victims (they do: both are over every victim)
        strips: list[CountStrip] = []
        for (r, c), rows in counted.items():
            if rows and not (r == 0 and counted.get((1, c)) == rows):
                strips.append(CountStrip(axes[r][c], rows))
                marks.counts = True
        # the legend names only what was drawn: no victims entry where no scheduler had a
        # victim (each panel says so), the schedulers' swatches then in the others' style
        handles: list[Any] = _scheduler_handles(scheds)
        if ticks is None:
            if kinds == {"nonvictim"}:
                for h in handles:
                    h.set_linestyle(OTHERS_LS)
            handles += [Line2D([], [], color="0.3", ls=ls, label=label)
                        for who, ls, label in (("victim", VICTIM_LS, "victims"),
                                               ("nonvictim", OTHERS_LS, "other requests"))
                        if who in kinds]
        elif "nonvictim" in kinds:
            with_victims = " (victims: the scheduler's marker)" * ("victim" in kinds)
            handles += [Line2D([], [], color="0.3", ls="", marker=OTHERS_MARKER,
                               label=f"other requests{with_victims}")]
        handles += enc.handles() + marks.handles()
        handles += [capacity] if capacity is not None else []
        fig_legend(fig, handles)
        suptitle(fig, title or "E2E latency of evicted requests (victims) and the others")
        count_strips(fig, strips)
        # each panel row its own height, whatever the legend takes: two rows of y labels
        # never meet however many entries the legend has
        fig.set_figheight(_title_in(fig) + PANEL_ROW_IN * 2 + strip_in(strips)
                          + legend_height(width, handles))
        thin_x_labels(fig)
        return _save(fig, path)


# --- time series --------------------------------------------------------------------------

def _idle_spans(kv: Binned) -> list[tuple[float, float]]:
    spans: list[tuple[float, float]] = []
    idle = kv.idle
    i = 0
    while i < idle.size:
        if idle[i]:
            j = i
            while j + 1 < idle.size and idle[j + 1]:
                j += 1
            spans.append((float(kv.edges[i]), float(kv.edges[j + 1])))
            i = j + 1
        else:
            i += 1
    return spans


def _stairs(kv: Binned, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Step-shaped points of per-bin values (NaN bins break the line)."""
    x = np.repeat(kv.edges, 2)[1:-1]
    return x, np.repeat(values, 2)


def kv_use_over_time(jobs: Sequence[JobSeries], path: str | Path, title: str = "",
                     shade_note: str = "", pdf: bool = True,
                     notes: dict[str, str] | None = None) -> Path:
    """KV pool used (% of capacity) against the jobs' time (simulated, or measured by a real
    run: `clock_words`), binned: a column of panels per scheduler, a row per `panel`. With
    one job in a panel: the mean per bin (line), the max per bin (band) and idle time (grey,
    no step ran), a legend entry per scheduler and thing drawn, each in the colour drawn;
    with several: the mean per job, shades explained by `shade_note`. `notes`: per
    scheduler, words after its name in its panels' titles (e.g. the run's evictions)."""
    panels = _panels(jobs)
    scheds = list(dict.fromkeys(j.scheduler for j in jobs)) or [""]
    clocks = [j.clock for j in jobs]
    ncol = len(scheds)
    width = COLUMN_IN if ncol == 1 else PAGE_IN
    with style():
        fig, axes = plt.subplots(len(panels), ncol, figsize=(width, 0.5 + 1.8 * len(panels)),
                                 squeeze=False, sharey=True, layout="constrained")
        single = all(sum(1 for j in jobs if j.panel == p and j.scheduler == s) <= 1
                     for p in panels for s in scheds)
        for r, panel in enumerate(panels):
            for c, sched in enumerate(scheds):
                ax = axes[r][c]
                js = [j for j in jobs if j.panel == panel and j.scheduler == sched]
                head = SCHEDULER_NAMES.get(sched, sched)
                if notes and notes.get(sched):
                    head = f"{head}: {notes[sched]}"
                ax.set_title(wrapped(f"{head}, {panel}" if panel else head, width / ncol))
                ax.set_ylim(0, 105)
                ax.set_xlabel(f"{clock_words([j.clock for j in js] or clocks)} (s)")
                if c == 0:
                    ax.set_ylabel("KV pool used (%)")
                if not js:
                    _note(ax, "no job")
                    continue
                for j in js:
                    cap = 100.0 / max(j.kv_capacity_tokens, 1)
                    if np.isnan(j.kv.mean["kv_used_tokens"]).all():
                        _note(ax, f"{j.name}: no steps")
                        continue
                    color = scheduler_color(j.scheduler) if single else j.color
                    if single:
                        for a, b in _idle_spans(j.kv):
                            ax.axvspan(a, b, color="0.88", lw=0)
                        x, hi = _stairs(j.kv, j.kv.max["kv_used_tokens"] * cap)
                        _, lo = _stairs(j.kv, j.kv.mean["kv_used_tokens"] * cap)
                        ax.fill_between(x, lo, hi, color=color, alpha=0.25, lw=0)
                    x, y = _stairs(j.kv, j.kv.mean["kv_used_tokens"] * cap)
                    ax.plot(x, y, color=color, lw=0.9)
        # each legend swatch one colour, the colour of what it labels: an entry per
        # scheduler drawn and thing drawn (named by the scheduler when there are several)
        drawn = [s for s in scheds if any(j.scheduler == s for j in jobs)]
        if single:
            handles: list[Any] = []
            for s in drawn:
                who = f"{SCHEDULER_NAMES.get(s, s)}: " if len(drawn) > 1 else ""
                handles += [Line2D([], [], color=scheduler_color(s), lw=0.9,
                                   label=f"{who}mean per bin"),
                            Patch(color=scheduler_color(s), alpha=0.25, lw=0,
                                  label=f"{who}max per bin")]
            idle = any(_idle_spans(j.kv) for j in jobs)
            if idle:  # named only when drawn
                handles.append(Patch(color="0.88", lw=0, label="idle (no step)"))
            # a column per scheduler (its mean and max), idle time in its own
            fig_legend(fig, handles, columns=len(drawn) + idle if len(drawn) > 1 else None)
        else:
            labels = sorted(dict.fromkeys((j.shade, j.label) for j in jobs))
            heading = labels[0][1].rpartition(": ")[0] if labels else ""
            handles = [LegendGroup(tuple(Line2D([], [], color=shade(scheduler_color(s), t),
                                                lw=0.9) for s in drawn),
                                   lab.rpartition(": ")[2] or "job", apart=True)
                       for t, lab in labels]
            fig_legend(fig, handles, heading or shade_note)
        suptitle(fig, title or f"KV pool use over {clock_words(clocks)}")
        return _save(fig, path, pdf)


@dataclass(frozen=True)
class LegendGroup:
    """One legend entry drawn as several swatches side by side (one per scheduler: each in
    the colour of the artists it labels); `fig_legend` draws it with `HandlerTuple`, the
    swatches touching, or with a gap between them (`apart`: lines or bands, which touching
    would read as one two-coloured swatch)."""

    parts: tuple[Any, ...]
    label: str
    apart: bool = False

    def get_label(self) -> str:
        """The entry's text (what `Legend` asks a handle for)."""
        return self.label


def shades(values: Sequence[Any]) -> dict[Any, float]:
    """Each distinct value's shade (0 light .. 1 dark) in ascending order (numbers) or in
    order of appearance."""
    distinct = list(dict.fromkeys(values))
    with suppress(TypeError, ValueError):
        distinct.sort(key=float)
    n = len(distinct)
    return {v: (1.0 if n == 1 else 0.15 + 0.85 * k / (n - 1)) for k, v in enumerate(distinct)}


def figure_stem(what: str, x: str | None) -> str:
    """A file name after what is plotted against what, e.g. `evictions_vs_load`."""
    if x is None:
        return f"{what}_by_scheduler"
    short = {"workload.rate_scale": "load", "kv_capacity_tokens": "kv_pool"}.get(
        x, x.split(".")[-1])
    return f"{what}_vs_{short}"
