"""The per-study figures of experiments/report (issue 30 item 7, "figures pass the checks"),
read off the drawn artists: the victims behind each point written under victim panels,
hollow markers said as `n < 30`; series at 0 all visible; the KV-use title saying which run
it draws and why, its legend one colour a swatch; load curves with ticks at the loads run,
p99 TTFT in seconds on a log axis and a title within the figure; a legend naming only what
was drawn (no victims entry without victims); the capacity line only within the loads run,
clear of the panel's edges."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from figure_checks import layout_problems, saved_figures
from matplotlib.colors import to_rgba
from matplotlib.text import Annotation
from test_figure_defects import capacity_lines, eviction_frame, load_frame

from experiments.report.figures import (
    CAPACITY_LABEL,
    HOLLOW_FACE,
    SCHEDULER_NAMES,
    CountRow,
    JobSeries,
    Metric,
    capacity_outside,
    count_text,
    kv_use_over_time,
    merged_rows,
    metric_vs_load,
    scheduler_color,
    scheduler_marker,
    victims_vs_others,
)
from experiments.report.tables import EVICTION_METRICS, kv_title_of
from experiments.results.timeseries import bin_steps


def strip_texts(ax: Any) -> list[tuple[str, Any]]:
    """(text, colour as RGB) of the numbers and row labels written under a panel
    (annotations below the axis), in the order written."""
    return [(a.get_text(), tuple(round(v, 6) for v in to_rgba(a.get_color())[:3]))
            for a in ax.texts if isinstance(a, Annotation) and a.xyann[1] < 0]


def rgb(sched: str) -> tuple[float, ...]:
    return tuple(round(v, 6) for v in to_rgba(scheduler_color(sched))[:3])


def legend_texts(fig: Any) -> list[str]:
    return [t.get_text() for t in fig.legends[0].get_texts()]


def test_victim_counts_are_written_compactly() -> None:
    assert [count_text(n) for n in (0, 29, 830, 1234, 9999, 15_400)] == [
        "0", "29", "830", "1.2k", "10.0k", "15k"]


def test_rows_merge_only_when_no_two_series_share_an_x() -> None:
    a = CountRow("vLLM", "b", ((0.0, 5, "b"),))
    b = CountRow("SGLang", "o", ((1.0, 7, "o"),))
    (one,) = merged_rows([a, b])  # a categorical axis of schedulers: one row, n
    assert one.label == "n" and [c[:2] for c in one.cells] == [(0.0, 5), (1.0, 7)]
    c = CountRow("SGLang", "o", ((0.0, 3, "o"),))
    assert merged_rows([a, c]) == [a, c]


def test_victim_panels_write_the_victims_behind_each_point(tmp_path: Path) -> None:
    # issue 30 item 7: the victim panels showed no n
    frame = load_frame()  # vLLM evicts past load 1: 600 victims behind each median, 20 p99
    with saved_figures() as figs:
        victims_vs_others(frame, "workload.load", tmp_path / "victim_e2el_vs_load.png")
    (fig,) = figs
    median, p99 = fig.axes
    blue = rgb("vllm")
    for ax, n in ((median, "600"), (p99, "20")):  # counts differ: a strip under each panel
        texts = strip_texts(ax)
        assert ("vLLM", blue) in texts  # the row's label, in the series' colour
        numbers = [t for t, c in texts if c == blue and t != "vLLM"]
        # every load: none at 0.5 and 1, then the victims; no row for SGLang (none)
        assert numbers == ["0", "0"] + [n] * 4, numbers
        assert not any(SCHEDULER_NAMES["sglang"] in t for t, _ in texts)
    # the p99's 20 victims: hollow markers, said with n
    faces = [to_rgba(ln.get_markerfacecolor()) for ln in p99.get_lines()
             if ln.get_marker() not in ("", "None")]
    assert to_rgba(HOLLOW_FACE) in faces
    words = legend_texts(fig)
    assert "hollow: n < 30 victims" in words
    assert "victims per point (under the axis, all realisations)" in words
    assert layout_problems(fig) == []
    # the same victims behind the median and the p99 (as always in a real sweep): once,
    # under the bottom panel
    frame["p99_e2el_victim_ms_n"] = frame["median_e2el_victim_ms_n"]
    with saved_figures() as figs:
        victims_vs_others(frame, "workload.load", tmp_path / "v2.png")
    (fig,) = figs
    top, bottom = fig.axes
    assert strip_texts(top) == [] and strip_texts(bottom)
    assert layout_problems(fig) == []


def test_counts_that_would_touch_are_staggered(tmp_path: Path) -> None:
    # four workloads side by side on a page: narrow panels, close loads, four-digit counts
    frame = load_frame(facets=4)
    frame["median_e2el_victim_ms_n"] = frame["median_e2el_victim_ms_n"] * 3  # 1.8k
    frame["p99_e2el_victim_ms_n"] = frame["median_e2el_victim_ms_n"]
    with saved_figures() as figs:
        victims_vs_others(frame, "workload.load", tmp_path / "v.png",
                          ("scheduler", "workload"))
    (fig,) = figs
    assert layout_problems(fig) == []
    offsets = {a.xyann[1] for ax in fig.axes for a in ax.texts
               if isinstance(a, Annotation) and a.get_text() == "1.8k"}
    assert len(offsets) == 2  # two lines


def test_the_recovery_panel_writes_its_victims(tmp_path: Path) -> None:
    frame = load_frame()
    frame["prefix_recovery_on_resume_n"] = np.where(frame["prefix_recovery_on_resume"] > 0,
                                                    25, 0)
    with saved_figures() as figs:
        metric_vs_load(frame, "workload.load", [Metric(*m) for m in EVICTION_METRICS],
                       tmp_path / "evictions_vs_load.png")
    (fig,) = figs
    evictions, recovery = fig.axes[0], fig.axes[3]
    assert strip_texts(evictions) == []  # not a victim statistic
    assert [t for t, _ in strip_texts(recovery)] == ["0", "0"] + ["25"] * 4 + ["vLLM"]
    assert "hollow: n < 30 victims" in legend_texts(fig)
    assert layout_problems(fig) == []


def test_two_series_at_zero_are_both_visible(tmp_path: Path) -> None:
    # issue 30 item 3: Llama-3-8B, where neither scheduler evicts: SGLang's zero line hid
    # vLLM's, the y axis ran 0-0.05 and the x axis from 0
    frame = load_frame(loads=(0.75, 1.0, 1.25, 1.5))
    for m in ("preemptions_per_1k_requests", "preempted_request_share",
              "recomputed_token_share"):
        frame[m] = 0.0
        frame[f"{m}_ci_lo"] = frame[f"{m}_ci_hi"] = 0.0
    frame["prefix_recovery_on_resume"] = float("nan")
    with saved_figures() as figs:
        metric_vs_load(frame, "workload.load", [Metric(*m) for m in EVICTION_METRICS],
                       tmp_path / "evictions_vs_load.png")
    (fig,) = figs
    for ax in fig.axes[:3]:
        assert ax.get_title(loc="left") == "vLLM and SGLang: 0 at every load"
        marks = {s: [ln for ln in ax.get_lines()
                     if to_rgba(ln.get_color()) == to_rgba(scheduler_color(s))
                     and ln.get_marker() == scheduler_marker(s)] for s in ("vllm", "sglang")}
        # no connecting line at 0 to hide the other; the markers side by side
        assert not [ln for ln in ax.get_lines() if len(ln.get_xdata()) > 1
                    and ln.get_linestyle() not in ("None", "")
                    and to_rgba(ln.get_color()) != to_rgba("0.82")]
        xs = {s: sorted(float(x) for ln in lines for x in ln.get_xdata())
              for s, lines in marks.items()}
        assert len(xs["vllm"]) == len(xs["sglang"]) == 4
        assert all(a < b for a, b in zip(xs["vllm"], xs["sglang"], strict=True))
        assert list(ax.get_yticks()) == [0]
        lo, hi = ax.get_xlim()
        assert 0.6 < lo < 0.75 and 1.5 < hi < 1.65  # the loads, not from 0
    assert fig.axes[3].get_xlim() == fig.axes[0].get_xlim()
    assert layout_problems(fig) == []


def test_one_scheduler_at_zero_keeps_its_line_beside_the_other(tmp_path: Path) -> None:
    with saved_figures() as figs:
        metric_vs_load(eviction_frame(sglang=3.0).query("workload == 'azure_conv'").assign(
            preemptions_per_1k_requests=lambda f: np.where(f["scheduler"] == "sglang", 0.0,
                                                           f["preemptions_per_1k_requests"])),
            "workload.rate_scale", [Metric(*EVICTION_METRICS[0])], tmp_path / "e.png")
    (fig,) = figs
    ax = fig.axes[0]
    assert ax.get_title(loc="left") == "SGLang: 0 at every load"
    lines = [ln for ln in ax.get_lines() if len(ln.get_xdata()) > 1
             and ln.get_linestyle() not in ("None", "")]
    assert {to_rgba(ln.get_color()) for ln in lines} == {
        to_rgba(scheduler_color(s)) for s in ("vllm", "sglang")}


def test_kv_title_says_which_run_and_why() -> None:
    # issue 30 item 2: "(most evictions)" where nothing was evicted, and no word of which run
    run = "trace window 0 (first of 5 swept)"
    busy = kv_title_of("simulated time", "load 1.5 × capacity", True, [], run)
    assert busy.split("\n") == [
        "KV pool use over simulated time", "load 1.5 × capacity (most evictions)",
        "one run: trace window 0 (first of 5 swept)"]
    idle = kv_title_of("simulated time", "load 1.5 × capacity", False, [], run)
    assert "most evictions" not in idle
    assert "load 1.5 × capacity (highest; no evictions at any load)" in idle
    assert "most evictions" not in kv_title_of("simulated time", "", False, ["w"], "")
    assert kv_title_of("simulated time", "", True, ["w"], "").endswith("w (most evictions)")
    # each line fits a page-wide figure unwrapped
    assert all(len(line) <= 91 for line in idle.split("\n"))


def kv_job(sched: str) -> JobSeries:
    steps = pa.table({"start_time": [0.0, 1.0, 5.0], "duration_s": [1.0, 1.0, 1.0],
                      "kv_used_tokens": [10, 60, 30], "num_preempted": [0, 0, 0]})
    return JobSeries(sched, "", np.array([0.1]), np.array([1.0]), bin_steps(steps, 12), 100)


def test_kv_legend_has_one_colour_a_swatch_and_panels_their_run(tmp_path: Path) -> None:
    # issue 30 item 2: the "mean per bin" swatch was half blue, half orange
    with saved_figures() as figs:
        kv_use_over_time([kv_job("vllm"), kv_job("sglang")], tmp_path / "kv.png",
                         "KV pool use", notes={"vllm": "3 evictions in this run",
                                               "sglang": "0 evictions in this run"})
    (fig,) = figs
    legend = fig.legends[0]
    assert legend._ncols == 3  # a column per scheduler, idle time in the third
    assert legend_texts(fig) == ["vLLM: mean per bin", "vLLM: max per bin",
                                 "SGLang: mean per bin", "SGLang: max per bin",
                                 "idle (no step)"]
    for handle, text in zip(legend.legend_handles, legend_texts(fig), strict=True):
        assert not isinstance(handle, tuple), text  # one swatch, not a group
        if text.startswith(("vLLM", "SGLang")):
            sched = "vllm" if text.startswith("vLLM") else "sglang"
            color = (handle.get_color() if hasattr(handle, "get_xdata")
                     else handle.get_facecolor())
            assert np.allclose(to_rgba(color)[:3], to_rgba(scheduler_color(sched))[:3])
    assert [ax.get_title() for ax in fig.axes] == ["vLLM: 3 evictions in this run",
                                                   "SGLang: 0 evictions in this run"]
    assert layout_problems(fig) == []


def curve_runs(loads: tuple[float, ...] = (0.75, 1.0, 1.25, 1.5)) -> pd.DataFrame:
    rows = [{"scheduler": s, "workload.load": load, "workload.realization": k, "status": "ok",
             "slo_attainment": max(0.0, 1.0 - 0.5 * (load - 0.7)) - k / 50,
             "request_goodput": 4.0 / load + k / 10,
             "p99_ttft_ms": 600.0 * 10 ** (1.2 * (load - 0.75)) * (1 + k / 10),
             "p99_tpot_ms": 60.0 + 40 * load + k}
            for s in ("vllm", "sglang") for load in loads for k in range(5)]
    return pd.DataFrame(rows)


def test_load_curves_read_at_the_loads_run(tmp_path: Path) -> None:
    # issue 30 item 4: a title wider than the figure, p99 TTFT ticks like 600000 (ms), x
    # ticks at 1.0 and 1.5 only
    from experiments.report.load_curves import load_curves

    title = "Q3: victim choice, A10 24GB setting"
    for loads in ((0.75, 1.0, 1.25, 1.5), (0.5, 1.0, 1.25, 1.5, 2.0, 3.0), (1.25, 1.5)):
        with saved_figures() as figs:
            load_curves(curve_runs(loads), tmp_path / "load_curves.png", 0.9, title)
        (fig,) = figs
        assert layout_problems(fig) == [], loads
        bottom = fig.axes[2:]
        within = loads[0] <= 1.0  # load 1 named only within the loads run (its line there)
        for ax in bottom:
            ticks = [float(t) for t in ax.get_xticks()]
            assert set(loads) <= set(ticks) and (1.0 in ticks) == within
            shown = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
            assert shown[0] == f"{loads[0]:g}" and shown[-1] == f"{loads[-1]:g}"
        ttft = fig.axes[2]
        assert ttft.get_ylabel() == "p99 TTFT (s)" and ttft.get_yscale() == "log"
        labels = [t.get_text() for t in ttft.get_yticklabels() if t.get_text()]
        assert labels and all(len(t) <= 4 for t in labels), labels  # 0.5, 20, 500: no 600000
        assert fig.get_suptitle().startswith(title + ":\n")
        # filled markers (hollow means few victims in the other figures)
        for ln in fig.axes[0].get_lines():
            if ln.get_marker() not in ("", "None"):
                assert to_rgba(ln.get_markerfacecolor()) != to_rgba("white")


def without_victims(frame: pd.DataFrame, scheds: tuple[str, ...]) -> pd.DataFrame:
    """`frame` with no victim of `scheds` at any load (their victim statistics n/a)."""
    frame = frame.copy()
    none = frame["scheduler"].isin(scheds)
    for column in [c for c in frame.columns if c.startswith(("median_e2el_victim_ms",
                                                             "p99_e2el_victim_ms"))]:
        frame.loc[none, column] = 0 if column.endswith("_n") else float("nan")
    return frame


def test_the_victim_legend_names_only_what_was_drawn(tmp_path: Path) -> None:
    # issue 30: results/sensitivity/sglang_page16/victim_e2el_vs_load.png (SGLang alone, no
    # victim at any load) listed a solid "victims" entry for a series not drawn
    frame = load_frame()
    with saved_figures() as figs:  # vLLM's victims drawn: both entries
        victims_vs_others(frame, "workload.load", tmp_path / "some.png")
    words = legend_texts(figs[0])
    assert "victims" in words and "other requests" in words
    none = without_victims(frame, ("vllm", "sglang"))
    for scheds in (("vllm", "sglang"), ("sglang",)):  # every scheduler; one alone (page16)
        part = none[none["scheduler"].isin(scheds)]
        with saved_figures() as figs:
            victims_vs_others(part, "workload.load", tmp_path / "none.png")
        (fig,) = figs
        words = legend_texts(fig)
        names = [SCHEDULER_NAMES[s] for s in scheds]
        assert words[:len(scheds)] == names and "other requests" in words
        assert "victims" not in words and not any("n < 30" in w for w in words), words
        assert not any(w.startswith("victims per point") for w in words), words
        # the schedulers' swatches in the style drawn: the others' dashes, no solid line
        swatches = fig.legends[0].legend_handles[:len(scheds)]
        assert [h.get_linestyle() for h in swatches] == ["--"] * len(scheds)
        for ax in fig.axes:  # each panel says that there is no victim, and whose
            assert ax.get_title() == f"no victims: {', '.join(names)}", ax.get_title()
            assert strip_texts(ax) == []
        assert layout_problems(fig) == []
    # schedulers side by side (no lines): the others' marker, victims not mentioned
    one_load = none[none["workload.load"] == 1.5]
    with saved_figures() as figs:
        victims_vs_others(one_load, None, tmp_path / "cat.png")
    words = legend_texts(figs[0])
    assert "other requests" in words and not any("victims" in w for w in words), words


def test_the_capacity_line_lies_inside_the_loads_run(tmp_path: Path) -> None:
    # issue 30: results/preemption/conv_sync ran loads 1.25 and 1.5 only; its capacity line
    # (load 1) sat on the panels' left edge, clipped
    from experiments.report.load_curves import load_curves

    assert [capacity_outside(xs) for xs in ((1.25, 1.5), (0.5, 0.75), (0.75, 1.25), (1.0,),
                                            (1.0, 1.5), (0.5, 1.0))] == [
        "below", "above", "", "", "", ""]
    below = f"{CAPACITY_LABEL} below the loads run"
    for loads in ((1.25, 1.5), (0.75, 1.0, 1.25, 1.5), (1.0, 1.25, 1.5), (0.5, 1.25)):
        frame = load_frame(loads=loads)
        with saved_figures() as figs:
            metric_vs_load(frame, "workload.load", [Metric(*m) for m in EVICTION_METRICS],
                           tmp_path / "evictions_vs_load.png")
            victims_vs_others(frame, "workload.load", tmp_path / "victim_e2el_vs_load.png")
            load_curves(curve_runs(loads), tmp_path / "load_curves.png", 0.9, "t")
        assert len(figs) == 3
        for fig in figs:
            words = legend_texts(fig)
            panels = [ax for ax in fig.axes if ax.get_visible()]
            if loads[0] > 1:  # no line, no tick at 1; the legend says where capacity lies
                assert below in words and CAPACITY_LABEL not in words, words
                assert all(capacity_lines(ax) == [] for ax in panels)
                assert all(1.0 not in [float(t) for t in ax.get_xticks()] for ax in panels)
                for ax in panels:  # the axis over the loads run, not widened to load 1
                    assert ax.get_xlim()[0] > 1.1, ax.get_xlim()
            else:  # a line on every panel, clear of its edges (a margin beside it)
                assert CAPACITY_LABEL in words and below not in words, words
                for ax in panels:
                    assert len(capacity_lines(ax)) == 1
                    lo, hi = ax.get_xlim()
                    assert min(1.0 - lo, hi - 1.0) >= 0.04 * (hi - lo), (loads, lo, hi)
            assert layout_problems(fig) == [], loads
