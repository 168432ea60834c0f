"""Unit tests of the vLLM scheduler's pieces: block pool order, prefix hits, preemption, limits."""

from __future__ import annotations

import pytest

from experiments.conformance.replay import fake_token
from schedulers.contract import Request, StepPlan, StepResult
from schedulers.vllm import VllmScheduler, VllmSchedulerConfig
from schedulers.vllm.block_pool import BlockPool
from schedulers.vllm.invariants import check_vllm_invariants
from schedulers.vllm.kv_cache_utils import hash_block_tokens
from schedulers.vllm.request import RequestStatus


def make(num_blocks: int = 16, **kw: object) -> VllmScheduler:
    cfg = VllmSchedulerConfig(num_blocks=num_blocks, block_size=4, max_num_seqs=8,
                              max_num_batched_tokens=64, max_model_len=256, **kw)  # type: ignore[arg-type]
    return VllmScheduler(cfg)


def req(i: int, prompt_len: int, max_tokens: int, prompt: list[int] | None = None,
        priority: int = 0, arrival: float = 0.0) -> Request:
    return Request(f"r{i}", prompt or [100 + i * 1000 + k for k in range(prompt_len)],
                   max_tokens=max_tokens, priority=priority, arrival_time=arrival,
                   ignore_eos=True)


def step(sched: VllmScheduler, reqs: dict[str, Request]) -> StepPlan:
    plan = sched.schedule()
    sampled = {c.request_id: fake_token(c.request_id, reqs[c.request_id].num_tokens)
               for c in plan.chunks if c.sample}
    sched.update_from_output(plan, StepResult(sampled, 0.0))
    check_vllm_invariants(sched)
    return plan


def test_free_order_hashed_last_unhashed_first() -> None:
    pool = BlockPool(6, enable_caching=True)
    a, b, c = pool.get_new_blocks(3)
    a.block_hash = 11
    pool.cached_block_hash_to_block[11] = a
    # free in reverse (tail first), as KVCacheManager.free does
    pool.free_blocks([c, b, a])
    order = pool.free_block_queue.block_ids()
    assert order[:2] == [c.block_id, b.block_id]  # unhashed: reused first, tail first
    assert order[-1] == a.block_id  # hashed: evicted last
    assert pool.num_free_cached_blocks == 1
    # reusing the cached block evicts its hash
    got = pool.get_new_blocks(5)
    assert got[-1] is a and a.block_hash is None and 11 not in pool.cached_block_hash_to_block


def test_a_hash_cached_twice_returns_the_earliest_block_still_cached() -> None:
    """mirrors BlockHashToBlockMap: several blocks under one hash, looked up earliest
    inserted first; evicting one leaves the others, in order."""
    pool = BlockPool(8, enable_caching=True)
    a, b, c, d = pool.get_new_blocks(4)
    pool.cache_full_blocks([a, b, c, d], [7, 7, 9, 7], 0, 4)
    assert pool.get_cached_block(7) is a and pool.cached_blocks(7) == [a, b, d]
    pool.free_blocks([a, b, c, d])  # hashed: to the tail, in this order
    pool.get_new_blocks(3)  # the 3 unhashed free blocks first
    assert pool.get_cached_block(7) is a
    pool.get_new_blocks(1)  # evicts a
    assert pool.get_cached_block(7) is b and pool.cached_blocks(7) == [b, d]
    pool.get_new_blocks(1)  # evicts b
    assert pool.get_cached_block(7) is d and pool.cached_blocks(7) == [d]
    assert pool.get_cached_block(9) is c
    pool.get_new_blocks(2)  # evicts c, then d
    assert pool.get_cached_block(7) is None and pool.cached_blocks(7) == []
    assert pool.get_cached_block(9) is None and not pool.cached_block_hash_to_block


def test_block_hashes_are_chained() -> None:
    h1 = hash_block_tokens(None, [1, 2, 3, 4])
    assert hash_block_tokens(h1, [5, 6, 7, 8]) != hash_block_tokens(None, [5, 6, 7, 8])
    assert hash_block_tokens(None, [1, 2, 3, 4]) == h1


def test_prefix_hit_is_whole_blocks_capped_at_num_tokens_minus_one() -> None:
    sched = make()
    prompt = list(range(1000, 1008))  # exactly two blocks of 4
    reqs = {"r0": req(0, 8, 2, prompt), "r1": req(1, 8, 2, prompt)}
    sched.add_request(reqs["r0"])
    while sched.has_unfinished():
        step(sched, reqs)
    sched.add_request(reqs["r1"])
    plan = step(sched, reqs)
    (chunk,) = plan.chunks
    # both blocks are cached, but the last token must be recomputed: hit = one block
    assert chunk.admitted and chunk.start_pos == 4 and len(chunk.token_ids) == 4


def test_rejections_name_the_reason() -> None:
    sched = make(num_blocks=5)  # 4 usable blocks of 4 tokens
    assert "empty" in (sched.add_request(req(0, 0, 4, prompt=[])) or "")
    assert "max_model_len" in (sched.add_request(req(1, 300, 4)) or "")
    reason = sched.add_request(req(2, 17, 4))
    assert reason is not None and "5 KV blocks" in reason and "holds 4" in reason
    assert not sched.has_unfinished()


def test_request_outgrowing_the_pool_is_aborted_not_retried_forever() -> None:
    sched = make(num_blocks=5)  # 16 token slots
    reqs = {"r0": req(0, 10, 50)}
    assert sched.add_request(reqs["r0"]) is None
    aborted = []
    for _ in range(100):
        plan = step(sched, reqs)
        aborted += plan.aborted
        if not sched.has_unfinished():
            break
    assert not sched.has_unfinished()
    assert aborted and aborted[0][0] == "r0" and "more KV blocks than the pool" in aborted[0][1]
    assert sched.kv_cache_manager.block_pool.get_num_free_blocks() == 4


def test_preempted_request_goes_to_queue_head_with_reset_debt() -> None:
    sched = make(num_blocks=7)  # 6 usable blocks
    reqs = {f"r{i}": req(i, 8, 20) for i in range(3)}
    for r in reqs.values():
        sched.add_request(r)
    preempted = []
    while not preempted:
        plan = step(sched, reqs)
        preempted = plan.preempted
        assert not (plan.preempted and any(c.admitted for c in plan.chunks)), \
            "no admission in a step that preempted"
    victim = sched.requests[preempted[0]]
    # all three prompts fit (2 blocks each); the first decode needing a third block
    # preempts the latest running request
    assert preempted == ["r2"]
    assert victim.status == RequestStatus.PREEMPTED and victim.num_computed_tokens == 0
    assert victim.num_preemptions == 1
    assert sched.waiting.peek_request() is victim


def test_priority_preempts_the_least_important() -> None:
    cfg = VllmSchedulerConfig(num_blocks=7, block_size=4, max_num_seqs=8,
                              max_num_batched_tokens=64, policy="priority")
    sched = VllmScheduler(cfg)
    reqs = {"r0": req(0, 8, 20, priority=5), "r1": req(1, 8, 20, priority=0, arrival=1.0)}
    for r in reqs.values():
        sched.add_request(r)
    preempted = []
    while not preempted:
        preempted = step(sched, reqs).preempted
    assert preempted == ["r0"]  # larger priority value = less important


def test_abort_frees_blocks() -> None:
    sched = make()
    reqs = {"r0": req(0, 10, 30)}
    sched.add_request(reqs["r0"])
    step(sched, reqs)
    assert sched.stats().kv_used_tokens > 0
    sched.abort("r0", "client went away")
    check_vllm_invariants(sched)
    assert not sched.has_unfinished() and sched.stats().kv_used_tokens == 0


@pytest.mark.parametrize(("field", "value"), [
    ("num_blocks", 1), ("block_size", 0), ("policy", "lifo"), ("watermark", 1.5),
    ("max_num_batched_tokens", 4),
])
def test_bad_config_names_field_and_value(field: str, value: object) -> None:
    kw = {"num_blocks": 16, "max_num_seqs": 8, field: value}
    with pytest.raises(ValueError, match=field):
        VllmSchedulerConfig(**kw)  # type: ignore[arg-type]


def test_eos_finishes_unless_ignore_eos() -> None:
    sched = make()
    r = Request("r0", [5, 6, 7], max_tokens=10, eos_token_id=2)
    sched.add_request(r)
    plan = sched.schedule()
    events = sched.update_from_output(plan, StepResult({"r0": 2}, 0.0))
    assert events.finished == [("r0", "stop")]
