"""Run metrics on a hand-made record set with known answers."""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa
import pytest

from engines.records import REQUEST_SCHEMA, STEP_SCHEMA
from experiments.results.metrics import compute_metrics, itl_seconds, step_series

NAN = math.nan


def request(**kw: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "first_scheduled_time": NAN, "first_token_time": NAN, "finish_time": NAN,
        "finish_detail": "", "max_tokens": 8, "eos_output_len": 8, "output_len": 0,
        "num_preemptions": 0, "victim": False, "num_computed_tokens": 0,
        "num_recomputed_tokens": 0, "prefix_hit_tokens": [], "computed_at_preemption": [],
        "token_times": [],
    }
    row.update(kw)
    if row["token_times"]:
        row["first_token_time"] = row["token_times"][0]
        row["output_len"] = len(row["token_times"])
    return row


def step(i: int, prefill: int, decode: int, **kw: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "step": i, "start_time": 0.1 * i, "duration_s": 0.1, "num_scheduled_reqs": 2,
        "num_tokens": prefill + decode, "num_prefill_tokens": prefill,
        "num_decode_tokens": decode, "num_decode_reqs": decode, "num_preempted": 0,
        "num_aborted": 0, "num_finished": 0, "kv_used_tokens": 40, "kv_cached_tokens": 0,
        "num_running": 2, "num_waiting": 0, "forward_mode": "mixed",
    }
    row.update(kw)
    return row


REQUESTS = pa.Table.from_pylist([
    # r0: arrives at 0, tokens at 0.1, 0.2, 0.4; never preempted.
    request(request_id="r0", arrival_time=0.0, first_scheduled_time=0.0, finish_time=0.4,
            finish_reason="length", prompt_len=10, num_computed_tokens=12,
            prefix_hit_tokens=[0], token_times=[0.1, 0.2, 0.4]),
    # r1: arrives at 0.5, preempted once with 15 computed, readmitted with a 12-token hit.
    request(request_id="r1", arrival_time=0.5, first_scheduled_time=0.5, finish_time=0.8,
            finish_reason="stop", prompt_len=20, num_preemptions=1, victim=True,
            num_computed_tokens=24, num_recomputed_tokens=3, prefix_hit_tokens=[0, 12],
            computed_at_preemption=[15], token_times=[0.7, 0.8]),
    # r2: rejected on arrival at 1.0.
    request(request_id="r2", arrival_time=1.0, finish_time=1.0, finish_reason="rejected",
            finish_detail="too long", prompt_len=5000),
], schema=REQUEST_SCHEMA)

STEPS = pa.Table.from_pylist([step(0, 30, 0), step(1, 0, 2, kv_used_tokens=64),
                              step(2, 3, 1, num_running=3)], schema=STEP_SCHEMA)


def test_known_answers() -> None:
    m = compute_metrics(REQUESTS, STEPS)
    assert m["duration"] == 1.0  # first arrival 0 -> last finish 1.0
    assert (m["completed"], m["failed"], m["rejected"], m["aborted"]) == (2, 1, 1, 0)
    assert (m["total_input_tokens"], m["total_output_tokens"]) == (30, 5)
    assert m["request_throughput"] == 2.0
    assert m["output_throughput"] == 5.0
    assert m["total_token_throughput"] == 35.0
    # TTFT 0.1 and 0.2 s
    assert m["mean_ttft_ms"] == pytest.approx(150.0)
    assert m["median_ttft_ms"] == pytest.approx(150.0)
    assert m["p99_ttft_ms"] == pytest.approx(199.0)
    assert m["p90_ttft_ms"] == pytest.approx(190.0)
    # E2EL 0.4 and 0.3 s
    assert m["mean_e2el_ms"] == pytest.approx(350.0)
    # TPOT (0.4 - 0.1) / 2 = 0.15 and (0.3 - 0.2) / 1 = 0.1
    assert m["mean_tpot_ms"] == pytest.approx(125.0)
    # ITL: r0 0.1, 0.2; r1 0.1 (no gap across requests)
    assert m["mean_itl_ms"] == pytest.approx(400.0 / 3)
    assert m["median_itl_ms"] == pytest.approx(100.0)
    assert m["max_output_tokens_per_s"] == 5.0
    assert m["request_goodput"] is None


def test_preemption_and_cache_metrics() -> None:
    m = compute_metrics(REQUESTS, STEPS)
    assert m["num_preemptions"] == 1
    assert m["num_victims"] == 1
    assert m["preempted_request_share"] == 0.5  # of the 2 accepted requests
    assert m["preemptions_per_1k_requests"] == 500.0
    assert m["median_e2el_victim_ms"] == pytest.approx(300.0)
    assert m["median_e2el_nonvictim_ms"] == pytest.approx(400.0)
    assert m["victim_e2el_median_ratio"] == pytest.approx(0.75)
    assert m["recomputed_tokens"] == 3
    assert m["prefill_tokens"] == 33 and m["decode_tokens"] == 3
    assert m["recomputed_token_share"] == pytest.approx(3 / 33)
    assert m["prefix_cache_hit_tokens"] == 12
    assert m["prefix_cache_hit_rate"] == 0.0  # first admissions found nothing cached
    assert m["prefix_recovery_on_resume"] == pytest.approx(12 / 15)
    assert m["computed_tokens"] == 36
    assert (m["num_steps"], m["max_kv_used_tokens"], m["max_running_requests"]) == (3, 64, 3)


def test_goodput() -> None:
    assert compute_metrics(REQUESTS, STEPS, slo_ms={"ttft": 150})["request_goodput"] == 1.0
    both = compute_metrics(REQUESTS, STEPS, slo_ms={"ttft": 250, "tpot": 120})
    assert both["request_goodput"] == 1.0  # r0's TPOT is 150 ms
    with pytest.raises(ValueError, match=r"unknown key.*latency; valid: ttft, tpot, e2el"):
        compute_metrics(REQUESTS, STEPS, slo_ms={"latency": 1})


def test_itl_ignores_request_boundaries_and_empty_sets() -> None:
    assert itl_seconds(REQUESTS).tolist() == pytest.approx([0.1, 0.2, 0.1])
    empty = REQUESTS.slice(0, 0)
    m = compute_metrics(empty, STEPS.slice(0, 0))
    assert m["completed"] == 0 and m["num_steps"] == 0
    assert math.isnan(m["request_throughput"])
    # statistics over no sample are NaN (null in summary.json), never a measured-looking 0
    for key in ("mean_ttft_ms", "median_ttft_ms", "p99_tpot_ms", "median_itl_ms",
                "std_e2el_ms", "mean_batch_size", "mean_kv_used_tokens"):
        assert math.isnan(m[key]), key
    assert m["max_kv_used_tokens"] == 0  # a peak over no step is a count, 0


def test_restarts_recovery_cap_and_victim_ratios() -> None:
    reqs = pa.Table.from_pylist([
        request(request_id="a", arrival_time=0.0, finish_time=1.0, finish_reason="length",
                prompt_len=10, token_times=[0.5, 1.0]),
        # preempted twice: lost 30 then 40; readmitted with 25 then 60 cached (a shared
        # prefix returned more than it lost the second time: counted as 40)
        request(request_id="b", arrival_time=0.0, finish_time=3.0, finish_reason="stop",
                prompt_len=50, num_preemptions=2, victim=True, prefix_hit_tokens=[0, 25, 60],
                computed_at_preemption=[30, 40], token_times=[2.0, 3.0]),
        request(request_id="c", arrival_time=0.0, finish_time=2.0, finish_reason="stop",
                prompt_len=10, num_preemptions=1, victim=True, prefix_hit_tokens=[0, 0],
                computed_at_preemption=[10], token_times=[1.5, 2.0]),
    ], schema=REQUEST_SCHEMA)
    m = compute_metrics(reqs, STEPS)
    assert m["restarts_histogram"] == {"0": 1, "1": 1, "2": 1}
    assert m["max_restarts_per_request"] == 2
    assert m["computed_tokens_at_preemption"] == 80
    assert m["prefix_cache_hit_tokens_on_resume"] == 85  # uncapped
    assert m["prefix_recovery_on_resume"] == pytest.approx((25 + 40 + 0) / 80)
    # victims' E2EL 3.0 and 2.0 s against 1.0 s
    assert m["median_e2el_victim_ms"] == pytest.approx(2500.0)
    assert m["victim_e2el_median_ratio"] == pytest.approx(2.5)
    assert m["p99_e2el_victim_ms"] == pytest.approx(2990.0)
    assert m["victim_e2el_p99_ratio"] == pytest.approx(2.99)


def test_occupancy_is_weighted_by_step_time() -> None:
    steps = pa.Table.from_pylist([
        step(0, 30, 0, duration_s=0.1, kv_used_tokens=100, num_scheduled_reqs=1),
        step(1, 0, 2, duration_s=0.3, kv_used_tokens=200, num_scheduled_reqs=3),
    ], schema=STEP_SCHEMA)
    m = compute_metrics(REQUESTS, steps, kv_capacity_tokens=400)
    assert m["mean_kv_used_tokens"] == pytest.approx((100 * 0.1 + 200 * 0.3) / 0.4)
    assert m["mean_kv_utilization"] == pytest.approx(175 / 400)
    assert m["max_kv_utilization"] == 0.5
    assert m["mean_batch_size"] == pytest.approx((1 * 0.1 + 3 * 0.3) / 0.4)
    assert (m["max_batch_size"], m["mean_scheduled_reqs_per_step"]) == (3, 2.0)
    assert compute_metrics(REQUESTS, steps)["mean_kv_utilization"] is None


def test_step_series_keeps_peaks_when_thinned() -> None:
    rows = [step(i, 1, 0, start_time=float(i), duration_s=1.0, kv_used_tokens=i % 7)
            for i in range(100)]
    steps = pa.Table.from_pylist(rows, schema=STEP_SCHEMA)
    full = step_series(steps, max_points=1000)
    assert full["time_s"].tolist() == [float(i + 1) for i in range(100)]
    thin = step_series(steps, max_points=10)
    assert thin["time_s"].size == 10 and thin["kv_used_tokens"].max() == 6
    assert thin["kv_used_tokens"].tolist()[0] == 6  # the first 10 steps peak at 6


def test_recovery_is_over_readmissions_and_undefined_without_one() -> None:
    # issue 30 item 7: a victim the run ended before readmitting resumed nothing; with no
    # readmission at all the recovery is n/a (NaN), not a 0 a figure would draw
    never_back = request(request_id="n", arrival_time=0.0, finish_reason="unfinished",
                         prompt_len=40, num_preemptions=1, victim=True,
                         prefix_hit_tokens=[0], computed_at_preemption=[40])
    back = request(request_id="b", arrival_time=0.0, finish_time=2.0, finish_reason="stop",
                   prompt_len=20, num_preemptions=1, victim=True, prefix_hit_tokens=[0, 15],
                   computed_at_preemption=[20], token_times=[1.0, 2.0])
    m = compute_metrics(pa.Table.from_pylist([never_back, back], schema=REQUEST_SCHEMA), STEPS)
    assert m["prefix_recovery_readmissions"] == 1
    assert m["prefix_recovery_on_resume"] == pytest.approx(15 / 20)  # not 15 / 60
    alone = compute_metrics(pa.Table.from_pylist([never_back], schema=REQUEST_SCHEMA), STEPS)
    assert alone["num_preemptions"] == 1 and alone["prefix_recovery_readmissions"] == 0
    assert math.isnan(alone["prefix_recovery_on_resume"])
    # readmitted with nothing cached (SGLang's retraction frees the KV): a measured 0
    lost = request(request_id="s", arrival_time=0.0, finish_time=2.0, finish_reason="stop",
                   prompt_len=20, num_preemptions=1, victim=True, prefix_hit_tokens=[0, 0],
                   computed_at_preemption=[20], token_times=[1.0, 2.0])
    zero = compute_metrics(pa.Table.from_pylist([lost], schema=REQUEST_SCHEMA), STEPS)
    assert zero["prefix_recovery_on_resume"] == 0.0 and zero["prefix_recovery_readmissions"] == 1
