"""The study-specific figures of issue 30 item 7 (scripts/prefix_recovery_report.py,
policy_report.py, sensitivity_report.py), read off the drawn artists: a statistic from few
readmissions or victims is hollow and its n is written, every error bar has its series'
colour, series that coincide stand apart, each scheduler has a y scale its values show on,
the capacities per window are drawn beside the pooled one, and every figure keeps the
report's rules (fonts at the floor or above, text inside the figure and clear of other text
and of the panels' frames)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from conftest import load_script
from figure_checks import drawn_texts, layout_problems, legends, saved_figures
from matplotlib.collections import LineCollection
from matplotlib.colors import to_rgba
from matplotlib.lines import Line2D

from experiments.report.figures import HOLLOW_FACE, scheduler_color
from experiments.report.realizations import REALIZATION

LOAD = "workload.load"


def frame_problems(fig: Any) -> list[str]:
    """Each text drawn on a panel that crosses the panel's frame (e.g. a value label
    touching the top spine)."""
    renderer = fig.canvas.get_renderer()
    problems = []
    for text in drawn_texts(fig):
        ax = text.axes
        if ax is None or text in (ax.title, ax.xaxis.label, ax.yaxis.label):
            continue
        if any(text is t.label1 or text is t.label2 for axis in (ax.xaxis, ax.yaxis)
               for t in [*axis.get_major_ticks(), *axis.get_minor_ticks()]):
            continue
        box, frame = text.get_window_extent(renderer), ax.get_window_extent(renderer)
        inside_x = box.x0 >= frame.x0 - 1 and box.x1 <= frame.x1 + 1
        inside_y = box.y0 >= frame.y0 - 1 and box.y1 <= frame.y1 + 1
        outside = (box.x1 <= frame.x0 + 1 or box.x0 >= frame.x1 - 1
                   or box.y1 <= frame.y0 + 1 or box.y0 >= frame.y1 - 1)
        if not (inside_x and inside_y) and not outside:
            problems.append(f"{text.get_text()!r} crosses its panel's frame")
    return problems


def marker_faces(ax: Any, color: str) -> list[tuple[float, str]]:
    """(x, face) of every marker drawn in `color` (face 'hollow' or 'filled')."""
    out = []
    for line in ax.get_lines():
        if line.get_marker() in ("", "None", None, "_", "|") or not np.allclose(
                to_rgba(line.get_color()), to_rgba(color)):
            continue
        hollow = np.allclose(to_rgba(line.get_markerfacecolor()), to_rgba(HOLLOW_FACE))
        out += [(float(x), "hollow" if hollow else "filled") for x in line.get_xdata()]
    return out


def error_bar_colours(ax: Any) -> list[tuple[float, ...]]:
    """The colour of each error bar (a segment of a line collection) drawn on `ax`."""
    out: list[tuple[float, ...]] = []
    for coll in ax.collections:
        if isinstance(coll, LineCollection):
            colors = np.asarray(coll.get_colors(), dtype=float).reshape(-1, 4)
            segments = coll.get_segments()
            for i in range(len(segments)):
                out.append(tuple(np.round(colors[i % len(colors)], 6)))
    return out


# --- prefix recovery ----------------------------------------------------------------------

def recovery_inputs() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Jobs and readmissions of two settings: vLLM readmits 20 victims at load 1.5 (two
    windows: hollow), 60 at 2 (three windows); SGLang evicts nothing."""
    jobs, readm = [], []
    rng = np.random.default_rng(0)
    for setting in ("mooncake", "azure_conv"):
        for sched in ("vllm", "sglang"):
            for load in (1.0, 1.5, 2.0):
                for k in range(3):
                    count = {1.5: 10 if k < 2 else 0, 2.0: 20}.get(load, 0) \
                        if sched == "vllm" else 0
                    jobs.append({"setting": setting, "scheduler": sched, LOAD: load,
                                 REALIZATION: k, "status": "ok", "num_victims": count,
                                 "num_preemptions": count,
                                 "preempted_request_share": count / 300,
                                 "recomputed_token_share": count / 3000})
                    for _ in range(count):
                        computed = int(rng.integers(10, 500))
                        recovered = int(rng.integers(0, computed + 1))
                        readm.append({"setting": setting, "scheduler": sched, LOAD: load,
                                      REALIZATION: k, "computed": computed,
                                      "recovered": recovered,
                                      "recovered_share": recovered / computed})
    return pd.DataFrame(jobs), pd.DataFrame(readm)


def test_recovery_vs_load_marks_few_readmissions_hollow_with_n_and_cis(tmp_path: Path) -> None:
    report = load_script("prefix_recovery_report")
    jobs, readm = recovery_inputs()
    rec, rc = report.recovery_table(jobs, readm), report.recompute_table(jobs)
    with saved_figures() as figs:
        report.recovery_vs_load(rec, rc, readm, tmp_path / "r.png")
    (fig,) = figs
    assert layout_problems(fig) == [] and frame_problems(fig) == [] and legends(fig) == 1
    top = fig.axes[0]
    blue = scheduler_color("vllm")
    faces = marker_faces(top, blue)
    # two series (mean per readmission, token-weighted) at each load with a readmission
    assert sorted(f for x, f in faces if x < 1.75) == ["hollow", "hollow"]
    assert sorted(f for x, f in faces if x > 1.75) == ["filled", "filled"]
    texts = [t.get_text() for t in top.texts]
    assert "n=20" in texts and "60" in texts  # the first of a row "n=", then the number
    # both series have their CI, in the scheduler's colour: 2 loads x 2 series
    colours = error_bar_colours(top)
    assert len(colours) == 4 and all(np.allclose(c, to_rgba(blue)) for c in colours)
    legend = "\n".join(t.get_text() for t in fig.legends[0].get_texts())
    assert "hollow: n < 30 readmissions" in legend
    # the token-weighted share's CI: the table's ratio, a bootstrap interval around it
    tw = report.token_weighted_ci(readm)
    row = tw[(tw["setting"] == "mooncake") & (tw["load"] == 2.0)].iloc[0]
    table = rec[(rec["setting"] == "mooncake") & (rec["scheduler"] == "vllm")
                & (rec["load"] == 2.0)].iloc[0]
    assert row["token_weighted"] == pytest.approx(table["token_weighted"])
    assert row["token_weighted_ci_lo"] <= row["token_weighted"] <= row["token_weighted_ci_hi"]


def test_recovery_cdf_keeps_the_report_rules(tmp_path: Path) -> None:
    report = load_script("prefix_recovery_report")
    jobs, readm = recovery_inputs()
    with saved_figures() as figs:
        report.recovery_cdf(readm, jobs, tmp_path / "c.png")
    (fig,) = figs
    assert layout_problems(fig) == []
    entries = [t.get_text() for ax in fig.axes for t in ax.get_legend().get_texts()]
    assert "vLLM 1.5x: n=20 (< 30), 2 windows" in entries


# --- victim policies ----------------------------------------------------------------------

def a10_runs() -> pd.DataFrame:
    """The a10 setting's shape: vLLM evicts hundreds of times a run, SGLang a few; the p99
    latency the same under recompute and swap (series that coincide)."""
    report = load_script("policy_report")
    rng = np.random.default_rng(1)
    rows = []
    for s in ("vllm", "sglang"):
        for m in report.MODES:
            for load in (1.25, 1.5):
                for p in report.POLICIES:
                    for k in range(3):
                        evictions = rng.uniform(100, 300) if s == "vllm" else rng.uniform(2, 16)
                        rows.append({"scheduler": s, "mode": m, "load": load, "policy": p,
                                     "realization": k, "status": "ok",
                                     "num_preemptions": evictions, "num_victims": evictions,
                                     "p99_e2el_ms": 5e4 + 1e3 * k,
                                     "slo_attainment": 0.5 + 0.01 * k, "request_goodput": 2.0,
                                     "recomputed_token_share": 0.01,
                                     "swap_time_share": 0.01 if m == "swap" else 0.0})
    return pd.DataFrame(rows)


def test_each_scheduler_has_its_own_y_scale(tmp_path: Path) -> None:
    report = load_script("policy_report")
    runs = a10_runs()
    with saved_figures() as figs:
        report.policy_figure(report.policy_stats(runs), tmp_path / "p.png")
        report.versus_figure(report.versus_default(runs), tmp_path / "v.png")
    for fig in figs:
        assert layout_problems(fig) == [] and legends(fig) == 1
    # the evictions: first row of policies.png, last row of vs_default.png (4 columns:
    # vLLM recompute, swap, SGLang recompute, swap)
    for row in (figs[0].axes[:4], figs[1].axes[8:12]):
        assert row[0].get_ylim() == row[1].get_ylim()
        assert row[2].get_ylim() == row[3].get_ylim()
        assert np.ptp(row[2].get_ylim()) < np.ptp(row[0].get_ylim()) / 5


def test_swap_figure_series_stand_apart_with_coloured_error_bars(tmp_path: Path) -> None:
    report = load_script("policy_report")
    with saved_figures() as figs:
        report.swap_figure(report.policy_stats(a10_runs()), tmp_path / "s.png")
    (fig,) = figs
    assert layout_problems(fig) == [] and legends(fig) == 1
    assert "\n" not in fig._suptitle.get_text()
    for ax in fig.axes:
        points = [ln for ln in ax.get_lines() if ln.get_marker() in ("o", "s")]
        # points and error bars, no connecting lines (a categorical axis)
        assert points and all(ln.get_linestyle() in ("None", "") for ln in points)
        xs = [round(float(x), 6) for ln in points for x in ln.get_xdata()]
        assert len(xs) == len(set(xs)), "two series at the same place"
        series = {tuple(np.round(to_rgba(ln.get_color()), 6)) for ln in points}
        assert error_bar_colours(ax) and set(error_bar_colours(ax)) <= series
    # top: 2 loads x 2 modes a policy, each in its own place
    assert len({round(float(x), 6) for ln in fig.axes[0].get_lines()
                if ln.get_marker() in ("o", "s") for x in ln.get_xdata()}) \
        == 4 * len(report.POLICIES)


def test_policy_bars_have_error_bars_in_their_colour(tmp_path: Path) -> None:
    report = load_script("policy_report")
    with saved_figures() as figs:
        report.policy_figure(report.policy_stats(a10_runs()), tmp_path / "p.png")
    ax = figs[0].axes[0]
    bars = {tuple(np.round(p.get_facecolor(), 6)) for p in ax.patches}
    colours = error_bar_colours(ax)
    assert colours
    for colour in colours:
        # a darker shade of one of the bars' colours (not black, not grey)
        assert any(np.allclose(colour[:3], np.array(b[:3]) * (1 - 0.45), atol=1e-3)
                   for b in bars)


# --- sensitivity --------------------------------------------------------------------------

def sensitivity_settings() -> list[tuple[Any, pd.DataFrame, dict[str, Any]]]:
    """Two settings: vLLM evicts past capacity (at 0.75 one victim: hollow), SGLang never;
    capacities pooled and per window."""
    report = load_script("sensitivity_report")
    out = []
    for k, setting in enumerate(report.SETTINGS[:2]):
        rows = []
        for sched in ("vllm", "sglang"):
            for load in (0.75, 1.0, 1.5):
                for w in range(3):
                    evicts = sched == "vllm" and load > 0.75
                    victims = 10 + w if evicts else (1 if sched == "vllm" and w == 0 else 0)
                    rows.append({"scheduler": sched, LOAD: load, REALIZATION: w,
                                 "status": "ok",
                                 "preemptions_per_1k_requests": 20.0 * victims,
                                 "preempted_request_share": victims / 300,
                                 "recomputed_token_share": victims / 1000,
                                 "num_victims": victims,
                                 "victim_e2el_median_ratio": 1.2 + 0.1 * w if victims
                                 else np.nan,
                                 "matched_victim_ratio": np.nan, "matched_victims": 0,
                                 "slo_attainment": 0.9})
        agg = report.aggregate(pd.DataFrame(rows), ["scheduler", LOAD, REALIZATION],
                               [m for m, _ in report.STATISTICS
                                if m not in report.FROM_AGGREGATED])
        agg.insert(0, "setting", setting.folder)
        cap = {"config": {"workload": {"max_requests": 300}}, "schedulers": {
            s: {"capacity": c, "capacity_request_rate": 5 * c, "bracket": [c, c * 1.02],
                "probes": [{}], "per_realization": {
                    str(w): {"capacity": c * (1 + 0.2 * w),
                             "capacity_request_rate": 5 * c * (1 + 0.2 * w)}
                    for w in range(3)}}
            for s, c in (("vllm", 1.0 + k), ("sglang", 0.9 + k))}}
        out.append((setting, agg, json.loads(json.dumps(cap))))
    return out


def test_sensitivity_figure_hollow_few_victims_and_no_empty_panels(tmp_path: Path) -> None:
    report = load_script("sensitivity_report")
    with saved_figures() as figs:
        report.sensitivity_figure(sensitivity_settings(), tmp_path / "s.png")
    (fig,) = figs
    assert layout_problems(fig) == [] and frame_problems(fig) == [] and legends(fig) == 1
    shown = [ax for ax in fig.axes if ax.get_visible()]
    # SGLang never evicts: no panels of it, said in the legend
    assert len(shown) == 4 and all(ax.get_title().startswith("vLLM") for ax in shown)
    legend = fig.legends[0]
    assert "SGLang: no eviction" in legend.get_title().get_text()
    ratio = next(ax for ax in shown if "median E2E" in ax.get_title())
    faces = [f for ln in ratio.get_lines() if ln.get_marker() not in ("", "None")
             for f in (["hollow"] if np.allclose(to_rgba(ln.get_markerfacecolor()),
                                                 to_rgba(HOLLOW_FACE)) else ["filled"])
             * len(ln.get_xdata())]
    assert faces.count("hollow") == 2  # load 0.75 in each setting: one victim
    assert [t.get_text() for t in ratio.texts].count("n=1") == 2
    texts = [t.get_text() for t in legend.get_texts()]
    assert "hollow: n < 30 victims" in texts


def test_capacity_figure_draws_every_window_beside_the_pooled_value(tmp_path: Path) -> None:
    report = load_script("sensitivity_report")
    settings = sensitivity_settings()
    with saved_figures() as figs:
        report.capacity_figure(settings, tmp_path / "c.png")
    (fig,) = figs
    assert layout_problems(fig) == [] and frame_problems(fig) == [] and legends(fig) == 1
    (ax,) = fig.axes
    windows = [x for ln in ax.get_lines() if ln.get_marker() == "o" and ln.get_markersize() < 4
               for x in ln.get_xdata()]
    assert len(windows) == 2 * 2 * 3  # settings x schedulers x windows
    values = {t.get_text() for t in ax.texts}
    assert {"5.00", "4.50", "10.00", "9.50"} <= values
    # a search without windows: the pooled values alone
    for _s, _agg, cap in settings:
        for entry in cap["schedulers"].values():
            entry.pop("per_realization")
    with saved_figures() as figs:
        report.capacity_figure(settings, tmp_path / "c2.png")
    assert layout_problems(figs[0]) == []
    assert not [ln for ln in figs[0].axes[0].get_lines() if ln.get_marker() == "o"
                and ln.get_markersize() < 4]


def test_marker_face_helper_tells_hollow_from_filled() -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([1.0], [1.0], marker="o", color="C0", mfc=HOLLOW_FACE, ls="")
    ax.add_line(Line2D([2.0], [1.0], marker="o", color="C0", ls=""))
    assert marker_faces(ax, "C0") == [(1.0, "hollow"), (2.0, "filled")]
    plt.close(fig)


def capacity_lines(fig: Any) -> int:
    """How many vertical lines at load 1 (the capacity mark) the figure's panels hold."""
    return sum(1 for ax in fig.axes for ln in ax.get_lines()
               if list(ln.get_xdata()) == [1.0, 1.0] and ln.get_linestyle() != "None")


def test_load_one_is_marked_only_inside_the_loads_run(tmp_path: Path) -> None:
    """As figures.mark_capacity: a sweep wholly above load 1 gets no line at the panel's
    edge, its legend saying where capacity lies; a sweep through load 1 gets the line."""
    recovery = load_script("prefix_recovery_report")
    jobs, readm = recovery_inputs()
    above = (jobs[LOAD] > 1.2, readm[LOAD] > 1.2)
    for kept, where in (((jobs, readm), ""), ((jobs[above[0]], readm[above[1]]), "below")):
        j, r = kept
        with saved_figures() as figs:
            recovery.recovery_vs_load(recovery.recovery_table(j, r),
                                      recovery.recompute_table(j), r, tmp_path / "r.png")
        (fig,) = figs
        legend = [t.get_text() for t in fig.legends[0].get_texts()]
        if where:
            assert capacity_lines(fig) == 0 and "capacity (load 1) below the loads run" in legend
        else:
            assert capacity_lines(fig) == 4 and "capacity (load 1)" in legend
    sensitivity = load_script("sensitivity_report")
    settings = [(s, agg[agg[LOAD] > 1.2], cap) for s, agg, cap in sensitivity_settings()]
    with saved_figures() as figs:
        sensitivity.sensitivity_figure(settings, tmp_path / "s.png")
    (fig,) = figs
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert capacity_lines(fig) == 0 and "capacity (load 1) below the loads run" in legend
