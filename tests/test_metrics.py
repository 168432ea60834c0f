"""Run metrics on a hand-made record set with known answers."""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa
import pytest

from engines.records import REQUEST_SCHEMA, STEP_SCHEMA
from experiments.metrics import compute_metrics, itl_seconds

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
    assert m["completed"] == 0 and m["mean_ttft_ms"] == 0.0 and m["num_steps"] == 0
    assert math.isnan(m["request_throughput"])
