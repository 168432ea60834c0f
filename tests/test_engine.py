"""The engine's step loop: clock jumps, rejection, deadlock, records, determinism."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import TINY_HW, TINY_MODEL
from fcfs_double import FcfsScheduler

from engines.engine import DeadlockError, Engine, StepLimitError
from engines.executors.sim import SimExecutor
from engines.records import REQUEST_SCHEMA, STEP_SCHEMA
from experiments.inputs.workloads import LengthDist, SyntheticWorkload, generate_synthetic
from experiments.results.sinks import write_table
from schedulers.contract import (
    Request,
    ScheduledChunk,
    Scheduler,
    SchedulerStats,
    StepEvents,
    StepPlan,
    StepResult,
)

TINY = dataclasses.replace(TINY_MODEL, vocab_size=1000)
HW = TINY_HW


def sim() -> SimExecutor:
    return SimExecutor(TINY, HW, step_overhead_s=0.001)


def req(i: int, prompt_len: int, out: int, t: float = 0.0, **kw: object) -> Request:
    return Request(f"r{i}", list(range(10, 10 + prompt_len)), max_tokens=out, arrival_time=t,
                   **kw)  # type: ignore[arg-type]


def _vllm_factory() -> Callable[[int], Scheduler] | None:
    try:
        from schedulers.vllm import VllmScheduler, VllmSchedulerConfig
    except ImportError:
        return None
    return lambda cap: VllmScheduler(VllmSchedulerConfig.from_capacity(
        cap, block_size=16, max_num_seqs=16, max_num_batched_tokens=256))


def _sglang_factory() -> Callable[[int], Scheduler] | None:
    try:
        from schedulers.sglang import SglangScheduler, SglangSchedulerConfig
    except ImportError:
        return None
    return lambda cap: SglangScheduler(SglangSchedulerConfig.from_capacity(
        cap, max_running_requests=16, chunked_prefill_size=256))


SCHEDULERS: dict[str, Callable[[int], Scheduler] | None] = {
    "fcfs_double": lambda cap: FcfsScheduler(cap, page_size=16, max_num_seqs=16,
                                             max_num_batched_tokens=256),
    "vllm": _vllm_factory(),
    "sglang": _sglang_factory(),
}


def make_scheduler(name: str, cap: int) -> Scheduler:
    factory = SCHEDULERS[name]
    if factory is None:
        pytest.skip(f"{name} scheduler not available")
    return factory(cap)


def workload(n: int = 60, mode: str = "fixed", seed: int = 3) -> list[Request]:
    return generate_synthetic(SyntheticWorkload(
        num_requests=n, request_rate=2000.0, seed=seed, mode=mode, max_tokens=64,
        prompt_len=LengthDist("uniform", low=20, high=120),
        output_len=LengthDist("uniform", low=1, high=40)))


def test_clock_jumps_to_arrivals() -> None:
    reqs = [req(0, 8, 3, t=2.5), req(1, 8, 3, t=100.0)]
    res = Engine(FcfsScheduler(256), sim(), reqs).run()
    rows = res.requests.to_pylist()
    assert res.start_time == 2.5
    # Nothing runs before the first arrival; the second starts exactly at its arrival.
    assert rows[0]["first_scheduled_time"] == 2.5
    assert rows[1]["first_scheduled_time"] == 100.0
    assert rows[0]["finish_time"] < 3.0
    steps = res.steps.to_pylist()
    assert steps[0]["start_time"] == 2.5
    assert next(s["start_time"] for s in steps if s["start_time"] >= 100.0) == 100.0
    assert all(r["finish_reason"] == "stop" and r["output_len"] == 3 for r in rows)
    assert res.end_time == rows[1]["finish_time"]


def test_time_advances_by_step_durations() -> None:
    res = Engine(FcfsScheduler(256), sim(), [req(0, 8, 4)]).run()
    steps = res.steps.to_pylist()
    for a, b in itertools.pairwise(steps):
        assert b["start_time"] == pytest.approx(a["start_time"] + a["duration_s"], abs=0)
    r = res.requests.to_pylist()[0]
    assert r["token_times"] == [s["start_time"] + s["duration_s"] for s in steps]
    assert r["first_token_time"] == r["token_times"][0]


def test_rejection_is_recorded() -> None:
    reqs = [req(0, 300, 10), req(1, 8, 2)]
    res = Engine(FcfsScheduler(256), sim(), reqs).run()
    rows = {r["request_id"]: r for r in res.requests.to_pylist()}
    assert rows["r0"]["finish_reason"] == "rejected"
    assert "exceeds the KV capacity 256" in rows["r0"]["finish_detail"]
    assert rows["r0"]["finish_time"] == 0.0 and math.isnan(rows["r0"]["first_scheduled_time"])
    assert rows["r1"]["finish_reason"] == "stop"  # EOS at max_tokens, not ignored


def test_deadlock_names_the_stuck_requests() -> None:
    # r0 can never fit, and FCFS blocks r1 behind it; r1's arrival comes after a jump.
    reqs = [req(0, 300, 10), req(1, 8, 2, t=5.0)]
    engine = Engine(FcfsScheduler(256, reject_oversized=False), sim(), reqs)
    with pytest.raises(DeadlockError) as e:
        engine.run()
    assert e.value.stuck_ids == ["r0", "r1"]
    msg = str(e.value)
    assert "r0, r1" in msg and "t=5.000000" in msg and "fcfs_double" in msg


def test_max_steps_guard() -> None:
    with pytest.raises(StepLimitError, match=r"max_steps=3 .* r0"):
        Engine(FcfsScheduler(256), sim(), [req(0, 8, 10)], max_steps=3).run()


class ScriptedScheduler:
    """Plays back fixed plans and events (to check the recorder's bookkeeping)."""

    name = "scripted"
    page_size = 4

    def __init__(self, script: list[tuple[StepPlan, StepEvents]]) -> None:
        self.script = list(script)
        self.added: list[str] = []

    def add_request(self, request: Request) -> str | None:
        self.added.append(request.request_id)
        return None

    def schedule(self) -> StepPlan:
        return self.script[0][0]

    def update_from_output(self, plan: StepPlan, result: StepResult) -> StepEvents:
        events = self.script.pop(0)[1]
        for c in plan.chunks:
            if c.sample:
                assert events.new_token_ids[c.request_id] == [result.sampled_token_ids[
                    c.request_id]]
        return events

    def abort(self, request_id: str, reason: str) -> None:
        pass

    def has_unfinished(self) -> bool:
        return bool(self.script)

    def stats(self) -> SchedulerStats:
        return SchedulerStats(0, 0, 64, 8, 0)


def _chunk(start: int, n: int, sample: bool, admitted: bool = False) -> ScheduledChunk:
    return ScheduledChunk("r0", list(range(n)), start, [0, 1, 2], sample, admitted)


def test_recorder_preemption_recompute_and_hits() -> None:
    r0 = req(0, 8, 4)
    ex_reg = SimExecutor(TINY, HW)  # a twin of the engine's executor, to script the tokens
    ex_reg.register(r0)

    def ev(seq_len: int, finished: bool = False) -> StepEvents:
        return StepEvents({"r0": [ex_reg.token_for("r0", seq_len)]},
                          [("r0", "length")] if finished else [])

    script = [
        (StepPlan(0, 4, [_chunk(0, 5, False, admitted=True)]), StepEvents()),
        (StepPlan(1, 4, [_chunk(5, 3, True)]), ev(8)),  # prefill done, output 1
        (StepPlan(2, 4, [_chunk(8, 1, True)]), ev(9)),  # decode, output 2
        (StepPlan(3, 4, [], preempted=["r0"]), StepEvents()),  # evicted with 9 computed
        # readmitted with a 4-token prefix hit; recomputes 4..8 and computes position 9
        (StepPlan(4, 4, [_chunk(4, 6, True, admitted=True)]), ev(10)),
        (StepPlan(5, 4, [_chunk(10, 1, True)]), ev(11, finished=True)),
    ]
    res = Engine(ScriptedScheduler(script), sim(), [r0]).run()
    r = res.requests.to_pylist()[0]
    assert r["num_preemptions"] == 1 and r["victim"]
    assert r["computed_at_preemption"] == [9]
    assert r["prefix_hit_tokens"] == [0, 4]
    assert r["num_computed_tokens"] == 5 + 3 + 1 + 6 + 1
    assert r["num_recomputed_tokens"] == 5  # positions 4..8
    assert r["output_len"] == 4 and len(r["token_times"]) == 4
    assert r["finish_reason"] == "length"
    steps = res.steps.to_pylist()
    assert [s["num_decode_tokens"] for s in steps] == [0, 0, 1, 0, 0, 1]
    assert [s["num_prefill_tokens"] for s in steps] == [5, 3, 0, 0, 6, 0]
    assert [s["num_preempted"] for s in steps] == [0, 0, 0, 1, 0, 0]
    assert steps[3]["duration_s"] == 0.0  # the empty plan took no time
    assert steps[0]["kv_used_tokens"] == 8


def test_tables_follow_the_schemas() -> None:
    res = Engine(FcfsScheduler(512), sim(), workload(5)).run()
    assert res.requests.schema == REQUEST_SCHEMA
    assert res.steps.schema == STEP_SCHEMA
    assert res.num_steps == res.steps.num_rows


def test_used_requests_are_refused() -> None:
    r = req(0, 4, 2)
    Engine(FcfsScheduler(256), sim(), [r]).run()
    with pytest.raises(ValueError, match=r"'r0' already has 2 output tokens"):
        Engine(FcfsScheduler(256), sim(), [r])


def test_duplicate_ids_are_refused() -> None:
    with pytest.raises(ValueError, match=r"duplicate request ids: r0"):
        Engine(FcfsScheduler(256), sim(), [req(0, 4, 1), req(0, 4, 1)])
    # a lazily pulled stream is checked against the requests still live
    with pytest.raises(ValueError, match=r"duplicate request ids: r0 .* still live"):
        Engine(FcfsScheduler(256), sim(), iter([req(0, 4, 8), req(0, 4, 1)])).run()


def test_a_stream_is_pulled_lazily_and_must_be_in_arrival_order() -> None:
    pulled: list[str] = []

    def stream():  # type: ignore[no-untyped-def]
        for k, t in enumerate((0.0, 0.5, 100.0)):
            pulled.append(f"r{k}")
            yield req(k, 4, 2, t=t)

    eng = Engine(FcfsScheduler(256), sim(), stream())
    assert pulled == ["r0"]  # one request ahead of the clock
    res = eng.run()
    assert res.requests.column("request_id").to_pylist() == ["r0", "r1", "r2"]
    a = Engine(FcfsScheduler(256), sim(), [req(0, 4, 2), req(1, 4, 2, t=0.5),
                                          req(2, 4, 2, t=100.0)]).run()
    assert a.requests.equals(res.requests) and a.steps.equals(res.steps)
    backwards = iter([req(0, 4, 2, t=1.0), req(1, 4, 2, t=0.25)])
    with pytest.raises(ValueError, match=r"arrival order: 'r1' arrives at t=0.25, before "
                                         r"'r0' .*t=1.0"):
        Engine(FcfsScheduler(256), sim(), backwards).run()


@pytest.mark.parametrize("name", list(SCHEDULERS))
@pytest.mark.parametrize("mode", ["fixed", "eos"])
def test_end_to_end_lengths_and_eos(name: str, mode: str) -> None:
    reqs = workload(40, mode=mode)
    res = Engine(make_scheduler(name, 1024), sim(), reqs).run()
    rows = res.requests.to_pylist()
    assert all(r["finish_reason"] == ("length" if mode == "fixed" else "stop") for r in rows)
    assert all(r["output_len"] == r["eos_output_len"] for r in rows)
    for q in reqs:  # the last token is EOS (the model emits it; fixed mode ignores it)
        assert q.output_token_ids[-1] == 2
        assert 2 not in q.output_token_ids[:-1]
    if name != "sglang":  # SGLang's conservative admission does not retract here
        assert sum(r["num_preemptions"] for r in rows) > 0  # the pool is tight enough


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_same_seed_same_bytes(name: str, tmp_path: Path) -> None:
    paths = []
    for k in range(2):
        res = Engine(make_scheduler(name, 1024), sim(), workload(60)).run()
        d = tmp_path / str(k)
        paths.append((write_table(res.requests, d / "requests.parquet"),
                      write_table(res.steps, d / "steps.parquet")))
    (a_req, a_steps), (b_req, b_steps) = paths
    assert a_req.read_bytes() == b_req.read_bytes()
    assert a_steps.read_bytes() == b_steps.read_bytes()
    assert pq.read_table(a_req).num_rows == 60


def test_the_run_collects_garbage_less_often_and_puts_the_thresholds_back() -> None:
    import gc

    seen: list[tuple[int, int, int]] = []
    before = gc.get_threshold()
    Engine(FcfsScheduler(256), sim(), [req(0, 8, 4)],
           check=lambda _s: seen.append(gc.get_threshold())).run()
    assert seen and all(t[0] >= 100_000 for t in seen)
    assert gc.get_threshold() == before
    with pytest.raises(StepLimitError):
        Engine(FcfsScheduler(256), sim(), [req(0, 8, 40)], max_steps=3).run()
    assert gc.get_threshold() == before
