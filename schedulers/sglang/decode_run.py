"""SGLang's decode runs: the replay's fast path beside the mirrored scheduler (not upstream).

A decode run is a stretch of steady steps in which the running batch decodes one token per
request and the event loop decides nothing else; the engine commits such a run at once
instead of step by step (DESIGN.md, "Decode runs"). `SglangDecodeRuns` predicts a run from
the scheduler's state (`next_run`) and commits it with exactly the pool operations the single
steps would do (`commit`); `SglangScheduler`'s `DecodeRunScheduler` methods delegate to it.
Its one piece of state, `steady`, is kept up to date by the scheduler's mirrored code at the
points where a step could end a run (`after_schedule`, a finish, an abort).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from schedulers.contract import (
    PLACEHOLDER_TOKEN_ID,
    DecodeRun,
    DecodeRunStats,
    ScheduledChunk,
    StepPlan,
)
from schedulers.sglang.schedule_batch import ScheduleBatch

if TYPE_CHECKING:
    from schedulers.sglang.scheduler import SglangScheduler


def paged_decode_steps(committed_lens: list[int], page_size: int, limit: int, room: int
                       ) -> int:
    """How many of the next `limit` decode steps fit in `room` free plus evictable slots:
    step j allocates a page for every request whose committed length plus j is a multiple of
    `page_size` (counted per residue: those of residue -j mod page_size)."""
    by_residue = [0] * page_size
    for n in committed_lens:
        by_residue[n % page_size] += 1
    need = 0
    for j in range(limit):
        need += page_size * by_residue[-j % page_size]
        if need > room:
            return j
    return limit


class SglangDecodeRuns:
    """The decode-run prediction and commit of one `SglangScheduler`."""

    def __init__(self, scheduler: SglangScheduler) -> None:
        self.scheduler = scheduler
        # Whether the last step was a decode that retracted, aborted and finished nothing.
        self.steady = False

    # ------------------------------------------------------------------ the scheduler's hooks
    def after_schedule(self, batch: ScheduleBatch | None) -> None:
        """After `schedule()` chose `batch`: steady when it decodes and the step retracted and
        aborted nothing."""
        s = self.scheduler
        self.steady = (batch is not None and batch.forward_mode == "decode"
                       and not s.plan_preempted and not s.plan_aborted)

    # ------------------------------------------------------------------ DecodeRunScheduler
    def arrivals_keep_run(self) -> bool:
        """Whether a request arriving now would change no decision of a decode run: with
        `batch_is_full` (and no priority preemption) prefill is skipped whatever waits."""
        s = self.scheduler
        return s.running_batch.batch_is_full and not s.enable_priority_preemption

    def next_run(self, limit: int) -> DecodeRun | None:
        """The steady decode steps ahead, at most `limit` (DESIGN.md, "Decode runs").

        After a decode step that retracted, aborted and finished nothing (or an extend step
        whose requests all go on to decode, merged now: `_merge_last_extend`), with no
        chunked request, no arrival and prefill skipped (`batch_is_full`, or nothing waiting,
        and no priority preemption), every next step decodes the same batch until a request reaches
        `max_new_tokens` or `check_decode_mem` would fail: the free plus evictable slots shrink
        by exactly each step's allocation (eviction moves slots from one to the other).
        """
        if limit <= 0 or (not self.steady and not self._merge_last_extend()):
            return None
        s = self.scheduler
        rb = s.running_batch
        if (s.chunked_req is not None or s.last_batch is not rb
                or s.enable_priority_preemption
                or not (rb.batch_is_full or not s.waiting_queue)):
            return None
        return self._bounded_run(limit)

    def _bounded_run(self, limit: int, pipelined: bool = False) -> DecodeRun | None:
        """The running batch's next decode steps, at most `limit`, bounded by its length caps
        (the step that reaches a request's `max_new_tokens` ends the run) and by memory;
        `pipelined`: the overlap loop's calls, whose last plan leaves out the requests that
        its commit finishes by length, so not all of them."""
        s = self.scheduler
        reqs = s.running_batch.reqs
        k = limit
        for r in reqs:
            if r.finished_reason is not None or r.to_finish is not None:
                return None
            # a length finish ends the run
            k = min(k, r.max_new_tokens - len(r.output_ids))
        if pipelined and k > 0 and all(
                r.max_new_tokens - len(r.output_ids) == k for r in reqs):
            k -= 1  # the last call's plan would leave every request out: an idle plan
        if k <= 0:
            return None
        room = s.allocator.available_size() + s.tree_cache.evictable_size()
        ps = s.page_size
        if ps == 1:
            k = min(k, room // len(reqs))
        else:
            k = paged_decode_steps([r.kv_committed_len for r in reqs], ps, k, room)
        if k <= 0:
            return None
        return DecodeRun(
            request_ids=[r.rid for r in reqs],
            seq_lens=[r.kv_committed_len + 1 for r in reqs],
            max_steps=k,
            forward_mode="decode",
        )

    def _merge_last_extend(self) -> bool:
        """After an extend step whose requests all go on to decode (no chunk left, none
        finished, nothing preempted or aborted), the next step merges them into the running
        batch and, when it skips prefill (`batch_is_full`, or nothing waiting), decodes. Do
        that merge now, as that step would begin, so that a run can start with its decode;
        returns whether it was done. Done and then not run, it is what the next step would
        do first, and that step finds it done.

        mirrors scheduler.py: get_next_batch_to_run and _get_new_batch_prefill_raw (their
        opening: the merge, and the checks that skip prefill)
        """
        s = self.scheduler
        lb, rb = s.last_batch, s.running_batch
        if (lb is None or lb is rb or lb.forward_mode != "extend" or s.plan_preempted
                or s.plan_aborted or s.chunked_req is not None
                or lb.chunked_req is not None or s.enable_priority_preemption
                or s.host_pool is not None):
            return False
        for r in lb.reqs:  # filter_batch keeps them all
            if r.finished_reason is not None or r.to_finish is not None:
                return False
        if not rb.is_empty() and rb.forward_mode != "decode":
            # an earlier extend batch that became the running batch and has not decoded
            # yet: merged into, it would be the last batch, and the next step would filter
            # it as an extend batch (its finished requests, its chunked request)
            return False
        merged = lb if rb.is_empty() else rb
        running_bs = len(lb.reqs) + (0 if merged is lb else len(rb.reqs))
        full = merged.batch_is_full
        if not full and s.waiting_queue:
            if s.get_num_allocatable_reqs(running_bs) > 0:
                return False  # the next step tries a prefill
            full = True  # ... and finds no room for one more request
        if merged is lb:
            s.running_batch = lb
        else:
            rb.merge_batch(lb)
        merged.batch_is_full = full
        s.last_batch = merged
        return True

    def commit(self, run: DecodeRun, tokens: list[list[int]]) -> DecodeRunStats:
        """Commit `len(tokens[0])` steps of `run` (at most `run.max_steps`): the same state as
        scheduling and updating them one by one (`update_running_batch`'s memory check and
        ratio decay, `alloc_for_decode`, the sampled tokens)."""
        s = self.scheduler
        num_steps = run.num_steps(tokens)
        rb = s.running_batch
        rb.forward_mode = "decode"  # prepare_for_decode (a run may follow an extend)
        self.steady = True  # its steps decode and retract and abort nothing
        reqs = rb.reqs
        tree, allocator = s.tree_cache, s.allocator
        capacity = s.config.kv_capacity_tokens
        used, cached = self._allocate(num_steps)
        for r, toks in zip(reqs, tokens):
            r.output_ids.extend(toks)
        s.step_count += num_steps
        num_running = s.req_to_token_pool.num_used_rows()
        # The last step may finish requests, as process_batch_result_decode would.
        finished: list[tuple[str, str]] = []
        allocator.free_group_begin()
        try:
            for r in reqs:
                s.finish_if_done(r, finished)
        finally:
            allocator.free_group_end()
        if finished:
            self.steady = False
            evictable = tree.evictable_size()
            used[-1] = capacity - allocator.available_size() - evictable
            cached[-1] = evictable
        return DecodeRunStats(used, cached, num_running, len(s.waiting_queue), finished,
                              s.req_to_token_pool.num_used_rows())

    def _allocate(self, num_steps: int) -> tuple[list[int], list[int]]:
        """Do what `num_steps` decode steps of the running batch do to the pools and the
        ratio, one by one (`update_running_batch`'s memory check and ratio decay,
        `alloc_for_decode`); returns the used and the cached slots after each step's
        allocation. The caller has bounded `num_steps` so that every step fits."""
        s = self.scheduler
        rb = s.running_batch
        reqs = rb.reqs
        bs = len(reqs)
        kv, tracker, tree = s.kv, s.new_token_ratio_tracker, s.tree_cache
        allocator = s.allocator
        capacity = s.config.kv_capacity_tokens
        used: list[int] = []
        cached: list[int] = []
        if s.page_size == 1:
            # The slots the steps evict and allocate one by one, in one eviction and one
            # allocation: the eviction order is total and the free list is FIFO, so the same
            # nodes go and every request gets the same slots.
            total = bs * num_steps
            available = allocator.available_size()
            evictable = tree.evictable_size()
            sizes: list[int] = []
            if total > available:
                tree.evict(total - available, sizes)
            slots = allocator.alloc(total)
            if slots is None:
                raise RuntimeError("sglang scheduler: a decode run ran out of memory")
            rows = s.req_to_token_pool.req_to_token
            for i, r in enumerate(reqs):
                rows[r.req_pool_idx].extend(slots[i::bs])  # type: ignore[index]
                r.kv_allocated_len += num_steps
                r.kv_committed_len += num_steps
            freed = at = 0
            for j in range(1, num_steps + 1):
                tracker.decay_step()
                while freed < j * bs - available:  # step j-1 evicted just enough
                    freed += sizes[at]
                    at += 1
                used.append(capacity - (available + freed - j * bs) - (evictable - freed))
                cached.append(evictable - freed)
        else:
            for _ in range(num_steps):
                if not rb.check_decode_mem():
                    raise RuntimeError("sglang scheduler: a decode run ran out of memory")
                tracker.decay_step()
                kv.alloc_for_decode(reqs)
                evictable = tree.evictable_size()
                used.append(capacity - allocator.available_size() - evictable)
                cached.append(evictable)
        return used, cached

    # ------------------------------------------------------------------ the overlap loop's
    def next_pipelined_run(self, limit: int) -> DecodeRun | None:
        """The overlap loop's steady calls ahead, at most `limit` (DESIGN.md, "Decode runs";
        the caller, `OverlapSglangScheduler.pipelined_decode_run`, has checked that the one
        batch in flight decodes the running batch and finishes nothing). Call `j` of a run
        plans the run's step `j` with output counts lagging one step (the plan in flight not
        yet committed): it sees `len(output_ids) + j` outputs, so no plan but the last leaves
        a request out (`_reqs_finishing_inflight`) and no commit but the last finishes one by
        length while `k <= max_new_tokens - len(output_ids)`: the last call's plan leaves out
        the requests its commit finishes by length (not all of them: that plan would be idle),
        as upstream's does; and the plans allocate at most what the synchronous steps
        allocate, so the same memory bound keeps `retract_decode` (and the skip-decode branch)
        away. A stop token may also finish requests at the last call's commit."""
        s = self.scheduler
        rb = s.running_batch
        if (limit <= 0 or s.chunked_req is not None or s.last_batch is not rb
                or rb.forward_mode != "decode" or s.enable_priority_preemption
                or s.host_pool is not None or not (rb.batch_is_full or not s.waiting_queue)):
            return None
        return self._bounded_run(limit, pipelined=True)

    def next_pipelined_run_after_extend(self, limit: int, extend: ScheduleBatch
                                        ) -> DecodeRun | None:
        """The overlap loop's steady calls ahead while `extend`, the last extend batch, is in
        flight (the caller has checked that its requests are live and sample no stop token).
        Call 0 would merge its requests into the running batch and, skipping prefill,
        decode them all (done now: `_merge_last_extend`, as in the synchronous loop), then
        commit `extend` (process_batch_result_prefill: their first tokens, the radix
        insertion of their prompts). The bound is `next_pipelined_run`'s: call `j` sees `j`
        outputs of the extend batch's requests and at most `len(output_ids) + j` of the
        others; the radix insertion only adds free or evictable slots (a duplicate it frees
        was in a node that it locks, or that was locked already), so the memory bound made
        before it holds."""
        s = self.scheduler
        lb = s.last_batch
        if limit <= 0 or lb is None or lb.forward_mode != "extend" or len(lb.reqs) != len(
                extend.reqs):
            return None
        for a, r in zip(lb.reqs, extend.reqs):
            if a is not r or r.inflight_middle_chunks:
                return None
        if not self._merge_last_extend():
            return None
        return self._bounded_run(limit, pipelined=True)

    def allocate_pipelined_step(self) -> None:
        """Call 0 of a run that starts with an extend batch in flight: the plan of step 0,
        the merged running batch's decode (update_running_batch: the memory check, the ratio
        decay, prepare_for_decode)."""
        s = self.scheduler
        self._allocate(1)
        s.running_batch.forward_mode = "decode"
        s.step_count += 1

    def commit_pipelined_calls(self, tokens: list[list[int]], first: int
                               ) -> tuple[StepPlan, DecodeRunStats]:
        """Calls `first .. k - 1` of a run of `k = len(tokens[0])` overlap-loop calls
        (`next_pipelined_run`) at once: call `j` plans the run's step `j` (its allocation
        and ratio decay) and then commits the batch before it (for `j = 0`, the one in
        flight), which samples `tokens[i][j]`. Only the last call's commit may finish
        requests (a stop token or a length cap). The last call's plan is the one `schedule()`
        would make there: prefill skipped, the requests finishing in flight by length left
        out (`_reqs_finishing_inflight`), the decode fits, so it decodes the rest of the
        running batch, every input token a placeholder (each request is in the batch in
        flight).
        Returns that plan and the stats of those calls (the last one after its finishes);
        the caller does the result queue."""
        s = self.scheduler
        k = len(tokens[0])
        rb = s.running_batch
        reqs = rb.reqs
        used: list[int] = []
        cached: list[int] = []
        if k - first > 1:
            used, cached = self._allocate(k - first - 1)
        for r, toks in zip(reqs, tokens):
            r.output_ids.extend(toks[first:-1])
        # mirrors Scheduler.schedule for the last call (get_next_batch_to_run:
        # get_new_batch_prefill returns None at once; update_running_batch leaves out the
        # requests the batch in flight finishes by length (_reqs_finishing_inflight), which
        # clears batch_is_full, and decodes the rest: the run's bound keeps the memory check)
        finishing = [r for r in reqs if len(r.output_ids) + 1 >= r.max_new_tokens]
        if finishing:
            rb.filter_batch(reqs_to_exclude=finishing)
            rb.batch_is_full = False
        last_used, last_cached = self._allocate(1)
        used += last_used
        cached += last_cached
        s.plan_preempted = []
        s.plan_aborted = []
        s._stall_candidate = None
        rb.forward_mode = "decode"
        s.last_batch = rb
        s._cur_batch = None
        self.steady = True
        plan = StepPlan(step=s.step_count + k - first - 1, page_size=s.page_size,
                        preempted=s.plan_preempted, aborted=s.plan_aborted)
        s.step_count += k - first
        plan.forward_mode = "decode"
        rows = s.req_to_token_pool.req_to_token
        chunks = plan.chunks
        for r in rb.reqs:
            chunks.append(ScheduledChunk(
                r.rid, [PLACEHOLDER_TOKEN_ID], r.kv_committed_len - 1,
                rows[r.req_pool_idx], True))  # type: ignore[index]
        num_running = s.req_to_token_pool.num_used_rows()
        # Then the last call commits the batch before it (process_batch_result_decode):
        # a stop token or a length cap may finish requests there.
        finished: list[tuple[str, str]] = []
        allocator = s.allocator
        allocator.free_group_begin()
        try:
            for r, toks in zip(reqs, tokens):
                r.output_ids.append(toks[-1])
                s.finish_if_done(r, finished)
        finally:
            allocator.free_group_end()
        if finished:
            self.steady = False
            evictable = s.tree_cache.evictable_size()
            used[-1] = s.config.kv_capacity_tokens - allocator.available_size() - evictable
            cached[-1] = evictable
        return plan, DecodeRunStats(used, cached, num_running, len(s.waiting_queue), finished,
                                    s.req_to_token_pool.num_used_rows())
