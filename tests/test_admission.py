"""Front-door admission control: the 503 rule at both limits, how refusals are recorded, and
what the summary makes of them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_engine import req, sim
from test_metrics import REQUESTS, STEPS, request
from test_run import TINY, run

from engines.admission import AdmissionLimits, FrontDoor
from engines.engine import Engine
from engines.records import REQUEST_SCHEMA
from experiments.results.metrics import compute_metrics
from schedulers.contract import StepEvents, StepPlan
from schedulers.vllm import VllmScheduler, VllmSchedulerConfig


def vllm(capacity: int = 4096) -> VllmScheduler:
    return VllmScheduler(VllmSchedulerConfig.from_capacity(
        capacity, block_size=16, max_num_seqs=8, max_num_batched_tokens=256))


def test_request_limit_refuses_the_arrival_that_would_exceed_it() -> None:
    door = FrontDoor(AdmissionLimits(max_num_queued_reqs=2))
    a, b, c = req(0, 10, 4), req(1, 10, 4), req(2, 10, 4)
    for r in (a, b):
        assert door.refusal(r) is None
        door.enqueue(r)
    assert door.refusal(c) == ("503 Service Unavailable: 2 requests queued; "
                               "max_num_queued_reqs=2")
    # a first token takes a request out of the queue; a prefill chunk alone does not
    door.on_step(StepPlan(step=1, page_size=16), StepEvents())
    assert door.refusal(c) is not None
    door.on_step(StepPlan(step=2, page_size=16), StepEvents(new_token_ids={"r0": [5]}))
    assert door.refusal(c) is None and door.num_queued_reqs == 1


def test_token_limit_counts_prompt_tokens_and_admits_up_to_it() -> None:
    door = FrontDoor(AdmissionLimits(max_num_queued_tokens=150))
    door.enqueue(req(0, 100, 4))
    assert door.refusal(req(1, 50, 4)) is None  # 150 is at the limit, not over it
    assert "100 prompt tokens queued + 51 > max_num_queued_tokens=150" in str(
        door.refusal(req(2, 51, 4)))
    # an abort or a finish without a first token also leaves the queue
    door.on_step(StepPlan(step=1, page_size=16, aborted=[("r0", "gone")]), StepEvents())
    assert door.num_queued_tokens == 0 and door.refusal(req(2, 150, 4)) is None


@pytest.mark.parametrize("bad", [0, -3, True, 2.5])
def test_limits_must_be_positive_integers(bad: object) -> None:
    with pytest.raises(ValueError, match=r"admission: max_num_queued_reqs=.*: must be a "
                                         r"positive integer \(or null: unlimited\)"):
        AdmissionLimits(max_num_queued_reqs=bad)  # type: ignore[arg-type]
    assert not AdmissionLimits().active


@pytest.mark.parametrize(("limits", "refused"), [
    (AdmissionLimits(max_num_queued_reqs=2), {"r2", "r3"}),
    (AdmissionLimits(max_num_queued_tokens=250), {"r2"}),  # 100 + 100 + 50 fit, not + 100
])
def test_engine_refuses_over_the_limits_and_admits_once_the_queue_drains(
        limits: AdmissionLimits, refused: set[str]) -> None:
    reqs = [req(0, 100, 8), req(1, 100, 8), req(2, 100, 8), req(3, 50, 8),
            req(4, 100, 8, t=5.0)]  # arrives long after the others got their first token
    rows = Engine(vllm(), sim(), reqs, admission=limits).run().requests.to_pylist()
    by_id = {r["request_id"]: r for r in rows}
    assert {rid for rid, r in by_id.items() if r["finish_reason"] == "rejected_503"} == refused
    for rid in refused:
        row = by_id[rid]
        assert row["finish_detail"].startswith("503 Service Unavailable")
        assert row["finish_time"] == 0.0 and row["output_len"] == 0
        assert math.isnan(row["first_scheduled_time"])
    assert all(by_id[rid]["finish_reason"] == "stop" for rid in set(by_id) - refused)


def test_a_scheduler_rejection_is_not_queued_and_not_a_503() -> None:
    # r0 can never fit the 256-slot pool: "rejected" by the scheduler, so r1 still gets in
    reqs = [req(0, 400, 4), req(1, 10, 4)]
    rows = Engine(vllm(256), sim(), reqs,
                  admission=AdmissionLimits(max_num_queued_reqs=1)).run().requests.to_pylist()
    assert [r["finish_reason"] for r in rows] == ["rejected", "stop"]


def test_no_limits_change_nothing() -> None:
    def records(admission: AdmissionLimits | None) -> list[dict[str, object]]:
        reqs = [req(i, 50 + 10 * i, 6, t=0.001 * i) for i in range(6)]
        return Engine(vllm(), sim(), reqs, admission=admission).run().requests.to_pylist()

    assert records(AdmissionLimits()) == records(None)


# ------------------------------------------------------------------ summary
WITH_503 = pa.concat_tables([REQUESTS, pa.Table.from_pylist([
    request(request_id="r3", arrival_time=0.6, finish_time=0.9, finish_reason="rejected_503",
            finish_detail="503 Service Unavailable: queue full", prompt_len=30),
], schema=REQUEST_SCHEMA)])


def test_summary_counts_503s_and_rates_them_against_arrivals() -> None:
    m = compute_metrics(WITH_503, STEPS)
    assert (m["rejected_503"], m["rejected"], m["num_requests"]) == (1, 1, 4)
    assert m["rejection_rate_503"] == 0.25
    assert m["failed"] == 2
    # a 503 was never accepted: the share of requests preempted is over the accepted two
    assert m["preempted_request_share"] == 0.5
    assert compute_metrics(REQUESTS, STEPS)["rejected_503"] == 0


def test_503s_are_outside_the_latency_percentiles() -> None:
    base, with_503 = compute_metrics(REQUESTS, STEPS), compute_metrics(WITH_503, STEPS)
    for key in ("mean_e2el_ms", "p99_e2el_ms", "median_ttft_ms", "p90_tpot_ms", "p99_itl_ms"):
        assert with_503[key] == base[key], key


def test_503s_count_against_goodput() -> None:
    slo = {"ttft": 150.0}  # r0 (TTFT 100 ms) is good, r1 (200 ms) is not
    base, with_503 = (compute_metrics(t, STEPS, slo_ms=slo) for t in (REQUESTS, WITH_503))
    assert base["slo_attainment"] == pytest.approx(1 / 3)
    assert with_503["slo_attainment"] == pytest.approx(1 / 4)
    assert compute_metrics(WITH_503, STEPS)["slo_attainment"] is None


def test_hydra_override_sets_the_limit(tmp_path: Path) -> None:
    out = tmp_path / "job"
    run(out, *TINY, "admission.max_num_queued_reqs=3", "progress=off")
    summary = json.loads((out / "summary.json").read_text())
    reasons = pq.read_table(out / "requests.parquet").column("finish_reason").to_pylist()
    assert 0 < summary["rejected_503"] == reasons.count("rejected_503") < 30
    assert summary["rejection_rate_503"] == summary["rejected_503"] / 30
    assert summary["completed"] + summary["rejected_503"] == 30
