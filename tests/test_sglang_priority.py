"""Priority scheduling and preemption of running requests (SGLang's own unit cases from
test/registered/scheduler/test_prefill_adder.py, restated on our objects, plus the loop)."""

from __future__ import annotations

from sglang_helpers import Run, req, sched, step

from schedulers.sglang.kv_cache import KVCache
from schedulers.sglang.memory_pool import ReqToTokenPool, make_allocator
from schedulers.sglang.radix_cache import RadixCache
from schedulers.sglang.req import Req
from schedulers.sglang.schedule_batch import ScheduleBatch
from schedulers.sglang.schedule_policy import PrefillAdder

PARAMS = [("run1", 0, 50), ("run2", 1, 75), ("run3", 2, 100)]


def _adder(params: list[tuple[str, int, int]], low_first: bool, available: int
           ) -> tuple[PrefillAdder, list[Req], ScheduleBatch]:
    alloc = make_allocator(available, 1)
    kv = KVCache(RadixCache(1, alloc), alloc, ReqToTokenPool(8))
    running = []
    for k, (_, prio, max_new) in enumerate(params):
        r = Req(req(k, [1], max_new, priority=prio))
        r.wait_queue_entry_time = 0
        running.append(r)
    batch = ScheduleBatch(list(running), kv)
    adder = PrefillAdder(1, kv, batch, 1.0, 10000, None,
                         priority_scheduling_preemption_threshold=0,
                         schedule_low_priority_values_first=low_first)
    return adder, running, batch


def _new(priority: int, max_new: int) -> Req:
    return Req(req(99, [5, 6], max_new, priority=priority))


def test_preempt_success_high_priority_values_first() -> None:
    adder, running, batch = _adder(PARAMS, low_first=False, available=225)
    assert adder.total_offset == 225 and adder.rem_total_tokens == 0
    assert adder.preempt_to_schedule(_new(1, 49))
    assert adder.preempt_list == [running[0]]
    assert adder.total_offset == 175
    assert batch.reqs == running[1:]
    assert running[0].is_retracted and running[0].retraction_count == 1


def test_preempt_success_low_priority_values_first() -> None:
    adder, running, _ = _adder(PARAMS, low_first=True, available=225)
    assert adder.preempt_to_schedule(_new(1, 49))
    assert adder.preempt_list == [running[2]] and adder.total_offset == 125


def test_preempt_fail_low_priority_values_first() -> None:
    adder, _, _ = _adder(PARAMS, low_first=True, available=225)
    assert not adder.preempt_to_schedule(_new(2, 49))  # no priority gap
    assert not adder.preempt_to_schedule(_new(1, 110))  # run3 alone frees 100 < 110
    assert adder.preempt_list == [] and adder.total_offset == 225


def test_preempt_fail_high_priority_values_first() -> None:
    adder, _, _ = _adder(PARAMS, low_first=False, available=225)
    assert not adder.preempt_to_schedule(_new(0, 49))
    assert not adder.preempt_to_schedule(_new(-1, 110))


def test_preempt_skips_already_preempted() -> None:
    adder, running, _ = _adder(PARAMS, low_first=False, available=225)
    assert adder.preempt_to_schedule(_new(1, 49))
    assert not adder.preempt_to_schedule(_new(1, 76))  # would need run1 again
    assert adder.preempt_list.count(running[0]) == 1 and adder.total_offset == 175


def test_preempt_exactly_once_and_twice() -> None:
    params = [*PARAMS, ("run4", 2, 125), ("run5", 2, 125)]
    adder, running, _ = _adder(params, low_first=True, available=475)
    assert adder.preempt_to_schedule(_new(1, 75))
    assert adder.preempt_list == [running[2]] and adder.total_offset == 375
    adder, running, _ = _adder(params, low_first=True, available=475)
    assert adder.preempt_to_schedule(_new(1, 200))
    assert adder.preempt_list == [running[2], running[3]] and adder.total_offset == 250


def _two_low_then(priority: int, **cfg: object) -> tuple[Run, list[list[str]]]:
    s = sched(2000, max_running_requests=2, enable_priority_scheduling=True, **cfg)
    run = Run()
    preempted: list[list[str]] = []
    for i in range(2):
        r = req(i, [10 + i, 20 + i, 30 + i], 30, priority=0)
        s.add_request(r)
        run.requests[r.request_id] = r
    for k in range(60):
        if k == 3:
            hi = req(2, [7, 8, 9], 5, priority=priority)
            assert s.add_request(hi) is None
            run.requests[hi.request_id] = hi
        plan = step(s, run)
        if plan.preempted:
            preempted.append(list(plan.preempted))
        if not s.has_unfinished():
            break
    return run, preempted


def test_high_priority_arrival_preempts_a_running_request() -> None:
    run, preempted = _two_low_then(20)
    # the lowest priority, latest queued running request goes (r1 was queued after r0)
    assert preempted == [["r1"]]
    admitted_at = next(i for i, p in enumerate(run.plans)
                       if any(c.request_id == "r2" for c in p.chunks))
    assert any(c.admitted for c in run.plans[admitted_at].chunks if c.request_id == "r2")
    assert run.plans[admitted_at].preempted == ["r1"]
    assert set(run.finished) == {"r0", "r1", "r2"}
    for r in run.requests.values():
        assert len(r.output_token_ids) == r.max_tokens


def test_priority_gap_within_threshold_does_not_preempt() -> None:
    _, preempted = _two_low_then(10)  # threshold 10: a gap of 10 is not enough
    assert preempted == []
    _, preempted = _two_low_then(20, disable_priority_preemption=True)
    assert preempted == []


def test_fcfs_with_priority_sorts_by_priority_then_arrival() -> None:
    s = sched(2000, max_running_requests=1, enable_priority_scheduling=True,
              disable_priority_preemption=True)
    run = Run()
    for i, prio in enumerate([0, 5, 5, 9]):
        r = req(i, [i + 1, i + 2], 2, priority=prio)
        s.add_request(r)
        run.requests[r.request_id] = r
    order = []
    while s.has_unfinished():
        plan = step(s, run)
        order += [c.request_id for c in plan.chunks if c.admitted]
    assert order == ["r3", "r1", "r2", "r0"]
    s2 = sched(2000, max_running_requests=1, enable_priority_scheduling=True,
               schedule_low_priority_values_first=True, disable_priority_preemption=True)
    run2 = Run()
    for i, prio in enumerate([3, 1, 2]):
        r = req(i, [i + 1, i + 2], 2, priority=prio)
        s2.add_request(r)
        run2.requests[r.request_id] = r
    order2 = []
    while s2.has_unfinished():
        order2 += [c.request_id for c in step(s2, run2).chunks if c.admitted]
    assert order2 == ["r1", "r2", "r0"]
