"""A request as SGLang's scheduler tracks it (mirrors python/sglang/srt/managers/schedule_batch.py:
Req and ReqKvInfo, the fields the scheduling path reads)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from schedulers.contract import Request

if TYPE_CHECKING:
    from schedulers.sglang.radix_cache import RadixCache, TreeNode


class Req:
    """Scheduler-side state of one contract `Request`.

    `origin_input_ids` and `output_ids` are the contract request's own lists (output tokens are
    appended to `request.output_token_ids`); `fill_ids` is upstream's
    `full_untruncated_fill_ids`, which lags the outputs until refreshed, as upstream's does.
    """

    __slots__ = (
        "admitted",
        "cache_inserted_len",
        "cache_protected_len",
        "eos_token_id",
        "extend_end",
        "fill_ids",
        "finished_len",
        "finished_reason",
        "ignore_eos",
        "inflight_middle_chunks",
        "is_retracted",
        "kv_allocated_len",
        "kv_committed_len",
        "last_node",
        "lock",
        "max_new_tokens",
        "num_matched_prefix_tokens",
        "origin_input_ids",
        "output_ids",
        "prefix_len",
        "priority",
        "req_pool_idx",
        "request",
        "retraction_count",
        "rid",
        "to_finish",
        "wait_queue_entry_time",
    )

    def __init__(self, request: Request) -> None:
        self.request = request
        self.rid = request.request_id
        self.origin_input_ids = request.prompt_token_ids
        self.output_ids = request.output_token_ids
        self.fill_ids: list[int] = []
        self.max_new_tokens = request.max_tokens
        self.ignore_eos = request.ignore_eos
        self.eos_token_id = request.eos_token_id
        self.priority = request.priority
        # This round extends fill ids [prefix_len, extend_end).
        self.prefix_len = 0
        self.extend_end: int | None = None
        self.last_node: TreeNode | None = None
        self.lock: TreeNode | None = None  # the node a TreeLock holds, or None
        self.num_matched_prefix_tokens = 0
        # ReqKvInfo
        self.req_pool_idx: int | None = None
        self.cache_protected_len = 0
        self.cache_inserted_len = 0
        self.kv_committed_len = 0
        self.kv_allocated_len = 0
        # finish state: "stop" (EOS), "length" or "abort"
        self.finished_reason: str | None = None
        self.finished_len: int | None = None
        self.to_finish: str | None = None  # an abort message, applied at the next update
        self.inflight_middle_chunks = 0
        self.is_retracted = False
        self.retraction_count = 0
        self.wait_queue_entry_time = 0
        self.admitted = False  # first chunk after (re)admission in the batch being built

    @property
    def seqlen(self) -> int:
        return len(self.origin_input_ids) + len(self.output_ids)

    @property
    def extend_len(self) -> int:
        assert self.extend_end is not None
        return self.extend_end - self.prefix_len

    @property
    def holds_kv(self) -> bool:
        return self.req_pool_idx is not None

    def finished(self) -> bool:
        return self.finished_reason is not None

    def refresh_fill_ids(self) -> None:
        # mirrors schedule_batch.py: Req.refresh_fill_ids
        fill = self.fill_ids
        n_have_output = len(fill) - len(self.origin_input_ids)
        if 0 <= n_have_output <= len(self.output_ids):
            if n_have_output < len(self.output_ids):
                fill.extend(self.output_ids[n_have_output:])
        else:
            self.fill_ids = self.origin_input_ids + self.output_ids

    def init_next_round_input(self, tree_cache: RadixCache | None = None) -> None:
        # mirrors schedule_batch.py: Req.init_next_round_input (+ mem_cache/common.py:
        # match_kv_cache); at least one token is left to compute (_compute_max_prefix_len)
        self.refresh_fill_ids()
        if tree_cache is not None:
            input_len = len(self.fill_ids)
            max_prefix_len = input_len - 1 if input_len > 0 else 0
            self.prefix_len, self.last_node = tree_cache.match_prefix(self.fill_ids,
                                                                      max_prefix_len)
            self.num_matched_prefix_tokens = min(self.prefix_len, max_prefix_len)
            self.cache_protected_len = self.prefix_len

    def match_full(self, tree_cache: RadixCache) -> None:
        """The match SchedulePolicy makes for cache-aware sorting: origin + output ids, no limit.

        mirrors mem_cache/common.py: match_kv_cache (called without max_prefix_len)
        """
        token_ids = self.origin_input_ids + self.output_ids
        self.prefix_len, self.last_node = tree_cache.match_prefix(token_ids)
        max_len = len(token_ids) - 1 if token_ids else 0
        self.num_matched_prefix_tokens = min(self.prefix_len, max_len)

    def owned_kv_len(self) -> int:
        # mirrors schedule_batch.py: Req.owned_kv_len
        if self.finished_len is None:
            return self.kv_committed_len
        return min(self.kv_committed_len, len(self.origin_input_ids) + self.finished_len)

    def update_finish_state(self) -> None:
        # mirrors schedule_batch.py: Req.update_finish_state (abort, EOS token, then length)
        if self.finished_reason is not None:
            return
        if self.to_finish is not None:
            self.finished_reason = "abort"
            return
        if not self.ignore_eos and self.eos_token_id is not None and self.output_ids and (
            self.output_ids[-1] == self.eos_token_id
        ):
            self.finished_reason = "stop"
            self.finished_len = len(self.output_ids)
            return
        if len(self.output_ids) >= self.max_new_tokens:
            self.finished_reason = "length"
            self.finished_len = self.max_new_tokens

    def reset_for_retract(self) -> None:
        # mirrors schedule_batch.py: Req.reset_for_retract
        self.retraction_count += 1
        self.prefix_len = 0
        self.last_node = None
        self.cache_protected_len = 0
        self.cache_inserted_len = 0
        self.num_matched_prefix_tokens = 0
        self.lock = None
        self.extend_end = None
        self.is_retracted = True
        self.inflight_middle_chunks = 0
        assert self.req_pool_idx is None, "expect it is already released"
        self.kv_committed_len = 0

    def __repr__(self) -> str:
        return f"Req({self.rid}, prompt={len(self.origin_input_ids)}, out={len(self.output_ids)})"
