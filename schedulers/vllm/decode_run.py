"""vLLM's decode runs: the replay's fast path beside the mirrored scheduler (not upstream).

A decode run is a stretch of steady steps in which every running request decodes one token
and `Scheduler.schedule` decides nothing else; the engine commits such a run at once instead
of step by step (DESIGN.md, "Decode runs"). `VllmDecodeRuns` predicts a run from the
scheduler's state (`next_run`) and commits it with exactly the pool operations the single
steps would do (`commit`); `VllmScheduler`'s `DecodeRunScheduler` methods delegate to it.
Its one piece of state, `steady`, is kept up to date by the scheduler's mirrored code at the
points where a step (or a run) could change what admission would do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from schedulers.contract import DecodeRun, DecodeRunStats, StepEvents, StepPlan
from schedulers.vllm.kv_cache_manager import cdiv
from schedulers.vllm.request import FINISH_REASONS, VllmRequest

# (request, token, is_stale, was_running, events) -> whether the token stops the request
CommitToken = Callable[[VllmRequest, int, bool, bool, StepEvents], bool]

if TYPE_CHECKING:
    from schedulers.vllm.scheduler import VllmScheduler


class VllmDecodeRuns:
    """The decode-run prediction and commit of one `VllmScheduler`."""

    def __init__(self, scheduler: VllmScheduler) -> None:
        self.scheduler = scheduler
        # Whether admission is known to be blocked for the steps ahead: the last step (or
        # run) preempted, aborted, skipped and finished nothing and its admission stopped for
        # a lasting reason (`after_schedule`); an arrival that may become the waiting head,
        # an abort or a finish clears it.
        self.steady = False

    # ------------------------------------------------------------------ the scheduler's hooks
    def after_schedule(self, quiet: bool, token_budget: int) -> None:
        """After `schedule()`: the steps ahead keep its admission decision when it preempted,
        aborted and skipped nothing (`quiet`) and its waiting loop stopped for a reason the
        next steps keep (a misfit, max_num_seqs, an empty queue), not because the step's
        token budget (`token_budget` left) ran out with requests still waiting."""
        self.steady = quiet and (token_budget > 0 or not self.scheduler.waiting)

    def on_arrival(self) -> None:
        """A request is about to join the waiting queue: unless arrivals change no decision of
        a run, it may become the head (behind a blocked head it waits)."""
        if not self.arrivals_keep_run():
            self.steady = False

    # ------------------------------------------------------------------ DecodeRunScheduler
    def arrivals_keep_run(self) -> bool:
        """Whether a request arriving now would change no decision of a decode run: under
        fcfs it queues behind the waiting head, which admission stops at."""
        s = self.scheduler
        return s.policy == "fcfs" and bool(s.waiting)

    def next_run(self, limit: int, pipelined: bool = False) -> DecodeRun | None:
        """The steady decode steps ahead, at most `limit` (DESIGN.md, "Decode runs").

        `pipelined` (the async scheduler, its caller having checked that the plan in flight
        samples for every running request and no stop token): each request has computed
        every known token and holds one placeholder, and the run's first call commits the
        in-flight plan's token, so a run of `k` loop calls appends `k` tokens; only its last
        call's commit may finish requests, and that call's plan skips the requests whose
        last token the commit appends (`commit_pipelined`).

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
        s = self.scheduler
        running = s.running
        if limit <= 0 or not running or len(running) > s.max_num_scheduled_tokens:
            return None
        if not pipelined:
            for r in running:  # each owes exactly its last output token
                if (len(r.all_token_ids) - r.num_computed_tokens != 1
                        or len(r.all_token_ids) == r.num_prompt_tokens):
                    return None
        bs = s.block_size
        kv = s.kv_cache_manager
        head = s.waiting.peek_request() if s.waiting else None
        if head is not None and kv.enable_caching and head.block_hashes:
            head_hashes = head.block_hashes
            for r in running:
                n = len(r.block_hashes)
                if n == 0 or (n <= len(head_hashes)
                              and head_hashes[n - 1] == r.block_hashes[n - 1]):
                    return None
        max_model_len = s.max_model_len
        k = limit
        for r in running:
            # step j appends output number num_output_tokens + j + 1: the step that reaches
            # max_tokens or max_model_len finishes the request and ends the run (pipelined:
            # call j commits output number num_output_tokens + j + 1, the same bound)
            k = min(k, r.max_tokens - r.num_output_tokens, max_model_len - r.num_tokens)
        if k <= 0:
            return None
        # The first step whose block allocations exceed the free blocks would preempt.
        req_to_blocks = kv.req_to_blocks
        first_crossing = [len(req_to_blocks[r.request_id]) * bs - r.num_computed_tokens
                          for r in running]
        num_free = kv.block_pool.free_block_queue.num_free_blocks
        free_after_first = num_free - first_crossing.count(0)  # the most any step sees
        # The last step finished, preempted or admitted something: the run's first step must
        # be one whose admission stops for a reason the next steps keep.
        if not self.steady and not self._admission_blocked(free_after_first):
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
        self.steady = True
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
        s = self.scheduler
        kv = s.kv_cache_manager
        if not kv.enable_caching or (s.host_pool is not None
                                     and s.host_pool.swapped_tokens(head.request_id)):
            return n  # no prefix lookup for this head
        hits, _ = kv.get_computed_blocks(head)
        bs, max_model_len = s.block_size, s.max_model_len
        budget = s.max_num_scheduled_tokens - len(s.running)
        lptt = s.config.long_prefill_token_threshold  # running and waiting: 2 or more
        num_tokens = head.num_tokens
        least = -1  # the fewest blocks the head needs after any such eviction
        free_hits: set[int] = set()
        for i, block in enumerate(hits):
            if block.ref_cnt == 0:  # evicting it leaves the first i blocks as the hit
                chunk = s.admitted_chunk(num_tokens - i * bs, lptt, budget)
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
        s = self.scheduler
        if s.host_pool is not None:
            return False  # a swapped head resumes from the host: leave it to schedule()
        running, waiting = s.running, s.waiting
        if not waiting or len(running) >= s.max_num_running_reqs:
            return True
        token_budget = s.max_num_scheduled_tokens - len(running)
        if token_budget <= 0:
            return False  # schedule() counts a spent budget as a passing stop
        kv = s.kv_cache_manager
        head = waiting.peek_request()
        new_computed_blocks, num_computed_tokens = kv.get_computed_blocks(head)
        num_new_tokens = s.admitted_chunk(head.num_tokens - num_computed_tokens,
                                          s.config.long_prefill_token_threshold, token_budget)
        return not kv.fits(head, num_new_tokens, num_computed_tokens, new_computed_blocks,
                           s.config.scheduler_reserve_full_isl, True, num_free)

    def commit(self, run: DecodeRun, tokens: list[list[int]]) -> DecodeRunStats:
        """Commit `len(tokens[0])` steps of `run` (at most `run.max_steps`): the same state as
        scheduling and updating them one by one.

        Per step, upstream gives each running request, in order, a new block when its token
        crosses a block boundary and caches the blocks it filled; the allocations are replayed
        in the same (step, request) order, so every block id and eviction matches.
        """
        s = self.scheduler
        num_steps = run.num_steps(tokens)
        kv = s.kv_cache_manager
        running = s.running
        used, cached = self._allocate(num_steps)
        for r, toks in zip(running, tokens):
            r.append_output_token_ids(toks)
        # Then each request caches the blocks it filled. Step by step, upstream interleaves
        # these inserts with the other requests' and with the evictions above; the hashes of
        # blocks holding different requests' outputs differ, so the hash map ends the same.
        req_to_blocks = kv.req_to_blocks
        for r in running:
            kv._cache_blocks(r, req_to_blocks[r.request_id], r.num_computed_tokens + num_steps)
        for r in running:
            r.num_computed_tokens += num_steps
        s.step_count += num_steps
        # The last step may finish requests (a stop token or a length cap), as
        # update_from_output would.
        finished: list[tuple[str, str]] = []
        for r, toks in zip(running, tokens):
            s.finish_if_stopped(r, toks[-1], finished)
        num_running = len(running)
        if finished:
            pool = kv.block_pool
            s.drop_finished_from_running()
            used[-1] = (s.num_usable_blocks - pool.free_block_queue.num_free_blocks) * s.block_size
            cached[-1] = pool.num_free_cached_blocks * s.block_size
        return DecodeRunStats(used, cached, num_running, len(s.waiting), finished,
                              len(s.running))

    def commit_pipelined(self, run: DecodeRun, tokens: list[list[int]],
                         commit_token: CommitToken) -> tuple[StepPlan, DecodeRunStats]:
        """Commit `k = len(tokens[0])` calls of the batch-queue loop over `run` (the async
        scheduler; `next_run(..., pipelined=True)`): call `j` plans the run's step `j` and
        commits the plan before it (for `j = 0`, the plan in flight), whose sampled tokens are
        `tokens[i][j]`. The state is the one those calls leave, one by one: the run's last
        plan (step `k - 1`, its placeholders unfilled) is made and returned for the engine to
        launch, and it is the one plan in flight. Only the last call's commit may finish
        requests (a stop token, or the length caps `next_run` bounds the run by); that call's
        plan skips the requests that reach a length cap there, as `Scheduler.schedule` does
        with the plan in flight sampling their last token. The stats are the `k` commits'
        (each after its call's plan was made; the last one after the finishes).
        `commit_token`: the async scheduler's mirrored commit of one sampled token
        (`AsyncVllmScheduler._commit_token`).
        """
        s = self.scheduler
        k = run.num_steps(tokens)
        kv = s.kv_cache_manager
        running = s.running
        max_model_len = s.max_model_len
        # mirrors Scheduler.schedule (the max-tokens skip, and no room under max_model_len):
        # the last call's plan skips a request whose plan in flight samples its last token
        last_planned = [r for r in running
                        if r.num_output_tokens + k < r.max_tokens
                        and r.num_computed_tokens + k < max_model_len]
        skipped = len(last_planned) < len(running)
        # The k plans' allocations (the skipped requests' none in the last); the last plan is
        # made with the first k - 1 tokens committed (their blocks are cached with the last
        # token's, below: each call caches only its requests' own filled blocks).
        used, cached = self._allocate(k, last_planned if skipped else running)
        for r, toks in zip(running, tokens):
            r.append_output_token_ids(toks[:-1])
            r.num_computed_tokens += k - 1
            r.num_in_flight_tokens = 1  # the last virtual plan's: every earlier one committed
        s.step_count += k
        if s.host_pool is not None:
            s.host_pool.commit()
            s._swap_out, s._swap_in, s._swap_fallbacks = [], [], []
        # mirrors Scheduler.schedule for the last call's plan: one token for each planned
        # request (its placeholder), nothing else; AsyncScheduler._update_after_schedule
        # counts its in-flight token and placeholder
        plan = s._make_plan(last_planned, [], {r.request_id: 1 for r in last_planned}, [], [])
        # Then that call commits the plan before it, with the mirrored code of
        # AsyncScheduler.update_from_output (as in `commit`, upstream's interleaving of the
        # earlier calls' cache inserts with these leaves the same hash map)
        events = StepEvents()
        finished = events.finished
        for r, toks in zip(running, tokens):
            r.num_in_flight_tokens -= 1
            if commit_token(r, toks[-1], False, True, events):
                finished.append((r.request_id, FINISH_REASONS[r.status]))
                s._free_request(r)
        num_running = len(running)
        if finished:
            s.drop_finished_from_running()
            pool = kv.block_pool
            used[-1] = (s.num_usable_blocks - pool.free_block_queue.num_free_blocks) * s.block_size
            cached[-1] = pool.num_free_cached_blocks * s.block_size
        return plan, DecodeRunStats(used, cached, num_running, len(s.waiting), finished,
                                    len(s.running))

    def _allocate(self, num_steps: int, last: list[VllmRequest] | None = None
                  ) -> tuple[list[int], list[int]]:
        """Give the running requests the blocks `num_steps` decode steps allocate (step `j`
        computes position `num_computed_tokens + j` of each); returns the used and the free
        cached slots after each step's allocations.

        Per step, upstream gives each running request, in order, a new block when its token
        crosses a block boundary; the allocations are replayed in the same (step, request)
        order, so every block id and eviction matches. `last`: the requests the last step
        schedules (default: all; the others are skipped, in running order).
        """
        s = self.scheduler
        kv = s.kv_cache_manager
        pool = kv.block_pool
        bs = s.block_size
        running = s.running
        in_last = None if last is None else {r.request_id for r in last}
        allocs: list[tuple[int, int]] = []  # (step, running index) of each new block
        for i, r in enumerate(running):
            j = len(kv.req_to_blocks[r.request_id]) * bs - r.num_computed_tokens
            end = num_steps if in_last is None or r.request_id in in_last else num_steps - 1
            while j < end:
                allocs.append((j, i))
                j += bs
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
        usable = s.num_usable_blocks
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
        return used, cached
