"""SGLang's overlap scheduling: the loop a plain SGLang server runs.

Mirrors python/sglang/srt/managers/scheduler.py: Scheduler.event_loop_overlap at v0.5.22 (and
the parts of `Scheduler` and of scheduler_components/batch_result_processor.py that only act
under it). The engine drives it in its overlap loop (`schedulers.contract.OVERLAP`,
engines/pipeline.py): each iteration plans batch k with `get_next_batch_to_run`, launches it,
and only then processes the result of batch k-1, so when batch k is planned
- the requests of batch k-1 (the one batch in `result_queue`) have not received its token:
  their output counts lag one step in the admission reservation (PrefillAdder), in the
  retraction order and in the ratio estimate after a retraction, and a prefill of batch k-1
  is not yet in the radix tree (checkpoint_kv_cache runs on its result);
- the last extend batch joins the running batch and may decode in batch k, each request's
  input token being the one batch k-1 samples (`PLACEHOLDER_TOKEN_ID`, which the engine fills
  in before executing, as upstream's FutureMap does on the device);
- a request of batch k-1 whose next output finishes it by length is left out of the decode
  (`_reqs_finishing_inflight`), and when the rest does not fit, the decode is skipped this
  iteration instead of retracting (`update_running_batch`): that result frees their KV;
- a request finished (e.g. aborted) or retracted while batch k-1 was in flight gets no token
  from it: release_kv_cache already freed its slot (process_batch_result_decode);
- the ratio resets only when fully idle with nothing in `result_queue` (on_idle,
  is_fully_idle).

Not mirrored: `is_disable_overlap_for_batch` (its conditions are off by default:
SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP false, no grammar with speculative decoding), the
unified-memory flush, beam search, mamba/SWA tracking. Its decode runs (not upstream) are the
overlap loop's: `pipelined_decode_run` (DESIGN.md, "Decode runs").
`preemption_mode=swap` (ours) is refused with the overlap loop (the config says so).
"""

from __future__ import annotations

from collections import deque

from schedulers.contract import (
    NOT_SAMPLED_TOKEN_ID,
    OVERLAP,
    PLACEHOLDER_TOKEN_ID,
    DecodeRun,
    DecodeRunStats,
    StepPlan,
    StepResult,
)
from schedulers.sglang.config import SglangSchedulerConfig
from schedulers.sglang.req import Req
from schedulers.sglang.schedule_batch import ScheduleBatch
from schedulers.sglang.scheduler import SglangScheduler


class OverlapSglangScheduler(SglangScheduler):
    """`SglangScheduler` for the overlap loop (module docstring)."""

    def __init__(self, config: SglangSchedulerConfig) -> None:
        super().__init__(config)
        self.engine_loop = OVERLAP
        # mirrors scheduler.py: Scheduler.__init__ (enable_overlap) and event_loop_overlap
        # (enable_skip_finishing_decode, result_queue)
        self.enable_overlap = True
        self.enable_skip_finishing_decode = True
        # launched batches whose result is not processed yet: (plan step, batch.copy())
        self.result_queue: deque[tuple[int, ScheduleBatch]] = deque()
        self._in_flight: set[Req] = set()

    def schedule(self) -> StepPlan:
        """mirrors event_loop_overlap: get_next_batch_to_run, then the launch, which queues
        `batch.copy()` in `result_queue` (an idle iteration queues nothing)."""
        queue = self.result_queue
        self._in_flight = set(queue[-1][1].reqs) if queue else set()
        plan = super().schedule()
        batch = self._cur_batch
        self._cur_batch = None
        if batch is not None:
            queue.append((plan.step, self._copy(batch)))
        return plan

    @staticmethod
    def _copy(batch: ScheduleBatch) -> ScheduleBatch:
        # mirrors schedule_batch.py: ScheduleBatch.copy (a snapshot of the request list)
        snapshot = ScheduleBatch(batch.reqs[:], batch.kv, chunked_req=batch.chunked_req)
        snapshot.forward_mode = batch.forward_mode
        return snapshot

    def _decode_input_token(self, req: Req) -> int:
        """The token a decode computes: the one batch k-1 samples when `req` is in it."""
        if req in self._in_flight:
            return PLACEHOLDER_TOKEN_ID
        return req.output_ids[-1]

    def _reqs_finishing_inflight(self, batch: ScheduleBatch) -> list[Req]:
        """mirrors scheduler.py: Scheduler._reqs_finishing_inflight: the requests of the queued
        batch whose result commits their last output by length."""
        if not self.enable_skip_finishing_decode or not self.result_queue:
            return []
        # at scheduling time the overlap loop has processed every result but the last
        assert len(self.result_queue) == 1, len(self.result_queue)
        queued = set(self.result_queue[0][1].reqs)
        return [r for r in batch.reqs
                if r in queued and len(r.output_ids) + 1 >= r.max_new_tokens]

    def _batch_for_result(self, plan: StepPlan) -> ScheduleBatch | None:
        """event_loop_overlap's pop_and_process: the oldest queued batch, when `plan` made it
        (an idle plan has none)."""
        queue = self.result_queue
        if not queue or queue[0][0] != plan.step:
            return None
        return queue.popleft()[1]

    def is_fully_idle(self) -> bool:
        # mirrors scheduler.py: Scheduler.is_fully_idle (`not enable_overlap or
        # len(result_queue) == 0`)
        return not self.result_queue and super().is_fully_idle()

    def _abort_stalled_heads(self) -> ScheduleBatch | None:
        """Not while a batch is in flight: its result may free what the head needs."""
        if self.result_queue:
            self._stall_candidate = None
            return None
        return super()._abort_stalled_heads()

    # ------------------------------------------------------------------ decode runs
    # Not upstream: the replay's fast path in the overlap loop (DESIGN.md, "Decode runs";
    # schedulers.contract.PipelinedDecodeRunScheduler), predicted and committed with
    # schedulers/sglang/decode_run.py.
    def decode_run(self, limit: int) -> DecodeRun | None:
        """No synchronous decode runs: this scheduler's runs are `pipelined_decode_run`'s."""
        return None

    def pipelined_decode_run(self, limit: int, in_flight: StepPlan, result: StepResult
                             ) -> DecodeRun | None:
        """The steady loop calls ahead (at most `limit`) while `in_flight`, the one batch in
        `result_queue` (sampling `result`), is committed, when it has retracted and aborted
        nothing and samples no stop token; it either decodes the running batch, every
        request of it live (neither finished, aborted nor retracted while in flight), or is
        the extend batch whose requests join the running batch in the run's first call; see
        `SglangDecodeRuns.next_pipelined_run`."""
        queue = self.result_queue
        if (in_flight.preempted or in_flight.aborted or len(queue) != 1
                or queue[0][0] != in_flight.step):
            return None
        batch = queue[0][1]
        sampled = result.sampled_token_ids
        for r in batch.reqs:
            if (r.finished_reason is not None or r.to_finish is not None or r.is_retracted
                    or (not r.ignore_eos and sampled.get(r.rid) == r.eos_token_id)):
                return None
        if batch.forward_mode == "extend":
            return self.decode_runs.next_pipelined_run_after_extend(limit, batch)
        reqs = self.running_batch.reqs
        if batch.forward_mode != "decode" or len(batch.reqs) != len(reqs):
            return None
        for a, r in zip(batch.reqs, reqs):
            if a is not r:
                return None
        return self.decode_runs.next_pipelined_run(limit)

    def commit_pipelined_decode_run(self, run: DecodeRun, tokens: list[list[int]]
                                    ) -> tuple[StepPlan, DecodeRunStats]:
        """schedulers.contract.PipelinedDecodeRunScheduler.commit_pipelined_decode_run: the
        run's `k` calls at once (`SglangDecodeRuns.commit_pipelined_calls`); an extend batch
        in flight is committed in call 0 with the mirrored `update_from_output`, between
        step 0's plan and step 1's, as upstream processes it."""
        queue = self.result_queue
        step, batch = queue[0]  # the batch in flight, committed by call 0
        runs = self.decode_runs
        if batch.forward_mode != "extend":
            queue.popleft()
            plan, stats = runs.commit_pipelined_calls(tokens, 0)
        else:
            # call 0: the plan of step 0 (the merged batch decodes: its allocation and
            # ratio decay), then process_batch_result_prefill (tokens, radix insertion)
            runs.allocate_pipelined_step()
            events = self.update_from_output(
                StepPlan(step=step, page_size=self.page_size),
                StepResult({r.rid: tokens[i][0] for i, r in
                            enumerate(self.running_batch.reqs)
                            if tokens[i][0] != NOT_SAMPLED_TOKEN_ID}, 0.0))
            assert not events.finished, events.finished  # the prediction excludes them
            first = self.stats()
            plan, stats = runs.commit_pipelined_calls(tokens, 1)
            stats.kv_used_tokens.insert(0, first.kv_used_tokens)
            stats.kv_cached_tokens.insert(0, first.kv_cached_tokens)
        # the batch of the last call's plan, now the one in flight
        queue.append((plan.step, self._copy(self.running_batch)))
        return plan, stats
