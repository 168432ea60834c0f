"""Decode runs (DESIGN.md, "Decode runs") change nothing: the engine's records and the
schedulers' final state are the same, to the byte, with and without them, over random
workloads and configurations of both schedulers, in the synchronous loop and (vLLM's async
scheduling, `vllm_async`) in the batch-queue loop and (SGLang's `sglang_overlap`) in the
overlap loop."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engines.admission import AdmissionLimits
from engines.engine import Engine
from engines.executors.sim import SimExecutor
from engines.executors.specs import HardwareSpec, ModelSpec
from schedulers.contract import Request
from schedulers.sglang import SglangScheduler, SglangSchedulerConfig
from schedulers.sglang.build import build_scheduler as build_sglang_scheduler
from schedulers.vllm import VllmScheduler, VllmSchedulerConfig, build_scheduler

TINY = ModelSpec(name="tiny", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, intermediate_size=128, vocab_size=512)
HW = HardwareSpec(name="hw", peak_flops=1e12, memory_bandwidth=1e9, host_link_bandwidth=1e9)
EXAMPLES = int(os.environ.get("SCHEDBENCH_HYPOTHESIS_EXAMPLES", "40"))

Spec = list[tuple[float, int, int, int, bool, int, int]]


def make_requests(spec: Spec) -> list[Request]:
    """(arrival, prompt length, max_tokens, EOS length, ignore_eos, priority, prefix group):
    requests of one prefix group share their first 48 prompt tokens."""
    reqs = []
    for i, (t, plen, cap, eos, ig, prio, group) in enumerate(spec):
        shared = [7 + (group * 13 + k) % 400 for k in range(48)]
        own = [3 + (i * 31 + k * 7) % 500 for k in range(plen)]
        reqs.append(Request(f"r{i}", (shared + own)[:max(plen, 1)], max_tokens=cap,
                            arrival_time=t, priority=prio, eos_output_len=min(eos, cap),
                            ignore_eos=ig))
    return reqs


def build(kind: str, capacity: int, page: int, policy: str, knob: int) -> Any:
    swap: dict[str, Any] = ({"preemption_mode": "swap", "host_kv_capacity_tokens": capacity // 2}
                            if knob % 5 == 2 else {})
    swap["victim_policy"] = ["default", "most_kv", "least_progress", "random"][knob % 4]
    if kind in ("vllm", "vllm_async"):
        config = VllmSchedulerConfig.from_capacity(
            capacity, block_size=page, max_num_seqs=2 + knob % 7,
            max_num_batched_tokens=[16, 64, 256][knob % 3],
            long_prefill_token_threshold=[0, 8, 24][knob % 3], policy=policy,
            scheduler_reserve_full_isl=knob % 2 == 0, watermark=[0.0, 0.1][knob % 2],
            async_scheduling=kind == "vllm_async", **swap)
        return build_scheduler(config) if kind == "vllm_async" else VllmScheduler(config)
    if kind == "sglang_overlap":
        swap.pop("preemption_mode", None)  # the overlap loop refuses swap
        swap.pop("host_kv_capacity_tokens", None)
    sglang = SglangSchedulerConfig.from_capacity(
        capacity, page_size=page, chunked_prefill_size=[64, 128, -1][knob % 3],
        schedule_policy={"fcfs": "fcfs", "priority": "lpm"}[policy],
        max_running_requests=[None, 3, 6][knob % 3],
        schedule_conservativeness=[1.0, 0.3, 2.0][knob % 3],
        enable_priority_scheduling=knob % 4 == 1,
        disable_overlap_schedule=kind != "sglang_overlap", **swap)
    return build_sglang_scheduler(sglang) if kind == "sglang_overlap" \
        else SglangScheduler(sglang)


def table_bytes(table: pa.Table) -> bytes:
    """The table's Arrow IPC stream: equal bytes, equal tables (NaN included)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def same(a: pa.Table, b: pa.Table) -> bool:
    return table_bytes(a) == table_bytes(b)


def run(kind: str, capacity: int, page: int, policy: str, knob: int, spec: Spec,
        decode_runs: bool) -> tuple[pa.Table, pa.Table, Engine]:
    sched = build(kind, capacity, page, policy, knob)
    limits = AdmissionLimits(max_num_queued_reqs=3 + knob % 4) if knob % 6 == 5 else None
    engine = Engine(sched, SimExecutor(TINY, HW, step_overhead_s=0.001), make_requests(spec),
                    decode_runs=decode_runs, admission=limits)
    result = engine.run()
    return result.requests, result.steps, engine


workloads = st.lists(
    st.tuples(st.floats(0, 1, allow_nan=False).map(lambda x: round(x, 3)),
              st.integers(1, 160), st.integers(1, 150), st.integers(1, 150), st.booleans(),
              st.integers(0, 2), st.integers(0, 2)),
    min_size=1, max_size=20,
).map(lambda xs: sorted(xs, key=lambda x: x[0]))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["vllm", "sglang"]), capacity=st.sampled_from([256, 512, 2048]),
       page=st.sampled_from([1, 4, 16]), policy=st.sampled_from(["fcfs", "priority"]),
       knob=st.integers(0, 11), spec=workloads)
def test_decode_runs_give_the_same_records(kind: str, capacity: int, page: int, policy: str,
                                           knob: int, spec: Spec) -> None:
    if kind == "vllm" and page == 1:
        page = 8
    reqs_a, steps_a, _ = run(kind, capacity, page, policy, knob, spec, decode_runs=False)
    reqs_b, steps_b, _ = run(kind, capacity, page, policy, knob, spec, decode_runs=True)
    assert same(reqs_a, reqs_b)
    assert same(steps_a, steps_b)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["vllm_async", "sglang_overlap"]),
       capacity=st.sampled_from([256, 512, 2048]), page=st.sampled_from([1, 4, 8, 16]),
       policy=st.sampled_from(["fcfs", "priority"]), knob=st.integers(0, 11), spec=workloads)
def test_pipelined_decode_runs_give_the_same_records(kind: str, capacity: int, page: int,
                                                     policy: str, knob: int, spec: Spec
                                                     ) -> None:
    """vLLM's async scheduling in the batch-queue loop and SGLang's overlap loop: runs of
    steady loop calls give the records of the calls one by one (tight pools that preempt or
    retract, shared prefixes, priority, EOS and length finishes, arrivals inside a run,
    swap (vLLM), admission limits)."""
    if kind == "vllm_async" and page == 1:
        page = 8
    reqs_a, steps_a, _ = run(kind, capacity, page, policy, knob, spec, decode_runs=False)
    reqs_b, steps_b, _ = run(kind, capacity, page, policy, knob, spec, decode_runs=True)
    assert same(reqs_a, reqs_b)
    assert same(steps_a, steps_b)


def test_runs_cover_most_steps_of_a_long_decode() -> None:
    """The fast path is taken: long outputs with a blocked queue are mostly decode runs."""
    spec: Spec = [(0.0, 40, 400, 400, True, 0, i % 2) for i in range(12)]
    for kind in ("vllm", "vllm_async", "sglang", "sglang_overlap"):
        reqs_a, steps_a, _ = run(kind, 2048, 16, "fcfs", 0, spec, decode_runs=False)
        reqs_b, steps_b, engine = run(kind, 2048, 16, "fcfs", 0, spec, decode_runs=True)
        assert same(reqs_a, reqs_b) and same(steps_a, steps_b)
        assert engine.num_decode_run_steps > 0.8 * steps_b.num_rows, kind


def test_runs_go_through_arrivals_that_change_nothing() -> None:
    """Arrivals behind a blocked queue head (vLLM fcfs) or while the batch is full (SGLang)
    are admitted at their step boundaries inside a run: same records, and runs still cover
    most steps."""
    spec: Spec = [(0.0, 100, 300, 300, True, 0, i) for i in range(6)]
    spec += [(0.05 + 0.01 * i, 100, 20, 20, False, 0, 3) for i in range(30)]
    for kind in ("vllm", "vllm_async", "sglang", "sglang_overlap"):
        reqs_a, steps_a, _ = run(kind, 1024, 16, "fcfs", 0, spec, decode_runs=False)
        reqs_b, steps_b, engine = run(kind, 1024, 16, "fcfs", 0, spec, decode_runs=True)
        assert same(reqs_a, reqs_b) and same(steps_a, steps_b), kind
        assert engine.num_decode_run_steps > 0.7 * steps_b.num_rows, kind
        waiting = steps_b.column("num_waiting").to_pylist()
        assert max(waiting) > 5, kind  # the arrivals did queue during the runs


def test_decode_runs_stop_at_arrivals_and_eos() -> None:
    """A run never swallows an arrival or a finish: each request's first token comes after
    its arrival and its last token is its finish time."""
    spec: Spec = [(0.01 * i, 30, 90, 20 + 7 * i, False, 0, 0) for i in range(10)]
    for kind in ("vllm", "vllm_async", "sglang", "sglang_overlap"):
        reqs, _, engine = run(kind, 4096, 16, "fcfs", 0, spec, decode_runs=True)
        assert engine.num_decode_run_steps > 0
        for row in reqs.to_pylist():
            assert row["token_times"][-1] == row["finish_time"]
            assert row["first_token_time"] > row["arrival_time"]
            assert row["output_len"] == row["eos_output_len"]


def test_spooled_records_with_runs_match_the_step_by_step_tables(tmp_path: Any) -> None:
    """Decode runs into a spooled recorder flushing small batches (runs straddle step
    batches; rows leave memory as requests end): the same rows as step by step in memory."""
    from engines.records import Recorder

    spec: Spec = [(0.02 * i, 30 + 7 * i, 60, 25 + 5 * i, i % 3 == 0, 0, i % 2)
                  for i in range(14)]
    for kind in ("vllm", "vllm_async", "sglang", "sglang_overlap"):
        reqs_a, steps_a, _ = run(kind, 512, 16, "fcfs", 0, spec, decode_runs=False)
        spool = (tmp_path / f"{kind}_r.parquet", tmp_path / f"{kind}_s.parquet")
        sched = build(kind, 512, 16, "fcfs", 0)
        rec = Recorder(spool=spool, request_batch_rows=3, step_batch_rows=7)
        engine = Engine(sched, SimExecutor(TINY, HW, step_overhead_s=0.001),
                        make_requests(spec), recorder=rec)
        result = engine.run()
        assert engine.num_decode_run_steps > 0
        reqs_b = result.requests.sort_by([("arrival_time", "ascending"),
                                          ("request_id", "ascending")])
        reqs_a = reqs_a.sort_by([("arrival_time", "ascending"), ("request_id", "ascending")])
        # read back from parquet the buffers differ; the values (NaN included) must not
        assert reqs_a.schema == reqs_b.schema and str(reqs_a.to_pylist()) == str(
            reqs_b.to_pylist()), kind
        assert str(steps_a.to_pylist()) == str(result.steps.to_pylist()), kind


def test_runs_start_after_a_finish_only_when_the_head_does_not_fit() -> None:
    """Right after a finish or a preemption a run starts only when the next step's admission
    would stop (vLLM: the waiting head does not fit in the blocks the running requests leave
    at that step). Sweeping the head's prompt length across that boundary, one token at a
    time, gives the same records as step by step, and runs start at such steps (in both
    loops)."""
    for kind in ("vllm", "vllm_async"):
        for page in (4, 16):
            for plen in range(40, 200, 3):
                spec: Spec = [(0.0, 60, 90, 90, True, 0, 0), (0.0, 30, 35, 35, True, 0, 1),
                              (0.001, plen, 20, 20, True, 0, 2),
                              (0.002, 50, 40, 40, True, 0, 1)]
                for knob in (1, 4):  # watermark 0.1 and reserve_full_isl; neither
                    reqs_a, steps_a, _ = run(kind, 256, page, "fcfs", knob, spec,
                                             decode_runs=False)
                    reqs_b, steps_b, engine = run(kind, 256, page, "fcfs", knob, spec,
                                                  decode_runs=True)
                    assert same(reqs_a, reqs_b) and same(steps_a, steps_b), \
                        (kind, page, plen, knob)
                    assert engine.num_decode_run_steps > 0


def test_a_run_ends_before_it_evicts_the_waiting_heads_hit() -> None:
    """A preempted head whose chunk long_prefill_token_threshold caps needs fewer blocks once
    a free block of its own prefix hit is evicted: a run whose allocations would evict one
    must end first (found by the property above: the head was admitted a step late)."""
    spec: Spec = [(0.0, 1, 1, 1, False, 0, 0)] * 5 + [
        (0.393, 88, 58, 58, False, 0, 0), (0.406, 1, 48, 48, False, 0, 0),
        (0.406, 1, 48, 48, False, 0, 0), (0.414, 1, 41, 41, False, 0, 0),
        (0.414, 82, 39, 39, False, 0, 0), (0.438, 159, 11, 11, False, 0, 1)]
    for kind in ("vllm", "vllm_async"):
        reqs_a, steps_a, _ = run(kind, 512, 8, "fcfs", 5, spec, decode_runs=False)
        reqs_b, steps_b, engine = run(kind, 512, 8, "fcfs", 5, spec, decode_runs=True)
        assert int(pa.compute.sum(reqs_a.column("num_preemptions")).as_py()) > 0, kind
        assert same(reqs_a, reqs_b) and same(steps_a, steps_b), kind
        assert engine.num_decode_run_steps > 0, kind


def test_pipelined_runs_stop_at_max_steps_where_the_calls_one_by_one_do() -> None:
    """A run in the batch-queue loop never launches past `max_steps`: the step limit stops
    the replay at the same step, clock and live requests as without runs."""
    from engines.errors import StepLimitError

    spec: Spec = [(0.0, 40, 400, 400, True, 0, i % 2) for i in range(12)]
    for max_steps in (5, 333, 1000):
        messages = []
        for decode_runs in (False, True):
            engine = Engine(build("vllm_async", 2048, 16, "fcfs", 0),
                            SimExecutor(TINY, HW, step_overhead_s=0.001), make_requests(spec),
                            decode_runs=decode_runs, max_steps=max_steps)
            try:
                engine.run()
                messages.append("")
            except StepLimitError as e:
                messages.append(f"{e} after {engine.recorder.num_steps} steps")
        assert messages[0] and messages[0] == messages[1], max_steps


def set_spy(sched: Any, method: str, spy: Any) -> None:
    """Replace `sched`'s `method` by `spy`; the compiled core's classes take no instance
    attributes, so these tests run on the Python sources only (the records are compared
    under both cores by the property tests)."""
    try:
        setattr(sched, method, spy)
    except AttributeError:
        pytest.skip("spies need the Python sources (SCHEDBENCH_CORE=compiled)")


def spy_runs(sched: Any) -> list[tuple[str, bool, int]]:
    """Record each pipelined run the scheduler predicts: (the plan in flight's forward mode,
    whether it preempted or retracted, the run's max_steps)."""
    seen: list[tuple[str, bool, int]] = []
    predict = sched.pipelined_decode_run

    def spy(limit: int, in_flight: Any, result: Any) -> Any:
        found = predict(limit, in_flight, result)
        if found is not None:
            seen.append((in_flight.forward_mode, bool(in_flight.preempted), found.max_steps))
        return found

    set_spy(sched, "pipelined_decode_run", spy)
    return seen


def run_spied(kind: str, capacity: int, page: int, knob: int, spec: Spec
              ) -> tuple[pa.Table, pa.Table, list[tuple[str, bool, int]]]:
    sched = build(kind, capacity, page, "fcfs", knob)
    seen = spy_runs(sched)
    result = Engine(sched, SimExecutor(TINY, HW, step_overhead_s=0.001), make_requests(spec),
                    decode_runs=True).run()
    return result.requests, result.steps, seen


def test_overlap_runs_start_with_the_extend_batch_in_flight() -> None:
    """SGLang's overlap loop: the call after an extend batch is launched merges its requests
    into the running batch and decodes them all, so a run starts there (as the synchronous
    loop's run starts right after the extend step), with the records of the calls one by
    one; requests that reach their length cap end such runs, their last call's plan leaving
    them out (caps 1 to 5: no run, the shortest run, the run's last call)."""
    for page in (1, 4, 16):
        for cap in (1, 2, 3, 5, 40):
            spec: Spec = [(0.0, 30, 200, 200, True, 0, 0), (0.0, 20, 200, 200, True, 0, 1)]
            spec += [(0.02 + 0.03 * i, 10 + 9 * i, cap, cap, True, 0, i % 3)
                     for i in range(5)]
            reqs_a, steps_a, _ = run("sglang_overlap", 2048, page, "fcfs", 0, spec,
                                     decode_runs=False)
            reqs_b, steps_b, seen = run_spied("sglang_overlap", 2048, page, 0, spec)
            assert same(reqs_a, reqs_b) and same(steps_a, steps_b), (page, cap)
            # a run is at least two calls; a request of cap 1 finishes at the commit of
            # the extend batch (call 0), so it allows none
            after_extend = [s for s in seen if s[0] == "extend" and s[2] >= 2]
            assert (len(after_extend) >= 4) == (cap > 1), (page, cap, seen)


def test_batch_queue_runs_start_with_a_preempting_plan_in_flight() -> None:
    """vLLM's batch queue: a plan that preempted is in flight at the next call; its
    victims have left the running set, so a run may start there when the next plan's
    admission stops (`_admission_blocked`), with the records of the calls one by one."""
    spec: Spec = [(0.0, 40, 120, 120, True, 0, i) for i in range(8)]
    found = 0
    for page in (4, 8, 16):
        for capacity in (256, 384, 512):
            reqs_a, steps_a, _ = run("vllm_async", capacity, page, "fcfs", 0, spec,
                                     decode_runs=False)
            reqs_b, steps_b, seen = run_spied("vllm_async", capacity, page, 0, spec)
            assert same(reqs_a, reqs_b) and same(steps_a, steps_b), (page, capacity)
            found += sum(preempted for _, preempted, _ in seen)
    assert found > 0


staggered = st.tuples(
    st.lists(st.tuples(st.integers(1, 120), st.integers(20, 150), st.integers(1, 150),
                       st.booleans()), min_size=1, max_size=4),
    st.lists(st.tuples(st.floats(0.001, 0.5, allow_nan=False).map(lambda x: round(x, 3)),
                       st.integers(1, 120), st.integers(1, 8), st.integers(1, 8),
                       st.booleans(), st.integers(0, 2)), min_size=1, max_size=10),
).map(lambda t: [(0.0, p, c, e, ig, 0, i % 3) for i, (p, c, e, ig) in enumerate(t[0])]
      + sorted((a, p, c, e, ig, 0, g) for a, p, c, e, ig, g in t[1]))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["vllm_async", "sglang_overlap"]),
       capacity=st.sampled_from([192, 512, 2048]), page=st.sampled_from([1, 4, 16]),
       knob=st.integers(0, 11), spec=staggered)
def test_pipelined_runs_around_prefills_and_short_caps(kind: str, capacity: int, page: int,
                                                       knob: int, spec: Spec) -> None:
    """Long decodes joined by short requests arriving one by one (caps 1 to 8, stop tokens
    or not): runs that start with a prefill in flight (SGLang's extend batch, vLLM's
    sampling prefill chunk) or a preempting plan, and runs that end at a length cap or a
    stop token, give the records of the calls one by one."""
    if kind == "vllm_async" and page == 1:
        page = 8
    reqs_a, steps_a, _ = run(kind, capacity, page, "fcfs", knob, spec, decode_runs=False)
    reqs_b, steps_b, _ = run(kind, capacity, page, "fcfs", knob, spec, decode_runs=True)
    assert same(reqs_a, reqs_b)
    assert same(steps_a, steps_b)


def spy_last_plans(sched: Any) -> list[int]:
    """Record, for each pipelined run the scheduler commits, how many of the run's requests
    its last call's plan leaves out."""
    shrunk: list[int] = []
    commit = sched.commit_pipelined_decode_run

    def spy(run: Any, tokens: list[list[int]]) -> Any:
        plan, stats = commit(run, tokens)
        shrunk.append(len(run.request_ids) - len(plan.chunks))
        return plan, stats

    set_spy(sched, "commit_pipelined_decode_run", spy)
    return shrunk


def test_overlap_runs_end_with_the_plan_that_leaves_length_finishes_out() -> None:
    """SGLang's overlap loop: the call whose plan leaves out the requests that the batch in
    flight finishes by length (`_reqs_finishing_inflight`) is a run's last call, not a call
    of its own after the run: a run's last plan has fewer requests than the run, and the
    records are those of the calls one by one."""
    for page in (1, 16):
        spec: Spec = [(0.0, 30, 300, 300, True, 0, 0)]
        spec += [(0.0, 20 + 9 * i, 30 + 17 * i, 300, True, 0, i % 3) for i in range(4)]
        reqs_a, steps_a, _ = run("sglang_overlap", 2048, page, "fcfs", 0, spec,
                                 decode_runs=False)
        sched = build("sglang_overlap", 2048, page, "fcfs", 0)
        shrunk = spy_last_plans(sched)
        result = Engine(sched, SimExecutor(TINY, HW, step_overhead_s=0.001),
                        make_requests(spec), decode_runs=True).run()
        assert same(reqs_a, result.requests) and same(steps_a, result.steps), page
        assert sum(n > 0 for n in shrunk) == 4, (page, shrunk)  # each capped request once
