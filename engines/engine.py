"""The step loop over a virtual clock (DESIGN.md, "Engine and clock").

Each iteration:
1. admit every request whose `arrival_time <= clock`: `executor.register(request)`, then
   `scheduler.add_request(request)`; a non-None return is a rejection reason and the request
   ends "rejected";
2. if the scheduler has nothing unfinished, jump the clock to the next arrival (or stop);
3. `plan = scheduler.schedule()`;
4. `result = executor.execute(plan)` (an empty plan is not executed: it takes no time);
5. `clock += result.duration_s`; `events = scheduler.update_from_output(plan, result)`;
6. record;
7. when the engine was given a `check` (`check_invariants=true`), call it on the scheduler: an
   exception from it stops the run with `InvariantViolation`, naming the step and the clock.
A plan without chunks that aborts or finishes nothing while work is pending jumps the clock to
the next arrival, or, when none is due, raises `DeadlockError` naming the stuck requests (a
scheduler gets two more tries first: SGLang legitimately idles for one step after its last
running request finishes, and a plan that only preempts makes room for the next). Every
`schedule()` is paired with an `update_from_output()`, as upstream vLLM does. The loop is
O(chunks) per step; memory holds only live requests (see `engines.records`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from engines.arrivals import ArrivalQueue
from engines.executors.base import Executor
from engines.records import Recorder
from schedulers.contract import Request, Scheduler, StepResult

if TYPE_CHECKING:
    import pandas as pd

# Consecutive chunk-less plans tolerated when they preempt something (state changed).
_MAX_EMPTY_PLANS = 3
_SHOW_IDS = 20


class DeadlockError(RuntimeError):
    """Work is pending, nothing can be scheduled, and no arrival is due."""

    def __init__(self, message: str, stuck_ids: list[str]) -> None:
        super().__init__(message)
        self.stuck_ids = stuck_ids


class StepLimitError(RuntimeError):
    """The run reached the engine's `max_steps` with work still pending."""


class InvariantViolation(RuntimeError):
    """The scheduler's state failed the engine's per-step `check`."""


SchedulerCheck = Callable[[Scheduler], None]


@dataclass(slots=True)
class EngineResult:
    """What one run produced: the records (see `engines.records`) and the clock span.

    `requests` / `steps` are the tables; with a spooled recorder they are read back from its
    files on each access (all rows in memory: use `requests_path` / `steps_path` to stream).
    """

    recorder: Recorder
    start_time: float
    end_time: float
    num_steps: int

    @property
    def requests(self) -> pa.Table:
        return self.recorder.requests_table()

    @property
    def steps(self) -> pa.Table:
        return self.recorder.steps_table()

    @property
    def requests_path(self) -> Path:
        """The requests parquet file of a spooled recorder."""
        return self.recorder.spool_paths[0]

    @property
    def steps_path(self) -> Path:
        """The steps parquet file of a spooled recorder."""
        return self.recorder.spool_paths[1]

    @property
    def duration_s(self) -> float:
        """Virtual seconds from the first arrival to the end of the last step."""
        return self.end_time - self.start_time

    def requests_df(self) -> pd.DataFrame:
        return self.requests.to_pandas()

    def steps_df(self) -> pd.DataFrame:
        return self.steps.to_pandas()


def _format_ids(ids: list[str]) -> str:
    shown = ", ".join(ids[:_SHOW_IDS])
    return shown + (f", ... ({len(ids)} in all)" if len(ids) > _SHOW_IDS else "")


class Engine:
    """Drives one scheduler and one executor over requests on a virtual clock.

    `requests`: a list (sorted here by arrival time) or any iterable already in arrival
    order, pulled only as the clock reaches each request (`engines.arrivals`). Requests that
    have ended are released from the recorder and the executor between steps.
    """

    def __init__(self, scheduler: Scheduler, executor: Executor, requests: Iterable[Request],
                 recorder: Recorder | None = None, max_steps: int | None = None,
                 check: SchedulerCheck | None = None) -> None:
        self.scheduler = scheduler
        self.check = check
        self.executor = executor
        self.recorder = recorder if recorder is not None else Recorder()
        self.max_steps = max_steps
        self.arrivals = ArrivalQueue(requests)
        self.recorder.start(self.arrivals.total)
        self.clock = 0.0
        self._ran = False

    def _run_check(self, clock: float) -> None:
        assert self.check is not None
        try:
            self.check(self.scheduler)
        except Exception as e:
            raise InvariantViolation(
                f"engine: {self.scheduler.name} broke an invariant after step "
                f"{self.recorder.num_steps} at t={clock:.6f}s: {type(e).__name__}: {e}") from e

    def run(self) -> EngineResult:
        """Replay every request to completion and return the records."""
        if self._ran:
            raise RuntimeError("engine: run() was already called; build a new Engine")
        self._ran = True
        sched, executor, rec = self.scheduler, self.executor, self.recorder
        arrivals = self.arrivals
        release = getattr(executor, "release", None)
        stall = 0
        clock = self.clock
        start_time = arrivals.peek_time() if arrivals.pending() else 0.0
        while True:
            for rid in rec.release_ended():
                if release is not None:
                    release(rid)
            while arrivals.peek_time() <= clock:
                req = arrivals.pop()
                i = rec.on_arrival(req)
                executor.register(req)
                reason = sched.add_request(req)
                if reason is None:
                    rec.on_admit(i)
                else:
                    rec.on_reject(i, reason, clock)
                del req
            if not sched.has_unfinished():
                if not arrivals.pending():
                    break
                clock = max(clock, arrivals.peek_time())
                continue
            if self.max_steps is not None and rec.num_steps >= self.max_steps:
                live = rec.live_ids()
                raise StepLimitError(
                    f"engine: max_steps={self.max_steps} reached at t={clock:.6f}s with "
                    f"{len(live)} request(s) unfinished: {_format_ids(live)}")
            plan = sched.schedule()
            # An empty plan is not executed: it takes no time and samples nothing.
            result = executor.execute(plan) if plan.chunks else StepResult({}, 0.0)
            start = clock
            clock += result.duration_s
            events = sched.update_from_output(plan, result)
            rec.on_step(plan, result, events, start, clock, sched.stats())
            if self.check is not None:
                self._run_check(clock)
            if plan.chunks or plan.aborted or events.finished:
                stall = 0
                continue
            stall += 1
            if stall < _MAX_EMPTY_PLANS:
                continue
            if arrivals.pending():
                clock = max(clock, arrivals.peek_time())
                stall = 0
                continue
            live = rec.live_ids()
            stats = sched.stats()
            raise DeadlockError(
                f"engine: deadlock at t={clock:.6f}s: {sched.name} scheduled nothing with "
                f"{len(live)} request(s) pending and no arrival due "
                f"(running={stats.num_running}, waiting={stats.num_waiting}, "
                f"kv_used={stats.kv_used_tokens}/{stats.kv_capacity_tokens} slots); "
                f"stuck: {_format_ids(live)}",
                live,
            )
        self.clock = clock
        if self.check is not None:
            self._run_check(clock)
        for rid in rec.release_ended():
            if release is not None:
                release(rid)
        rec.finish()
        return EngineResult(
            recorder=rec,
            start_time=start_time,
            end_time=max(clock, start_time),
            num_steps=rec.num_steps,
        )
