"""The vLLM v1 scheduler: token debt, running first, preemption by recompute (or by swap).

Mirrors vllm/v1/core/sched/scheduler.py (Scheduler) at vLLM v0.32.0, for a decoder-only text
model with one full-attention KV cache group and no KV connector, speculative decoding, LoRA or
encoder inputs. Async scheduling (`AsyncScheduler`) is the subclass in
schedulers/vllm/async_scheduler.py; what it relies on here (output placeholders, the max-tokens
skip, the stale-output admission skip) is upstream's base `Scheduler` too, inert while
nothing is in flight.

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
from schedulers.vllm.kv_cache_manager import KVCacheManager, cdiv
from schedulers.vllm.kv_cache_utils import KVCacheBlock
from schedulers.vllm.request import RequestStatus, VllmRequest
from schedulers.vllm.request_queue import create_request_queue

FINISH_REASONS = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_LENGTH_CAPPED: "length",
    RequestStatus.FINISHED_ABORTED: "abort",
}


def admitted_chunk(num_new_tokens: int, lptt: int, token_budget: int) -> int:
    """mirrors scheduler.py: Scheduler.schedule (waiting loop): the tokens a request admitted
    this step gets, capped by `long_prefill_token_threshold` when set, then by the budget."""
    if 0 < lptt < num_new_tokens:
        num_new_tokens = lptt
    return min(num_new_tokens, token_budget)


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
        # Whether admission is known to be blocked for the steps ahead: the last step (or
        # run) preempted, aborted and finished nothing and its admission stopped for a
        # lasting reason (see `decode_run`).
        self._steady = False
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

    # ------------------------------------------------------------------ requests
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
        if not self.arrivals_keep_decode_run():
            self._steady = False  # it may become the head (behind a blocked head it waits)
        self.waiting.add_request(req)
        return None

    def abort(self, request_id: str, reason: str) -> None:
        """mirrors scheduler.py: Scheduler.finish_requests with FINISHED_ABORTED."""
        req = self.requests.get(request_id)
        if req is None:
            return
        self._steady = False
        if req.status == RequestStatus.RUNNING:
            self.running.remove(req)
        else:
            self.waiting.remove_requests((req,))
        req.status = RequestStatus.FINISHED_ABORTED
        self._free_request(req)

    def has_unfinished(self) -> bool:
        return bool(self.running) or bool(self.waiting)

    # ------------------------------------------------------------------ schedule
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

        # Next, the WAITING requests, unless this step preempted. `admission_blocked`: the
        # loop stopped for a reason the next steps keep (a misfit, max_num_seqs, nothing
        # waiting), not because this step's token budget ran out.
        admission_blocked = True
        if not preempted_reqs:
            waiting = self.waiting
            reserve_full_isl = self.config.scheduler_reserve_full_isl
            skipped: list[VllmRequest] = []
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
                num_new_tokens = admitted_chunk(
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
            else:
                admission_blocked = not waiting
            if skipped:
                waiting.prepend_requests(skipped)
                admission_blocked = False

        plan = self._make_plan(
            scheduled_running_reqs, admitted_reqs, num_scheduled_tokens, preempted_reqs, aborted
        )
        self._steady = not preempted_reqs and not aborted and admission_blocked
        return plan

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

    # ------------------------------------------------------------------ commit
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
            self._finish_if_stopped(req, token_id, finished)
        if finished:
            self._drop_finished_from_running()
        return events

    def _finish_if_stopped(self, req: VllmRequest, token_id: int,
                           finished: list[tuple[str, str]]) -> None:
        """After `token_id` was appended: on a stop (check_stop), free the request and report
        it in `finished`."""
        if self._check_stop(req, token_id, self.max_model_len):
            finished.append((req.request_id, FINISH_REASONS[req.status]))
            self._free_request(req)

    def _drop_finished_from_running(self) -> None:
        # mirrors scheduler.py: update_from_output (stopped requests leave self.running; the
        # others are all RUNNING: a preempted request has left it already)
        running = RequestStatus.RUNNING
        self.running = [r for r in self.running if r.status is running]
        self._steady = False

    # ------------------------------------------------------------------ decode runs
    def arrivals_keep_decode_run(self) -> bool:
        """Whether a request arriving now would change no decision of a decode run: under
        fcfs it queues behind the waiting head, which admission stops at."""
        return self.policy == "fcfs" and bool(self.waiting)

    def decode_run(self, limit: int) -> DecodeRun | None:
        """The steady decode steps ahead, at most `limit` (DESIGN.md, "Decode runs").

        When every running request owes one token within the budget and the next step's
        admission loop would stop at a misfit, at max_num_seqs or an empty queue (known
        from the last step when it preempted, aborted and finished nothing, else checked
        now: `_admission_blocked`), the next steps decode that batch, one token each, until
        a request finishes by length or needs a block the free queue cannot give (a
        preemption) or would evict a free block of the waiting head's prefix hit. Admission
        stays blocked: an arrival under fcfs queues behind the head, free blocks only shrink,
        and a larger budget only asks for more blocks; the head's prefix hit could grow only
        if a block a running request fills continued its hash chain, and then there is no
        run, and it shrinks only by such an eviction.
        """
        running = self.running
        if limit <= 0 or not running or len(running) > self.max_num_scheduled_tokens:
            return None
        for r in running:  # each owes exactly its last output token
            if (len(r.all_token_ids) - r.num_computed_tokens != 1
                    or len(r.all_token_ids) == r.num_prompt_tokens):
                return None
        bs = self.block_size
        head = self.waiting.peek_request() if self.waiting else None
        if head is not None and self.kv_cache_manager.enable_caching and head.block_hashes:
            head_hashes = head.block_hashes
            for r in running:
                n = len(r.block_hashes)
                if n == 0 or (n <= len(head_hashes)
                              and head_hashes[n - 1] == r.block_hashes[n - 1]):
                    return None
        max_model_len = self.max_model_len
        k = limit
        for r in running:
            # step j appends output number num_output_tokens + j + 1: the step that reaches
            # max_tokens or max_model_len finishes the request and ends the run
            k = min(k, r.max_tokens - r.num_output_tokens, max_model_len - r.num_tokens)
        if k <= 0:
            return None
        # The first step whose block allocations exceed the free blocks would preempt.
        req_to_blocks = self.kv_cache_manager.req_to_blocks
        first_crossing = [len(req_to_blocks[r.request_id]) * bs - r.num_computed_tokens
                          for r in running]
        num_free = self.kv_cache_manager.block_pool.free_block_queue.num_free_blocks
        free_after_first = num_free - first_crossing.count(0)  # the most any step sees
        # The last step finished, preempted or admitted something: the run's first step must
        # be one whose admission stops for a reason the next steps keep.
        if not self._steady and not self._admission_blocked(free_after_first):
            return None

        def crossings_up_to(j: int) -> int:
            return sum((j - j0) // bs + 1 for j0 in first_crossing if j0 <= j)

        # The allocations come from the free queue's head; the run ends before the step whose
        # allocations would exceed the free blocks (a preemption) or reach a free block of
        # the waiting head's prefix hit (`_blocks_before_a_free_hit`).
        allocated = crossings_up_to(k - 1)
        room = num_free
        if head is not None:
            room = min(room, self._blocks_before_a_free_hit(head, allocated, free_after_first))
        if allocated > room:
            lo, hi = 0, k - 1  # the first step j with crossings_up_to(j) > room
            while lo < hi:
                mid = (lo + hi) // 2
                if crossings_up_to(mid) > room:
                    hi = mid
                else:
                    lo = mid + 1
            k = lo
        if k <= 0:
            return None
        self._steady = True
        return DecodeRun(
            request_ids=[r.request_id for r in running],
            seq_lens=[r.num_computed_tokens + 1 for r in running],
            max_steps=k,
            forward_mode="mixed",
        )

    def _blocks_before_a_free_hit(self, head: VllmRequest, n: int, most_free: int) -> int:
        """How many of the first `n` free blocks come before one that the waiting head's
        prefix hit holds (`n` when none does, or when no such eviction could let the head in
        while at most `most_free` blocks are free).

        Evicting such a block cuts the hit there, and a head whose chunk is capped (by
        `long_prefill_token_threshold` or the token budget) may then need fewer blocks: each
        free block of the hit takes one from the free queue, the capped chunk a fixed number.
        So a head that does not fit may fit once one is evicted, and the run must end first.
        """
        kv = self.kv_cache_manager
        if not kv.enable_caching or (self.host_pool is not None
                                     and self.host_pool.swapped_tokens(head.request_id)):
            return n  # no prefix lookup for this head
        hits, _ = kv.get_computed_blocks(head)
        bs, max_model_len = self.block_size, self.max_model_len
        budget = self.max_num_scheduled_tokens - len(self.running)
        lptt = self.config.long_prefill_token_threshold  # running and waiting: 2 or more
        num_tokens = head.num_tokens
        least = -1  # the fewest blocks the head needs after any such eviction
        free_hits: set[int] = set()
        for i, block in enumerate(hits):
            if block.ref_cnt == 0:  # evicting it leaves the first i blocks as the hit
                chunk = admitted_chunk(num_tokens - i * bs, lptt, budget)
                need = max(cdiv(min(i * bs + chunk, max_model_len), bs) - i, 0) + len(free_hits)
                least = need if least < 0 else min(least, need)
                free_hits.add(block.block_id)
        if least < 0 or (least + kv.watermark_blocks > most_free
                         and not kv.block_pool.has_shared_hashes()):
            # No free block in the hit, or none whose eviction lets the head fit (and none
            # whose eviction hands its hash to another block, which may be held: one fewer
            # free block to take, the hit as long)
            return n
        for i, block in enumerate(kv.block_pool.free_block_queue.peek_n(n)):
            if block.block_id in free_hits:
                return i
        return n

    def _admission_blocked(self, num_free: int) -> bool:
        """Whether the next step, decoding one token for each running request and left
        `num_free` free blocks by their allocations, would admit nothing for a reason the
        steps after it keep: `schedule`'s waiting loop, without its side effects.

        It stops at max_num_seqs, at an empty queue, or at a head that does not fit; then
        the head keeps not fitting over the run: free blocks only shrink, and the run ends
        before any of its allocations reaches a free block of the head's prefix hit (whose
        eviction could make a capped chunk fit: `_blocks_before_a_free_hit`), so the hit the
        head is judged on here is the one that step sees.
        """
        if self.host_pool is not None:
            return False  # a swapped head resumes from the host: leave it to schedule()
        running, waiting = self.running, self.waiting
        if not waiting or len(running) >= self.max_num_running_reqs:
            return True
        token_budget = self.max_num_scheduled_tokens - len(running)
        if token_budget <= 0:
            return False  # schedule() counts a spent budget as a passing stop
        kv = self.kv_cache_manager
        head = waiting.peek_request()
        new_computed_blocks, num_computed_tokens = kv.get_computed_blocks(head)
        num_new_tokens = admitted_chunk(head.num_tokens - num_computed_tokens,
                                        self.config.long_prefill_token_threshold, token_budget)
        return not kv.fits(head, num_new_tokens, num_computed_tokens, new_computed_blocks,
                           self.config.scheduler_reserve_full_isl, True, num_free)

    def commit_decode_run(self, run: DecodeRun, tokens: list[list[int]]) -> DecodeRunStats:
        """Commit `len(tokens[0])` steps of `run` (at most `run.max_steps`): the same state as
        scheduling and updating them one by one.

        Per step, upstream gives each running request, in order, a new block when its token
        crosses a block boundary and caches the blocks it filled; the allocations are replayed
        in the same (step, request) order, so every block id and eviction matches.
        """
        num_steps = run.num_steps(tokens)
        kv = self.kv_cache_manager
        pool = kv.block_pool
        bs = self.block_size
        running = self.running
        allocs: list[tuple[int, int]] = []  # (step, running index) of each new block
        for i, r in enumerate(running):
            j = len(kv.req_to_blocks[r.request_id]) * bs - r.num_computed_tokens
            while j < num_steps:
                allocs.append((j, i))
                j += bs
            r.append_output_token_ids(tokens[i])
        allocs.sort()
        # Blocks leave the free queue head in (step, request) order, evicting cached ones.
        queue = pool.free_block_queue
        num_free = queue.num_free_blocks
        num_cached = pool.num_free_cached_blocks
        was_cached = [b.block_hash is not None for b in queue.peek_n(len(allocs))]
        new_blocks = pool.get_new_blocks(len(allocs))
        req_to_blocks, req_to_block_ids = kv.req_to_blocks, kv.req_to_block_ids
        for (_, i), blk in zip(allocs, new_blocks):
            rid = running[i].request_id
            req_to_blocks[rid].append(blk)
            req_to_block_ids[rid].append(blk.block_id)
        # Then each request caches the blocks it filled. Step by step, upstream interleaves
        # these inserts with the other requests' and with the evictions above; the hashes of
        # blocks holding different requests' outputs differ, so the hash map ends the same.
        for r in running:
            kv._cache_blocks(r, req_to_blocks[r.request_id], r.num_computed_tokens + num_steps)
        usable = self.num_usable_blocks
        used: list[int] = []
        cached: list[int] = []
        at = 0
        for step in range(num_steps):
            while at < len(allocs) and allocs[at][0] == step:
                num_free -= 1
                num_cached -= was_cached[at]
                at += 1
            used.append((usable - num_free) * bs)
            cached.append(num_cached * bs)
        for r in running:
            r.num_computed_tokens += num_steps
        self.step_count += num_steps
        # The last step may finish requests (a stop token or a length cap), as
        # update_from_output would.
        finished: list[tuple[str, str]] = []
        for r, toks in zip(running, tokens):
            self._finish_if_stopped(r, toks[-1], finished)
        num_running = len(running)
        if finished:
            self._drop_finished_from_running()
            used[-1] = (usable - queue.num_free_blocks) * bs
            cached[-1] = pool.num_free_cached_blocks * bs
        return DecodeRunStats(used, cached, num_running, len(self.waiting), finished,
                              len(self.running))

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

    def _free_request(self, request: VllmRequest) -> None:
        # mirrors scheduler.py: Scheduler._free_request / _free_blocks
        self.kv_cache_manager.free(request)
        if self.host_pool is not None:
            self.host_pool.drop(request.request_id)
        del self.requests[request.request_id]

    # ------------------------------------------------------------------ stats
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
