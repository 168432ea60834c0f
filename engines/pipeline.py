"""The pipelined engine loop (DESIGN.md, "Engine loops"): step k+1 is planned before step k's
result is committed, for a scheduler that declares such a loop
(`schedulers.contract.LoopDeclaringScheduler`).

`BATCH_QUEUE` mirrors vllm/v1/engine/core.py: EngineCore.step_with_batch_queue with a queue of
`batch_queue_size` plans (vLLM's `max_concurrent_batches`, 2 with async scheduling). One call
of it (one iteration below; the conformance replay logs one line per call):
1. the arrivals due by the clock reach the scheduler (EngineCore._process_input_queue runs
   before every call); with nothing unfinished and nothing queued, the clock jumps to the
   next arrival (the engine blocks on its input queue);
2. if the scheduler has unfinished requests: `schedule()`, launch the plan (below), queue it;
   the call ends there unless the queue is full or the plan computed nothing and there is
   nothing more to schedule (`must_commit`);
3. the oldest queued plan's result is committed (`update_from_output`) once it is ready.

`OVERLAP` mirrors sglang/srt/managers/scheduler.py: Scheduler.event_loop_overlap. One call:
1. the arrivals due reach the scheduler (ingest_requests), or the clock jumps as above;
2. plan batch k (`schedule()`, get_next_batch_to_run) and launch it when it computes
   something (an idle plan launches nothing);
3. commit batch k-1 when one was launched in the previous call (pop_and_process, whether or
   not batch k exists); an idle plan is then committed at once (it carries only aborts).
So at most one batch is in flight when a plan is made, as with the batch queue of two; unlike
it, a call always commits the previous batch, even when it launched nothing
(`must_commit_overlap`).

The virtual clock charges no time for scheduling in either loop (the scheduler reads no
clock), so overlapping it with execution does not shorten a step: the executor runs the plans
back to back in launch order. A plan made at clock `t` starts when the executor is free,
`start = max(t, end of the previous plan)`, and its result is ready at `end = start +
duration` (the executor's duration, as in the synchronous loop); committing it moves the clock
to `end`. In the steady state a plan is therefore made at the end of the step before the one
it follows, with that step in flight: arrivals wait one step longer, a finish frees its
blocks after the next plan is made, and a token sampled by the step in flight is a
placeholder in the next plan (`fill_placeholders`). Each committed plan is one step row
(engines/records.py): `start_time`, `duration_s` and the commit at their sum as above, plus
`planned_at` and `in_flight` (the plans launched and not yet committed when it was made).
A plan without chunks or swaps is not executed (no time). Steady calls are committed at once
as decode runs (`BatchQueueLoop._decode_run`; DESIGN.md, "Decode runs").
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engines.arrivals import check_clock, next_arrival_clock
from engines.errors import DeadlockError, StepLimitError
from engines.executors.base import DecodeRunExecutor, ReleasingExecutor
from engines.livelock import format_ids
from engines.records import Launched
from schedulers.contract import (
    NOT_SAMPLED_TOKEN_ID,
    PLACEHOLDER_TOKEN_ID,
    DecodeRun,
    DecodeRunStats,
    PipelinedDecodeRunScheduler,
    Request,
    SchedulerStats,
    StepEvents,
    StepPlan,
    StepResult,
)

if TYPE_CHECKING:
    from engines.engine import Engine

# Consecutive loop calls that compute and finish nothing before the clock jumps to the next
# arrival (or, with none due, a deadlock); as the synchronous loop's `_MAX_EMPTY_PLANS`.
_MAX_IDLE_CALLS = 3
# The most loop calls a decode run commits at once (as engines.engine's _MAX_RUN_STEPS).
_MAX_RUN_CALLS = 4096


@dataclass(slots=True)
class Batch:
    """A launched plan: its result (known at launch on our executors, committed later), when
    it was planned, and when it runs on the executor."""

    plan: StepPlan
    result: StepResult
    launched: Launched
    planned_at: float
    start: float
    end: float
    in_flight: int

    @property
    def executed(self) -> bool:
        """Whether the plan ran on the executor (an idle plan does not)."""
        return bool(self.plan.chunks or self.plan.has_swaps)


def must_commit(queued: int, size: int, executed: bool, more_to_schedule: bool) -> bool:
    """mirrors core.py: EngineCore.step_with_batch_queue: after queueing a plan (`queued`
    plans now), the call waits for the oldest result when the queue is full, or when the plan
    computed nothing and the scheduler has nothing more to schedule."""
    return queued >= size or not (executed or more_to_schedule)


def must_commit_overlap(queued: int, executed: bool) -> bool:
    """mirrors scheduler.py: Scheduler.event_loop_overlap: after planning (`queued` plans in
    the queue now, the new one included), the call processes the previous batch when there is
    one (`queued` 2), and an idle plan is committed at once (it ran nothing)."""
    return queued >= 2 or not executed


def fill_placeholders(plan: StepPlan, previous: StepResult | None) -> None:
    """Put the token that the previous plan samples where `plan` holds its placeholder (the
    last token of a chunk; with a batch queue of two only that plan is in flight)."""
    for chunk in plan.chunks:
        tokens = chunk.token_ids
        if tokens and tokens[-1] == PLACEHOLDER_TOKEN_ID:
            token = previous.sampled_token_ids.get(chunk.request_id) if previous else None
            if token is None:
                raise RuntimeError(
                    f"engine: step {plan.step} computes a placeholder token of "
                    f"{chunk.request_id} at position {chunk.start_pos + len(tokens) - 1} "
                    "that the plan in flight does not sample")
            tokens[-1] = token


class BatchQueueLoop:
    """Runs `engine` in the batch-queue loop (module docstring) from `clock`; `run` returns
    the clock when every request has ended and every queued plan is committed."""

    def __init__(self, engine: Engine, batch_queue_size: int, overlap: bool = False) -> None:
        self.engine = engine
        self.size = batch_queue_size
        self.overlap = overlap  # SGLang's event_loop_overlap (module docstring, `OVERLAP`)
        self.queue: deque[Batch] = deque()  # newest first, as upstream's appendleft / pop
        self.executor_free = 0.0  # when the executor finishes the last launched plan
        self.previous: StepResult | None = None  # the last launched plan's result
        self.ended: list[str] = []  # ended at the last commit: progress for the watch
        self.idle = 0  # calls in a row that computed and finished nothing

    def run(self, clock: float) -> float:
        eng = self.engine
        sched, rec, arrivals = eng.scheduler, eng.recorder, eng.arrivals
        release = eng.executor.release if isinstance(eng.executor, ReleasingExecutor) \
            else None
        queue = self.queue
        check_clock(clock, -math.inf, "the start")  # then every step's end (`_launch`)
        self.executor_free = clock
        runs = eng.pipelined_runs if eng.check is None else None
        while True:
            for rid in rec.release_ended():
                eng.watch.forget(rid)
                if release is not None:
                    release(rid)
            while arrivals.peek_time() <= clock:
                eng.admit(arrivals.pop(), clock)
            busy = sched.has_unfinished()
            if not busy and not queue:
                if not arrivals.pending():
                    return clock
                clock = next_arrival_clock(clock, arrivals)
                continue
            if busy and runs is not None and len(queue) == 1:
                after = self._decode_run(clock, runs)
                if after is not None:
                    clock = after
                    self.idle = 0
                    continue
            progress = False
            if busy:
                plan = self._launch(clock)
                progress = bool(plan.chunks or plan.aborted)
                executed = bool(plan.chunks or plan.has_swaps)
                if self.overlap:
                    commit = must_commit_overlap(len(queue), executed)
                else:
                    commit = must_commit(len(queue), self.size, executed,
                                         sched.has_unfinished())
                if not commit:
                    clock = self._count_idle(progress, clock)
                    continue
            batch = queue.pop()
            clock = max(clock, batch.end)
            finished = self._commit(batch)
            progress = progress or bool(batch.plan.chunks) or finished
            if self.overlap and queue and not queue[-1].executed:
                idle = queue.pop()  # the idle plan just made, committed after batch k-1
                clock = max(clock, idle.end)
                self._commit(idle)
            clock = self._count_idle(progress, clock)

    def _decode_run(self, clock: float,
                    runs: tuple[PipelinedDecodeRunScheduler, DecodeRunExecutor]
                    ) -> float | None:
        """Run the steady loop calls ahead at once (DESIGN.md, "Decode runs"), with the one
        queued plan in flight and the arrivals due at `clock` admitted; returns the clock
        after the run, or None when there is none (fewer than two calls).

        Call `j` of a run is the loop's call at clock `c_j` (`c_0 = clock`): the arrivals due
        by `c_j` (admitted then, when the scheduler says they change nothing, else the run
        stops before that call), the plan of the run's step `j` made at `c_j` and started
        when the executor is free, and the plan before it committed at its end, `c_{j+1}`.
        The last call's plan is made by the scheduler, executed and queued as any other; the
        others are not built, their durations are `decode_step_seconds` (what `execute`
        gives a decode plan). The records are those of the calls one by one.
        """
        eng = self.engine
        sched, executor = runs
        arrivals = eng.arrivals
        (first,) = self.queue
        limit = _MAX_RUN_CALLS
        if eng.max_steps is not None:  # each call's launch checks the step limit
            limit = min(limit, eng.max_steps - eng.recorder.num_steps - 1)
        run = sched.pipelined_decode_run(limit, first.plan, first.result)
        if run is None:
            return None
        # The run's step j is the plan call j makes; call j + 1 commits it. Only the last
        # call's commit may finish requests: the executor's first stop token is in step
        # `limit - 1` at the latest, so the run has at most `limit + 1` calls.
        k = min(executor.decode_run_limit(run) + 1, run.max_steps)
        through_arrivals = sched.arrivals_keep_decode_run()
        due: list[tuple[Request, float, int]] = []  # (request, admitted at, call)
        batch = len(run.seq_lens)
        total = sum(run.seq_lens)
        longest = max(run.seq_lens)
        step_seconds = executor.decode_step_seconds
        planned: list[float] = []  # c_j
        starts: list[float] = []  # the virtual plans' (steps 0 .. k - 2)
        ends: list[float] = []
        free = self.executor_free
        c = clock
        while len(planned) < k:
            j = len(planned)
            if j:  # call j - 1 committed the plan before step j - 1
                c = max(c, first.end if j == 1 else ends[j - 2])
                if arrivals.peek_time() <= c:
                    if not through_arrivals:
                        break
                    while arrivals.peek_time() <= c:
                        due.append((arrivals.pop(), c, j))
            planned.append(c)
            if j == k - 1:
                break  # the last call's plan is executed below
            start = max(c, free)
            free = start + step_seconds(batch, total, longest)
            starts.append(start)
            ends.append(free)
            total += batch
            longest += 1
        calls = len(planned)
        if calls < 2:
            assert not due
            return None
        last = calls - 1
        if len(starts) > last:  # stopped before call `calls` (an arrival): drop its step
            del starts[last:], ends[last:]
        virtual = executor.decode_run_tokens(run, last)
        sampled = first.result.sampled_token_ids
        # a request the plan in flight does not schedule (SGLang: beside an extend batch)
        # gets no token from call 0's commit
        tokens = [[sampled.get(rid, NOT_SAMPLED_TOKEN_ID), *toks]
                  for rid, toks in zip(run.request_ids, virtual)]
        plan, stats = sched.commit_pipelined_decode_run(run, tokens)
        # The arrivals change no decision of the run, and the run nothing they see: admitted
        # now, they count as waiting from their call's commit on.
        waiting = [stats.num_waiting] * calls if isinstance(stats.num_waiting, int) \
            else list(stats.num_waiting)
        rec = eng.recorder
        # Call 0 commits the plan in flight (its first tokens may leave the front door).
        capacity = eng.scheduler.stats().kv_capacity_tokens
        events = StepEvents({rid: [sampled[rid]] for rid in run.request_ids if rid in sampled},
                            [])
        rec.on_commit(first.plan, first.result, events, first.launched, first.start,
                      first.end, SchedulerStats(
                          num_running=stats.num_running, num_waiting=waiting[0],
                          kv_capacity_tokens=capacity, kv_used_tokens=stats.kv_used_tokens[0],
                          kv_cached_tokens=stats.kv_cached_tokens[0]),
                      first.planned_at, first.in_flight)
        if eng.door is not None:
            eng.door.on_step(first.plan, events)
        for req, at, j in due:
            if eng.admit(req, at):
                for call in range(j, calls):
                    waiting[call] += 1
        # Calls 1 .. calls - 1 commit the run's steps 0 .. calls - 2: one decode segment,
        # each planned one call earlier with one plan in flight (the last may finish).
        segment = DecodeRun(run.request_ids, run.seq_lens, last, run.forward_mode)
        rec.on_decode_run(segment, starts, ends, DecodeRunStats(
            stats.kv_used_tokens[1:], stats.kv_cached_tokens[1:], stats.num_running,
            waiting[1:], stats.finished, stats.num_running_after),
            planned_at=planned[:last], in_flight=1)
        # The last call's plan: its placeholders hold the tokens of the step before it.
        previous = StepResult(
            {rid: toks[-1] for rid, toks in zip(run.request_ids, tokens)}, 0.0)
        self.previous = previous
        self.executor_free = ends[-1]
        self._launch_plan(plan, planned[last])  # with one plan in flight, as upstream's
        self.queue.pop()  # `first`, committed by call 0
        self.ended = [rid for rid, _ in stats.finished]  # by the last call's commit
        eng.num_decode_run_steps += calls
        return max(planned[last], ends[-1])  # call `last` committed step last - 1

    def _launch(self, clock: float) -> StepPlan:
        """Plan at `clock`, execute the plan (placeholders filled), record its launch, queue
        it; returns the plan."""
        eng = self.engine
        if eng.max_steps is not None and eng.recorder.num_steps + len(self.queue) >= \
                eng.max_steps:
            live = eng.recorder.live_ids()
            raise StepLimitError(
                f"engine: max_steps={eng.max_steps} reached at t={clock:.6f}s with "
                f"{len(live)} request(s) unfinished: {format_ids(live)}")
        plan = eng.scheduler.schedule()
        self._launch_plan(plan, clock)
        return plan

    def _launch_plan(self, plan: StepPlan, clock: float) -> None:
        """Execute `plan`, made at `clock` (placeholders filled), record its launch, queue
        it."""
        eng = self.engine
        if plan.chunks or plan.has_swaps:
            fill_placeholders(plan, self.previous)
            result = eng.executor.execute(plan)
        else:
            result = StepResult({}, 0.0)  # an empty plan is not executed
        start = max(clock, self.executor_free)
        end = start + result.duration_s
        if not start <= end < math.inf:
            check_clock(end, start, f"the plan launched at t={start!r}s "
                        f"(duration_s={result.duration_s!r})")
        self.executor_free = end
        self.previous = result
        launched = eng.recorder.on_launch(plan, start)
        self.queue.appendleft(Batch(plan, result, launched, clock, start, end, len(self.queue)))
        eng.observe(plan, self.ended, clock)
        self.ended = []

    def _commit(self, batch: Batch) -> bool:
        """Commit `batch` (the oldest) at its end; returns whether requests finished."""
        eng = self.engine
        sched = eng.scheduler
        events = sched.update_from_output(batch.plan, batch.result)
        eng.recorder.on_commit(batch.plan, batch.result, events, batch.launched, batch.start,
                               batch.end, sched.stats(), batch.planned_at, batch.in_flight)
        if eng.door is not None:
            eng.door.on_step(batch.plan, events)
        if eng.check is not None:
            eng.run_check(batch.end)
        self.ended.extend(rid for rid, _ in events.finished)
        return bool(events.finished)

    def _count_idle(self, progress: bool, clock: float) -> float:
        """Count a call that computed and finished nothing (`progress` False); after
        `_MAX_IDLE_CALLS` in a row, jump to the next arrival, or stop with a deadlock when
        none is due (as the synchronous loop does). Returns the clock."""
        eng = self.engine
        self.idle = 0 if progress else self.idle + 1
        if self.idle < _MAX_IDLE_CALLS or not eng.scheduler.has_unfinished():
            return clock
        self.idle = 0
        if eng.arrivals.pending():
            return next_arrival_clock(clock, eng.arrivals)
        live = eng.recorder.live_ids()
        stats = eng.scheduler.stats()
        raise DeadlockError(
            f"engine: deadlock at t={clock:.6f}s: {eng.scheduler.name} scheduled nothing with "
            f"{len(live)} request(s) pending and no arrival due "
            f"(running={stats.num_running}, waiting={stats.num_waiting}, "
            f"kv_used={stats.kv_used_tokens}/{stats.kv_capacity_tokens} slots); "
            f"stuck: {format_ids(live)}",
            live,
        )
