"""The vLLM v1 scheduler: token debt, running first, preemption by recompute (or by swap).

Mirrors vllm/v1/core/sched/scheduler.py (Scheduler) at vLLM v0.32.0, for a decoder-only text
model with one full-attention KV cache group and no KV connector, speculative decoding, LoRA or
encoder inputs. Async scheduling (`AsyncScheduler`) is the subclass in
schedulers/vllm/async_scheduler.py; what it relies on here (output placeholders, the max-tokens
skip, the stale-output admission skip) is upstream's base `Scheduler` too, inert while
nothing is in flight.

Decode runs (not upstream: the replay's fast path, the `DecodeRunScheduler` methods at the
end) are predicted and committed in schedulers/vllm/decode_run.py.

`preemption_mode=swap` (not in v1; vLLM v0 had it) keeps upstream's queue placement (a victim
goes to the head of `waiting`) and only changes the KV: a victim's computed KV is copied to a
host pool and its progress kept; at readmission it is copied back instead of recomputed.
"""

from __future__ import annotations

import random

from schedulers.contract import (
    PLACEHOLDER_TOKEN_ID,
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
    SwapOp,
)
from schedulers.host_pool import HostKVPool
from schedulers.victim_policy import VictimFacts, rank_victims
from schedulers.vllm.config import VllmSchedulerConfig
from schedulers.vllm.decode_run import VllmDecodeRuns
from schedulers.vllm.kv_cache_manager import KVCacheManager, cdiv
from schedulers.vllm.kv_cache_utils import KVCacheBlock
from schedulers.vllm.request import FINISH_REASONS, RequestStatus, VllmRequest
from schedulers.vllm.request_queue import create_request_queue


class VllmScheduler:
    """Implements the `schedulers.contract.Scheduler` protocol with vLLM v1's decisions.

    Each step first gives every running request the tokens it owes (`num_tokens -
    num_computed_tokens`, capped by the token budget and `long_prefill_token_threshold`),
    preempting from the back of `running` (or the least important request under `priority`)
    when its blocks cannot be allocated; then, if nothing was preempted, admits waiting
    requests in queue order until one does not fit.
    """

    name = "vllm"

    def __init__(self, config: VllmSchedulerConfig) -> None:
        if config.async_scheduling != self._mirrors_async_scheduler():
            raise ValueError(
                f"vllm scheduler: async_scheduling={config.async_scheduling} does not fit "
                f"{type(self).__name__}; build it with schedulers.vllm.build_scheduler")
        self.config = config
        # The loop that drives it (schedulers.contract.LoopDeclaringScheduler).
        self.engine_loop: EngineLoop = SYNCHRONOUS
        self.page_size = config.block_size
        self.block_size = config.block_size
        self.max_num_running_reqs = config.max_num_seqs
        self.max_num_scheduled_tokens = config.max_num_batched_tokens
        self.max_model_len = config.max_model_len
        self.policy = config.policy
        self.victim_policy = config.victim_policy
        self.victim_rng = random.Random(config.random_seed)
        self.kv_cache_manager = KVCacheManager(
            num_blocks=config.num_blocks,
            block_size=config.block_size,
            max_model_len=config.max_model_len,
            enable_caching=config.enable_prefix_caching,
            watermark=config.watermark,
        )
        self.requests: dict[str, VllmRequest] = {}
        self.waiting = create_request_queue(config.policy)
        self.running: list[VllmRequest] = []
        self.step_count = 0
        self.num_usable_blocks = config.num_blocks - 1
        # Not upstream: the decode-run prediction (the replay's fast path), kept informed
        # by the hooks below (`self.decode_runs.`...)
        self.decode_runs = VllmDecodeRuns(self)
        # preemption_mode=swap: the host pool and this step's swap ops
        self.host_pool: HostKVPool | None = None
        if config.preemption_mode == "swap":
            self.host_pool = HostKVPool(config.host_kv_capacity_tokens, config.block_size)
        self._swap_out: list[SwapOp] = []
        self._swap_in: list[SwapOp] = []
        self._swap_fallbacks: list[str] = []

    def _mirrors_async_scheduler(self) -> bool:
        """Whether this class is upstream's AsyncScheduler (its subclass says so)."""
        return False

    # ------------------------------------------------------------------ schedule
    # mirrors vllm/v1/core/sched/scheduler.py: Scheduler.schedule, _preempt_request,
    # _update_after_schedule
    def schedule(self) -> StepPlan:
        """mirrors scheduler.py: Scheduler.schedule."""
        self.step_count += 1
        kv = self.kv_cache_manager
        host = self.host_pool
        if host is not None:
            self._swap_out, self._swap_in, self._swap_fallbacks = [], [], []
        running = self.running
        preempted_reqs: list[VllmRequest] = []
        aborted: list[tuple[str, str]] = []
        scheduled_running_reqs: list[VllmRequest] = []
        admitted_reqs: list[VllmRequest] = []
        num_scheduled_tokens: dict[str, int] = {}
        token_budget = self.max_num_scheduled_tokens
        priority_policy = self.policy == "priority"
        ranked_victims = self.victim_policy != "default"

        # The threshold only protects other requests from a long prefill: alone, it is off.
        num_eligible = len(running) + len(self.waiting)
        lptt = self.config.long_prefill_token_threshold if num_eligible > 1 else 0

        # First, the RUNNING requests.
        req_index = 0
        while req_index < len(running) and token_budget > 0:
            request = running[req_index]
            placeholders = request.num_output_placeholders  # 0 unless async scheduling
            if placeholders and (request.num_computed_tokens + 2 - placeholders
                                 >= request.num_prompt_tokens + request.max_tokens):
                # mirrors Scheduler.schedule: the plan in flight samples its last token
                req_index += 1
                continue
            num_new_tokens = request.num_tokens + placeholders - request.num_computed_tokens
            if 0 < lptt < num_new_tokens:
                num_new_tokens = lptt
            num_new_tokens = min(
                num_new_tokens,
                token_budget,
                self.max_model_len - request.num_computed_tokens - 1,
            )
            if num_new_tokens <= 0:
                req_index += 1
                continue

            while True:
                new_blocks = kv.allocate_slots_running(request, num_new_tokens)
                if new_blocks is not None:
                    break
                # mirrors Scheduler.schedule: preempt the lowest-priority request (fcfs: the
                # back of running); a victim_policy other than default only changes whom
                if priority_policy or ranked_victims:
                    preempted_req = self._choose_victim(running, request)
                    victim_index = running.index(preempted_req)
                    del running[victim_index]
                    if victim_index < req_index:
                        req_index -= 1
                    if preempted_req in scheduled_running_reqs:
                        # refund the budget of a victim already scheduled this step
                        scheduled_running_reqs.remove(preempted_req)
                        token_budget += num_scheduled_tokens.pop(preempted_req.request_id)
                else:
                    preempted_req = running.pop()
                self._preempt_request(preempted_req)
                preempted_reqs.append(preempted_req)
                if preempted_req is request:
                    break
            if new_blocks is None:
                if not running:
                    # Alone, with every other block free or evictable, it still does not fit:
                    # upstream would readmit and preempt it forever. Give it up instead.
                    aborted.append((request.request_id, self._abort_never_fits(request)))
                break
            scheduled_running_reqs.append(request)
            num_scheduled_tokens[request.request_id] = num_new_tokens
            token_budget -= num_new_tokens
            req_index += 1

        # Next, the WAITING requests, unless this step preempted.
        skipped: list[VllmRequest] = []
        if not preempted_reqs:
            waiting = self.waiting
            reserve_full_isl = self.config.scheduler_reserve_full_isl
            while waiting and token_budget > 0:
                if len(running) >= self.max_num_running_reqs:
                    break
                request = waiting.peek_request()
                if request.num_stale_output_tokens:
                    # mirrors Scheduler.schedule (async scheduling): the output of a plan in
                    # flight when it was preempted is still to come; skip it this step
                    skipped.append(waiting.pop_request())
                    continue
                swapped = host.swapped_tokens(request.request_id) if host is not None else 0
                if swapped:
                    # Resumes from its host copy (num_computed_tokens == swapped): no prefix
                    # lookup; allocate_slots counts blocks for the swapped and the new tokens.
                    new_computed_blocks: list[KVCacheBlock] = []
                    num_computed_tokens = 0
                else:
                    new_computed_blocks, num_computed_tokens = kv.get_computed_blocks(request)
                # num_tokens, not num_prompt_tokens: a resumed request recomputes its outputs
                num_new_tokens = self.admitted_chunk(
                    request.num_tokens - num_computed_tokens - swapped, lptt, token_budget)
                new_blocks = kv.allocate_slots(
                    request,
                    num_new_tokens,
                    num_new_computed_tokens=num_computed_tokens,
                    new_computed_blocks=new_computed_blocks,
                    full_sequence_must_fit=reserve_full_isl,
                    has_scheduled_reqs=bool(running),
                )
                if new_blocks is None:
                    break  # admission stops at the first request that does not fit
                waiting.pop_request()
                running.append(request)
                admitted_reqs.append(request)
                num_scheduled_tokens[request.request_id] = num_new_tokens
                token_budget -= num_new_tokens
                request.status = RequestStatus.RUNNING
                request.num_computed_tokens = num_computed_tokens + swapped
                if swapped:
                    assert host is not None
                    self._swap_in.append(
                        host.swap_in(request.request_id, kv.get_block_ids(request.request_id)))
            if skipped:
                waiting.prepend_requests(skipped)

        plan = self._make_plan(
            scheduled_running_reqs, admitted_reqs, num_scheduled_tokens, preempted_reqs, aborted
        )
        # not upstream: what this step says about the next ones, for the decode-run prediction
        self.decode_runs.after_schedule(not (preempted_reqs or aborted or skipped), token_budget)
        return plan

    @staticmethod
    def admitted_chunk(num_new_tokens: int, lptt: int, token_budget: int) -> int:
        """mirrors scheduler.py: Scheduler.schedule (waiting loop): the tokens a request admitted
        this step gets, capped by `long_prefill_token_threshold` when set, then by the budget."""
        if 0 < lptt < num_new_tokens:
            num_new_tokens = lptt
        return min(num_new_tokens, token_budget)

    def _choose_victim(self, running: list[VllmRequest], requester: VllmRequest
                       ) -> VllmRequest:
        """The request to preempt under `victim_policy` when `requester` needs a block (never
        called for fcfs + default, whose victim is simply the back of `running`)."""
        if self.victim_policy == "default":
            # mirrors Scheduler.schedule (policy=priority): the least important request
            return max(running, key=lambda r: (r.priority, r.arrival_time))
        if self.victim_policy == "most_kv":
            # Anti-thrash rule (ours; most_kv is not upstream): the requester evicts only a
            # later arrival, by (arrival_time, request_id), and itself only when none runs.
            # Without it two requests evict each other forever: a victim loses its KV, so
            # the request that evicted it now holds the most and is the next victim when
            # the first grows back. With it, as under upstream's fcfs, the earliest arrival
            # running is never a victim while another request runs, so it always finishes.
            later = [r for r in running if (r.arrival_time, r.request_id)
                     > (requester.arrival_time, requester.request_id)]
            running = later or [requester]
        block_ids = self.kv_cache_manager.req_to_block_ids
        facts = [
            VictimFacts(
                request_id=r.request_id,
                arrival_time=r.arrival_time,
                num_output_tokens=r.num_output_tokens,
                num_prompt_tokens=r.num_prompt_tokens,
                computed_tokens=r.num_computed_tokens,
                kv_slots=len(block_ids.get(r.request_id, ())) * self.block_size,
                remaining_tokens=r.max_tokens - r.num_output_tokens,
            )
            for r in running
        ]
        return running[rank_victims(facts, self.victim_policy, self.victim_rng)[0]]

    def _abort_never_fits(self, request: VllmRequest) -> str:
        self.waiting.remove_requests((request,))
        # it was swapped out just now: nothing will read that copy
        self._swap_out = [op for op in self._swap_out if op.request_id != request.request_id]
        request.status = RequestStatus.FINISHED_ABORTED
        self._free_request(request)
        return (
            f"needs more KV blocks than the pool holds ({self.num_usable_blocks} blocks of "
            f"{self.block_size}) at {request.num_tokens} tokens"
        )

    def _preempt_request(self, request: VllmRequest) -> None:
        """mirrors scheduler.py: Scheduler._preempt_request (free KV, back to the queue head).

        In swap mode the computed KV is first copied to the host pool (mirrors vLLM v0's
        vllm/core/scheduler.py: Scheduler._preempt_by_swap / _swap_out) and the progress
        kept; with the pool full the victim is recomputed, as in v1, and counted.
        """
        kept = 0
        if self.host_pool is not None and request.num_computed_tokens > 0:
            rid = request.request_id
            op = self.host_pool.swap_out(rid, self.kv_cache_manager.get_block_ids(rid),
                                         request.num_computed_tokens)
            if op is None:
                self._swap_fallbacks.append(rid)
            else:
                self._swap_out.append(op)
                kept = op.num_tokens
        self.kv_cache_manager.free(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = kept
        request.num_preemptions += 1
        self.waiting.prepend_request(request)

    def _make_plan(
        self,
        scheduled_running_reqs: list[VllmRequest],
        admitted_reqs: list[VllmRequest],
        num_scheduled_tokens: dict[str, int],
        preempted_reqs: list[VllmRequest],
        aborted: list[tuple[str, str]],
    ) -> StepPlan:
        # mirrors Scheduler._update_after_schedule: advance num_computed_tokens optimistically
        get_block_ids = self.kv_cache_manager.get_block_ids
        chunks: list[ScheduledChunk] = []
        for reqs, admitted in ((scheduled_running_reqs, False), (admitted_reqs, True)):
            for req in reqs:
                n = num_scheduled_tokens[req.request_id]
                start = req.num_computed_tokens
                end = start + n
                req.num_computed_tokens = end
                num_known = len(req.all_token_ids)
                req.is_prefill_chunk = end < num_known + req.num_output_placeholders
                token_ids = req.all_token_ids[start:end]
                if end > num_known:  # async scheduling: sampled by the plan in flight
                    token_ids.extend([PLACEHOLDER_TOKEN_ID] * (end - max(start, num_known)))
                chunks.append(
                    ScheduledChunk(
                        request_id=req.request_id,
                        token_ids=token_ids,
                        start_pos=start,
                        page_ids=get_block_ids(req.request_id),
                        sample=not req.is_prefill_chunk,
                        admitted=admitted,
                    )
                )
        return StepPlan(
            step=self.step_count,
            page_size=self.block_size,
            chunks=chunks,
            preempted=[r.request_id for r in preempted_reqs],
            aborted=aborted,
            forward_mode="mixed" if chunks else "idle",
            swap_out=self._swap_out,
            swap_in=self._swap_in,
            swap_fallbacks=self._swap_fallbacks,
        )

    # ------------------------------------------------------------------ update_from_output
    # mirrors vllm/v1/core/sched/scheduler.py: Scheduler.update_from_output,
    # vllm/v1/core/sched/utils.py: check_stop
    def update_from_output(self, plan: StepPlan, result: StepResult) -> StepEvents:
        """mirrors scheduler.py: Scheduler.update_from_output (append tokens, check stop, free)."""
        events = StepEvents()
        if self.host_pool is not None:
            self.host_pool.commit()
        sampled = result.sampled_token_ids
        requests = self.requests
        finished = events.finished
        for chunk in plan.chunks:
            if not chunk.sample:
                continue
            req = requests.get(chunk.request_id)
            if req is None or req.status.is_finished:
                continue
            token_id = sampled[chunk.request_id]
            req.append_output_token_id(token_id)
            events.new_token_ids[req.request_id] = [token_id]
            self.finish_if_stopped(req, token_id, finished)
        if finished:
            self.drop_finished_from_running()
        return events

    def finish_if_stopped(self, req: VllmRequest, token_id: int,
                           finished: list[tuple[str, str]]) -> None:
        """After `token_id` was appended: on a stop (check_stop), free the request and report
        it in `finished`."""
        if self._check_stop(req, token_id, self.max_model_len):
            finished.append((req.request_id, FINISH_REASONS[req.status]))
            self._free_request(req)

    def drop_finished_from_running(self) -> None:
        # mirrors scheduler.py: update_from_output (stopped requests leave self.running; the
        # others are all RUNNING: a preempted request has left it already)
        running = RequestStatus.RUNNING
        self.running = [r for r in self.running if r.status is running]
        self.decode_runs.steady = False

    @staticmethod
    def _check_stop(req: VllmRequest, token_id: int, max_model_len: int) -> bool:
        """mirrors vllm/v1/core/sched/utils.py: check_stop (EOS, then the length caps); sets
        the finished status."""
        if token_id == req.eos_token_id:
            req.status = RequestStatus.FINISHED_STOPPED
        elif (
            len(req.all_token_ids) >= max_model_len
            or len(req.all_token_ids) - req.num_prompt_tokens >= req.max_tokens
        ):
            req.status = RequestStatus.FINISHED_LENGTH_CAPPED
        else:
            return False
        return True

    # ------------------------------------------------------------------ requests
    # mirrors vllm/v1/core/sched/scheduler.py: Scheduler.add_request, finish_requests,
    # _free_request, get_num_unfinished_requests
    def add_request(self, request: Request) -> str | None:
        """Queue a request, or return why it can never be served.

        Upstream validates prompts in the input processor (empty prompt, prompt longer than
        `max_model_len`); we also refuse a prompt whose blocks exceed the whole pool, which
        upstream would otherwise retry forever.
        """
        if request.request_id in self.requests:
            raise ValueError(f"vllm scheduler: request_id={request.request_id!r} already added")
        prompt_len = len(request.prompt_token_ids)
        if prompt_len == 0:
            return "prompt is empty"
        if request.max_tokens < 1:
            return f"max_tokens={request.max_tokens} must be at least 1"
        # mirrors vllm/v1/engine/input_processor.py: _validate_model_input (a generating
        # request's prompt must leave room for one output token)
        if prompt_len >= self.max_model_len:
            return (
                f"prompt of {prompt_len} tokens leaves no room for output under "
                f"max_model_len={self.max_model_len}"
            )
        needed = cdiv(prompt_len, self.block_size)
        if needed > self.num_usable_blocks:
            return (
                f"prompt of {prompt_len} tokens needs {needed} KV blocks; the pool holds "
                f"{self.num_usable_blocks}"
            )
        req = VllmRequest(request, self.block_size)
        self.requests[req.request_id] = req
        self.decode_runs.on_arrival()
        self.waiting.add_request(req)
        return None

    def abort(self, request_id: str, reason: str) -> None:
        """mirrors scheduler.py: Scheduler.finish_requests with FINISHED_ABORTED."""
        req = self.requests.get(request_id)
        if req is None:
            return
        self.decode_runs.steady = False
        if req.status == RequestStatus.RUNNING:
            self.running.remove(req)
        else:
            self.waiting.remove_requests((req,))
        req.status = RequestStatus.FINISHED_ABORTED
        self._free_request(req)

    def _free_request(self, request: VllmRequest) -> None:
        # mirrors scheduler.py: Scheduler._free_request / _free_blocks
        self.kv_cache_manager.free(request)
        if self.host_pool is not None:
            self.host_pool.drop(request.request_id)
        del self.requests[request.request_id]

    def has_unfinished(self) -> bool:
        return bool(self.running) or bool(self.waiting)

    # ------------------------------------------------------------------ stats
    # mirrors vllm/v1/core/sched/scheduler.py: Scheduler.make_stats
    def stats(self) -> SchedulerStats:
        pool = self.kv_cache_manager.block_pool
        bs = self.block_size
        num_free = pool.get_num_free_blocks()
        return SchedulerStats(
            num_running=len(self.running),
            num_waiting=len(self.waiting),
            kv_capacity_tokens=self.num_usable_blocks * bs,
            kv_used_tokens=(self.num_usable_blocks - num_free) * bs,
            kv_cached_tokens=pool.num_free_cached_blocks * bs,
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
