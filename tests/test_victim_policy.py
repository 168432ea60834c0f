"""victim_policy: which request each scheduler evicts under every policy, the upstream mechanics
kept around the choice, and bad names refused with the valid ones."""

from __future__ import annotations

import random

import pytest
from sglang_helpers import Run, step

from experiments.conformance.replay import fake_token
from schedulers.contract import Request, StepPlan, StepResult
from schedulers.sglang import SglangScheduler, SglangSchedulerConfig
from schedulers.victim_policy import VICTIM_POLICIES, VictimFacts, rank_victims
from schedulers.vllm import VllmScheduler, VllmSchedulerConfig


# ------------------------------------------------------------------ vLLM
def vllm_sched(policy: str, num_blocks: int, seed: int = 0, max_num_seqs: int = 4,
               max_num_batched_tokens: int = 16) -> VllmScheduler:
    return VllmScheduler(VllmSchedulerConfig(
        num_blocks=num_blocks, block_size=4, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens, victim_policy=policy,
        random_seed=seed))


def vllm_until_preemption(s: VllmScheduler, spec: list[tuple[int, int, int]]) -> StepPlan:
    """Add request i = (arrival step, prompt length, max_tokens) at its step; step until a
    plan preempts, and return that plan."""
    pending = [(t, Request(f"r{i}", [5 + (i * 13 + k) % 40 for k in range(plen)],
                           max_tokens=cap, arrival_time=float(t), ignore_eos=True))
               for i, (t, plen, cap) in enumerate(spec)]
    for n in range(200):
        while pending and pending[0][0] <= n:
            assert s.add_request(pending.pop(0)[1]) is None
        plan = s.schedule()
        sampled = {c.request_id: fake_token(c.request_id, n) for c in plan.chunks if c.sample}
        s.update_from_output(plan, StepResult(sampled, 0.0))
        if plan.preempted:
            return plan
    raise AssertionError("no preemption")


# At step 8, 18 usable blocks of 4 are all held and r0 (first in running) needs a new one:
#   r0: arrived 0, 7 outputs, prompt 22, 28 computed, 28 slots held, 34 left to max_tokens
#   r1: arrived 1, 6 outputs, prompt 12, 17 computed, 20 slots held, 49 left
#   r2: arrived 2, 6 outputs, prompt  3,  8 computed,  8 slots held, 19 left
#   r3: arrived 2, 6 outputs, prompt  9, 14 computed, 16 slots held, 23 left
VLLM_SPEC = [(0, 22, 41), (1, 12, 55), (2, 3, 25), (2, 9, 29)]


@pytest.mark.parametrize(("policy", "victim"), [
    ("default", "r3"),             # upstream fcfs: the back of running
    ("latest_arrival", "r3"),      # r2 and r3 arrived together: the larger id goes
    ("fewest_outputs", "r1"),      # r1, r2, r3 have 6 outputs; r1 has the longest input
    ("least_progress", "r2"),
    ("most_kv", "r1"),             # r0 holds the most but asks: the most among later arrivals
    ("shortest_remaining", "r2"),
])
def test_vllm_victim_by_policy(policy: str, victim: str) -> None:
    s = vllm_sched(policy, num_blocks=19)
    plan = vllm_until_preemption(s, VLLM_SPEC)
    assert plan.step == 9
    assert plan.preempted == [victim]
    assert victim not in {c.request_id for c in plan.chunks}
    assert s.waiting.peek_request().request_id == victim  # to the head of waiting
    assert victim not in {r.request_id for r in s.running}


def test_vllm_a_request_that_preempts_itself_ends_the_running_pass() -> None:
    # random (seed 5) picks r0, the very request asking for a block: nothing else is scheduled
    s = vllm_sched("random", num_blocks=19, seed=5)
    plan = vllm_until_preemption(s, VLLM_SPEC)
    assert plan.preempted == ["r0"] and plan.chunks == []
    assert [r.request_id for r in s.running] == ["r1", "r2", "r3"]


def test_vllm_a_victim_already_scheduled_this_step_is_unscheduled_and_refunded() -> None:
    # A budget of 3 tokens and 7 usable blocks. At step 9 running is [r0, r1, r2]: r0 gets its
    # decode token, then r1 needs a block and shortest_remaining evicts r0 (6 tokens left).
    # r0's token goes back to the budget, so r2's prefill chunk gets 2 tokens, not 1.
    s = vllm_sched("shortest_remaining", num_blocks=8, max_num_seqs=3, max_num_batched_tokens=3)
    plan = vllm_until_preemption(s, [(0, 5, 13), (0, 11, 29), (0, 4, 18)])
    assert plan.step == 9 and plan.preempted == ["r0"]
    assert [(c.request_id, c.start_pos, c.num_tokens) for c in plan.chunks] == [
        ("r1", 12, 1), ("r2", 1, 2)]
    r0 = s.waiting.peek_request()
    assert r0.request_id == "r0" and r0.num_computed_tokens == 0


def run_to_end(s: VllmScheduler, reqs: list[Request], limit: int) -> list[str]:
    """Step `s` over `reqs` (all at step 0) until every one ends; returns the preemptions."""
    for r in reqs:
        assert s.add_request(r) is None
    preempted: list[str] = []
    for n in range(limit):
        if not s.has_unfinished():
            return preempted
        plan = s.schedule()
        preempted += plan.preempted
        s.update_from_output(plan, StepResult(
            {c.request_id: fake_token(c.request_id, n) for c in plan.chunks if c.sample}, 0.0))
    raise AssertionError(f"not done after {limit} steps; preempted {preempted[-8:]} ...")


def test_vllm_most_kv_does_not_livelock() -> None:
    # Issue 15: r0 evicted r1 (more KV), r1 came back and evicted r0 (now the larger), and so
    # on forever. Under the anti-thrash rule a request evicts only later arrivals.
    s = VllmScheduler(VllmSchedulerConfig.from_capacity(
        104, block_size=4, max_num_seqs=3, max_num_batched_tokens=30, max_model_len=512,
        long_prefill_token_threshold=16, enable_prefix_caching=False,
        scheduler_reserve_full_isl=False, victim_policy="most_kv"))
    reqs = [Request("r0", [5] * 66, 24, ignore_eos=True),
            Request("r1", [6] * 42, 40, ignore_eos=True, arrival_time=0.0)]
    preempted = run_to_end(s, reqs, limit=500)
    assert all(len(r.output_token_ids) == r.max_tokens for r in reqs)
    assert "r0" not in preempted[preempted.index("r1"):]  # r1 never evicts r0


def test_vllm_default_under_priority_is_upstreams_least_important() -> None:
    s = VllmScheduler(VllmSchedulerConfig(num_blocks=6, block_size=4, max_num_seqs=2,
                                          max_num_batched_tokens=18, policy="priority"))
    reqs = [Request("r0", list(range(5, 15)), 20, priority=1, ignore_eos=True),
            Request("r1", list(range(5, 13)), 20, priority=0, ignore_eos=True)]
    for r in reqs:
        s.add_request(r)
    preempted: list[str] = []
    for n in range(10):
        plan = s.schedule()
        s.update_from_output(plan, StepResult(
            {c.request_id: fake_token(c.request_id, n) for c in plan.chunks if c.sample}, 0.0))
        preempted += plan.preempted
        if preempted:
            break
    assert preempted == ["r0"]  # the larger priority value is the less important


def test_vllm_random_is_seeded() -> None:
    def victim(seed: int) -> str:
        return vllm_until_preemption(vllm_sched("random", 19, seed), VLLM_SPEC).preempted[0]

    victims = [victim(seed) for seed in range(8)]
    assert victims == [victim(seed) for seed in range(8)]
    assert len(set(victims)) > 1


# ------------------------------------------------------------------ SGLang
def sglang_sched(policy: str, seed: int = 0) -> SglangScheduler:
    return SglangScheduler(SglangSchedulerConfig(
        max_total_tokens=148, schedule_conservativeness=0.05, chunked_prefill_size=64,
        victim_policy=policy, random_seed=seed))


# At step 27 the decode batch outgrows the 148-slot pool:
#   r0: arrived 0, 25 outputs, prompt 21, 45 slots, 16 left to max_tokens
#   r1: arrived 2, 24 outputs, prompt  5, 28 slots,  3 left
#   r2: arrived 2, 24 outputs, prompt 14, 37 slots,  3 left
#   r3: arrived 5, 22 outputs, prompt 14, 35 slots, 11 left
SGLANG_SPEC = [(0, 21, 41), (2, 5, 27), (2, 14, 27), (5, 14, 33)]


def sglang_until_retraction(s: SglangScheduler) -> StepPlan:
    pending = [(t, Request(f"r{i}", [100 + 10 * i + k for k in range(plen)], max_tokens=cap,
                           arrival_time=float(t), eos_token_id=None))
               for i, (t, plen, cap) in enumerate(SGLANG_SPEC)]
    run = Run()
    for n in range(200):
        while pending and pending[0][0] <= n:
            r = pending.pop(0)[1]
            assert s.add_request(r) is None
            run.requests[r.request_id] = r
        plan = step(s, run)
        if plan.preempted:
            return plan
    raise AssertionError("no retraction")


@pytest.mark.parametrize(("policy", "victim"), [
    ("default", "r3"),             # upstream length rule: fewest outputs
    ("latest_arrival", "r3"),
    ("fewest_outputs", "r3"),
    ("least_progress", "r1"),
    ("most_kv", "r0"),
    ("shortest_remaining", "r2"),  # r1 and r2 both have 3 left and arrived together
])
def test_sglang_victim_by_policy(policy: str, victim: str) -> None:
    s = sglang_sched(policy)
    plan = sglang_until_retraction(s)
    assert plan.step == 27
    assert plan.preempted[0] == victim
    assert plan.chunks, "retraction keeps at least one request"
    assert {c.request_id for c in plan.chunks}.isdisjoint(plan.preempted)
    # victims go to the tail of the waiting queue, in the order retracted
    assert [r.rid for r in s.waiting_queue][-len(plan.preempted):] == plan.preempted


def test_sglang_random_is_seeded() -> None:
    def victim(seed: int) -> str:
        return sglang_until_retraction(sglang_sched("random", seed)).preempted[0]

    victims = [victim(seed) for seed in range(8)]
    assert victims == [victim(seed) for seed in range(8)]
    assert len(set(victims)) > 1


# ------------------------------------------------------------------ ranking and config
def facts(rid: str, arrival: float, outputs: int = 0, prompt: int = 1) -> VictimFacts:
    return VictimFacts(rid, arrival, outputs, prompt, prompt + outputs, prompt + outputs,
                       10 - outputs)


def test_ties_go_to_the_later_arrival_then_the_larger_id() -> None:
    # all equal under fewest_outputs: the order of the list does not matter
    xs = [facts("b", 1.0), facts("a", 2.0), facts("c", 1.0)]
    assert [xs[i].request_id for i in rank_victims(xs, "fewest_outputs", random.Random(0))
            ] == ["a", "c", "b"]
    rev = xs[::-1]
    assert [rev[i].request_id for i in rank_victims(rev, "most_kv", random.Random(0))
            ] == ["a", "c", "b"]


def test_random_ranking_ignores_the_list_order() -> None:
    xs = [facts(f"r{i}", float(i)) for i in range(6)]
    one = [xs[i].request_id for i in rank_victims(xs, "random", random.Random(3))]
    rev = xs[::-1]
    two = [rev[i].request_id for i in rank_victims(rev, "random", random.Random(3))]
    assert one == two


@pytest.mark.parametrize("make", [
    lambda p: VllmSchedulerConfig(num_blocks=8, victim_policy=p),
    lambda p: SglangSchedulerConfig(max_total_tokens=64, victim_policy=p),
])
def test_unknown_victim_policy_is_refused_with_the_valid_names(make) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=r"victim_policy='oldest': valid: "
                                         + ", ".join(VICTIM_POLICIES)):
        make("oldest")
    for name in VICTIM_POLICIES:
        make(name)


def test_sglang_victim_policy_and_priority_retraction_do_not_mix() -> None:
    with pytest.raises(ValueError, match=r"victim_policy='most_kv': replaces "
                                         r"retraction_policy='priority'"):
        SglangSchedulerConfig(max_total_tokens=64, victim_policy="most_kv",
                              retraction_policy="priority")
    SglangSchedulerConfig(max_total_tokens=64, retraction_policy="priority")


@pytest.mark.parametrize(("overrides", "field"), [
    (["scheduler.victim_policy=least_progress", "scheduler.random_seed=7"], "random_seed"),
    (["scheduler=sglang", "scheduler.victim_policy=least_progress",
      "scheduler.random_seed=7"], "random_seed"),
])
def test_hydra_overrides_reach_the_scheduler(overrides: list[str], field: str) -> None:
    from test_reliability_config import job_config

    from experiments.run.build import build_scheduler

    cfg = job_config(*overrides, "kv_capacity_tokens=16384")  # a number: built directly
    sched = build_scheduler(cfg.scheduler, int(cfg.kv_capacity_tokens))
    config = sched.config  # type: ignore[attr-defined]
    assert config.victim_policy == "least_progress"
    assert getattr(config, field) == 7


def test_eviction_options_are_declared_once_for_every_scheduler() -> None:
    """preemption_mode, host_kv_capacity_tokens, victim_policy and random_seed: one
    declaration (schedulers/eviction.py) that every evicting scheduler's config inherits (and
    no other scheduler's), none of them restated in a scheduler's YAML, one seed name (vLLM's
    old victim_seed is gone)."""
    import dataclasses
    import re
    from pathlib import Path

    from schedulers import registry
    from schedulers.eviction import EvictionOptions

    shared = [f.name for f in dataclasses.fields(EvictionOptions)]
    assert shared == ["preemption_mode", "host_kv_capacity_tokens", "victim_policy",
                      "random_seed"]
    conf = Path(__file__).resolve().parents[1] / "conf" / "scheduler"
    shipped = [n for n in registry.all_names() if not registry.get(n).test_only]
    for name in shipped:
        entry = registry.get(name)
        assert issubclass(entry.config_cls, EvictionOptions) == entry.evicts, name
        assert not (set(shared) & entry.config_fields()) or entry.evicts, name
        keys = re.findall(r"^(\w+):", (conf / f"{name}.yaml").read_text(), re.M)
        assert not set(keys) & set(shared), name
    from test_reliability_config import job_config

    with pytest.raises(Exception, match="victim_seed"):
        job_config("scheduler.victim_seed=7")
    assert registry.names("evicts")
    for name in registry.names("evicts"):
        with pytest.raises(ValueError, match=rf"{name} scheduler: random_seed=-1: must be at "
                                             "least 0"):
            registry.get(name).config(1024, random_seed=-1)
