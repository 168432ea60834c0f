"""Every report across realisations (issue 28 items 2, 5, 6): the bootstrap against an
analytic answer, the ratio of means with its CI by hand, `experiments.report A B` per config,
the W&B sweep run's aggregated tables read back, and the figures' rules (error bars, hollow
markers under 30 victims, no text under 7 pt, at most four curves per CDF panel)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from conftest import compose_config
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.colors import to_rgba
from matplotlib.text import Text

from experiments.report import figures
from experiments.report.charts import sweep_charts
from experiments.report.compare import compare_realizations, ratio_column, write_comparison
from experiments.report.figures import (
    FONT_FLOOR_PT,
    HOLLOW_FACE,
    JobSeries,
    Metric,
    kv_use_over_time,
    latency_cdfs,
    metric_vs_load,
    victims_vs_others,
)
from experiments.report.realizations import bootstrap_ci, curve_band, ratio_ci
from experiments.results.timeseries import bin_steps

R = "workload.realization"


# --- the statistics ---------------------------------------------------------------------------

def test_bootstrap_ci_of_a_large_sample_is_the_normal_interval() -> None:
    # the mean of n draws has standard error s / sqrt(n); for n = 400 the percentile
    # bootstrap interval is the normal one, mean +- 1.96 s / sqrt(n), within a few percent
    x = np.random.default_rng(11).normal(10.0, 2.0, size=400)
    lo, hi = bootstrap_ci(x)
    half = 1.959964 * x.std(ddof=0) / math.sqrt(x.size)
    assert math.isclose((hi - lo) / 2, half, rel_tol=0.05)
    assert math.isclose((hi + lo) / 2, x.mean(), abs_tol=0.05 * half)


def test_ratio_of_means_ci_by_hand_paired_and_not() -> None:
    a, b = [1.0, 3.0], [3.0, 5.0]
    # paired: resampling realisations gives (0,0) -> 3/1, (1,1) -> 5/3, mixed -> 8/4, each
    # extreme with probability 1/4 > 2.5 %: the interval is [5/3, 3]
    ratio, lo, hi = ratio_ci(a, b, paired=True)
    assert ratio == 2.0
    assert math.isclose(lo, 5 / 3, rel_tol=1e-12) and hi == 3.0
    # unpaired: A's means {1, 2, 3} and B's {3, 4, 5} independently: 3/3 to 5/1
    ratio, lo, hi = ratio_ci(a, b, paired=False)
    assert (ratio, lo, hi) == (2.0, 1.0, 5.0)
    # too few values: the ratio without an interval; a zero mean: no ratio
    assert ratio_ci([2.0], [3.0], paired=True)[0] == 1.5
    assert math.isnan(ratio_ci([2.0], [3.0], paired=True)[1])
    assert all(math.isnan(v) for v in ratio_ci([0.0, 0.0], [1.0, 2.0], paired=True))
    with pytest.raises(ValueError, match="paired sides differ"):
        ratio_ci([1.0, 2.0], [1.0], paired=True)


def test_curve_band_of_identical_curves_is_the_curve_and_spans_two() -> None:
    mean, lo, hi = curve_band(np.array([[0.0, 0.5, 1.0], [0.0, 0.5, 1.0]]))
    assert mean.tolist() == lo.tolist() == hi.tolist() == [0.0, 0.5, 1.0]
    mean, lo, hi = curve_band(np.array([[0.0, 0.2, 1.0], [0.0, 0.6, 1.0]]))
    assert mean[1] == pytest.approx(0.4) and lo[1] == pytest.approx(0.2)
    assert hi[1] == pytest.approx(0.6)


# --- compare A vs B per config ----------------------------------------------------------------

def side(values: dict[str, list[float]], victims: list[int]) -> pd.DataFrame:
    """Two configs (vllm at rates 1 and 2), two realisations each."""
    return pd.DataFrame({
        "scheduler": ["vllm"] * 4, "workload.request_rate": [1, 1, 2, 2], R: [0, 1, 0, 1],
        "status": ["ok"] * 4, "num_victims": victims, **values})


def test_compare_realizations_by_hand() -> None:
    a = side({"median_e2el_ms": [1.0, 3.0, 10.0, 10.0],
              "median_e2el_victim_ms": [2.0, 4.0, math.nan, 6.0]}, [10, 12, 0, 40])
    b = side({"median_e2el_ms": [3.0, 5.0, 30.0, 10.0],
              "median_e2el_victim_ms": [4.0, 4.0, 6.0, 6.0]}, [5, 5, 20, 20])
    b.loc[3, R] = 2  # B's rate-2 config ran realisations 0 and 2: not paired
    extra = side({"median_e2el_ms": [1.0] * 4, "median_e2el_victim_ms": [1.0] * 4}, [1] * 4)
    extra["scheduler"] = "sglang"
    b = pd.concat([b, extra], ignore_index=True)
    pairing = compare_realizations(a, b, ["workload.request_rate", R], ("A", "B"),
                                   metrics=("median_e2el_ms", "median_e2el_victim_ms"))
    assert pairing.only_b == ["sglang 1", "sglang 2"] and not pairing.only_a
    t = pairing.table.set_index("workload.request_rate")
    one, two = t.loc[1], t.loc[2]
    assert bool(one["paired"]) and not bool(two["paired"])
    assert one["realizations [A]"] == 2
    e2el = ratio_column("median_e2el_ms", ("A", "B"))
    # rate 1: A 1, 3 (mean 2, CI [1, 3]); B 3, 5 (mean 4); paired ratio 2 in [5/3, 3]
    assert (one["median_e2el_ms [A]"], one["median_e2el_ms [A] ci_lo"],
            one["median_e2el_ms [A] ci_hi"]) == (2.0, 1.0, 3.0)
    assert one["median_e2el_ms [B]"] == 4.0
    assert one[e2el] == 2.0 and one[f"{e2el} ci_hi"] == 3.0
    assert one[f"{e2el} ci_lo"] == pytest.approx(5 / 3, rel=1e-12)
    # rate 2: A 10, 10 and B 30, 10 resampled apart: means 10 and {10, 20, 30}
    assert two[e2el] == 2.0 and (two[f"{e2el} ci_lo"], two[f"{e2el} ci_hi"]) == (1.0, 3.0)
    # victims: summed over the realisations whose statistic exists
    assert one["median_e2el_victim_ms [A] n"] == 22
    assert two["median_e2el_victim_ms [A] n"] == 40  # realisation 0 had none
    assert two["median_e2el_victim_ms [A]"] == 6.0
    assert "median_e2el_ms [A] n" not in t.columns  # not a victim statistic


# --- real sweeps: compare, W&B ----------------------------------------------------------------

# Settings these tests need, whatever the defaults: the simulator on a fixed model, hardware
# and KV pool small enough that vLLM evicts.
SETTINGS = ["executor=sim", "model=llama3_8b", "hardware=h200", "executor.cost_model=roofline",
            "workload=synthetic",
            "workload.num_requests=40", "workload.request_rate=50",
            "workload.prompt_len.mean=200", "workload.output_len.mean=40", "progress=off"]


def make_sweep(root: Path, kv: int) -> Path:
    from experiments.run.main import run_experiment

    num = 0
    for sched in ("vllm", "sglang"):
        for k in range(2):
            overrides = [f"scheduler={sched}", f"{R}={k}"]
            run_experiment(compose_config([*overrides, *SETTINGS, f"kv_capacity_tokens={kv}"]),
                           root / str(num), overrides=overrides)
            num += 1
    return root


@pytest.fixture(scope="module")
def two_sweeps(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("agg")
    return make_sweep(root / "a", 2048), make_sweep(root / "b", 4096)


def test_report_a_b_compares_configs_with_cis(two_sweeps: tuple[Path, Path],
                                              tmp_path: Path) -> None:
    a, b = two_sweeps
    paths = write_comparison(a, b, tmp_path, ("small", "large"), figures=False)
    table = pd.read_csv(paths["compare.csv"])
    assert sorted(table["scheduler"]) == ["sglang", "vllm"]  # a row per config, not per job
    assert set(table["realizations [small]"]) == {2} and table["paired"].all()
    col = ratio_column("median_e2el_ms", ("small", "large"))
    assert {col, f"{col} ci_lo", f"{col} ci_hi", "median_e2el_victim_ms [small] n"} \
        <= set(table.columns)
    md = paths["compare.md"].read_text()
    assert "paired by realisation" in md and "percentile bootstrap over realisations" in md
    assert " n=" in md


def test_wandb_sweep_run_holds_configs_with_ci_columns(two_sweeps: tuple[Path, Path]
                                                       ) -> None:
    import wandb

    from experiments.run.wandb_log import WandbOptions, log_sweep_dir, read_offline_run

    sweep = two_sweeps[0]
    run_dir = log_sweep_dir(sweep, WandbOptions(dir=str(sweep / "wandb_test")), "g", "s",
                            {"name": "t"})
    assert run_dir is not None
    wandb.teardown()
    run = read_offline_run(run_dir)
    columns, data = run.table("tables/aggregated")
    assert len(data) == 2  # one row per scheduler: its two realisations together
    assert {"scheduler", "n_realizations", "median_e2el_ms", "median_e2el_ms_ci_lo",
            "median_e2el_ms_ci_hi", "median_e2el_victim_ms_n"} <= set(columns)
    columns, data = run.table("tables/side_by_side")
    assert "vllm (x2)" in columns
    cells = [c for row in data for c in row if isinstance(c, str)]
    assert any(" n=" in c for c in cells) and any("[" in c for c in cells)
    chart = next(k for k in run.charts if "victim_e2el" in k)
    columns, data = run.table(f"{chart}_table")
    assert {"median E2E latency (ms) CI low", "median E2E latency (ms) CI high",
            "realisations", "n victims", "few victims"} <= set(columns)
    assert all(r[columns.index("realisations")] == 2 for r in data)


def test_charts_of_a_sweep_with_realizations_are_means_with_cis() -> None:
    frame = side({"num_preemptions": [1.0, 3.0, 10.0, 20.0],
                  "median_e2el_victim_ms": [2.0, 4.0, 6.0, 8.0]}, [10, 12, 20, 40])
    frame["job"] = range(4)
    charts = {c.key: c for c in sweep_charts(frame, ["workload.request_rate", R],
                                              "workload.request_rate")}
    ev = charts["charts/evictions_vs_request_rate"].table
    assert ev["evictions"].tolist() == [2.0, 15.0]
    assert ev["evictions CI low"].tolist() == [1.0, 10.0]
    assert ev["evictions CI high"].tolist() == [3.0, 20.0]
    vic = charts["charts/victim_e2el_vs_request_rate"].table
    assert vic["n victims"].tolist() == [22, 60]
    assert vic["few victims"].tolist() == [True, False]


# --- figures ----------------------------------------------------------------------------------

@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """The figures the functions draw, kept open instead of written."""
    kept: list[Any] = []

    def keep(fig: Any, path: str | Path, pdf: bool = True) -> Path:
        fig.canvas.draw()  # lay it out as saving would
        kept.append(fig)
        return Path(path)

    monkeypatch.setattr(figures, "_save", keep)
    yield kept
    for fig in kept:
        plt.close(fig)


def aggregated_rows() -> pd.DataFrame:
    """Two schedulers at two rates, across three realisations (as `aggregate` writes)."""
    return pd.DataFrame({
        "scheduler": ["vllm", "vllm", "sglang", "sglang"], "workload.request_rate": [1, 2] * 2,
        "n_realizations": [3] * 4,
        "median_e2el_victim_ms": [1000.0, 2000.0, 1500.0, 2500.0],
        "median_e2el_victim_ms_ci_lo": [900.0, 1800.0, 1400.0, 2000.0],
        "median_e2el_victim_ms_ci_hi": [1100.0, 2300.0, 1600.0, 3000.0],
        "median_e2el_victim_ms_n": [12, 90, 29, 30],
        "median_e2el_nonvictim_ms": [800.0, 900.0, 850.0, 950.0],
        "p99_e2el_victim_ms": [3000.0] * 4, "p99_e2el_nonvictim_ms": [2000.0] * 4,
        "p99_e2el_victim_ms_n": [12, 90, 29, 30],
    })


def markers(ax: Any) -> list[tuple[float, float, tuple[float, float, float, float]]]:
    """(x, y, face colour) of every marker drawn on `ax`."""
    out = []
    for line in ax.get_lines():
        if line.get_marker() in ("", "None", None):
            continue
        face = to_rgba(line.get_markerfacecolor())
        out += [(float(x), float(y), face) for x, y in zip(*line.get_data(), strict=True)]
    return out


def test_statistics_from_fewer_than_30_victims_are_hollow(drawn: list[Any]) -> None:
    metric_vs_load(aggregated_rows(), "workload.request_rate",
                   [Metric("median_e2el_victim_ms", "victims' median (s)", 1e-3)],
                   "x.png")
    ax = drawn[0].axes[0]
    face = {round(y, 3): f for _, y, f in markers(ax)}
    white = to_rgba(HOLLOW_FACE)
    assert face[1.0] == white and face[1.5] == white      # 12 and 29 victims
    assert face[2.0] != white and face[2.5] != white      # 90 and 30 victims
    legend = [t.get_text() for t in drawn[0].legends[0].get_texts()]
    assert "hollow: n < 30 victims" in legend


def test_realisations_draw_error_bars_from_the_ci(drawn: list[Any]) -> None:
    victims_vs_others(aggregated_rows(), "workload.request_rate", "x.png")
    ax = drawn[0].axes[0]  # median
    spans = sorted((round(min(s[:, 1]), 6), round(max(s[:, 1]), 6))
                   for c in ax.collections if isinstance(c, LineCollection)
                   for s in c.get_segments())
    assert (1.8, 2.3) in spans and (2.0, 3.0) in spans  # seconds: the CI bounds
    legend = " ".join(t.get_text() for t in drawn[0].legends[0].get_texts())
    assert "mean of 3 realisations, bar: 95% CI" in legend


def test_categorical_axes_have_no_connecting_lines(drawn: list[Any]) -> None:
    frame = pd.DataFrame({"scheduler": ["vllm", "sglang"], "scheduler.victim_policy": ["a", "b"],
                          "num_preemptions": [3.0, 4.0]})
    metric_vs_load(frame, "scheduler.victim_policy", [Metric("num_preemptions", "evictions")],
                   "x.png")
    lines = [ln for ln in drawn[0].axes[0].get_lines() if len(ln.get_xdata()) > 0]
    assert lines and all(ln.get_linestyle() in ("None", "") for ln in lines)


def job_series(sched: str, rate: float, runs: int = 1) -> JobSeries:
    rng = np.random.default_rng(int(rate * 10))
    steps = pd.DataFrame({"start_time": [0.0, 1.0], "duration_s": [1.0, 1.0],
                          "kv_used_tokens": [100, 200], "num_preempted": [0, 0]})
    import pyarrow as pa

    kv = bin_steps(pa.Table.from_pandas(steps), 2)
    parts = [JobSeries(sched, f"request rate (req/s): {rate:g}", rng.lognormal(size=50),
                       rng.lognormal(size=50), kv, 1000, shade=rate / 8) for _ in range(runs)]
    return parts[0] if runs == 1 else JobSeries.pooled(parts)


def test_no_text_under_the_font_floor(drawn: list[Any]) -> None:
    frame = aggregated_rows()
    metric_vs_load(frame, "workload.request_rate",
                   [Metric("median_e2el_victim_ms", "victims (s)", 1e-3),
                    Metric("median_e2el_nonvictim_ms", "others (s)", 1e-3)], "x.png",
                   title="A long title that has to wrap to the width of the figure " * 3)
    victims_vs_others(frame, "workload.request_rate", "x.png")
    jobs = [job_series(s, r, 3) for s in ("vllm", "sglang") for r in (1, 2, 4, 8)]
    latency_cdfs(jobs, "x.png", shade_note="light to dark: load")
    kv_use_over_time([job_series("vllm", 1)], "x.png")
    assert len(drawn) == 4
    for fig in drawn:
        texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
        assert texts
        small = [(t.get_text(), t.get_fontsize()) for t in texts
                 if t.get_fontsize() < FONT_FLOOR_PT]
        assert not small, small
        # the title wrapped within the figure's width
        for t in texts:
            if t.get_text() == fig.get_suptitle():
                ext = t.get_window_extent(fig.canvas.get_renderer())
                assert ext.x0 >= -1 and ext.x1 <= fig.bbox.x1 + 1, t.get_text()


def test_cdf_panels_hold_at_most_four_curves_with_bands(drawn: list[Any]) -> None:
    jobs = [job_series(s, r, 3) for s in ("vllm", "sglang") for r in (1, 2, 4, 8, 16)]
    latency_cdfs(jobs, "x.png", shade_note="light to dark: load")
    fig = drawn[0]
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 4  # a row per scheduler, TTFT and E2E
    for ax in axes:
        curves = [ln for ln in ax.get_lines() if len(ln.get_xdata()) > 1]
        assert 1 <= len(curves) <= 4
        assert len({ln.get_linestyle() for ln in curves}) == len(curves)  # apart in grey
        assert any(isinstance(c, PolyCollection) for c in ax.collections)  # the band
    assert len(fig.legends) == 1


def test_by_scheduler_across_realizations_is_one_row_per_setting() -> None:
    from experiments.report.realizations import aggregate
    from experiments.report.tables import aggregated_pivot

    frame = side({"median_e2el_victim_ms": [2.0, 4.0, 6.0, 8.0]}, [10, 12, 20, 40])
    other = frame.assign(scheduler="sglang", median_e2el_victim_ms=[1.0, 1.0, 1.0, 1.0])
    both = pd.concat([frame, other], ignore_index=True)
    params = ["scheduler", "workload.request_rate", R]
    pivots = aggregated_pivot(aggregate(both, params, ["median_e2el_victim_ms"]), params,
                              ["median_e2el_victim_ms"])
    assert pivots is not None
    numbers, text = pivots
    assert numbers["workload.request_rate"].tolist() == [1, 2]
    assert numbers["median_e2el_victim_ms[vllm]"].tolist() == [3.0, 7.0]
    assert numbers["median_e2el_victim_ms_n[vllm]"].tolist() == [22, 60]
    assert text["median_e2el_victim_ms[vllm]"].tolist() == ["3.0 [2.0, 4.0] n=22*",
                                                            "7.0 [6.0, 8.0] n=60"]


def test_a_sweep_report_with_realizations_draws_configs(two_sweeps: tuple[Path, Path],
                                                        tmp_path: Path,
                                                        drawn: list[Any]) -> None:
    from experiments.report.tables import (
        comparison_frame,
        load_sweep,
        varied_params,
        with_fair_columns,
        write_figures,
    )
    from experiments.report.victims import fair_comparisons

    jobs = load_sweep(two_sweeps[0])
    params = varied_params(jobs)
    frame = with_fair_columns(comparison_frame(jobs, params), fair_comparisons(jobs, params)[0])
    paths = write_figures(jobs, frame, params, tmp_path)
    assert set(paths) == {"latency_cdf_ttft_e2el", "evictions_by_scheduler",
                          "victim_e2el_by_scheduler", "kv_use_vs_time"}
    # evictions, victims, CDFs: drawn per config (error bars / bands); KV use: one realisation
    cdfs, evictions, victims, kv = drawn
    assert any(isinstance(c, LineCollection) for ax in evictions.axes for c in ax.collections)
    assert any(isinstance(c, LineCollection) for ax in victims.axes for c in ax.collections)
    assert any(isinstance(c, PolyCollection) for ax in cdfs.axes for c in ax.collections)
    assert "realisation 0" in kv.get_suptitle()


def test_analysis_aggregated_is_a_row_per_config(two_sweeps: tuple[Path, Path]) -> None:
    from experiments.report.analysis import aggregated, load

    agg = aggregated(two_sweeps[0])
    jobs = load(two_sweeps[0], requests=False, steps=False).jobs
    assert sorted(agg["scheduler"]) == ["sglang", "vllm"] and set(agg["n_realizations"]) == {2}
    for sched, row in agg.set_index("scheduler").iterrows():
        runs = jobs[jobs["scheduler"] == sched]["median_e2el_ms"].astype(float)
        assert row["median_e2el_ms"] == pytest.approx(runs.mean(), rel=1e-12)
        assert (row["median_e2el_ms_ci_lo"], row["median_e2el_ms_ci_hi"]) == \
            (runs.min(), runs.max())  # two realisations: the interval spans them
    assert "median_e2el_victim_ms_n" in agg


def test_headline_across_realizations_is_per_config(two_sweeps: tuple[Path, Path],
                                                    tmp_path: Path) -> None:
    from experiments.report.tables import write_report

    paths = write_report(two_sweeps[0], tmp_path, figures=False,
                         columns=["median_e2el_victim_ms", "p99_ttft_ms"])
    md = paths["headline.md"].read_text()
    assert "| vllm (x2) | sglang (x2) |" in md and " n=" in md
    assert "percentile bootstrap over realisations" in md
    csv = pd.read_csv(paths["headline.csv"])
    assert len(csv) == 2 and "p99_ttft_ms_ci_lo" in csv
