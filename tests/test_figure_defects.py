"""The figure defects of issue 30 item 7, each read off the drawn artists: a series at 0
everywhere stays visible and is said; the KV-use legend's swatches have the colours of what
they label; the victim-policy figures and the real-model step-time figure keep the report's
rules (fonts at the floor or above, text inside the figure and clear of other text, one
legend)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
from conftest import load_script
from figure_checks import layout_problems, legends, saved_figures
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_rgba
from matplotlib.patches import Rectangle

from experiments.report.figures import (
    SCHEDULER_NAMES,
    ZERO_ZORDER,
    JobSeries,
    Metric,
    kv_use_over_time,
    log_subs,
    log_ticks,
    metric_vs_load,
    scheduler_color,
    victims_vs_others,
)
from experiments.report.step_time import StepTimes, step_time_figure
from experiments.report.tables import EVICTION_METRICS
from experiments.results.timeseries import bin_steps

LOADS = (1.0, 1.5, 2.0, 3.0, 4.0)


def eviction_frame(sglang: float = 0.0) -> pd.DataFrame:
    """Q1's shape: vLLM evicts a lot on conv and a little on code, SGLang `sglang` times
    as much as vLLM on code (0: never)."""
    rows = []
    for workload, scale in (("azure_conv", 100.0), ("azure_code", 1.0)):
        for load in LOADS:
            for sched in ("vllm", "sglang"):
                v = scale * load * (1.0 if sched == "vllm" else sglang / scale)
                rows.append({"scheduler": sched, "workload": workload,
                             "workload.rate_scale": load, "status": "ok",
                             "preemptions_per_1k_requests": v,
                             "preempted_request_share": v / 1000.0,
                             "recomputed_token_share": v / 4000.0,
                             "prefix_recovery_on_resume": 0.8 if v else float("nan")})
    return pd.DataFrame(rows)


def draw_evictions(frame: pd.DataFrame, path: Path) -> object:
    with saved_figures() as figs:
        metric_vs_load(frame, "workload.rate_scale", [Metric(*m) for m in EVICTION_METRICS],
                       path, ("scheduler", "workload"))
    return figs[0]


def lines_of(ax: object, sched: str) -> list[object]:
    """The lines (and markers) drawn in the scheduler's colour with a point to show."""
    color = to_rgba(scheduler_color(sched))
    return [ln for ln in ax.get_lines()  # type: ignore[attr-defined]
            if np.allclose(to_rgba(ln.get_color()), color)
            and np.isfinite(np.asarray(ln.get_ydata(), dtype=float)).any()]


def test_a_scheduler_at_zero_everywhere_is_drawn_on_top_and_said(tmp_path: Path) -> None:
    # issue 30: SGLang's zero line hid under vLLM's code line near 0 in evictions_vs_load
    fig = draw_evictions(eviction_frame(), tmp_path / "evictions_vs_load.png")
    evictions = fig.axes[0]  # type: ignore[attr-defined]
    assert evictions.get_title(loc="left") == "SGLang: 0 at every load"
    zero, others = lines_of(evictions, "sglang"), lines_of(evictions, "vllm")
    assert zero and others
    assert min(ln.get_zorder() for ln in zero) == ZERO_ZORDER > max(
        ln.get_zorder() for ln in others)
    assert not any(ln.get_clip_on() for ln in zero)  # markers at 0 not cut by the axis
    # the others' lines clipped as usual (every series' markers are whole at the axis)
    assert all(ln.get_clip_on() for ln in others if ln.get_linestyle() not in ("None", ""))
    # recovery: SGLang never readmitted, so n/a (not drawn), said; not a 0
    recovery = fig.axes[3]  # type: ignore[attr-defined]
    assert not lines_of(recovery, "sglang")
    assert recovery.get_title(loc="left") == "SGLang: no readmissions: n/a"
    assert layout_problems(fig) == []


def test_only_the_zero_series_of_a_scheduler_is_named(tmp_path: Path) -> None:
    frame = eviction_frame(sglang=3.0)
    code = (frame["scheduler"] == "vllm") & (frame["workload"] == "azure_code")
    frame.loc[code, "preemptions_per_1k_requests"] = 0.0
    fig = draw_evictions(frame, tmp_path / "e.png")
    assert fig.axes[0].get_title(loc="left") == (  # type: ignore[attr-defined]
        "vLLM, Azure code: 0 at every load")
    assert fig.axes[1].get_title(loc="left") == ""  # type: ignore[attr-defined]


def kv_job(sched: str) -> JobSeries:
    steps = pa.table({"start_time": [0.0, 1.0, 5.0], "duration_s": [1.0, 1.0, 1.0],
                      "kv_used_tokens": [10, 60, 30], "num_preempted": [0, 0, 0]})
    return JobSeries(sched, "", np.array([0.1]), np.array([1.0]), bin_steps(steps, 12), 100)


def test_kv_use_legend_swatches_have_the_colours_they_label(tmp_path: Path) -> None:
    # issue 30: the "max per bin" swatch was grey, the bands it labels blue and orange
    with saved_figures() as figs:
        kv_use_over_time([kv_job("vllm"), kv_job("sglang")], tmp_path / "kv.png")
    fig = figs[0]
    bands = [to_rgba(c.get_facecolor()[0]) for ax in fig.axes for c in ax.collections
             if isinstance(c, PolyCollection)]
    spans = [to_rgba(p.get_facecolor()) for ax in fig.axes for p in ax.patches]
    (legend,) = fig.legends
    swatches = [to_rgba(r.get_facecolor()) for r in legend.findobj(Rectangle)
                if r is not legend.legendPatch and r.get_visible() and r.get_width() > 0
                and r.get_height() > 0 and r.get_facecolor()[3] > 0]
    assert {scheduler_color("vllm"), scheduler_color("sglang")} and bands and spans
    for color in {*bands, *spans}:  # every coloured area drawn has its swatch...
        assert any(np.allclose(color, s) for s in swatches), color
    for s in swatches:  # ...and every swatch is the colour of something drawn
        assert any(np.allclose(s, c) for c in [*bands, *spans]), s
    assert layout_problems(fig) == []
    # without idle time, no idle entry: the legend names only what is drawn
    busy = pa.table({"start_time": [0.0, 1.0], "duration_s": [1.0, 1.0],
                     "kv_used_tokens": [10, 60], "num_preempted": [0, 0]})
    job = JobSeries("vllm", "", np.array([0.1]), np.array([1.0]), bin_steps(busy, 4), 100)
    with saved_figures() as figs:
        kv_use_over_time([job], tmp_path / "busy.png")
    (legend,) = figs[0].legends
    assert [t.get_text() for t in legend.get_texts()] == ["mean per bin", "max per bin"]


def policy_runs() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    policy_report = load_script("policy_report")
    rows = [{"scheduler": s, "mode": m, "load": load, "policy": p, "realization": k,
             "status": "ok", "num_preemptions": float(rng.integers(0, 1100)),
             "num_victims": float(rng.integers(0, 900)),
             "p99_e2el_victim_ms": float(rng.uniform(5e3, 1e5)),
             "p99_e2el_ms": float(rng.uniform(5e3, 7e4)),
             "slo_attainment": float(rng.uniform(0, 1)),
             "swap_time_share": float(rng.uniform(0, 0.01)) if m == "swap" else 0.0}
            for s in ("vllm", "sglang") for m in policy_report.MODES for load in (1.0, 1.5)
            for p in policy_report.POLICIES for k in range(3)]
    for row in rows:
        row["request_goodput"] = row["slo_attainment"] * 4.0
        row["recomputed_token_share"] = row["slo_attainment"] / 10.0
    return pd.DataFrame(rows)


def policy_stats() -> pd.DataFrame:
    return load_script("policy_report").policy_stats(policy_runs())


def test_victim_policy_figures_keep_the_report_rules(tmp_path: Path) -> None:
    # issue 30: clipped titles, overlapping labels and 5.5-6 pt fonts in the swap figures
    policy_report = load_script("policy_report")
    stats = policy_stats()
    with saved_figures() as figs:
        policy_report.policy_figure(stats, tmp_path / "p.png")
        policy_report.swap_figure(stats, tmp_path / "s.png")
    assert len(figs) == 2
    for fig in figs:
        assert layout_problems(fig) == []
        assert legends(fig) == 1
    titles = {ax.get_title() for ax in figs[1].axes} - {""}
    assert titles == {SCHEDULER_NAMES["vllm"], SCHEDULER_NAMES["sglang"]}
    # one scheduler at one load (the study's run): a column-wide figure, still within rules
    one = stats[(stats["scheduler"] == "vllm") & (stats["load"] == 1.0)]
    with saved_figures() as figs:
        policy_report.policy_figure(one, tmp_path / "p1.png")
        policy_report.swap_figure(one, tmp_path / "s1.png")
    for fig in figs:
        assert layout_problems(fig) == [] and legends(fig) == 1
    # the paired differences from the default, both schedulers and one
    runs = policy_runs()
    for frame in (runs, runs[(runs["scheduler"] == "vllm") & (runs["load"] == 1.0)]):
        with saved_figures() as figs:
            policy_report.versus_figure(policy_report.versus_default(frame), tmp_path / "v.png")
        (fig,) = figs
        assert layout_problems(fig) == [] and legends(fig) == 1


def test_step_time_ticks_never_collide(tmp_path: Path) -> None:
    # issue 30: real_model's step_time figure had colliding tick labels ("3x10^2" beside
    # "4x10^2"); over three and a half decades, a column of a paper wide
    rng = np.random.default_rng(1)

    def steps(lo: float, hi: float) -> StepTimes:
        measured = np.exp(rng.uniform(np.log(lo), np.log(hi), 300))
        return StepTimes(measured, measured * rng.uniform(0.7, 1.3, 300),
                         rng.uniform(size=300) < 0.2)

    for panels in ({"vllm": steps(0.035, 0.6), "sglang": steps(0.03, 0.25)},
                   {"vllm": steps(0.001, 4.0), "sglang": steps(0.002, 0.3)},
                   {"vllm": steps(0.04, 0.09)}):
        with saved_figures() as figs:
            step_time_figure(panels, tmp_path / "step_time.png", pdf=False)
        (fig,) = figs
        assert layout_problems(fig) == []
        for ax in fig.axes:  # at least two labelled ticks on each axis
            for axis in (ax.xaxis, ax.yaxis):
                lo, hi = sorted(axis.get_view_interval())
                shown = [t for t in axis.get_major_ticks()
                         if lo <= t.get_loc() <= hi and t.label1.get_text()]
                assert len(shown) >= 2, [t.get_loc() for t in shown]


def test_a_long_legend_entry_takes_a_row_of_its_own(tmp_path: Path) -> None:
    # the categorical victims figure's legend ran past a column-wide figure's edge
    frame = pd.DataFrame({"scheduler": ["vllm", "sglang"], "status": ["ok", "ok"],
                          "median_e2el_victim_ms": [15000.0, float("nan")],
                          "p99_e2el_victim_ms": [25000.0, float("nan")],
                          "median_e2el_nonvictim_ms": [11000.0, 17000.0],
                          "p99_e2el_nonvictim_ms": [29000.0, 36000.0]})
    with saved_figures() as figs:
        victims_vs_others(frame, None, tmp_path / "v.png")
    (fig,) = figs
    assert layout_problems(fig) == [] and legends(fig) == 1


def test_a_log_axis_gets_the_ticks_its_length_has_room_for() -> None:
    assert log_subs(40.0, 600.0, 3.0, 0.4) == (1.0, 2.0, 5.0)  # 50 100 200 500
    assert log_subs(1.0, 1e4, 3.0, 0.4) == (1.0,)  # four decades: powers of ten
    assert log_subs(5.05, 14.3, 1.6, 0.2) == (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0)
    import matplotlib.pyplot as plt

    # a p99 axis from 5 s to 14 s (swap figure, Azure code): 6, 8 and 10, not 10 alone
    fig, ax = plt.subplots(figsize=(3.4, 2.2), layout="constrained")
    ax.plot([0, 1], [5.05, 14.3])
    log_ticks(ax, "y", inches=1.6)
    fig.canvas.draw()
    lo, hi = ax.get_ylim()
    shown = [t.label1.get_text() for t in ax.yaxis.get_major_ticks()
             if lo <= t.get_loc() <= hi]
    assert len(shown) >= 3 and "10" in shown
    assert layout_problems(fig) == []
    plt.close(fig)


STUDY_LOADS = (0.5, 1.0, 1.25, 1.5, 2.0, 3.0)  # victim_choice's; preemption's are a subset


def load_frame(facets: int = 1, loads: tuple[float, ...] = STUDY_LOADS) -> pd.DataFrame:
    """A load sweep as `figure_frame` gives it (means over 5 realisations with CIs and the
    victims behind them), `facets` workloads: the shape of Q1 and Q3's report."""
    rows = []
    for f in range(facets):
        for load in loads:
            for sched in ("vllm", "sglang"):
                evicts = sched == "vllm" and load > 1
                row = {"scheduler": sched, "workload.load": load, "status": "ok",
                       "workload": f"w{f}", "n_realizations": 5,
                       "preemptions_per_1k_requests": 150.0 * evicts,
                       "preempted_request_share": 0.13 * evicts,
                       "recomputed_token_share": 0.05 * evicts,
                       "prefix_recovery_on_resume": 0.6 if evicts else float("nan")}
                for stat, base in (("median", 30_000.0), ("p99", 80_000.0)):
                    for who, k in (("victim", 1.2), ("nonvictim", 1.0)):
                        col = f"{stat}_e2el_{who}_ms"
                        v = base * load * k if who == "nonvictim" or evicts else float("nan")
                        row.update({col: v, f"{col}_ci_lo": 0.9 * v, f"{col}_ci_hi": 1.1 * v})
                row["median_e2el_victim_ms_n"] = 600 if evicts else 0
                row["p99_e2el_victim_ms_n"] = 20 if evicts else 0  # some hollow markers
                for m in ("preemptions_per_1k_requests", "preempted_request_share",
                          "recomputed_token_share", "prefix_recovery_on_resume"):
                    row[f"{m}_ci_lo"], row[f"{m}_ci_hi"] = 0.8 * row[m], 1.2 * row[m]
                rows.append(row)
    return pd.DataFrame(rows)


def test_victim_e2el_vs_load_has_no_overlapping_labels(tmp_path: Path) -> None:
    # issue 30: the two y-axis labels ("median E2E latency (s)" over "p99 ...") overlapped
    # in results/victim_choice/main and results/preemption/*; a panel column per workload,
    # as many as a sweep may vary
    for facets in (1, 2, 3, 4):
        frame = load_frame(facets)
        series = ("scheduler", "workload") if facets > 1 else ("scheduler",)
        with saved_figures() as figs:
            victims_vs_others(frame, "workload.load", tmp_path / f"v{facets}.png", series,
                              title="E2E latency: victims and other requests vs load")
        (fig,) = figs
        assert layout_problems(fig) == [], facets
        assert legends(fig) == 1
        # the first and last loads stay named under the bottom-left panel (axes row-major)
        bottom_left = fig.axes[facets]  # type: ignore[attr-defined]
        labels = [t.get_text() for t in bottom_left.get_xticklabels() if t.get_visible()]
        assert "1" in labels and "3" in labels, labels


def capacity_lines(ax: object) -> list[object]:
    """The vertical lines at load 1 on a panel (the axis-spanning kind axvline draws)."""
    return [ln for ln in ax.get_lines()  # type: ignore[attr-defined]
            if list(ln.get_xdata()) == [1.0, 1.0] and list(ln.get_ydata()) == [0, 1]]


def test_evictions_vs_load_marks_saturation_as_load_curves_does(tmp_path: Path) -> None:
    # issue 30: load_curves marked capacity (load 1), evictions_vs_load did not
    from experiments.report.load_curves import load_curves

    frame = load_frame()
    with saved_figures() as figs:
        metric_vs_load(frame, "workload.load", [Metric(*m) for m in EVICTION_METRICS],
                       tmp_path / "evictions_vs_load.png", ("scheduler",))
        victims_vs_others(frame, "workload.load", tmp_path / "victim_e2el_vs_load.png")
        runs = pd.concat([frame.assign(**{"workload.realization": k}, slo_attainment=0.9 - k / 50,
                                       request_goodput=4.0 + k, p99_ttft_ms=900.0 * (k + 1),
                                       p99_tpot_ms=60.0 + k) for k in range(3)])
        load_curves(runs, tmp_path / "load_curves.png", target=0.9)
    evictions, victims, curves = figs
    reference = capacity_lines(curves.axes[0])[0]  # type: ignore[attr-defined]
    # load_curves' CI swatches are the bands' colours, not a grey like the capacity line's
    (legend,) = curves.legends  # type: ignore[attr-defined]
    swatches = [r.get_facecolor()[:3] for r in legend.findobj(Rectangle)
                if r is not legend.legendPatch and r.get_width() > 0 and r.get_facecolor()[3] > 0]
    bands = {to_rgba(scheduler_color(s))[:3] for s in ("vllm", "sglang")}
    assert swatches and all(any(np.allclose(c, b) for b in bands) for c in swatches)
    for fig in (evictions, victims):
        shown = [ax for ax in fig.axes if ax.get_visible()]  # type: ignore[attr-defined]
        for ax in shown:
            (line,) = capacity_lines(ax)
            for prop in ("color", "linestyle", "linewidth"):
                assert getattr(line, f"get_{prop}")() == getattr(reference, f"get_{prop}")()
        legend = fig.legends[0]  # type: ignore[attr-defined]
        assert "capacity (load 1)" in [t.get_text() for t in legend.get_texts()]
        assert layout_problems(fig) == []
    # loads all past capacity (Q1's synchronous loops): no line, which would sit on the
    # panel's left edge, nor load 1 named; the legend says where capacity lies
    with saved_figures() as figs:
        metric_vs_load(load_frame(loads=(1.25, 1.5)), "workload.load",
                       [Metric(*m) for m in EVICTION_METRICS], tmp_path / "e2.png")
    for ax in figs[0].axes:  # type: ignore[attr-defined]
        assert not capacity_lines(ax)
        assert "1" not in [t.get_text() for t in ax.get_xticklabels()]
    assert "capacity (load 1) below the loads run" in [
        t.get_text() for t in figs[0].legends[0].get_texts()]  # type: ignore[attr-defined]
    assert layout_problems(figs[0]) == []
    # not a load sweep (x is the recorded-rate scale): no capacity to mark
    other = frame.rename(columns={"workload.load": "workload.rate_scale"})
    with saved_figures() as figs:
        metric_vs_load(other, "workload.rate_scale", [Metric(*m) for m in EVICTION_METRICS],
                       tmp_path / "e.png", ("scheduler",))
    assert not any(capacity_lines(ax) for ax in figs[0].axes)  # type: ignore[attr-defined]
    assert "capacity (load 1)" not in [
        t.get_text() for t in figs[0].legends[0].get_texts()]  # type: ignore[attr-defined]
