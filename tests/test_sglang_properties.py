"""Property tests: whatever the workload and config, no slot leaks or is held twice, every
request ends with exactly max_tokens outputs or an abort reason, and the loop never stalls."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from sglang_helpers import Run, step

from engines.livelock import ProgressWatch
from schedulers.contract import Request
from schedulers.sglang import SglangScheduler, SglangSchedulerConfig
from schedulers.sglang.invariants import check_sglang_invariants
from schedulers.victim_policy import VICTIM_POLICIES


@st.composite
def setups(draw: Any) -> tuple[SglangSchedulerConfig, list[tuple[int, Request]]]:
    ps = draw(st.sampled_from([1, 1, 2, 4, 8]))
    pages = draw(st.integers(min_value=48, max_value=240)) // ps
    chunk = draw(st.sampled_from([None, 1, 2, 4, 8]))
    retraction_policy = draw(st.sampled_from(["length", "priority"]))
    # a victim_policy other than default replaces retraction_policy (length)
    victim_policy = ("default" if retraction_policy == "priority"
                     else draw(st.sampled_from(VICTIM_POLICIES)))
    cfg = SglangSchedulerConfig(
        max_total_tokens=pages * ps,
        page_size=ps,
        max_running_requests=draw(st.integers(min_value=1, max_value=12)),
        schedule_policy=draw(st.sampled_from(["fcfs", "lpm", "dfs-weight", "lof", "random"])),
        chunked_prefill_size=None if chunk is None else chunk * ps * 2,
        max_prefill_tokens=draw(st.sampled_from([16, 64, 16384])),
        schedule_conservativeness=draw(st.sampled_from([0.02, 0.05, 0.3, 1.0, 2.0])),
        enable_priority_scheduling=draw(st.booleans()),
        priority_scheduling_preemption_threshold=draw(st.sampled_from([0, 10])),
        random_seed=draw(st.integers(min_value=0, max_value=3)),
        clip_max_new_tokens_estimation=draw(st.sampled_from([4096, 8])),
        prefill_max_requests=draw(st.sampled_from([None, None, 1, 3])),
        retraction_policy=retraction_policy,
        victim_policy=victim_policy,
        schedule_low_priority_values_first=draw(st.booleans()),
    )
    prefixes = [draw(st.lists(st.integers(3, 40), min_size=1, max_size=3 * ps + 6))
                for _ in range(3)]
    n = draw(st.integers(min_value=1, max_value=14))
    arrivals = []
    for i in range(n):
        pre = draw(st.sampled_from([[], *prefixes]))
        suffix = draw(st.lists(st.integers(3, 40), min_size=0 if pre else 1, max_size=12))
        r = Request(request_id=f"r{i}", prompt_token_ids=pre + suffix,
                    max_tokens=draw(st.integers(min_value=1, max_value=90)),
                    priority=draw(st.integers(min_value=-15, max_value=15)),
                    ignore_eos=draw(st.booleans()), eos_token_id=None)
        arrivals.append((draw(st.integers(min_value=0, max_value=15)), r))
    return cfg, arrivals


@settings(max_examples=int(os.environ.get("SCHEDBENCH_HYPOTHESIS_EXAMPLES", "300")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(setups())
def test_no_leak_and_every_request_completes(setup: tuple[SglangSchedulerConfig,
                                                          list[tuple[int, Request]]]) -> None:
    cfg, arrivals = setup
    s = SglangScheduler(cfg)
    run = Run()
    pending = sorted(arrivals, key=lambda a: a[0])
    k = 0
    idle_streak = 0
    watch = ProgressWatch()  # the engine's livelock detector: raises NoProgressError
    for n in range(200_000):
        if k >= len(pending) and not s.has_unfinished():
            break
        while k < len(pending) and pending[k][0] <= n:
            r = pending[k][1]
            k += 1
            why = s.add_request(r)
            if why is None:
                run.requests[r.request_id] = r
            else:
                run.rejected[r.request_id] = why
        busy = s.has_unfinished()
        ended = {*run.finished, *run.aborted}
        plan = step(s, run)
        watch.observe(plan, {*run.finished, *run.aborted} - ended)
        ps = plan.page_size
        for c in plan.chunks:
            r = run.requests[c.request_id]
            seq = r.prompt_token_ids + r.output_token_ids
            if c.sample:
                seq = seq[:-1]  # the token just sampled for it was appended by the commit
            assert c.token_ids == seq[c.start_pos:c.start_pos + len(c.token_ids)]
            assert len(c.page_ids) == (c.start_pos + len(c.token_ids) - 1) // ps + 1
        check_sglang_invariants(s)
        if busy and plan.is_empty and not plan.aborted:
            idle_streak += 1
            assert idle_streak < 2, "two idle steps in a row with work pending"
        else:
            idle_streak = 0
    assert not s.has_unfinished() and k == len(pending), "the livelock detector did not fire"
    event(f"retractions: {min(s.num_retractions, 3)}{'+' if s.num_retractions > 3 else ''}")
    event(f"preemptions: {bool(s.num_priority_preemptions)}")
    event(f"aborts: oom {bool(s.num_oom_aborts)}, stall {bool(s.num_stall_aborts)}")
    capacity = cfg.kv_capacity_tokens
    tree = s.tree_cache
    assert s.allocator.available_size() + tree.evictable_size() + tree.protected_size() == capacity
    assert tree.protected_size() == 0
    for rid, r in run.requests.items():
        if rid in run.aborted:
            assert run.aborted[rid]
        else:
            assert run.finished.get(rid) == "length", rid
            assert len(r.output_token_ids) == r.max_tokens
