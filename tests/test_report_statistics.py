"""The report's statistics against known answers (issue 28 items 2, 3, 6): the bootstrap CI,
the aggregation across realisations, the length-matching rule and the paired join."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from experiments.report.realizations import aggregate, bootstrap_ci, ci_cell
from experiments.report.victims import PARTS, job_stats, length_cell, matched_rows, paired_rows


def test_bootstrap_ci_is_the_percentile_interval_numpy_draws_with_the_same_seed() -> None:
    x = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    lo, hi = bootstrap_ci(x, resamples=2000, seed=3)
    # by hand: the same draws, the 2.5th and 97.5th percentiles of the resampled means
    idx = np.random.default_rng(3).integers(0, 5, size=(2000, 5))
    means = np.sort(x[idx].mean(axis=1))
    assert math.isclose(lo, float(np.quantile(means, 0.025)), rel_tol=1e-12)
    assert math.isclose(hi, float(np.quantile(means, 0.975)), rel_tol=1e-12)
    assert 1.0 <= lo < x.mean() < hi <= 16.0


def test_bootstrap_ci_of_a_constant_and_of_too_few_values() -> None:
    assert bootstrap_ci([5.0, 5.0, 5.0]) == (5.0, 5.0)
    assert all(math.isnan(v) for v in bootstrap_ci([5.0]))
    assert all(math.isnan(v) for v in bootstrap_ci([5.0, math.nan]))  # NaNs left out


def test_two_values_have_an_interval_between_them() -> None:
    # resampling two values gives means 1, 2 or 3 with probability 1/4, 1/2, 1/4: the 95 %
    # interval runs from the smallest to the largest
    assert bootstrap_ci([1.0, 3.0]) == (1.0, 3.0)


def test_aggregate_groups_realizations_and_sums_victims() -> None:
    frame = pd.DataFrame({
        "scheduler": ["a", "a", "a", "b", "b", "b"],
        "workload.realization": [0, 1, 2, 0, 1, 2],
        "status": ["ok"] * 6,
        "median_e2el_victim_ms": [10.0, 20.0, math.nan, 1.0, 1.0, 1.0],
        "num_victims": [4, 6, 0, 20, 20, 20],
    })
    agg = aggregate(frame, ["scheduler", "workload.realization"], ["median_e2el_victim_ms"])
    a = agg[agg["scheduler"] == "a"].iloc[0]
    assert a["n_realizations"] == 3
    assert a["median_e2el_victim_ms"] == 15.0  # the realisation without victims left out
    assert a["median_e2el_victim_ms_n"] == 10
    assert (a["median_e2el_victim_ms_ci_lo"], a["median_e2el_victim_ms_ci_hi"]) == (10.0, 20.0)
    b = agg[agg["scheduler"] == "b"].iloc[0]
    assert b["median_e2el_victim_ms_n"] == 60
    assert ci_cell("15.0", "10.0", "20.0", 10) == "15.0 [10.0, 20.0] n=10*"  # flagged
    assert ci_cell("1.0", "1.0", "1.0", 60) == "1.0 [1.0, 1.0] n=60"


def test_length_cells_are_log2_bins() -> None:
    cells = length_cell(pd.Series([1, 2, 3, 4, 100, 0]), pd.Series([7, 8, 15, 16, 1, 1]))
    assert cells.tolist() == ["0,2", "1,3", "1,3", "2,4", "6,0", "0,0"]


def test_matching_on_a_hand_made_table() -> None:
    df = pd.DataFrame({
        "request_id": ["v1", "n1", "n2", "n3", "v2", "n4"],
        "prompt_len": [100, 120, 70, 127, 1000, 20],
        "output_len": [10, 12, 9, 15, 10, 10],
        "victim": [True, False, False, False, True, False],
        "e2el_per_token_s": [4.0, 1.0, 9.0, 3.0, 5.0, 2.0],
    })
    # v1: prompt cell 6 (64..127), output cell 3 (8..15): non-victims n1, n2, n3 (median
    # 3.0) -> 4 / 3; v2: prompt cell 9, nothing to match -> NaN, unmatched
    out = matched_rows(df).set_index("request_id")
    assert out.loc["v1", "cell_nonvictims"] == 3
    assert out.loc["v1", "cell_nonvictim_per_token_s"] == 3.0
    assert math.isclose(out.loc["v1", "matched_ratio"], 4.0 / 3.0, rel_tol=1e-12)
    assert out.loc["v2", "cell_nonvictims"] == 0
    assert math.isnan(out.loc["v2", "matched_ratio"])


def test_breakdown_sets_victims_parts_against_the_others() -> None:
    """The E2E parts are averaged over victims and, separately, over the other requests."""
    parts = {f"{p}_s": [1.0, 3.0, 10.0, 20.0] for p in PARTS}
    parts["evicted_s"] = [2.0, 4.0, 0.0, 0.0]
    df = pd.DataFrame({"request_id": ["v1", "v2", "n1", "n2"], "prompt_len": [10] * 4,
                       "output_len": [10] * 4, "victim": [True, True, False, False],
                       "e2el_per_token_s": [1.0] * 4, **parts})
    stats = job_stats(df)
    assert stats["victim_queued_ms"] == 2000.0 and stats["nonvictim_queued_ms"] == 15000.0
    assert stats["victim_evicted_ms"] == 3000.0 and stats["nonvictim_evicted_ms"] == 0.0
    assert all(f"nonvictim_{p}_ms" in stats for p in PARTS)


def test_paired_join_on_request_id() -> None:
    a = pd.DataFrame({"request_id": ["r0", "r1", "r2"], "prompt_len": [1, 2, 3],
                      "output_len": [1, 2, 3], "e2el_s": [1.0, 2.0, 4.0],
                      "victim": [True, False, True]})
    b = pd.DataFrame({"request_id": ["r2", "r1", "r3"], "e2el_s": [2.0, 6.0, 1.0],
                      "victim": [True, True, False]})
    out = paired_rows(a, b, ("x", "y")).set_index("request_id")
    assert sorted(out.index) == ["r1", "r2"]  # completed by both only
    assert out.loc["r1", "e2el_ratio"] == 3.0 and out.loc["r1", "evicted_by"] == "y"
    assert out.loc["r2", "e2el_ratio"] == 0.5 and out.loc["r2", "evicted_by"] == "both"


@pytest.mark.parametrize("n", [0, 29])
def test_few_victims_are_flagged(n: int) -> None:
    assert ci_cell("1", "n/a", "n/a", n).endswith("*")


def test_a_sweep_with_realizations_reports_cis_victims_and_fair_rows(tmp_path) -> None:
    from pathlib import Path

    from experiments.report.tables import load_sweep, terminal_summary, write_report
    from experiments.run.config import compose_run_config
    from experiments.run.main import run_experiment

    root = Path(__file__).resolve().parents[1]
    num = 0
    for sched in ("vllm", "sglang"):
        for k in range(3):
            overrides = [f"scheduler={sched}", f"workload.realization={k}"]
            cfg = compose_run_config([
                *overrides, "workload.num_requests=60", "workload.request_rate=200",
                "kv_capacity_tokens=4096", "progress=off"], str(root / "conf"))
            run_experiment(cfg, tmp_path / str(num), overrides=overrides)
            num += 1
    text = terminal_summary(load_sweep(tmp_path))
    assert "vllm (x3)" in text and "sglang (x3)" in text
    assert "percentile bootstrap over realisations" in text
    assert "Victims' median E2EL (ms)" in text and " n=" in text
    paths = write_report(tmp_path, figures=False)
    for name in ("aggregated.csv", "victims_paired.csv", "victims_matched.csv"):
        assert name in paths, name
    agg = pd.read_csv(paths["aggregated.csv"])
    assert set(agg["n_realizations"]) == {3}
    assert {"median_e2el_ms_ci_lo", "median_e2el_ms_ci_hi", "median_e2el_victim_ms_n"} \
        <= set(agg.columns)
    paired = pd.read_csv(paths["victims_paired.csv"])
    assert set(paired["workload.realization"]) == {0, 1, 2}
    assert len(paired) == 3 * 60  # every request completed by both, paired per realisation
    comparison = pd.read_csv(paths["comparison.csv"])
    assert {"paired_victim_e2el_ratio", "matched_victim_ratio", "victim_evicted_ms",
            "num_victims"} <= set(comparison.columns)
