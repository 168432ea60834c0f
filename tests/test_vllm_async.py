"""vLLM's AsyncScheduler mirror (schedulers/vllm/async_scheduler.py), step by step: output
placeholders, the max-tokens skip, stale output after a preemption (delivered, finishing a
waiting request, skipped at admission until it has arrived) and caching only the positions
whose tokens are known. Plans are made and committed by hand, as the batch queue does; the
queue of three in `test_a_request_with_stale_output_is_skipped_at_admission` is deeper than the
engine's, to reach the skip upstream needs for pipeline parallelism."""

from __future__ import annotations

from conftest import tiny_sim

from engines.pipeline import fill_placeholders
from schedulers.contract import PLACEHOLDER_TOKEN_ID, Request, StepPlan, StepResult
from schedulers.vllm import AsyncVllmScheduler, VllmSchedulerConfig, build_scheduler
from schedulers.vllm.invariants import check_vllm_invariants
from schedulers.vllm.request import RequestStatus, VllmRequest


class Pipeline:
    """A scheduler with the sim executor: `plan()` schedules and executes (placeholders
    filled from the last plan), `commit()` commits the oldest plan not yet committed."""

    def __init__(self, capacity: int, **fields: object) -> None:
        self.sched = build_scheduler(VllmSchedulerConfig.from_capacity(
            capacity, block_size=4, async_scheduling=True, **fields))  # type: ignore[arg-type]
        assert isinstance(self.sched, AsyncVllmScheduler)
        self.sim = tiny_sim()
        self.queue: list[tuple[StepPlan, StepResult]] = []
        self.last: StepResult | None = None

    def add(self, i: int, prompt_len: int, max_tokens: int) -> None:
        r = Request(f"r{i}", [10 + i + k for k in range(prompt_len)], max_tokens=max_tokens,
                    ignore_eos=True)
        self.sim.register(r)
        assert self.sched.add_request(r) is None

    def plan(self) -> StepPlan:
        plan = self.sched.schedule()
        fill_placeholders(plan, self.last)
        self.last = self.sim.execute(plan)
        self.queue.append((plan, self.last))
        check_vllm_invariants(self.sched)
        return plan

    def commit(self) -> dict[str, list[int]]:
        events = self.sched.update_from_output(*self.queue.pop(0))
        check_vllm_invariants(self.sched)
        self.finished = events.finished
        return events.new_token_ids

    def req(self, i: int) -> VllmRequest:
        return self.sched.requests[f"r{i}"]


def chunks(plan: StepPlan) -> list[tuple[str, int, int]]:
    return [(c.request_id, c.start_pos, len(c.token_ids)) for c in plan.chunks]


def test_placeholders_let_the_next_plan_decode_the_token_in_flight() -> None:
    p = Pipeline(64)
    p.add(0, 7, 10)
    first = p.plan()
    assert chunks(first) == [("r0", 0, 7)] and p.req(0).num_output_placeholders == 1
    second = p.sched.schedule()  # before the first result: decode the position in flight
    assert chunks(second) == [("r0", 7, 1)]
    assert second.chunks[0].token_ids == [PLACEHOLDER_TOKEN_ID]
    assert p.req(0).num_output_placeholders == 2 and p.req(0).num_computed_tokens == 8
    assert p.req(0).num_in_flight_tokens == 8


def test_the_plan_in_flight_sampling_the_last_token_stops_further_plans() -> None:
    p = Pipeline(64)
    p.add(0, 7, 2)
    p.plan()  # samples output 1
    assert chunks(p.plan()) == [("r0", 7, 1)]  # samples output 2, the last
    p.commit()
    assert chunks(p.plan()) == []  # max_tokens skip: output 2 is in flight
    assert [r.request_id for r in p.sched.running] == ["r0"]
    p.commit()
    assert p.finished == [("r0", "length")] and not p.sched.running


def test_blocks_are_cached_up_to_the_tokens_known() -> None:
    """Prompt of 7 in blocks of 4: once output 1 (position 7) is committed all 8 tokens of the
    second block are known, but position 7's KV is computed by the plan still in flight: the
    block is cached only when that plan is committed (the synchronous scheduler caches it when
    it schedules the decode)."""
    p = Pipeline(64)
    p.add(0, 7, 5)
    kv = p.sched.kv_cache_manager
    p.plan()
    p.plan()
    p.commit()
    assert p.req(0).num_tokens == 8 and kv.num_cached_block["r0"] == 1
    p.commit()  # position 7's KV is in: committing caches the block
    assert kv.num_cached_block["r0"] == 2
    sync = build_scheduler(VllmSchedulerConfig.from_capacity(64, block_size=4))
    sync.add_request(Request("r0", [10 + k for k in range(7)], max_tokens=5, ignore_eos=True))
    plan = sync.schedule()
    sync.update_from_output(plan, StepResult({"r0": 5}, 1.0))
    sync.schedule()
    assert sync.kv_cache_manager.num_cached_block["r0"] == 2


def tight_pair(max_tokens: int) -> Pipeline:
    """r0 and r1 (7-token prompts) fill a pool of four blocks; the third plan's decode of r0
    needs a fifth block and preempts r1, whose second plan is still in flight."""
    p = Pipeline(16)
    p.add(0, 7, 10)
    p.add(1, 7, max_tokens)
    p.plan()
    p.plan()
    p.commit()
    third = p.plan()
    assert third.preempted == ["r1"] and chunks(third) == [("r0", 8, 1)]
    victim = p.req(1)
    assert victim.status == RequestStatus.PREEMPTED and victim.num_output_placeholders == 0
    assert victim.num_stale_output_tokens == 1 == victim.num_in_flight_tokens
    return p


def test_stale_output_is_delivered_without_moving_a_counter() -> None:
    p = tight_pair(max_tokens=10)
    victim = p.req(1)
    tokens = p.commit()  # the second plan: r1's stale output
    assert "r1" in tokens and victim.num_tokens == 9
    assert victim.num_output_placeholders == 0 and victim.num_stale_output_tokens == 0
    assert victim.num_computed_tokens == 0 and "r1" not in p.sched.kv_cache_manager.req_to_blocks
    assert [r.request_id for r in p.sched.waiting] == ["r1"]


def test_stale_output_can_finish_a_preempted_request() -> None:
    p = tight_pair(max_tokens=2)  # r1's second plan samples its last token
    p.commit()
    assert p.finished == [("r1", "length")]
    assert not p.sched.waiting and "r1" not in p.sched.requests


def test_a_request_with_stale_output_is_skipped_at_admission() -> None:
    """With its stale output still to come, the preempted head is skipped and stays the head;
    the next waiting request is admitted behind it (upstream: it drains within the pipeline
    depth; the engine's queue of two commits it before the next plan, so only a deeper queue
    reaches this)."""
    p = tight_pair(max_tokens=10)
    p.add(2, 3, 4)
    fourth = p.plan()  # the second plan is still not committed
    assert ("r2", 0, 3) in chunks(fourth) and "r1" not in {c.request_id for c in fourth.chunks}
    assert p.sched.waiting.peek_request().request_id == "r1"
    assert "r1" in p.commit()  # the stale output arrives: no longer skipped
    assert p.req(1).num_stale_output_tokens == 0
