"""Issue 24, items 6 and 7: a step duration that is NaN, infinite or that overflows the clock
stops the run with a `ClockError` naming the step, in both engine loops, instead of
spinning forever (a NaN clock never admits an arrival) or ending in a bare AssertionError.
The config check refuses such values first (tests/test_config_ranges.py); these inject them
past it, into the executor's results and the engine's clock."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import pytest
from conftest import TINY_HW, TINY_MODEL
from fcfs_double import FcfsScheduler

from engines.engine import ClockError, Engine
from engines.executors.sim import SimExecutor
from schedulers.contract import Request, StepPlan, StepResult
from schedulers.vllm import VllmSchedulerConfig, build_scheduler

TINY = dataclasses.replace(TINY_MODEL, vocab_size=1000)
TIMEOUT_S = 60  # the run ends at once; a spinning loop would never


class FixedDurationExecutor:
    """The simulated executor's tokens, every step taking `duration_s` seconds (a value no
    config may set: NaN, inf, a huge one that overflows the clock)."""

    def __init__(self, duration_s: float) -> None:
        self.inner = SimExecutor(TINY, TINY_HW, step_overhead_s=0.001)
        self.duration_s = duration_s

    def register(self, request: Request) -> None:
        self.inner.register(request)

    def execute(self, plan: StepPlan) -> StepResult:
        result = self.inner.execute(plan)
        return dataclasses.replace(result, duration_s=self.duration_s)


def requests() -> list[Request]:
    # the second arrives later: after the first step, the loop must reach it on the clock
    return [Request("r0", list(range(10, 42)), max_tokens=4, arrival_time=0.0),
            Request("r1", list(range(10, 42)), max_tokens=4, arrival_time=5.0)]


def schedulers() -> dict[str, Any]:
    return {
        "synchronous": lambda: FcfsScheduler(1024, page_size=16, max_num_seqs=8,
                                             max_num_batched_tokens=256),
        "batch_queue": lambda: build_scheduler(VllmSchedulerConfig.from_capacity(
            1024, block_size=16, max_num_seqs=8, max_num_batched_tokens=256,
            async_scheduling=True)),
    }


def run_with_timeout(engine: Engine) -> BaseException | None:
    """Run `engine` in a thread; the error it raised (None: it ended normally). Fails the
    test when the run does not end within TIMEOUT_S (the loop spins)."""
    outcome: list[BaseException | None] = []

    def target() -> None:
        try:
            engine.run()
            outcome.append(None)
        except BaseException as e:
            outcome.append(e)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(TIMEOUT_S)
    assert not thread.is_alive(), "the engine loop spins: it did not end"
    return outcome[0]


@pytest.mark.parametrize("loop", ["synchronous", "batch_queue"])
@pytest.mark.parametrize("duration", [float("nan"), float("inf"), 1e308, -1.0])
def test_a_step_duration_that_is_not_a_finite_number_of_seconds_stops_the_run(
        loop: str, duration: float) -> None:
    engine = Engine(schedulers()[loop](), FixedDurationExecutor(duration), requests(),
                    decode_runs=False)
    assert engine.loop.name == loop
    error = run_with_timeout(engine)
    assert isinstance(error, ClockError), repr(error)
    assert "a step must take a finite, non-negative number of seconds" in str(error)
    assert "duration_s=" in str(error)


@pytest.mark.parametrize("loop", ["synchronous", "batch_queue"])
def test_a_nan_clock_never_spins_the_loop(loop: str) -> None:
    """The clock itself made NaN past every check: no pass of the loop may repeat
    forever (a NaN clock never reaches the next arrival)."""
    engine = Engine(schedulers()[loop](), FixedDurationExecutor(0.01), requests())
    engine.clock = float("nan")
    error = run_with_timeout(engine)
    assert isinstance(error, ClockError), repr(error)
    assert "t=nan" in str(error)


def test_a_nan_clock_between_arrivals_is_caught_when_jumping_to_the_next() -> None:
    """The path that spun (engines/engine.py before issue 24): nothing unfinished, the
    clock jumped to the next arrival with max(nan, t) = nan, and `continue`d forever."""
    from engines.arrivals import ArrivalQueue, next_arrival_clock

    queue = ArrivalQueue(requests()[1:])
    with pytest.raises(ClockError, match=r"cannot reach the next arrival at t=5\.0 s"):
        next_arrival_clock(float("nan"), queue)
    assert next_arrival_clock(1.0, queue) == 5.0


def test_finite_durations_run_to_the_end() -> None:
    engine = Engine(schedulers()["synchronous"](), FixedDurationExecutor(0.5), requests())
    assert run_with_timeout(engine) is None
    assert engine.clock > 5.0
