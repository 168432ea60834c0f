"""Waiting-queue order and prefill admission.

Mirrors python/sglang/srt/managers/schedule_policy.py (SchedulePolicy, PrefillAdder,
AddReqResult) with the plain token pool's budget of python/sglang/srt/mem_cache/prefill_budget.py
(PrefillBudget).
"""

from __future__ import annotations

import enum
import random

from schedulers.sglang.kv_cache import KVCache
from schedulers.sglang.radix_cache import RadixCache
from schedulers.sglang.req import Req
from schedulers.sglang.schedule_batch import ScheduleBatch

# Arbitrary; bounds per-round prefix work on the waiting queue.
WAITING_QUEUE_PREFIX_MATCH_MAX = 128
# Bound the walk cost using scheduling passes.
WAITING_PREFIX_REFRESH_INTERVAL = 32

CACHE_AWARE_POLICIES = ("lpm", "dfs-weight")


class SchedulePolicy:
    """Sorts the waiting queue in place (mirrors schedule_policy.py: SchedulePolicy)."""

    def __init__(self, policy: str, tree_cache: RadixCache, enable_priority_scheduling: bool,
                 schedule_low_priority_values_first: bool, random_seed: int = 0,
                 in_batch_prefix_caching_check_threshold: int = 32,
                 in_batch_prefix_caching_deprioritize_threshold: int = 32,
                 enable_waiting_prefix_refresh: bool = True) -> None:
        self.policy = policy
        self.tree_cache = tree_cache
        self.enable_priority_scheduling = enable_priority_scheduling
        self.priority_sign = 1 if schedule_low_priority_values_first else -1
        self.rng = random.Random(random_seed)
        self.check_threshold = in_batch_prefix_caching_check_threshold
        self.deprioritize_threshold = in_batch_prefix_caching_deprioritize_threshold
        self.enable_waiting_prefix_refresh = enable_waiting_prefix_refresh
        self._waiting_prefix_refresh_calls = 0
        # used to find the matching prefix for in-batch prefix caching
        self.waiting_queue_radix_tree = RadixCache(page_size=1)

    def _determine_active_policy(self, waiting_queue: list[Req]) -> str:
        # mirrors schedule_policy.py: SchedulePolicy._determine_active_policy
        if self.policy == "lpm" and len(waiting_queue) > WAITING_QUEUE_PREFIX_MATCH_MAX:
            # turn off the expensive prefix matching and sorting when the queue is long
            return "fcfs"
        return self.policy

    def calc_priority(self, waiting_queue: list[Req]) -> None:
        # mirrors schedule_policy.py: SchedulePolicy.calc_priority
        policy = self._determine_active_policy(waiting_queue)
        sign = self.priority_sign
        if self.policy == "fcfs":
            if self.enable_priority_scheduling:
                # _sort_by_priority_and_fcfs
                waiting_queue.sort(key=lambda r: (r.priority * sign, r.wait_queue_entry_time))
        elif policy in CACHE_AWARE_POLICIES:
            deprioritized = self._compute_prefix_matches(waiting_queue)
            if policy == "lpm":
                # _sort_by_longest_prefix
                inf = float("inf")
                waiting_queue.sort(key=lambda r: -r.num_matched_prefix_tokens
                                   if r.rid not in deprioritized else inf)
            else:
                # _sort_by_dfs_weight
                order = self.tree_cache.dfs_weight_order(
                    [r.last_node for r in waiting_queue])  # type: ignore[misc]
                waiting_queue[:] = [waiting_queue[i] for i in order]
        elif policy == "lof":
            # _sort_by_longest_output
            if self.enable_priority_scheduling:
                waiting_queue.sort(key=lambda r: (r.priority * sign, -r.max_new_tokens))
            else:
                waiting_queue.sort(key=lambda r: -r.max_new_tokens)
        elif policy == "random":
            # _sort_randomly (upstream shuffles with the global `random`, seeded by random_seed)
            self.rng.shuffle(waiting_queue)
        self._touch_waiting_prefixes(policy, waiting_queue)

    def _touch_waiting_prefixes(self, policy: str, waiting_queue: list[Req]) -> None:
        # mirrors schedule_policy.py: SchedulePolicy._touch_waiting_prefixes (head last, so LRU
        # evicts in reverse admission order)
        if policy in CACHE_AWARE_POLICIES or not waiting_queue:
            return
        if not self.enable_waiting_prefix_refresh:
            return
        refresh = self._waiting_prefix_refresh_calls % WAITING_PREFIX_REFRESH_INTERVAL == 0
        self._waiting_prefix_refresh_calls += 1
        if not refresh:
            return
        for r in reversed(waiting_queue[:WAITING_QUEUE_PREFIX_MATCH_MAX]):
            # (origin + output ids; without outputs, no need to copy a long prompt)
            self.tree_cache.touch_prefix(r.origin_input_ids + r.output_ids if r.output_ids
                                         else r.origin_input_ids)

    def _compute_prefix_matches(self, waiting_queue: list[Req]) -> set[str]:
        # mirrors schedule_policy.py: SchedulePolicy._compute_prefix_matches
        deprioritized: set[str] = set()
        sim = self.waiting_queue_radix_tree
        sim.reset()
        for r in waiting_queue:
            r.match_full(self.tree_cache)
            # In-batch prefix caching: of several requests sharing a prefix the cache does
            # not hold yet, schedule one so that the others hit its KV later.
            if r.prefix_len <= self.check_threshold:
                prefix_ids = r.origin_input_ids + r.output_ids
                matched, _ = sim.match_prefix(prefix_ids)
                if matched >= self.deprioritize_threshold:
                    deprioritized.add(r.rid)
                else:
                    sim.insert(prefix_ids, len(prefix_ids), ())
        return deprioritized


class AddReqResult(enum.Enum):
    CONTINUE = enum.auto()  # continue to add requests
    NO_TOKEN = enum.auto()  # no token left
    OTHER = enum.auto()  # other reasons to stop adding requests


class PrefillAdder:
    """Admits waiting requests into one prefill batch under the token, chunk, memory and row
    budgets (mirrors schedule_policy.py: PrefillAdder; PrefillBudget for the plain pool)."""

    def __init__(self, page_size: int, kv: KVCache, running_batch: ScheduleBatch,
                 new_token_ratio: float, rem_input_tokens: int, rem_chunk_tokens: int | None,
                 priority_scheduling_preemption_threshold: int = 0,
                 schedule_low_priority_values_first: bool = False,
                 clip_max_new_tokens: int = 4096,
                 prefill_max_requests: int | None = None) -> None:
        self.page_size = page_size
        self.kv = kv
        self.tree_cache = kv.tree_cache
        self.allocator = kv.allocator
        self.running_batch = running_batch
        self.new_token_ratio = new_token_ratio
        self.rem_input_tokens = rem_input_tokens
        self.rem_chunk_tokens = rem_chunk_tokens
        self.clip_max_new_tokens = clip_max_new_tokens
        self.prefill_max_requests = prefill_max_requests
        self.priority_scheduling_preemption_threshold = priority_scheduling_preemption_threshold
        self.priority_sign = 1 if schedule_low_priority_values_first else -1
        self.can_run_list: list[Req] = []
        self.preempt_list: list[Req] = []
        self.new_chunked_req: Req | None = None
        # PrefillBudget: offsets include pending allocations and decode headroom
        self.total_offset: float = 0.0
        self.current_offset: float = 0.0
        # reserve the running requests' remaining outputs; summed left to right as
        # Python 3.11's sum() does
        acc: float = 0.0
        for r in running_batch.reqs:
            acc += self._get_running_request_total_token_offset(r)
        self.total_offset += acc
        # one extra page per request for allocation rounding
        self.per_req_token_overhead = page_size

    # ------------------------------------------------------------------ budget
    def _get_running_request_total_token_offset(self, req: Req) -> float:
        # mirrors PrefillAdder._get_running_request_total_token_offset (fixed-length requests
        # cannot benefit from the early-EOS estimate)
        ratio = 1.0 if req.ignore_eos else self.new_token_ratio
        return min(req.max_new_tokens - len(req.output_ids), self.clip_max_new_tokens) * ratio

    def _available_and_evictable(self) -> int:
        return self.allocator.available_size() + self.tree_cache.evictable_size()

    @property
    def rem_total_tokens(self) -> float:
        # mirrors prefill_budget.py: PrefillBudget.remaining_total
        return self._available_and_evictable() - self.total_offset

    @property
    def cur_rem_tokens(self) -> float:
        # mirrors prefill_budget.py: PrefillBudget.remaining_current
        return self._available_and_evictable() - self.current_offset

    def ceil_paged_tokens(self, tokens: int) -> int:
        return -(-tokens // self.page_size) * self.page_size

    def budget_state(self) -> AddReqResult:
        # mirrors PrefillAdder.budget_state
        if not (self.rem_total_tokens > 0 and self.cur_rem_tokens > 0):
            return AddReqResult.NO_TOKEN
        if self.rem_input_tokens <= 0:
            return AddReqResult.OTHER
        if self.rem_chunk_tokens is not None and self.rem_chunk_tokens <= 0:
            return AddReqResult.OTHER
        return AddReqResult.CONTINUE

    def _update_prefill_budget(self, extend_input_len: int, max_new_tokens: int) -> None:
        # mirrors PrefillAdder._update_prefill_budget and PrefillBudget.reserve
        extend_input_len = self.ceil_paged_tokens(extend_input_len)
        immediate = extend_input_len + self.page_size + (
            self.per_req_token_overhead - self.page_size)
        self.total_offset += immediate + max_new_tokens
        self.current_offset += immediate
        self.rem_input_tokens -= extend_input_len
        if self.rem_chunk_tokens is not None:
            self.rem_chunk_tokens -= extend_input_len

    # ------------------------------------------------------------------ admission
    def add_chunked_req(self, req: Req) -> Req | None:
        """The next chunk of the chunked request; returns it while chunks remain.

        mirrors PrefillAdder.add_chunked_req
        """
        assert self.rem_chunk_tokens is not None
        # PrefillBudget.available_chunk_tokens: a continuation must make progress
        rem_tokens = min(self.rem_chunk_tokens, int(self.rem_total_tokens))
        if rem_tokens <= 0:
            rem_tokens = self.rem_chunk_tokens
        cand_extend_input_len = len(req.fill_ids) - req.prefix_len
        truncated = cand_extend_input_len > rem_tokens
        new_len = min(cand_extend_input_len, rem_tokens)
        req.extend_end = req.prefix_len + new_len
        self.can_run_list.append(req)
        self._update_prefill_budget(
            new_len, min(req.max_new_tokens, self.clip_max_new_tokens) if not truncated else 0)
        return req if truncated else None

    def add_one_req(self, req: Req) -> AddReqResult:
        """Admit `req` whole or as the first chunk of a chunked prefill, if it fits after its
        matched prefix is locked.

        mirrors PrefillAdder.add_one_req, _select_prefill_admission, _commit_prefill_admission
        (the ignore_eos path only runs with the radix cache disabled, so not here)
        """
        # --prefill-max-requests caps the requests of one prefill batch
        if (self.prefill_max_requests is not None
                and len(self.can_run_list) >= self.prefill_max_requests):
            return AddReqResult.OTHER
        ps = self.page_size
        max_new = min(max(req.max_new_tokens - len(req.output_ids), 0), self.clip_max_new_tokens)
        cand_extend_input_len = len(req.fill_ids) - req.prefix_len
        total_tokens = cand_extend_input_len + max_new + self.per_req_token_overhead
        # a request resuming from the host needs device pages for its swapped tokens too
        swapped = self.kv.swapped_tokens(req)
        if swapped:
            total_tokens += self.ceil_paged_tokens(swapped)
        last_node = req.last_node
        assert last_node is not None
        tree = self.tree_cache
        # the temporary pin excludes this prefix from the evictable budget (_lock_node)
        tree.inc_lock_ref(last_node)
        try:
            prefix_len = req.prefix_len
            extend_len = len(req.fill_ids) - prefix_len
            input_tokens = self.ceil_paged_tokens(extend_len)
            # PrefillBudget.check_prefill
            if not total_tokens < self.rem_total_tokens:
                return AddReqResult.NO_TOKEN
            # without chunking, allow the first request even above the input cap
            if (self.rem_chunk_tokens is None and self.can_run_list
                    and input_tokens >= self.rem_input_tokens):
                return AddReqResult.OTHER
            is_chunked = False
            max_new_tokens = min(req.max_new_tokens, self.clip_max_new_tokens)
            chunk_limit = self.rem_chunk_tokens
            if chunk_limit is not None and input_tokens > chunk_limit:
                extend_len = chunk_limit // ps * ps
                end = (prefix_len + extend_len) // ps * ps
                extend_len = end - prefix_len
                if extend_len <= 0:
                    return AddReqResult.OTHER
                is_chunked = True
                max_new_tokens = 0
            # _commit_prefill_admission
            req.extend_end = prefix_len + extend_len
            tree.inc_lock_ref(last_node)
            req.lock = last_node
            req.admitted = True
            self.can_run_list.append(req)
            if is_chunked:
                self.new_chunked_req = req
            self._update_prefill_budget(extend_len, max_new_tokens)
            if swapped:
                # memory only: swapped tokens are copied, not computed (no input/chunk budget)
                self.total_offset += self.ceil_paged_tokens(swapped)
                self.current_offset += self.ceil_paged_tokens(swapped)
        finally:
            tree.dec_lock_ref(last_node)
        return self.budget_state()

    def preempt_to_schedule(self, req: Req) -> bool:
        """Preempt running requests whose priority is lower than `req`'s by more than the
        threshold, if that frees enough of the budget for it.

        mirrors PrefillAdder.preempt_to_schedule (v0.5.22 reads the candidate's fill ids and
        prefix length as they stand before its init_next_round_input, as upstream does)
        """
        sign = self.priority_sign
        preempted = set(self.preempt_list)
        valid = [r for r in self.running_batch.reqs if r not in preempted and not r.finished()]
        valid.sort(key=lambda r: (r.priority * (-sign), -r.wait_queue_entry_time))
        min_tokens_to_remove: float = (
            len(req.fill_ids) - req.prefix_len
            + min(req.max_new_tokens, self.clip_max_new_tokens)
            - self.rem_total_tokens
        )
        preemptible: list[Req] = []
        for running_req in valid:
            priority_diff = (req.priority - running_req.priority) * (-sign)
            if priority_diff > self.priority_scheduling_preemption_threshold:
                preemptible.append(running_req)
                min_tokens_to_remove -= self._get_running_request_total_token_offset(
                    running_req)
                if min_tokens_to_remove <= 0:
                    break
            else:
                break
        if not preemptible or min_tokens_to_remove > 0:
            return False
        chosen = set(preemptible)
        batch = self.running_batch
        keep_indices: list[int] = []
        release_counter = 0
        for i, running_req in enumerate(batch.reqs):
            if running_req in chosen:
                self.total_offset -= self._get_running_request_total_token_offset(running_req)
                release_counter += 1
                self.kv.release_req(running_req, len(batch.reqs) - release_counter)
            else:
                keep_indices.append(i)
        batch.filter_batch(keep_indices=keep_indices)
        self.preempt_list.extend(preemptible)
        return True
