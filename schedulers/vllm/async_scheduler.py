"""vLLM's async scheduling: the scheduler a plain `vllm serve` runs on a GPU.

Mirrors vllm/v1/core/sched/async_scheduler.py (AsyncScheduler) at vLLM v0.32.0, with the
parts of vllm/v1/core/sched/scheduler.py (Scheduler) that only matter while a plan is in
flight. The engine drives it with a batch queue of two (`schedulers.contract.BATCH_QUEUE`,
vllm/v1/engine/core.py: EngineCore.step_with_batch_queue): step k+1 is planned before step
k's result is committed, so when a plan is made
- each running request whose last plan samples a token holds an output placeholder for it
  (counted in `num_computed_tokens`); its next chunk computes that token's position, whose
  token id the engine fills in before executing (`PLACEHOLDER_TOKEN_ID`);
- a request whose plan in flight samples its last token (`max_tokens`) is not scheduled again,
  and keeps its blocks (and its place in `running`) until that result is committed, after
  the next `schedule()`;
- a request preempted with a plan in flight gets that plan's output later, as stale output:
  its tokens are appended (and may finish it while it waits) but no counter moves, and it is
  not readmitted until the output has arrived (the base scheduler's waiting loop skips it);
- blocks are cached when an output is committed, up to `num_computed_tokens -
  num_output_placeholders` (the positions whose tokens are known).

Not mirrored (no connector, spec decoding or pipeline parallelism here): `drop_stale_output`
(only KV connectors and `reset_prefix_cache` set it), spec-token placeholders and
`next_decode_eligible_step` (a no-op with one pipeline stage).

With `preemption_mode=swap` (ours, see schedulers/vllm/scheduler.py) a victim's swap-out
copies the positions its plan in flight computes: the engine executes plans in launch order,
so that plan has written them first.
"""

from __future__ import annotations

from schedulers.contract import (
    BATCH_QUEUE,
    DecodeRun,
    DecodeRunStats,
    StepEvents,
    StepPlan,
    StepResult,
)
from schedulers.vllm.config import VllmSchedulerConfig
from schedulers.vllm.request import FINISH_REASONS, RequestStatus, VllmRequest
from schedulers.vllm.scheduler import VllmScheduler


class AsyncVllmScheduler(VllmScheduler):
    """`VllmScheduler` for the pipelined loop (mirrors AsyncScheduler); see the module
    docstring. Its decode runs are the batch-queue loop's (`pipelined_decode_run`)."""

    def __init__(self, config: VllmSchedulerConfig) -> None:
        super().__init__(config)
        self.engine_loop = BATCH_QUEUE

    def _mirrors_async_scheduler(self) -> bool:
        return True

    def _make_plan(
        self,
        scheduled_running_reqs: list[VllmRequest],
        admitted_reqs: list[VllmRequest],
        num_scheduled_tokens: dict[str, int],
        preempted_reqs: list[VllmRequest],
        aborted: list[tuple[str, str]],
    ) -> StepPlan:
        """mirrors scheduler.py: Scheduler._update_after_schedule (num_in_flight_tokens) and
        async_scheduler.py: AsyncScheduler._update_after_schedule (one output placeholder per
        request that samples)."""
        plan = super()._make_plan(scheduled_running_reqs, admitted_reqs, num_scheduled_tokens,
                                  preempted_reqs, aborted)
        requests = self.requests
        for chunk in plan.chunks:
            req = requests[chunk.request_id]
            req.num_in_flight_tokens += len(chunk.token_ids)
            if chunk.sample:
                req.num_output_placeholders += 1
        return plan

    def _preempt_request(self, request: VllmRequest) -> None:
        """mirrors scheduler.py: Scheduler._preempt_request (async scheduling): the output of
        its plans in flight becomes stale, and its placeholders are dropped."""
        super()._preempt_request(request)
        request.num_stale_output_tokens = request.num_in_flight_tokens
        request.num_output_placeholders = 0

    def update_from_output(self, plan: StepPlan, result: StepResult) -> StepEvents:
        """mirrors scheduler.py: Scheduler.update_from_output with async_scheduler.py:
        AsyncScheduler._update_request_with_output (`plan` is the oldest plan in flight)."""
        events = StepEvents()
        if self.host_pool is not None:
            self.host_pool.commit()
        sampled = result.sampled_token_ids
        requests = self.requests
        finished = events.finished
        stopped_running = False
        stopped_waiting: list[VllmRequest] = []
        for chunk in plan.chunks:
            req = requests.get(chunk.request_id)
            if req is None:
                continue  # ended while this plan was in flight: its output is dropped
            req.num_in_flight_tokens -= len(chunk.token_ids)
            is_stale = req.num_stale_output_tokens > 0
            if is_stale:  # drained in lockstep with the in-flight tokens
                req.num_stale_output_tokens -= len(chunk.token_ids)
            if not chunk.sample or req.status.is_finished:
                continue
            was_running = req.status == RequestStatus.RUNNING
            if self._commit_token(req, sampled[chunk.request_id], is_stale, was_running,
                                  events):
                finished.append((req.request_id, FINISH_REASONS[req.status]))
                if was_running:
                    stopped_running = True
                else:
                    stopped_waiting.append(req)
                self._free_request(req)
        if stopped_running:
            self.drop_finished_from_running()
        if stopped_waiting:  # stale output finished a preempted request
            self.waiting.remove_requests(stopped_waiting)
        return events

    def _commit_token(self, req: VllmRequest, token_id: int, is_stale: bool,
                      was_running: bool, events: StepEvents) -> bool:
        """Append `token_id`; returns whether it stops the request (status set).

        mirrors async_scheduler.py: AsyncScheduler._update_request_with_output: a stale
        token changes no placeholder; only a request that was running caches its blocks, up
        to the positions whose tokens are known."""
        req.append_output_token_id(token_id)
        events.new_token_ids[req.request_id] = [token_id]
        stopped = self._check_stop(req, token_id, self.max_model_len)
        if not is_stale:
            req.num_output_placeholders -= 1
            assert req.num_output_placeholders >= 0, req
        if was_running:
            self.kv_cache_manager.cache_blocks(
                req, req.num_computed_tokens - req.num_output_placeholders)
        return stopped

    # ------------------------------------------------------------------ decode runs
    # Not upstream: the replay's fast path in the batch-queue loop (DESIGN.md, "Decode runs";
    # schedulers.contract.PipelinedDecodeRunScheduler).
    def decode_run(self, limit: int) -> DecodeRun | None:
        """No synchronous decode runs: this scheduler's runs are `pipelined_decode_run`'s."""
        return None

    def pipelined_decode_run(self, limit: int, in_flight: StepPlan, result: StepResult
                             ) -> DecodeRun | None:
        """The steady loop calls ahead (at most `limit`) while `in_flight` (the one plan in
        flight, sampling `result`) is committed: its chunks of live requests must be every
        running request's, in running order, each sampling a token that is no stop token
        (a chunk of a request that has ended since is dropped at the commit, as
        `update_from_output` drops it), and be all they have in flight (no stale output, one
        placeholder each, every known token computed). The run's step `j` is the plan the
        run's call `j` makes; see `VllmDecodeRuns.next_run`."""
        if in_flight.aborted or in_flight.has_swaps:
            return None
        running = self.running
        requests = self.requests
        sampled = result.sampled_token_ids
        i = 0
        n = len(running)
        for c in in_flight.chunks:
            if c.request_id not in requests:
                continue  # ended while the plan was in flight
            if i == n:
                return None
            r = running[i]
            i += 1
            if (c.request_id != r.request_id or not c.sample
                    or r.num_in_flight_tokens != len(c.token_ids)
                    or r.num_output_placeholders != 1 or r.num_stale_output_tokens
                    or len(r.all_token_ids) != r.num_computed_tokens
                    or sampled[r.request_id] == r.eos_token_id):
                return None
        if i != n:
            return None
        return self.decode_runs.next_run(limit, pipelined=True)

    def commit_pipelined_decode_run(self, run: DecodeRun, tokens: list[list[int]]
                                    ) -> tuple[StepPlan, DecodeRunStats]:
        """schedulers.contract.PipelinedDecodeRunScheduler.commit_pipelined_decode_run"""
        return self.decode_runs.commit_pipelined(run, tokens, self._commit_token)
