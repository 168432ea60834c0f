"""Decode retraction: victim order, at least one retracted and one kept, KV released without
insertion, eviction for the rest, tail of the waiting queue, the ratio re-estimate, and the
out-of-memory abort of the last request."""

from __future__ import annotations

from sglang_helpers import Run, drive, req, sched, step

from schedulers.sglang.req import Req
from schedulers.sglang.schedule_batch import ABORT_OOM_LAST_REQUEST, ScheduleBatch


def _req_with(i: int, prompt_len: int, outputs: int, priority: int = 0) -> Req:
    r = Req(req(i, list(range(prompt_len)), 100, priority=priority))
    r.output_ids.extend([1] * outputs)
    return r


def test_retraction_order_fewest_outputs_then_longest_input() -> None:
    reqs = [_req_with(0, 10, 5), _req_with(1, 50, 5), _req_with(2, 10, 1),
            _req_with(3, 30, 9), _req_with(4, 50, 5)]
    order = ScheduleBatch.get_decode_retraction_order(reqs)
    # popped from the end: r2 (1 output), then the 5-output ones longest input first, and of
    # the two equal ones (r1, r4) the later in the batch first
    assert [reqs[i].rid for i in reversed(order)] == ["r2", "r4", "r1", "r0", "r3"]


def test_priority_retraction_policy() -> None:
    reqs = [_req_with(0, 10, 1, priority=5), _req_with(1, 10, 9, priority=0)]
    order = ScheduleBatch.get_decode_retraction_order(reqs, "priority")
    assert reqs[order[-1]].rid == "r1"  # lower priority goes first despite more outputs


def _tight_run() -> tuple[Run, list[str]]:
    # 4 requests whose outputs outgrow a 160-slot pool; the ratio lets them all in
    s = sched(160, schedule_conservativeness=0.05, chunked_prefill_size=64)
    arrivals = [(0, req(i, [100 + 10 * i + k for k in range(10)], 60)) for i in range(4)]
    seen: list[str] = []
    run = Run()
    for _, r in arrivals:
        assert s.add_request(r) is None
        run.requests[r.request_id] = r
    while s.has_unfinished():
        waiting_before = [x.rid for x in s.waiting_queue]
        plan = step(s, run)
        if plan.preempted:
            seen.extend(plan.preempted)
            # victims go to the tail of the waiting queue, in the order retracted
            assert [x.rid for x in s.waiting_queue][-len(plan.preempted):] == plan.preempted
            assert [x.rid for x in s.waiting_queue][: len(waiting_before)] == waiting_before
            assert len(plan.chunks) >= 1  # at least one kept
            for rid in plan.preempted:
                victim = next(x for x in s.waiting_queue if x.rid == rid)
                assert victim.req_pool_idx is None and victim.lock is None
                assert victim.prefix_len == 0
    return run, seen


def test_retraction_in_a_tight_pool() -> None:
    run, seen = _tight_run()
    assert seen, "expected at least one retraction"
    assert len(run.finished) == 4 and not run.aborted
    for r in run.requests.values():
        assert len(r.output_token_ids) == r.max_tokens


def test_retracted_kv_is_not_inserted_and_ratio_is_reestimated() -> None:
    s = sched(160, schedule_conservativeness=0.05, chunked_prefill_size=64)
    run = Run()
    for i in range(4):
        r = req(i, [100 + 10 * i + k for k in range(10)], 60)
        s.add_request(r)
        run.requests[r.request_id] = r
    while True:
        tree_before = s.tree_cache.total_size()
        plan = step(s, run)
        if plan.preempted:
            break
    # the victims' outputs never entered the tree (eviction may only have shrunk it)
    assert s.tree_cache.total_size() <= tree_before
    running = s.running_batch.reqs
    decoded = sum(len(r.output_ids) - 1 for r in running)  # before this step's token
    max_new = sum(r.max_new_tokens for r in running)
    expected = min(1.0, (decoded + 20 * len(running)) / (max_new + 1))
    assert abs(s.new_token_ratio_tracker.current - expected) < 1e-12


def test_last_request_aborted_when_it_cannot_fit_alone() -> None:
    # the admission estimate clips max_new_tokens at 8, so a 100-token output is let in
    s = sched(64, clip_max_new_tokens_estimation=8, chunked_prefill_size=32)
    run = drive(s, [(0, req(0, list(range(10)), 100, ignore_eos=True))])
    assert run.aborted == {"r0": ABORT_OOM_LAST_REQUEST}
    r = run.requests["r0"]
    assert len(r.output_token_ids) == 64 - 10 + 1  # the pool's last slot held token 63
    st = s.stats()
    assert st.kv_used_tokens == 0  # nothing leaked: whatever is held is evictable cache
    assert st.kv_cached_tokens == 64 - s.allocator.available_size()
    assert s.tree_cache.protected_size() == 0 and not s.has_unfinished()
