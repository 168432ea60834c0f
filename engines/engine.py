"""The step loop over a virtual clock (DESIGN.md, "Engine and clock").

The engine runs the loop the scheduler declares (`LoopDeclaringScheduler`, DESIGN.md "Engine
loops"): the synchronous loop below, or a pipelined loop of engines/pipeline.py (vLLM's
batch queue, SGLang's overlap loop). Each iteration of the synchronous loop:
1. admit every request whose `arrival_time <= clock`: `executor.register(request)`; with
   `admission` limits, a request over them ends "rejected_503" at once (engines/admission.py);
   then `scheduler.add_request(request)`: a non-None return is a rejection reason and the
   request ends "rejected";
2. if the scheduler has nothing unfinished, jump the clock to the next arrival (or stop);
3. `plan = scheduler.schedule()`;
4. `result = executor.execute(plan)` (a plan without chunks or swaps is not executed: it
   takes no time);
5. `clock += result.duration_s`; `events = scheduler.update_from_output(plan, result)`;
6. record;
7. when the engine was given a `check` (`check_invariants=true`), call it on the scheduler: an
   exception from it stops the run with `InvariantViolation`, naming the step and the clock.
After a steady decode step, when the scheduler and the executor both support decode runs
(`decode_runs=True`, the default, and no `check`), the engine commits the steady steps ahead
at once (DESIGN.md, "Decode runs"; the batch-queue loop's runs are in engines/pipeline.py):
the scheduler bounds the run (`decode_run`), the executor ends it at the first stop token
(`decode_run_limit`), arrivals either end it or, when they change nothing
(`arrivals_keep_decode_run`), are admitted at their step boundaries, and the scheduler,
executor and recorder commit it with the same results, to the byte, as the step-by-step loop.
A plan without chunks that aborts or finishes nothing while work is pending jumps the clock to
the next arrival, or, when none is due, raises `DeadlockError` naming the stuck requests (a
scheduler gets two more tries first: SGLang legitimately idles for one step after its last
running request finishes, and a plan that only preempts makes room for the next). Every
`schedule()` is paired with an `update_from_output()`, as upstream vLLM does. A run that keeps
scheduling but computes nothing new (a livelock: requests evicting each other forever) stops
with `NoProgressError` naming the requests (engines/livelock.py). The loop is
O(chunks) per step; memory holds only live requests (see `engines.records`).
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from engines.admission import AdmissionLimits, FrontDoor
from engines.arrivals import ArrivalQueue, check_clock, next_arrival_clock
from engines.errors import ClockError as ClockError  # re-exported
from engines.errors import DeadlockError, InvariantViolation, NoProgressError, StepLimitError
from engines.executors.base import DecodeRunExecutor, Executor, ReleasingExecutor
from engines.livelock import ProgressWatch, format_ids
from engines.pipeline import BatchQueueLoop
from engines.records import Recorder
from schedulers.contract import (
    BATCH_QUEUE,
    OVERLAP,
    SYNCHRONOUS,
    DecodeRunScheduler,
    EngineLoop,
    LoopDeclaringScheduler,
    PipelinedDecodeRunScheduler,
    Request,
    Scheduler,
    StepPlan,
    StepResult,
)

# A replay allocates millions of long-lived objects (requests, blocks, token lists) and
# makes almost no reference cycles: at the default threshold (700 net container allocations)
# the cyclic collector ran ~500 times in a whole Azure conv replay and took ~9 % of it.
_GC_GEN0_THRESHOLD = 100_000


@contextmanager
def _fewer_gc_passes() -> Iterator[None]:
    """Run the cyclic garbage collector less often while the body runs (what it collects,
    and hence every result, is the same); the thresholds are put back after."""
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], _GC_GEN0_THRESHOLD), old[1], old[2])
    try:
        yield
    finally:
        gc.set_threshold(*old)


# Consecutive chunk-less plans tolerated when they preempt something (state changed).
_MAX_EMPTY_PLANS = 3
# The longest decode run committed at once (bounds the work of sizing one).
_MAX_RUN_STEPS = 4096


SchedulerCheck = Callable[[Scheduler], None]
# The loops this engine implements, by `EngineLoop.name`.
_LOOPS = (SYNCHRONOUS.name, BATCH_QUEUE.name, OVERLAP.name)


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


class Engine:
    """Drives one scheduler and one executor over requests on a virtual clock.

    `requests`: a list (sorted here by arrival time) or any iterable already in arrival
    order, pulled only as the clock reaches each request (`engines.arrivals`). Requests that
    have ended are released from the recorder and the executor between steps.
    """

    def __init__(self, scheduler: Scheduler, executor: Executor, requests: Iterable[Request],
                 recorder: Recorder | None = None, max_steps: int | None = None,
                 check: SchedulerCheck | None = None,
                 admission: AdmissionLimits | None = None, decode_runs: bool = True,
                 watch: ProgressWatch | None = None) -> None:
        self.scheduler = scheduler
        # Always on: a step loop that computes nothing new stops (engines/livelock.py).
        self.watch = watch if watch is not None else ProgressWatch()
        self.door = FrontDoor(admission) if admission is not None and admission.active \
            else None
        self.check = check
        self.executor = executor
        self.recorder = recorder if recorder is not None else Recorder()
        self.max_steps = max_steps
        self.arrivals = ArrivalQueue(requests)
        self.recorder.start(self.arrivals.total)
        self.clock = 0.0
        self._ran = False
        # The loop the scheduler declares (DESIGN.md, "Engine loops"); synchronous if none.
        self.loop: EngineLoop = (scheduler.engine_loop
                                 if isinstance(scheduler, LoopDeclaringScheduler)
                                 else SYNCHRONOUS)
        if self.loop.name not in _LOOPS:
            raise ValueError(f"engine: {scheduler.name} declares the engine loop "
                             f"{self.loop.name!r}; this engine runs: {', '.join(_LOOPS)}")
        # Decode runs need both sides' support, the synchronous loop and no per-step `check`
        # (decided in `run`). (tested once here: a protocol isinstance is too slow for the
        # step loop)
        self._runs: tuple[DecodeRunScheduler, DecodeRunExecutor] | None = (
            (scheduler, executor) if decode_runs and not self.loop.pipelined
            and isinstance(scheduler, DecodeRunScheduler)
            and isinstance(executor, DecodeRunExecutor) else None)
        # the batch-queue loop's runs (engines/pipeline.py)
        self.pipelined_runs: tuple[PipelinedDecodeRunScheduler, DecodeRunExecutor] | None = (
            (scheduler, executor) if decode_runs and self.loop.pipelined
            and isinstance(scheduler, PipelinedDecodeRunScheduler)
            and isinstance(executor, DecodeRunExecutor) else None)
        self.decode_runs = self._runs is not None or self.pipelined_runs is not None
        self.num_decode_run_steps = 0

    def run_check(self, clock: float) -> None:
        """Run the invariant check after a committed step, naming the step and `clock`."""
        assert self.check is not None
        try:
            self.check(self.scheduler)
        except Exception as e:
            raise InvariantViolation(
                f"engine: {self.scheduler.name} broke an invariant after step "
                f"{self.recorder.num_steps} at t={clock:.6f}s: {type(e).__name__}: {e}") from e

    def admit(self, req: Request, clock: float) -> bool:
        """`req` arrives at `clock`: the front door, then the scheduler. Returns whether the
        scheduler accepted it."""
        door, rec = self.door, self.recorder
        i = rec.on_arrival(req)
        self.executor.register(req)
        refusal = door.refusal(req) if door is not None else None
        if refusal is not None:
            rec.on_overload(i, refusal, clock)
            return False
        reason = self.scheduler.add_request(req)
        if reason is not None:
            rec.on_reject(i, reason, clock)
            return False
        rec.on_admit(i)
        if door is not None:
            door.enqueue(req)
        return True

    def _decode_run(self, clock: float) -> float | None:
        """Commit the steady decode steps ahead (DESIGN.md, "Decode runs"), admitting the
        arrivals due at their step boundaries when the scheduler says they change nothing
        before the run ends (`arrivals_keep_decode_run`), else stopping before them. Returns
        the clock after the run, or None when there is no run.
        """
        assert self._runs is not None
        sched, executor = self._runs
        limit = _MAX_RUN_STEPS
        if self.max_steps is not None:
            limit = min(limit, self.max_steps - self.recorder.num_steps)
        run = sched.decode_run(limit)
        if run is None:
            return None
        k = executor.decode_run_limit(run)
        arrivals = self.arrivals
        through_arrivals = sched.arrivals_keep_decode_run()
        due: list[tuple[Request, float, int]] = []  # (request, admitted at, before step)
        batch = len(run.seq_lens)
        total = sum(run.seq_lens)
        longest = max(run.seq_lens)  # a padded decode batch's cost depends on it
        step_seconds = executor.decode_step_seconds
        starts: list[float] = []
        ends: list[float] = []
        while len(starts) < k:
            if arrivals.peek_time() <= clock:
                if not through_arrivals:
                    break
                while arrivals.peek_time() <= clock:
                    due.append((arrivals.pop(), clock, len(starts)))
            starts.append(clock)
            clock += step_seconds(batch, total, longest)
            ends.append(clock)
            total += batch
            longest += 1
        if not starts:
            assert not due
            return None
        tokens = executor.decode_run_tokens(run, len(starts))
        stats = sched.commit_decode_run(run, tokens)
        # The arrivals change no decision of the run, and the run nothing they see (no first
        # token, finishes only at its end): admitting them now is admitting them on time; the
        # ones the scheduler queues count as waiting from their step on.
        if due:
            waiting = [stats.num_waiting] * len(starts) if isinstance(stats.num_waiting, int) \
                else list(stats.num_waiting)
            for req, at, j in due:
                if self.admit(req, at):
                    for step in range(j, len(starts)):
                        waiting[step] += 1
            stats.num_waiting = waiting
        # Every request of a run had its first token before it, so none of them is in the
        # front door's queue: the run's finishes leave nothing there to update.
        self.recorder.on_decode_run(run, starts, ends, stats)
        self.num_decode_run_steps += len(starts)
        return clock

    def observe(self, plan: StepPlan, ended: list[str], clock: float) -> None:
        """Show the livelock watch a plan and the requests that ended with it."""
        try:
            self.watch.observe(plan, ended)
        except NoProgressError as e:
            # The context is formatted here, on the error, not on every step.
            stats = self.scheduler.stats()
            raise NoProgressError(
                f"engine: {self.scheduler.name} at t={clock:.6f}s: {e} (running="
                f"{stats.num_running}, waiting={stats.num_waiting}, kv_used="
                f"{stats.kv_used_tokens}/{stats.kv_capacity_tokens} slots; live: "
                f"{format_ids(self.recorder.live_ids())})", e.stuck_ids) from None

    def run(self) -> EngineResult:
        """Replay every request to completion and return the records."""
        if self._ran:
            raise RuntimeError("engine: run() was already called; build a new Engine")
        self._ran = True
        with _fewer_gc_passes():
            return self._run()

    def _run(self) -> EngineResult:
        rec, arrivals = self.recorder, self.arrivals
        release = self.executor.release if isinstance(self.executor, ReleasingExecutor) \
            else None
        start_time = arrivals.peek_time() if arrivals.pending() else 0.0
        if self.loop.pipelined:
            clock = BatchQueueLoop(self, self.loop.batch_queue_size,
                                   overlap=self.loop.name == OVERLAP.name).run(self.clock)
        else:
            clock = self._run_synchronous(self.clock)
        self.clock = clock
        if self.check is not None:
            self.run_check(clock)
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

    def _run_synchronous(self, clock: float) -> float:
        """The synchronous loop from `clock` (module docstring); returns the clock when every
        request has ended."""
        sched, executor, rec = self.scheduler, self.executor, self.recorder
        arrivals = self.arrivals
        release = executor.release if isinstance(executor, ReleasingExecutor) else None
        stall = 0
        # Every pass of the loop admits an arrival, commits a step the progress watch sees,
        # or ends: the clock stays finite and non-decreasing (`check_clock`), and a jump to
        # the next arrival reaches it (`next_arrival_clock`), so no pass can repeat forever.
        check_clock(clock, -math.inf, "the start")
        use_runs = self.decode_runs and self.check is None
        door = self.door
        watch = self.watch
        while True:
            for rid in rec.release_ended():
                watch.forget(rid)
                if release is not None:
                    release(rid)
            while arrivals.peek_time() <= clock:
                self.admit(arrivals.pop(), clock)
            if not sched.has_unfinished():
                if not arrivals.pending():
                    break
                clock = next_arrival_clock(clock, arrivals)
                continue
            if self.max_steps is not None and rec.num_steps >= self.max_steps:
                live = rec.live_ids()
                raise StepLimitError(
                    f"engine: max_steps={self.max_steps} reached at t={clock:.6f}s with "
                    f"{len(live)} request(s) unfinished: {format_ids(live)}")
            if use_runs:
                after = self._decode_run(clock)
                if after is not None:
                    if not clock <= after < math.inf:
                        check_clock(after, clock, f"the decode run ending at step {rec.num_steps}")
                    clock = after
                    stall = 0
                    watch.progressed()
                    continue
            plan = sched.schedule()
            # An empty plan is not executed: it takes no time and samples nothing.
            result = (executor.execute(plan) if plan.chunks or plan.has_swaps
                      else StepResult({}, 0.0))
            start = clock
            clock += result.duration_s
            if not start <= clock < math.inf:
                check_clock(clock, start, f"step {rec.num_steps + 1} "
                            f"(duration_s={result.duration_s!r})")
            events = sched.update_from_output(plan, result)
            rec.on_step(plan, result, events, start, clock, sched.stats())
            if door is not None:
                door.on_step(plan, events)
            if self.check is not None:
                self.run_check(clock)
            self.observe(plan, [rid for rid, _ in events.finished], clock)
            if plan.chunks or plan.aborted or events.finished:
                stall = 0
                continue
            stall += 1
            if stall < _MAX_EMPTY_PLANS:
                continue
            if arrivals.pending():
                clock = next_arrival_clock(clock, arrivals)
                stall = 0
                continue
            live = rec.live_ids()
            stats = sched.stats()
            raise DeadlockError(
                f"engine: deadlock at t={clock:.6f}s: {sched.name} scheduled nothing with "
                f"{len(live)} request(s) pending and no arrival due "
                f"(running={stats.num_running}, waiting={stats.num_waiting}, "
                f"kv_used={stats.kv_used_tokens}/{stats.kv_capacity_tokens} slots); "
                f"stuck: {format_ids(live)}",
                live,
            )
        return clock
