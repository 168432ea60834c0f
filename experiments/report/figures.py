"""Paper-style figures of runs and sweeps: PNG and a vector PDF beside it, written atomically.

One visual language for every figure:
- a fixed colour per scheduler (`SCHEDULER_COLORS`, from each registry entry: vLLM blue,
  SGLang orange), the same in every figure, file and W&B run; jobs of one scheduler at
  several loads are shades of it (light: low load, dark: high load);
- a line style and marker per series kind: victims solid with filled circles, the other
  requests dashed with open squares; further series (e.g. a second workload, recompute vs
  swap) by line style and marker (`SERIES_STYLES`);
- sized for one column of a two-column paper (`COLUMN_IN` wide; `PAGE_IN` for figures with
  several panels), fonts 6.5-8 pt, axes named in words with units (`param_label`), legends
  that name only what varies, missing data written on the panel.
Figures:
- `latency_cdfs`: TTFT and end-to-end latency CDFs, schedulers overlaid on one log-x axis;
- `metric_vs_load`: sweep metrics (e.g. evictions per 1,000 requests) against a parameter;
- `victims_vs_others`: victims' and the other requests' median / p99 E2E latency;
- `kv_use_over_time`: KV pool use binned on the run's time (mean and max per bin; bins in
  which no step ran are idle, shaded, not bridged), a panel per scheduler; the time axis
  names the clock the run used (`clock_words`): simulated, or the real executor's measured
  wall-clock, CPU or GPU time.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import to_rgb
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

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
VICTIM_STYLE = {"ls": "-", "marker": "o", "mfc": None}        # filled with the line colour
OTHERS_STYLE = {"ls": "--", "marker": "s", "mfc": "white"}    # open

# Axis labels of config keys (words with units); others: the last key part in words.
PARAM_LABELS = {
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
    "font.size": 7.5, "axes.labelsize": 7.5, "axes.titlesize": 8, "legend.fontsize": 6.5,
    "xtick.labelsize": 6.5, "ytick.labelsize": 6.5, "lines.linewidth": 1.2,
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


def _suptitle(fig: Any, text: str) -> None:
    """The figure's title, each line wrapped to the figure's width."""
    import textwrap

    chars = int(fig.get_figwidth() * 15)  # about 15 characters per inch at 8 pt
    lines = [w for line in text.split("\n") for w in textwrap.wrap(line, chars) or [""]]
    fig.suptitle("\n".join(lines))


def _note(ax: Any, text: str, y: float = 0.5) -> None:
    """Write why a panel (or part of it) has no data, on the panel."""
    ax.text(0.5, y, text, transform=ax.transAxes, ha="center", va="center", fontsize=6.5,
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


def _fig_legend(fig: Any, handles: list[Any], note: str = "") -> None:
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 4),
                   title=note or None, title_fontsize=6.5)
    elif note:
        fig.text(0.5, 0.0, note, ha="center", va="top", fontsize=6.5)


def _job_handles(jobs: Sequence[JobSeries], shade_note: str) -> list[Any]:
    """One legend entry per job when few; one per scheduler (shades explained) when many."""
    many = len(jobs) > 4 and bool(shade_note)
    handles: list[Any] = []
    seen: set[str] = set()
    for j in jobs:
        key = j.scheduler if many else j.name
        if key in seen:
            continue
        seen.add(key)
        color = scheduler_color(j.scheduler) if many else j.color
        name = SCHEDULER_NAMES.get(j.scheduler, j.scheduler) if many else j.name
        handles.append(Line2D([], [], color=color, label=name))
    return handles


def latency_cdfs(jobs: Sequence[JobSeries], path: str | Path, title: str = "",
                 shade_note: str = "", pdf: bool = True) -> Path:
    """TTFT (left) and E2E latency (right) CDFs in seconds on log-x axes, every scheduler on
    the same axes (its colour; shades for its jobs at several loads, explained by
    `shade_note`), a row of panels per `panel`."""
    panels = _panels(jobs)
    with style():
        fig, axes = plt.subplots(len(panels), 2, figsize=(PAGE_IN, 0.4 + 2.0 * len(panels)),
                                 squeeze=False, sharey=True, layout="constrained")
        for r, panel in enumerate(panels):
            js = [j for j in jobs if j.panel == panel]
            for c, (what, attr) in enumerate((("time to first token (s)", "ttft_s"),
                                              ("end-to-end latency (s)", "e2el_s"))):
                ax = axes[r][c]
                missing = []
                for j in js:
                    x = np.sort(np.asarray(getattr(j, attr))[np.isfinite(getattr(j, attr))])
                    if x.size == 0:
                        missing.append(j.name)
                        continue
                    x = np.maximum(x, 1e-4)  # log axis: a zero latency sits at 0.1 ms
                    ax.step(x, np.arange(1, x.size + 1) / x.size, where="post", color=j.color)
                if len(missing) == len(js):
                    _note(ax, "no completed requests")
                    continue
                if missing:
                    _note(ax, "no completed requests: " + "; ".join(missing), 0.1)
                _seconds_axis(ax)
                ax.set_xlabel(what)
                ax.set_ylim(0, 1.02)
            axes[r][0].set_ylabel(f"{panel}\nshare of requests" if panel else
                                  "share of requests")
        _fig_legend(fig, _job_handles(jobs, shade_note), shade_note if len(jobs) > 4 else "")
        _suptitle(fig, title or "Latency per completed request (CDF)")
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
    return [Line2D([], [], color=scheduler_color(s), lw=2.5, label=SCHEDULER_NAMES.get(s, s))
            for s in scheds]


def metric_vs_load(frame: pd.DataFrame, x: str | None,
                   metrics: Sequence[Metric | tuple[Any, ...]],
                   path: str | Path, series: Sequence[str] = ("scheduler",),
                   title: str = "") -> Path:
    """A panel per metric (a `Metric`, or its fields as a tuple) against `x`: colour per
    scheduler; the other `series` columns by line style, marker and shade (`_Encoding`). A
    metric without data is said so on its panel, nothing is drawn at 0."""
    specs = [m if isinstance(m, Metric) else Metric(*m) for m in metrics]
    df = frame.copy()
    df["_x"], ticks = _x_values(df, x)
    xs = sorted(set(df["_x"].tolist()))
    enc = _Encoding.of(df, _series_keys(df, series))
    df["_series"] = [enc.key(r) for _, r in df.iterrows()]
    scheds = list(dict.fromkeys(df["scheduler"]))
    ncol = 1 if len(metrics) == 1 else 2
    nrow = -(-len(metrics) // ncol)
    width = COLUMN_IN if ncol == 1 else PAGE_IN
    with style():
        fig, axes = plt.subplots(nrow, ncol, figsize=(width, 0.5 + 1.9 * nrow), squeeze=False,
                                 layout="constrained")
        flat = [ax for row in axes for ax in row]
        for ax in flat[len(metrics):]:
            ax.set_visible(False)
        for ax, m in zip(flat, specs, strict=False):
            ax.set_ylabel(m.label)
            _x_axis(ax, x, xs, ticks)
            y_all = pd.to_numeric(df[m.column], errors="coerce") if m.column in df else None
            if y_all is None or y_all.isna().all():
                _note(ax, m.missing)
                continue
            absent = [SCHEDULER_NAMES.get(str(sc), str(sc)) for sc in scheds
                      if y_all[df["scheduler"] == sc].isna().all()]
            if absent:
                ax.text(0.02, 0.97, f"{', '.join(absent)}: {m.missing}", transform=ax.transAxes,
                        ha="left", va="top", fontsize=6.5, color="0.35")
            for (sched, key), g in df.groupby(["scheduler", "_series"], sort=False):
                g = g.sort_values("_x")
                ax.plot(g["_x"], pd.to_numeric(g[m.column], errors="coerce") * m.scale,
                        **enc.draw(tuple(key), scheduler_color(str(sched))))  # type: ignore[arg-type]
            ax.set_ylim(bottom=0)
        _fig_legend(fig, _scheduler_handles(scheds) + enc.handles())
        _suptitle(fig, title)
        return _save(fig, path)


def victims_vs_others(frame: pd.DataFrame, x: str | None, path: str | Path,
                      series: Sequence[str] = ("scheduler",), title: str = "") -> Path:
    """Median (top) and p99 (bottom) E2E latency of victims (solid, filled circles) and of
    the other requests (dashed, open squares), colour per scheduler; a column of panels per
    value of the first other `series` column, the rest by shade. A scheduler without victims
    is said so."""
    df = frame.copy()
    df["_x"], ticks = _x_values(df, x)
    xs = sorted(set(df["_x"].tolist()))
    keys = _series_keys(df, series)
    facet = keys[0] if keys else None
    columns = _levels(df, facet) if facet else [""]
    enc = _Encoding.of(df, keys[1:], use_style=False, use_marker=False)
    df["_series"] = [enc.key(r) for _, r in df.iterrows()]
    scheds = list(dict.fromkeys(df["scheduler"]))
    ncol = len(columns)
    width = COLUMN_IN if ncol == 1 else PAGE_IN
    with style():
        fig, axes = plt.subplots(2, ncol, figsize=(width, 3.6), squeeze=False, sharex=True,
                                 layout="constrained")
        for c, level in enumerate(columns):
            part = df[df[facet].astype(str) == level] if facet else df
            for r, stat in enumerate(("median", "p99")):
                ax = axes[r][c]
                no_victims = []
                for sched in scheds:
                    mine = part[part["scheduler"] == sched]
                    color = scheduler_color(sched)
                    if not mine.empty and pd.to_numeric(
                            mine.get(f"{stat}_e2el_victim_ms"), errors="coerce").isna().all():
                        no_victims.append(SCHEDULER_NAMES.get(sched, sched))
                    for key, g in mine.groupby("_series", sort=False):
                        g = g.sort_values("_x")
                        tone = enc.draw(key, color)["color"]
                        for who, st in (("victim", VICTIM_STYLE), ("nonvictim", OTHERS_STYLE)):
                            y = pd.to_numeric(g.get(f"{stat}_e2el_{who}_ms"), errors="coerce")
                            if y is None or y.isna().all():
                                continue
                            ax.plot(g["_x"], y / 1000.0, ls=st["ls"], marker=st["marker"],
                                    color=tone, mfc=st["mfc"] or tone, mec=tone)
                if no_victims:
                    ax.text(0.02, 0.97, f"no victims: {', '.join(no_victims)}",
                            transform=ax.transAxes, ha="left", va="top", fontsize=6.5,
                            color="0.35")
                _x_axis(ax, x, xs, ticks)
                if r == 0:
                    ax.set_xlabel("")
                    if facet:
                        ax.set_title(value_label(facet, level))
                if c == 0:
                    ax.set_ylabel(f"{stat} E2E latency (s)")
                ax.set_ylim(bottom=0)
        handles: list[Any] = _scheduler_handles(scheds)
        handles += [Line2D([], [], color="0.3", ls="-", marker="o", label="victims"),
                    Line2D([], [], color="0.3", ls="--", marker="s", mfc="white",
                           label="other requests")]
        _fig_legend(fig, handles + enc.handles())
        _suptitle(fig, title or "E2E latency of evicted requests (victims) and the others")
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
                     shade_note: str = "", pdf: bool = True) -> Path:
    """KV pool used (% of capacity) against the jobs' time (simulated, or measured by a real
    run: `clock_words`), binned: a column of panels per scheduler, a row per `panel`. With
    one job in a panel: the mean per bin (line), the max per bin (band) and idle time (grey,
    no step ran); with several: the mean per job, shades explained by `shade_note`."""
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
                ax.set_title(f"{head}, {panel}" if panel else head)
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
        if single:
            color = "0.3"
            handles: list[Any] = [Line2D([], [], color=color, lw=0.9, label="mean per bin"),
                                  Patch(color=color, alpha=0.25, label="max per bin"),
                                  Patch(color="0.88", label="idle (no step)")]
            _fig_legend(fig, handles)
        else:
            labels = sorted(dict.fromkeys((j.shade, j.label) for j in jobs))
            heading = labels[0][1].rpartition(": ")[0] if labels else ""
            handles = [Line2D([], [], color=shade("#404040", t),
                              label=lab.rpartition(": ")[2] or "job") for t, lab in labels]
            _fig_legend(fig, handles, heading or shade_note)
        _suptitle(fig, title or f"KV pool use over {clock_words(clocks)}")
        return _save(fig, path, pdf)


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
