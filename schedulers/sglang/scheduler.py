"""SGLang v0.5.22's scheduling loop behind the project's Scheduler contract.

Mirrors python/sglang/srt/managers/scheduler.py (non-overlap `event_loop_normal`):
`get_next_batch_to_run`, `_get_new_batch_prefill_raw`, `update_running_batch`,
`_add_request_to_queue`, `get_num_allocatable_reqs`, `on_idle` (the ratio reset) and the result
handling of managers/scheduler_components/batch_result_processor.py
(`process_batch_result_prefill` / `_decode`). `schedule()` is one iteration up to the forward
pass; `update_from_output()` is its result processing.

Decode runs (not upstream: the replay's fast path, the `DecodeRunScheduler` methods at the
end) are predicted and committed in schedulers/sglang/decode_run.py.

`preemption_mode=swap` (not upstream) keeps upstream's queue placement (a retracted request
goes to the tail of the waiting queue) and only changes the KV: see kv_cache.py.

One addition: where upstream would spin forever (nothing runs and the head of the queue can
never fit, even in an empty pool), the head is aborted with a reason and counted
(`num_stall_aborts`), and admission is retried in the same step.
"""

from __future__ import annotations

import random

from schedulers.contract import (
    SYNCHRONOUS,
    DecodeRun,
    DecodeRunStats,
    EngineLoop,
    Request,
    ScheduledChunk,
    SchedulerStats,
    StepEvents,
    StepPlan,
    StepResult,
)
from schedulers.host_pool import HostKVPool
from schedulers.sglang.config import SglangSchedulerConfig
from schedulers.sglang.decode_run import SglangDecodeRuns
from schedulers.sglang.kv_cache import KVCache
from schedulers.sglang.memory_pool import ReqToTokenPool, make_allocator
from schedulers.sglang.new_token_ratio import NewTokenRatioTracker
from schedulers.sglang.radix_cache import RadixCache
from schedulers.sglang.req import Req
from schedulers.sglang.schedule_batch import ScheduleBatch
from schedulers.sglang.schedule_policy import AddReqResult, PrefillAdder, SchedulePolicy


class SglangScheduler:
    """The SGLang scheduler: radix prefix cache, prefill-first batches, decode retraction."""

    name = "sglang"

    def __init__(self, config: SglangSchedulerConfig) -> None:
        self.config = config
        # The loop that drives it (schedulers.contract.LoopDeclaringScheduler); the overlap
        # loop's scheduler is schedulers/sglang/overlap.py.
        self.engine_loop: EngineLoop = SYNCHRONOUS
        self.enable_overlap = False  # mirrors Scheduler.enable_overlap
        self.page_size = config.page_size
        self.max_running_requests = config.resolved_max_running_requests
        self.chunked_prefill_size = config.resolved_chunked_prefill_size
        self.max_prefill_tokens = config.max_prefill_tokens
        self.enable_priority_preemption = config.enable_priority_preemption
        self.allocator = make_allocator(config.max_total_tokens, config.page_size)
        self.req_to_token_pool = ReqToTokenPool(self.max_running_requests)
        self.tree_cache = RadixCache(config.page_size, self.allocator)
        self.host_pool: HostKVPool | None = None
        if config.preemption_mode == "swap":
            self.host_pool = HostKVPool(config.host_kv_capacity_tokens, config.page_size)
        self.kv = KVCache(self.tree_cache, self.allocator, self.req_to_token_pool,
                          config.retract_decode_steps, self.host_pool)
        self.policy = SchedulePolicy(
            config.schedule_policy, self.tree_cache, config.enable_priority_scheduling,
            config.schedule_low_priority_values_first, config.random_seed,
            config.in_batch_prefix_caching_check_threshold,
            config.in_batch_prefix_caching_deprioritize_threshold,
            config.enable_waiting_prefix_refresh)
        # its own stream: the random schedule_policy's draws stay as upstream's
        self.victim_rng = random.Random(config.random_seed)
        self.new_token_ratio_tracker = NewTokenRatioTracker.from_config(
            config.schedule_conservativeness, config.init_new_token_ratio,
            config.min_new_token_ratio_factor, config.new_token_ratio_decay_steps,
            config.retract_decode_steps)
        self.waiting_queue: list[Req] = []
        self.running_batch = ScheduleBatch([], self.kv)
        self.last_batch: ScheduleBatch | None = None
        self.chunked_req: Req | None = None
        self._live: dict[str, Req] = {}
        self._cur_batch: ScheduleBatch | None = None
        self.step_count = 0
        self._queue_clock = 0
        self._stall_candidate: Req | None = None
        # the ids this step retracts or preempts, and aborts (with the reason)
        self.plan_preempted: list[str] = []
        self.plan_aborted: list[tuple[str, str]] = []
        # Not upstream: the decode-run prediction (the replay's fast path), kept informed
        # by the hooks below (`self.decode_runs.`...)
        self.decode_runs = SglangDecodeRuns(self)
        # counters for experiments
        self.num_retractions = 0
        self.num_priority_preemptions = 0
        self.num_stall_aborts = 0
        self.num_oom_aborts = 0

    # ------------------------------------------------------------------ contract: intake
    # mirrors python/sglang/srt/managers/scheduler.py: Scheduler.handle_generate_request,
    # _add_request_to_queue, get_num_allocatable_reqs
    def add_request(self, request: Request) -> str | None:
        rid = request.request_id
        if rid in self._live:
            return f"request id {rid!r} is already queued or running"
        prompt_len = len(request.prompt_token_ids)
        if prompt_len == 0:
            return "empty prompt"
        if request.max_tokens < 1:
            return f"max_tokens={request.max_tokens}: must be at least 1"
        # mirrors managers/utils.py: validate_input_length
        limit = self.config.max_req_input_len
        if prompt_len >= limit:
            return (f"Input length ({prompt_len} tokens) exceeds the maximum allowed length "
                    f"({limit} tokens).")
        req = Req(request)
        self._live[rid] = req
        self._add_request_to_queue(req)
        return None

    def _add_request_to_queue(self, req: Req) -> None:
        # mirrors scheduler.py: Scheduler._add_request_to_queue (tail; stamps the entry time)
        self.waiting_queue.append(req)
        self._queue_clock += 1
        req.wait_queue_entry_time = self._queue_clock

    def get_num_allocatable_reqs(self, running_bs: int) -> int:
        # mirrors scheduler.py: Scheduler.get_num_allocatable_reqs (pp budget = max running)
        return min(self.max_running_requests - running_bs,
                   self.req_to_token_pool.available_size())

    # ------------------------------------------------------------------ contract: schedule
    # mirrors python/sglang/srt/managers/scheduler.py: Scheduler.event_loop_normal (up to the
    # forward pass), get_next_batch_to_run, _get_new_batch_prefill_raw, update_running_batch,
    # on_idle, is_fully_idle
    def schedule(self) -> StepPlan:
        self.plan_preempted = []
        self.plan_aborted = []
        batch = self.get_next_batch_to_run()
        if batch is None:
            if self.is_fully_idle():
                # mirrors scheduler.py: Scheduler.on_idle (reset only when fully idle)
                self.new_token_ratio_tracker.reset()
            else:
                batch = self._abort_stalled_heads()
        self.last_batch = batch
        self._cur_batch = batch
        self.decode_runs.after_schedule(batch)  # not upstream: for the decode-run prediction
        plan = StepPlan(step=self.step_count, page_size=self.page_size,
                        preempted=self.plan_preempted, aborted=self.plan_aborted)
        self.step_count += 1
        if self.host_pool is not None:
            plan.swap_out, plan.swap_in, plan.swap_fallbacks = self.kv.take_swap_ops()
        if batch is None:
            plan.forward_mode = "idle"
            return plan
        plan.forward_mode = batch.forward_mode
        rows = self.req_to_token_pool.req_to_token
        chunks = plan.chunks
        if batch.forward_mode == "extend":
            for r in batch.reqs:
                assert r.extend_end is not None and r.req_pool_idx is not None
                chunks.append(ScheduledChunk(
                    r.rid, r.fill_ids[r.prefix_len:r.extend_end], r.prefix_len,
                    # the last chunk samples (overlap: an earlier chunk may be in flight)
                    rows[r.req_pool_idx], r is not batch.chunked_req, r.admitted))
                r.admitted = False
        else:
            for r in batch.reqs:
                chunks.append(ScheduledChunk(
                    r.rid, [self._decode_input_token(r)], r.kv_committed_len - 1,
                    rows[r.req_pool_idx], True))  # type: ignore[index]
        return plan

    def _decode_input_token(self, req: Req) -> int:
        """The token a decode step computes: the request's last output."""
        return req.output_ids[-1]

    def is_fully_idle(self) -> bool:
        # mirrors scheduler.py: Scheduler.is_fully_idle
        lb = self.last_batch
        return (self.running_batch.is_empty() and self.chunked_req is None
                and (lb is None or lb.is_empty()) and not self.waiting_queue)

    def get_next_batch_to_run(self) -> ScheduleBatch | None:
        # mirrors scheduler.py: Scheduler.get_next_batch_to_run
        reqs_to_exclude: list[Req] = []
        chunked = self.chunked_req
        if chunked is not None:
            # move the chunked request out of the batch so that only finished prefills merge
            reqs_to_exclude.append(chunked)
            assert chunked.extend_end is not None
            if chunked.extend_end > chunked.prefix_len:
                self.kv.checkpoint_kv_cache(chunked)  # stash_chunked_request
        lb = self.last_batch
        if lb is not None and lb.forward_mode == "extend":
            if lb.chunked_req is not None and lb.chunked_req not in reqs_to_exclude:
                reqs_to_exclude.append(lb.chunked_req)
            last_bs = lb.batch_size()
            lb.filter_batch(reqs_to_exclude=reqs_to_exclude)
            if lb.batch_size() < last_bs:
                self.running_batch.batch_is_full = False
            if not lb.is_empty() and lb is not self.running_batch:
                if self.running_batch.is_empty():
                    self.running_batch = lb
                else:
                    self.running_batch.merge_batch(lb)
        new_batch = self.get_new_batch_prefill()
        if new_batch is not None:
            return new_batch  # run prefill first if possible
        if not self.running_batch.is_empty():
            decode_batch = self.update_running_batch(self.running_batch)
            if decode_batch is not None and not decode_batch.is_empty():
                return decode_batch
        return None

    def get_new_batch_prefill(self) -> ScheduleBatch | None:
        # mirrors scheduler.py: Scheduler._get_new_batch_prefill_raw (no grammar, LoRA,
        # hicache, mixed chunk, delayer)
        self._stall_candidate = None
        rb = self.running_batch
        if self.enable_priority_preemption:
            rb.batch_is_full = False  # reset to try preemption with a prefill adder
        if rb.is_empty():
            rb.batch_is_full = False
        if (rb.batch_is_full or not self.waiting_queue) and self.chunked_req is None:
            return None
        running_bs = len(rb.reqs)
        if (self.get_num_allocatable_reqs(running_bs) <= 0 and self.chunked_req is None
                and not self.enable_priority_preemption):
            rb.batch_is_full = True
            return None
        self.policy.calc_priority(self.waiting_queue)
        adder = PrefillAdder(
            self.page_size, self.kv, rb, self.new_token_ratio_tracker.current,
            self.max_prefill_tokens, self.chunked_prefill_size,
            self.config.priority_scheduling_preemption_threshold,
            self.config.schedule_low_priority_values_first,
            self.config.clip_max_new_tokens_estimation, self.config.prefill_max_requests)
        if self.chunked_req is not None:
            self.chunked_req.init_next_round_input()
            self.chunked_req = adder.add_chunked_req(self.chunked_req)
        for req in self.waiting_queue:
            if len(adder.can_run_list) >= self.get_num_allocatable_reqs(len(rb.reqs)):
                rb.batch_is_full = True
            if rb.batch_is_full and (
                not self.enable_priority_preemption or not adder.preempt_to_schedule(req)
            ):
                break
            if self.host_pool is None or not self.kv.resume_from_host(req):
                req.init_next_round_input(self.tree_cache)
            res = adder.add_one_req(req)
            if res != AddReqResult.CONTINUE:
                if res == AddReqResult.NO_TOKEN:
                    # set batch_is_full after making sure there are requests that can be served
                    rb.batch_is_full = len(adder.can_run_list) > 0 or not rb.is_empty()
                    if (not adder.can_run_list and rb.is_empty()
                            and self.chunked_req is None):
                        self._stall_candidate = req
                break
        can_run_list = adder.can_run_list
        if adder.preempt_list:
            self.num_priority_preemptions += len(adder.preempt_list)
            self.plan_preempted.extend(r.rid for r in adder.preempt_list)
        if not can_run_list:
            # preemption already released these requests; requeue them anyway
            for r in adder.preempt_list:
                self._add_request_to_queue(r)
            return None
        queue = self.waiting_queue
        n = len(can_run_list)
        if n <= len(queue) and all(queue[i] is r for i, r in enumerate(can_run_list)):
            del queue[:n]  # the usual case: the admitted requests are the head of the queue
        else:
            can_run_set = set(can_run_list)
            self.waiting_queue = [x for x in queue if x not in can_run_set]
        for r in adder.preempt_list:
            self._add_request_to_queue(r)
        if adder.new_chunked_req is not None:
            assert self.chunked_req is None
            self.chunked_req = adder.new_chunked_req
        if self.chunked_req is not None:
            self.chunked_req.inflight_middle_chunks += 1
        new_batch = ScheduleBatch(can_run_list, self.kv, chunked_req=self.chunked_req)
        new_batch.prepare_for_extend()
        return new_batch

    def update_running_batch(self, batch: ScheduleBatch) -> ScheduleBatch | None:
        # mirrors scheduler.py: Scheduler.update_running_batch (None skips decode this step)
        initial_bs = batch.batch_size()
        finishing_reqs = self._reqs_finishing_inflight(batch)
        batch.filter_batch(reqs_to_exclude=finishing_reqs)
        if batch.is_empty():
            batch.batch_is_full = False
            return batch
        kv_full_retract_flag = not batch.check_decode_mem()
        if kv_full_retract_flag and finishing_reqs:
            # the queued result frees the finishing requests' KV: decode the rest next step
            batch.batch_is_full = False
            return None
        if kv_full_retract_flag:
            retracted, new_token_ratio, reqs_to_abort = batch.retract_decode(
                self.new_token_ratio_tracker, self.config.retraction_policy,
                self.config.schedule_low_priority_values_first, self.config.victim_policy,
                self.victim_rng)
            self.new_token_ratio_tracker.current = new_token_ratio
            for r in reqs_to_abort:
                self._finish_aborted(r, r.to_finish or "aborted")
                self.num_oom_aborts += 1
            for r in retracted:
                self.plan_preempted.append(r.rid)
                self._add_request_to_queue(r)
            self.num_retractions += len(retracted)
        else:
            self.new_token_ratio_tracker.decay_step()
        if batch.batch_size() < initial_bs:
            batch.batch_is_full = False
        if batch.is_empty():
            return batch
        batch.prepare_for_decode()
        return batch

    def _reqs_finishing_inflight(self, batch: ScheduleBatch) -> list[Req]:
        """None outside the overlap loop (upstream: enable_skip_finishing_decode is off)."""
        return []

    def _abort_stalled_heads(self) -> ScheduleBatch | None:
        """Nothing runs and the queue head got NO_TOKEN: it cannot fit even in an empty pool,
        and upstream would retry it forever. Abort it and retry admission."""
        batch = None
        while batch is None and self._stall_candidate is not None:
            req = self._stall_candidate
            self._stall_candidate = None
            need = len(req.fill_ids) - req.prefix_len + min(
                max(req.max_new_tokens - len(req.output_ids), 0),
                self.config.clip_max_new_tokens_estimation) + self.page_size
            reason = (
                f"cannot be scheduled: its prompt and reserved output need {need} token slots "
                f"beyond its cached prefix of {req.prefix_len}, and the KV pool holds "
                f"{self.config.kv_capacity_tokens}; SGLang would keep it waiting forever")
            self.waiting_queue.remove(req)
            self._finish_aborted(req, reason)
            self.num_stall_aborts += 1
            batch = self.get_new_batch_prefill()
        return batch

    def _finish_aborted(self, req: Req, reason: str) -> None:
        req.finished_reason = "abort"
        req.to_finish = reason
        self.kv.drop_swapped(req)
        self.plan_aborted.append((req.rid, reason))
        self._live.pop(req.rid, None)

    # ------------------------------------------------------------------ contract: commit
    # mirrors python/sglang/srt/managers/scheduler_components/batch_result_processor.py:
    # process_batch_result_prefill, process_batch_result_decode
    def update_from_output(self, plan: StepPlan, result: StepResult) -> StepEvents:
        # mirrors batch_result_processor.py: process_batch_result_prefill / _decode
        events = StepEvents()
        if self.host_pool is not None:
            self.host_pool.commit()
        batch = self._batch_for_result(plan)
        if batch is None:
            return events
        sampled = result.sampled_token_ids
        kv = self.kv
        self.allocator.free_group_begin()
        try:
            if batch.forward_mode == "extend":
                for req in batch.reqs:
                    if (req.finished() and req.inflight_middle_chunks <= 0) or req.is_retracted:
                        continue
                    if req.inflight_middle_chunks > 0:
                        req.inflight_middle_chunks -= 1  # a middle chunk: no token
                        continue
                    if not self._commit_token(req, sampled, events):
                        kv.checkpoint_kv_cache(req)
            else:
                for req in batch.reqs:
                    # overlap: a request finished or retracted in flight gets no token
                    if req.finished_reason is None and not (self.enable_overlap
                                                            and req.is_retracted):
                        self._commit_token(req, sampled, events)
        finally:
            self.allocator.free_group_end()
        if events.finished:
            self.decode_runs.steady = False
        return events

    def _batch_for_result(self, plan: StepPlan) -> ScheduleBatch | None:
        """The batch whose result `plan`'s result is: the one just scheduled."""
        batch = self._cur_batch
        self._cur_batch = None
        return batch

    def _commit_token(self, req: Req, sampled: dict[str, int], events: StepEvents) -> bool:
        """Append the request's sampled token; on a finish release its KV (checkpointed into
        the tree) and report it. Returns whether it finished."""
        tok = self._sampled(sampled, req)
        req.output_ids.append(tok)
        events.new_token_ids[req.rid] = [tok]
        return self.finish_if_done(req, events.finished)

    def finish_if_done(self, req: Req, finished: list[tuple[str, str]]) -> bool:
        """After a token was appended: on a finish release the request's KV (checkpointed into
        the tree) and report it in `finished`. Returns whether it finished."""
        req.update_finish_state()
        if req.finished_reason is None:
            return False
        self.kv.release_kv_cache(req, checkpoint=True)
        finished.append((req.rid, req.finished_reason))
        self._live.pop(req.rid, None)
        return True

    @staticmethod
    def _sampled(sampled: dict[str, int], req: Req) -> int:
        try:
            return sampled[req.rid]
        except KeyError:
            raise KeyError(f"StepResult has no sampled token for {req.rid!r}, whose chunk "
                           "had sample=True") from None

    # ------------------------------------------------------------------ contract: misc
    # mirrors python/sglang/srt/managers/scheduler.py: Scheduler.abort_request
    def abort(self, request_id: str, reason: str) -> None:
        req = self._live.pop(request_id, None)
        if req is None:
            return
        self.decode_runs.steady = False
        if req in self.waiting_queue:
            self.waiting_queue.remove(req)
            self.kv.drop_swapped(req)
        else:
            if req is self.chunked_req:
                self.chunked_req = None
            # mirrors scheduler.py: process_pending_chunked_abort / the running-batch abort
            # (KV released; the batches drop the finished request when they next filter)
            self.kv.release_kv_cache(req, checkpoint=False)
        req.finished_reason = "abort"
        req.to_finish = reason

    def has_unfinished(self) -> bool:
        return bool(self._live)

    def stats(self) -> SchedulerStats:
        capacity = self.config.kv_capacity_tokens
        evictable = self.tree_cache.evictable_size()
        return SchedulerStats(
            # requests holding a request row (req_pool_idx set), counted by the row pool
            num_running=self.req_to_token_pool.num_used_rows(),
            num_waiting=len(self.waiting_queue),
            kv_capacity_tokens=capacity,
            # held by live requests (their private slots and the prefixes they lock); the
            # evictable radix cache counts as cached, as vLLM's free hashed blocks do
            kv_used_tokens=capacity - self.allocator.available_size() - evictable,
            kv_cached_tokens=evictable,
        )

    # ------------------------------------------------------------------ decode runs
    # Not upstream: the replay's fast path (DESIGN.md, "Decode runs"), in decode_run.py.
    def arrivals_keep_decode_run(self) -> bool:
        """schedulers.contract.DecodeRunScheduler.arrivals_keep_decode_run"""
        return self.decode_runs.arrivals_keep_run()

    def decode_run(self, limit: int) -> DecodeRun | None:
        """schedulers.contract.DecodeRunScheduler.decode_run"""
        return self.decode_runs.next_run(limit)

    def commit_decode_run(self, run: DecodeRun, tokens: list[list[int]]) -> DecodeRunStats:
        """schedulers.contract.DecodeRunScheduler.commit_decode_run"""
        return self.decode_runs.commit(run, tokens)
