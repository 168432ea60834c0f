"""SGLang's overlap loop (schedulers/sglang/overlap.py, the engine's OVERLAP loop in
engines/pipeline.py): the scheduler a config builds, the loop's commit rule, requests that end
with their output under random workloads, and a whole job through Hydra. Step-for-step
agreement with the real scheduler is tests/test_conformance_sglang.py's (`overlap_*` cases)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from conftest import invariant_check_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_pipeline import UnitSteps

from engines.engine import Engine
from engines.pipeline import must_commit_overlap
from schedulers.contract import OVERLAP, PLACEHOLDER_TOKEN_ID, SYNCHRONOUS, Request, StepResult
from schedulers.sglang.build import build_scheduler
from schedulers.sglang.config import SglangSchedulerConfig
from schedulers.sglang.overlap import OverlapSglangScheduler


def sglang(capacity: int = 600, **fields: Any) -> Any:
    return build_scheduler(SglangSchedulerConfig.from_capacity(
        capacity, max_running_requests=8, **fields))


def req(i: int, prompt_len: int, out: int, t: float = 0.0) -> Request:
    return Request(f"r{i}", [5 + (i * 31 + k) % 400 for k in range(prompt_len)],
                   max_tokens=out, arrival_time=t)


def test_the_config_picks_the_loop() -> None:
    sync, overlap = sglang(), sglang(disable_overlap_schedule=False)
    assert sync.engine_loop == SYNCHRONOUS and not isinstance(sync, OverlapSglangScheduler)
    assert isinstance(overlap, OverlapSglangScheduler) and overlap.engine_loop == OVERLAP
    engine = Engine(overlap, UnitSteps(), [req(0, 20, 5)])
    assert engine.loop == OVERLAP and not engine.decode_runs


def test_swap_is_refused_with_the_overlap_loop() -> None:
    with pytest.raises(ValueError, match=r"disable_overlap_schedule=False: preemption_mode=swap"):
        SglangSchedulerConfig.from_capacity(600, disable_overlap_schedule=False,
                                            preemption_mode="swap",
                                            host_kv_capacity_tokens=128)
    with pytest.raises(ValueError, match=r"disable_overlap_schedule='no': must be true or false"):
        SglangSchedulerConfig.from_capacity(600, disable_overlap_schedule="no")


def test_the_call_commits_the_previous_batch_even_when_it_launches_nothing() -> None:
    # mirrors event_loop_overlap: `if self.last_batch: pop_and_process()`
    assert must_commit_overlap(2, True) and must_commit_overlap(2, False)
    assert must_commit_overlap(1, False)  # an idle plan alone: committed at once
    assert not must_commit_overlap(1, True)  # the first batch stays in flight


def test_a_decode_planned_with_the_prefill_in_flight_holds_a_placeholder() -> None:
    sched = sglang(disable_overlap_schedule=False)
    sched.add_request(req(0, 10, 3))
    prefill = sched.schedule()
    decode = sched.schedule()  # planned before the prefill's result is processed
    assert decode.forward_mode == "decode"
    assert [(c.token_ids, c.start_pos) for c in decode.chunks] == [([PLACEHOLDER_TOKEN_ID], 10)]
    events = sched.update_from_output(prefill, StepResult({"r0": 7}, 1.0))
    assert events.new_token_ids == {"r0": [7]}


def test_a_request_finishing_in_flight_is_not_decoded_again() -> None:
    """_reqs_finishing_inflight: max_tokens 2, the prefill's token in flight and the first
    decode's token in flight: the third plan leaves it out."""
    sched = sglang(disable_overlap_schedule=False)
    sched.add_request(req(0, 10, 2))
    p0 = sched.schedule()
    p1 = sched.schedule()
    sched.update_from_output(p0, StepResult({"r0": 7}, 1.0))
    p2 = sched.schedule()
    assert [c.request_id for c in p1.chunks] == ["r0"] and not p2.chunks
    events = sched.update_from_output(p1, StepResult({"r0": 8}, 1.0))
    assert events.finished == [("r0", "length")]
    assert not sched.has_unfinished() and sched.stats().kv_used_tokens == 0


Spec = list[tuple[float, int, int, int, int]]
workloads = st.lists(
    st.tuples(st.floats(0, 0.5, allow_nan=False).map(lambda x: round(x, 3)),
              st.integers(1, 120), st.integers(1, 60), st.integers(1, 60), st.integers(0, 40)),
    min_size=1, max_size=16,
).map(lambda xs: sorted(xs, key=lambda x: x[0]))
EXAMPLES = int(os.environ.get("SCHEDBENCH_HYPOTHESIS_EXAMPLES", "25"))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=workloads, knob=st.integers(0, 11), page=st.sampled_from([1, 4]))
def test_every_request_finishes_with_the_invariants_held(spec: Spec, knob: int,
                                                         page: int) -> None:
    """Random workloads and configurations (policies, chunking, priority with preemption,
    conservativeness, victim policies, EOS before max_tokens) in the overlap loop: every
    request ends with its output, the invariants hold after every commit, and every executed
    chunk holds the real tokens (placeholders filled)."""
    fields: dict[str, Any] = {
        "max_running_requests": 2 + knob % 5,
        "chunked_prefill_size": [None, 16, 64][knob % 3],
        "schedule_policy": ["fcfs", "lpm", "lof", "dfs-weight"][knob % 4],
        "schedule_conservativeness": [1.0, 0.3][knob // 6],
        "victim_policy": ["default", "most_kv", "least_progress"][knob % 3],
    }
    if knob % 4 in (0, 2):
        fields.update(enable_priority_scheduling=True, priority_scheduling_preemption_threshold=5)
    sched = build_scheduler(SglangSchedulerConfig.from_capacity(
        256, page_size=page, disable_overlap_schedule=False, **fields))
    reqs = [Request(f"r{i}", [5 + (i * 31 + k * 7) % 400 for k in range(plen)],
                    max_tokens=cap, arrival_time=t, priority=prio,
                    eos_output_len=min(eos, cap))
            for i, (t, plen, cap, eos, prio) in enumerate(spec)]
    res = Engine(sched, UnitSteps(), reqs, check=invariant_check_for(sched)).run()
    for row in res.requests.to_pylist():
        assert row["finish_reason"] in ("stop", "length", "rejected", "abort"), row
        if row["finish_reason"] in ("stop", "length"):
            assert row["output_len"] == row["eos_output_len"] == len(row["token_times"])
    assert not sched.has_unfinished() and sched.stats().kv_used_tokens == 0


def test_the_overlap_loop_runs_end_to_end_through_hydra(tmp_path: Path) -> None:
    """`scheduler.disable_overlap_schedule` (default false, as upstream's) picks the loop of a
    whole job; the summary says which loop ran, the step rows what was in flight."""
    from test_reliability_config import job_config

    from experiments.run.main import run_experiment

    assert job_config("scheduler=sglang").scheduler.disable_overlap_schedule is False
    for flag, loop, in_flight in (("true", "synchronous", {0}), ("false", "overlap", {0, 1})):
        summary = run_experiment(job_config("scheduler=sglang",
                                            f"scheduler.disable_overlap_schedule={flag}"),
                                 tmp_path / flag)
        assert summary["status"] == "ok" and summary["engine_loop"] == loop
        assert summary["completed"] == summary["num_requests"] > 0
        steps = pq.read_table(tmp_path / flag / "steps.parquet")
        assert set(steps.column("in_flight").to_pylist()) == in_flight
