"""Figures: binning on simulated time (idle shows as idle), names, colours and labels; the
time axis named after the clock the run used."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from experiments.report import figures
from experiments.report.figures import (
    SCHEDULER_COLORS,
    JobSeries,
    Metric,
    figure_stem,
    job_clock,
    kv_use_over_time,
    latency_cdfs,
    metric_vs_load,
    param_label,
    scheduler_color,
    shades,
    victims_vs_others,
)
from experiments.results.timeseries import bin_steps


def steps_table(start: list[float], dur: list[float], kv: list[int],
                preempted: list[int] | None = None) -> pa.Table:
    return pa.table({"start_time": start, "duration_s": dur, "kv_used_tokens": kv,
                     "num_preempted": preempted or [0] * len(start)})


def test_bins_are_time_weighted_keep_the_max_and_leave_idle_time_empty() -> None:
    # busy 0-2 s, idle 2-8 s, busy 8-10 s: five 2-second bins
    steps = steps_table([0.0, 1.5, 8.0, 9.0], [1.5, 0.5, 1.0, 1.0], [100, 500, 40, 60],
                        [0, 2, 1, 0])
    b = bin_steps(steps, num_bins=5)
    assert b.edges.tolist() == pytest.approx([0, 2, 4, 6, 8, 10])
    mean = b.mean["kv_used_tokens"]
    assert mean[0] == pytest.approx((100 * 1.5 + 500 * 0.5) / 2.0)
    assert b.max["kv_used_tokens"][0] == 500
    assert all(math.isnan(v) for v in mean[1:4])  # idle: no value carried across the gap
    assert b.idle.tolist() == [False, True, True, True, False]
    assert mean[4] == pytest.approx(50.0)
    assert b.total["evictions"].tolist() == [2, 0, 0, 0, 1]


def test_bin_steps_of_no_steps_and_bad_bin_count() -> None:
    b = bin_steps(steps_table([], [], []), num_bins=10)
    assert len(b) == 1 and b.idle.all()
    with pytest.raises(ValueError, match="num_bins=0"):
        bin_steps(steps_table([0.0], [1.0], [1]), num_bins=0)


def test_one_colour_per_scheduler_shades_by_load_and_words_on_axes() -> None:
    assert scheduler_color("vllm") == SCHEDULER_COLORS["vllm"] != scheduler_color("sglang")
    assert scheduler_color("mine") == scheduler_color("mine")
    tone = shades(["4", "1", "2"])
    assert tone["1"] < tone["2"] < tone["4"] == 1.0
    assert param_label("workload.rate_scale") == "load (× recorded rate)"
    assert param_label("kv_capacity_tokens") == "KV pool (tokens)"
    assert param_label("scheduler.some_knob") == "some knob"
    assert figure_stem("evictions", "kv_capacity_tokens") == "evictions_vs_kv_pool"
    assert figure_stem("evictions", "workload.rate_scale") == "evictions_vs_load"
    assert figure_stem("victim_e2el", None) == "victim_e2el_by_scheduler"


def test_figures_with_missing_data_are_still_written(tmp_path: Path) -> None:
    empty = np.zeros(0)
    steps = steps_table([0.0, 5.0], [1.0, 1.0], [10, 20])
    jobs = [JobSeries("vllm", "", np.array([0.01, 0.2]), np.array([1.0, 3.0]),
                      bin_steps(steps, 10), 100),
            JobSeries("sglang", "", empty, empty, bin_steps(steps, 10), 100)]
    assert latency_cdfs(jobs, tmp_path / "cdf.png").with_suffix(".pdf").is_file()
    frame = pd.DataFrame({"scheduler": ["vllm", "sglang"], "kv_capacity_tokens": [1024, 1024],
                          "median_e2el_victim_ms": [900.0, float("nan")],
                          "p99_e2el_victim_ms": [1900.0, float("nan")],
                          "median_e2el_nonvictim_ms": [800.0, 700.0],
                          "p99_e2el_nonvictim_ms": [1000.0, 900.0],
                          "prefix_recovery_on_resume": [float("nan")] * 2})
    victims_vs_others(frame, "kv_capacity_tokens", tmp_path / "v.png")
    metric_vs_load(frame, "kv_capacity_tokens",
                   [Metric("prefix_recovery_on_resume", "prefix recovered (%)", 100.0)],
                   tmp_path / "m.png")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "cdf.pdf", "cdf.png", "m.pdf", "m.png", "v.pdf", "v.png"]


def test_a_long_step_keeps_the_bins_it_runs_through_busy() -> None:
    # a 5-second prefill from 0 s, then a short step at 8 s: bins of one second
    b = bin_steps(steps_table([0.0, 8.0], [5.0, 1.0], [100, 30]), num_bins=9)
    assert b.idle.tolist() == [False] * 5 + [True] * 3 + [False]
    assert b.mean["kv_used_tokens"][:5].tolist() == [100.0] * 5
    assert b.busy_share[:5].tolist() == pytest.approx([1.0] * 5)


def kv_figure_words(jobs: list[JobSeries], path: Path, monkeypatch: pytest.MonkeyPatch
                    ) -> tuple[set[str], str]:
    """The x-axis labels and the title of `kv_use_over_time`'s figure of `jobs`."""
    seen: list[tuple[set[str], str]] = []
    save = figures._save

    def capture(fig: object, target: Path, pdf: bool = True) -> Path:
        seen.append(({ax.get_xlabel() for ax in fig.axes},  # type: ignore[attr-defined]
                     fig.get_suptitle()))  # type: ignore[attr-defined]
        return save(fig, target, pdf)

    monkeypatch.setattr(figures, "_save", capture)
    kv_use_over_time(jobs, path, pdf=False)
    return seen[0]


def test_kv_use_over_time_names_the_clock_the_run_used(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 25: a real run's figure said "simulated time" on its axis
    steps = steps_table([0.0, 1.0], [1.0, 1.0], [10, 20])
    real_summary = {"executor": "real", "clock": "cpu", "scheduler": "vllm"}

    def job(sched: str, clock: str) -> JobSeries:
        return JobSeries(sched, "", np.array([0.1]), np.array([1.0]), bin_steps(steps, 4), 100,
                         clock=clock)

    axes, title = kv_figure_words([job("vllm", job_clock(real_summary)),
                                   job("sglang", "cpu")], tmp_path / "real.png", monkeypatch)
    assert axes == {"measured CPU time (s)"} and title == "KV pool use over measured CPU time"
    axes, _ = kv_figure_words([job("vllm", "wall")], tmp_path / "wall.png", monkeypatch)
    assert axes == {"measured wall-clock time (s)"}
    axes, title = kv_figure_words([job("vllm", "simulated")], tmp_path / "sim.png", monkeypatch)
    assert axes == {"simulated time (s)"} and "simulated" in title
    # summaries written before `clock`: the executor tells simulated from measured
    assert job_clock({"executor": "real"}) == "measured"
    assert job_clock({"executor": "sim"}) == job_clock({}) == "simulated"
