"""The engine's pipelined loop (engines/pipeline.py, DESIGN.md "Engine loops"): vLLM's batch
queue of two, driven by the scheduler's declared loop; the clock, the records, arrivals in
flight, placeholders, and a finish that frees its blocks only after the next plan."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import TINY_HW, TINY_MODEL, invariant_check_for, tiny_sim
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engines.engine import DeadlockError, Engine, StepLimitError
from engines.executors.sim import SimExecutor
from engines.pipeline import fill_placeholders, must_commit
from schedulers.contract import (
    BATCH_QUEUE,
    PLACEHOLDER_TOKEN_ID,
    SYNCHRONOUS,
    EngineLoop,
    Request,
    ScheduledChunk,
    SchedulerStats,
    StepEvents,
    StepPlan,
    StepResult,
)
from schedulers.vllm import VllmSchedulerConfig, build_scheduler


class UnitSteps:
    """The sim executor's tokens, one second per executed step (simple clock arithmetic);
    checks that every executed chunk holds the request's real tokens (no placeholder)."""

    def __init__(self) -> None:
        self.sim = SimExecutor(TINY_MODEL, TINY_HW)
        self.prompts: dict[str, list[int]] = {}
        self.num_executed = 0

    def register(self, request: Request) -> None:
        self.sim.register(request)
        self.prompts[request.request_id] = list(request.prompt_token_ids)

    def execute(self, plan: StepPlan) -> StepResult:
        for c in plan.chunks:
            prompt = self.prompts[c.request_id]
            # position p holds the prompt's token, else the token sampled after p tokens
            want = [prompt[p] if p < len(prompt) else self.sim.token_for(c.request_id, p)
                    for p in range(c.start_pos, c.start_pos + len(c.token_ids))]
            assert c.token_ids == want, (c.request_id, c.start_pos, c.token_ids, want)
        self.num_executed += 1
        return StepResult(self.sim.execute(plan).sampled_token_ids, 1.0)


def vllm(capacity: int = 1024, **fields: Any) -> Any:
    return build_scheduler(VllmSchedulerConfig.from_capacity(
        capacity, block_size=16, max_num_seqs=8, max_num_batched_tokens=256, **fields))


def req(i: int, prompt_len: int, out: int, t: float = 0.0) -> Request:
    return Request(f"r{i}", [5 + (i * 31 + k) % 400 for k in range(prompt_len)],
                   max_tokens=out, arrival_time=t, ignore_eos=True)


def rows(table: pa.Table) -> dict[str, dict[str, Any]]:
    return {r["request_id"]: r for r in table.to_pylist()}


def test_the_scheduler_declares_its_loop_and_the_engine_runs_it() -> None:
    sync, pipelined = vllm(), vllm(async_scheduling=True)
    assert sync.engine_loop == SYNCHRONOUS and pipelined.engine_loop == BATCH_QUEUE
    engine = Engine(pipelined, tiny_sim(), [req(0, 20, 5)])
    # decode runs: the batch-queue loop's for the async scheduler (engines/pipeline.py)
    assert engine.loop == BATCH_QUEUE and engine.decode_runs
    assert engine.pipelined_runs is not None
    assert Engine(sync, tiny_sim(), []).decode_runs
    assert not Engine(pipelined, tiny_sim(), [], decode_runs=False).decode_runs


def test_an_undeclared_or_unknown_loop() -> None:
    sched = vllm(async_scheduling=True)
    sched.engine_loop = EngineLoop("mixed", 2)
    with pytest.raises(ValueError, match=r"declares the engine loop 'mixed'; this engine "
                                         r"runs: synchronous, batch_queue, overlap"):
        Engine(sched, tiny_sim(), [])
    with pytest.raises(ValueError, match=r"async_scheduling=True does not fit VllmScheduler"):
        from schedulers.vllm import VllmScheduler

        VllmScheduler(VllmSchedulerConfig.from_capacity(512, async_scheduling=True))


def test_the_clock_runs_plans_back_to_back_and_records_when_each_was_made() -> None:
    """Unit steps: a plan made at the commit of the step before the one in flight starts when
    that one ends; the result is committed (tokens) at its end."""
    res = Engine(vllm(async_scheduling=True), UnitSteps(), [req(0, 8, 4)]).run()
    steps = res.steps.to_pylist()
    # prefill, decode x3, each planned one step before it starts (the first with nothing in
    # flight); then, with the last token in flight, an empty plan (max_tokens skip)
    assert [s["start_time"] for s in steps] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert [s["duration_s"] for s in steps] == [1.0, 1.0, 1.0, 1.0, 0.0]
    assert [s["planned_at"] for s in steps] == [0.0, 0.0, 1.0, 2.0, 3.0]
    assert [s["in_flight"] for s in steps] == [0, 1, 1, 1, 1]
    assert [s["num_scheduled_reqs"] for s in steps] == [1, 1, 1, 1, 0]
    row = rows(res.requests)["r0"]
    assert row["token_times"] == [1.0, 2.0, 3.0, 4.0] and row["finish_time"] == 4.0
    assert res.end_time == 4.0
    sync = Engine(vllm(), UnitSteps(), [req(0, 8, 4)]).run()
    assert rows(sync.requests)["r0"]["token_times"] == [1.0, 2.0, 3.0, 4.0]
    assert sync.steps.column("planned_at").to_pylist() == [0.0, 1.0, 2.0, 3.0]
    assert set(sync.steps.column("in_flight").to_pylist()) == {0}


def test_a_request_arriving_mid_flight_reaches_the_next_plan() -> None:
    """r1 arrives at 2.5, while a step runs: the synchronous loop schedules it at the next
    step boundary (3.0); the pipelined one plans it there too, but that plan starts after the
    step then in flight (4.0), as vLLM's step_with_batch_queue admits it before its next
    schedule()."""
    reqs = [req(0, 8, 10), req(1, 8, 3, t=2.5)]
    sync = rows(Engine(vllm(), UnitSteps(), reqs).run().requests)
    res = Engine(vllm(async_scheduling=True), UnitSteps(),
                 [req(0, 8, 10), req(1, 8, 3, t=2.5)]).run()
    pipelined = rows(res.requests)
    assert sync["r1"]["first_scheduled_time"] == 3.0
    assert pipelined["r1"]["first_scheduled_time"] == 4.0
    first = next(s for s in res.steps.to_pylist() if s["start_time"] == 4.0)
    assert first["planned_at"] == 3.0 and first["in_flight"] == 1
    assert pipelined["r1"]["token_times"] == [5.0, 6.0, 7.0]


def test_a_finish_frees_its_blocks_only_after_the_next_plan() -> None:
    """The pool holds one request: r1 waits for r0's blocks. Synchronously it is admitted by
    the plan after r0's last step; pipelined, the plan made while r0's last token is in flight
    skips r0 (max_tokens) and cannot admit r1 (r0 still holds its blocks): it is empty, and
    r1 is admitted by the plan after the commit that frees them."""
    reqs = [req(0, 40, 3), req(1, 40, 3)]
    sync = Engine(vllm(capacity=64), UnitSteps(), reqs).run()
    res = Engine(vllm(capacity=64, async_scheduling=True), UnitSteps(),
                 [req(0, 40, 3), req(1, 40, 3)]).run()
    r0, r1 = rows(res.requests)["r0"], rows(res.requests)["r1"]
    s0, s1 = rows(sync.requests)["r0"], rows(sync.requests)["r1"]
    assert s1["first_scheduled_time"] == s0["finish_time"] == 3.0
    steps = res.steps.to_pylist()
    # one empty plan while each request's last token is in flight
    empty = [s for s in steps if s["num_scheduled_reqs"] == 0]
    assert [s["planned_at"] for s in empty] == [2.0, 5.0]
    admitted = next(s for s in steps if s["start_time"] == r1["first_scheduled_time"]
                    and s["num_scheduled_reqs"])
    assert admitted["planned_at"] == r0["finish_time"] == 3.0
    assert res.steps.num_rows == sync.steps.num_rows + 2


def test_the_scheduler_keeps_a_finished_requests_blocks_until_its_result_is_committed(
        ) -> None:
    sched = vllm(capacity=64, async_scheduling=True)
    sched.add_request(req(0, 40, 2))
    sched.add_request(req(1, 40, 2))
    sim = tiny_sim()
    for r in (req(0, 40, 2), req(1, 40, 2)):
        sim.register(r)
    prefill = sched.schedule()
    decode = sched.schedule()  # samples r0's second (last) token
    first = sim.execute(prefill)
    sched.update_from_output(prefill, first)
    fill_placeholders(decode, first)
    last = sim.execute(decode)
    used = sched.stats().kv_used_tokens
    nothing = sched.schedule()  # r0's last token in flight: skipped; r1 does not fit
    assert nothing.chunks == [] and sched.stats().kv_used_tokens == used
    assert [r.request_id for r in sched.running] == ["r0"]
    events = sched.update_from_output(decode, last)
    assert events.finished == [("r0", "length")] and sched.stats().kv_used_tokens == 0
    sched.update_from_output(nothing, StepResult({}, 0.0))
    admit = sched.schedule()
    assert [(c.request_id, c.admitted) for c in admit.chunks] == [("r1", True)]


def test_placeholders_are_filled_from_the_plan_in_flight() -> None:
    plan = StepPlan(step=2, page_size=16, chunks=[
        ScheduledChunk("r1", [7, PLACEHOLDER_TOKEN_ID], 10, [1], True),
        ScheduledChunk("r2", [3, 4], 0, [2], False)])
    fill_placeholders(plan, StepResult({"r1": 99}, 1.0))
    assert plan.chunks[0].token_ids == [7, 99] and plan.chunks[1].token_ids == [3, 4]
    orphan = StepPlan(step=3, page_size=16, chunks=[
        ScheduledChunk("r3", [PLACEHOLDER_TOKEN_ID], 5, [1], True)])
    with pytest.raises(RuntimeError, match="step 3 computes a placeholder token of r3 at "
                                           "position 5 that the plan in flight does not"):
        fill_placeholders(orphan, StepResult({}, 1.0))


def test_must_commit_follows_step_with_batch_queue() -> None:
    assert must_commit(2, 2, True, True)  # the queue is full
    assert not must_commit(1, 2, True, False)  # room, and the plan ran something
    assert not must_commit(1, 2, False, True)  # room, and more to schedule
    assert must_commit(1, 2, False, False)  # nothing ran and nothing more to schedule
    assert must_commit(1, 1, True, True)  # a queue of one: the synchronous loop


def test_max_steps_counts_the_plans_in_flight() -> None:
    with pytest.raises(StepLimitError, match="max_steps=3 reached"):
        Engine(vllm(async_scheduling=True), tiny_sim(), [req(0, 8, 50)], max_steps=3).run()


Spec = list[tuple[float, int, int, int, int]]
workloads = st.lists(
    st.tuples(st.floats(0, 0.5, allow_nan=False).map(lambda x: round(x, 3)),
              st.integers(1, 150), st.integers(1, 80), st.integers(1, 80), st.integers(0, 2)),
    min_size=1, max_size=16,
).map(lambda xs: sorted(xs, key=lambda x: x[0]))


EXAMPLES = int(os.environ.get("SCHEDBENCH_HYPOTHESIS_EXAMPLES", "25"))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=workloads, knob=st.integers(0, 11), page=st.sampled_from([4, 16]))
def test_every_request_finishes_with_the_invariants_held(spec: Spec, knob: int,
                                                         page: int) -> None:
    """Random workloads and configurations (fcfs and priority, chunking, watermark, swap,
    victim policies, EOS before max_tokens): the pipelined loop ends every request with its
    output, the vLLM invariants hold after every commit, and the chunks executed hold the
    real tokens (UnitSteps)."""
    fields: dict[str, Any] = {
        "max_num_seqs": 2 + knob % 5, "max_num_batched_tokens": [16, 64, 256][knob % 3],
        "long_prefill_token_threshold": [0, 8, 24][knob % 3],
        "policy": ["fcfs", "priority"][knob % 2], "watermark": [0.0, 0.1][knob // 6],
        "victim_policy": ["default", "most_kv", "least_progress", "random"][knob % 4],
        "scheduler_reserve_full_isl": knob % 3 != 1,
    }
    if knob % 5 == 2:
        fields.update(preemption_mode="swap", host_kv_capacity_tokens=128)
    sched = build_scheduler(VllmSchedulerConfig.from_capacity(
        256, block_size=page, async_scheduling=True, **fields))
    reqs = [Request(f"r{i}", [5 + (i * 31 + k * 7) % 400 for k in range(plen)],
                    max_tokens=cap, arrival_time=t, priority=prio,
                    eos_output_len=min(eos, cap))
            for i, (t, plen, cap, eos, prio) in enumerate(spec)]
    res = Engine(sched, UnitSteps(), reqs, check=invariant_check_for(sched)).run()
    for row in res.requests.to_pylist():
        assert row["finish_reason"] in ("stop", "length", "rejected"), row
        if row["finish_reason"] != "rejected":
            assert row["output_len"] == row["eos_output_len"] == len(row["token_times"])
    assert not sched.has_unfinished() and sched.stats().kv_used_tokens == 0


def test_async_scheduling_runs_end_to_end_through_hydra(tmp_path: Path) -> None:
    """`scheduler.async_scheduling` (default true, as upstream's) picks the loop of a whole
    job; the summary says which loop ran, the step rows what was in flight."""
    from test_reliability_config import job_config

    from experiments.run.main import run_experiment

    assert job_config().scheduler.async_scheduling is True
    for flag, loop, in_flight in (("false", "synchronous", {0}), ("true", "batch_queue", {0, 1})):
        summary = run_experiment(job_config(f"scheduler.async_scheduling={flag}"),
                                 tmp_path / flag)
        assert summary["status"] == "ok" and summary["engine_loop"] == loop
        assert summary["completed"] == summary["num_requests"] > 0
        steps = pq.read_table(tmp_path / flag / "steps.parquet")
        assert set(steps.column("in_flight").to_pylist()) == in_flight


class NeverSchedules:
    """A scheduler in the batch-queue loop that accepts requests and never plans any work."""

    name = "stuck"
    page_size = 16
    engine_loop = BATCH_QUEUE

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.plans = 0

    def add_request(self, request: Request) -> str | None:
        self.ids.append(request.request_id)
        return None

    def schedule(self) -> StepPlan:
        self.plans += 1
        return StepPlan(step=self.plans, page_size=16, forward_mode="idle")

    def update_from_output(self, plan: StepPlan, result: StepResult) -> StepEvents:
        return StepEvents()

    def abort(self, request_id: str, reason: str) -> None:
        self.ids.remove(request_id)

    def has_unfinished(self) -> bool:
        return bool(self.ids)

    def stats(self) -> SchedulerStats:
        return SchedulerStats(0, len(self.ids), 256, 0, 0)


def test_idle_calls_jump_to_the_next_arrival_then_stop_with_a_deadlock() -> None:
    sched = NeverSchedules()
    with pytest.raises(DeadlockError, match=r"deadlock at t=7\.000000s: stuck scheduled "
                                            r"nothing with 2 request\(s\) pending .* r0, r1"):
        Engine(sched, tiny_sim(), [req(0, 8, 4), req(1, 8, 4, t=7.0)]).run()
    assert sched.plans == 6  # three idle calls before the jump, three after
