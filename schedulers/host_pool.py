"""The host (CPU) KV pool behind `preemption_mode=swap`, shared by both schedulers.

Only bookkeeping: which host pages are free, which request's swapped KV each page holds, and
which pages wait for the step that reads them to be committed. The executor owns the bytes
(engines/executors/real.py keeps a host tensor indexed by the same page ids).

Neither upstream at the pinned versions swaps: vLLM v1 preempts by recompute only, and vLLM
v0's swap (vllm/core/scheduler.py: Scheduler._swap_out / _swap_in, over
vllm/core/block_manager.py's CPU block allocator) kept swapped requests in their own queue.
Here each scheduler keeps its own queue placement and only what happens to the KV changes.
SGLang's host pool (sglang/srt/mem_cache/memory_pool_host.py: HostKVCache) is sized in
tokens and allocated in whole pages of the device page size, as this one is.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from schedulers.contract import SwapOp

PREEMPTION_MODES = ("recompute", "swap")


def check_preemption_config(owner: str, preemption_mode: object, host_kv_capacity_tokens: object,
                            page_size: int) -> None:
    """Raise ValueError naming the field, its value and what is valid."""
    if preemption_mode not in PREEMPTION_MODES:
        raise ValueError(f"{owner}: preemption_mode={preemption_mode!r}: valid: "
                         f"{', '.join(PREEMPTION_MODES)}")
    cap = host_kv_capacity_tokens
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 0:
        raise ValueError(f"{owner}: host_kv_capacity_tokens={cap!r}: must be an integer >= 0 "
                         "(0: every swap falls back to recompute)")
    if cap % page_size:
        raise ValueError(f"{owner}: host_kv_capacity_tokens={cap} is not a multiple of the page "
                         f"size ({page_size})")


@dataclass(slots=True)
class SwappedKV:
    """A request's KV on the host: `num_tokens` positions in `host_page_ids`."""

    host_page_ids: list[int]
    num_tokens: int


class HostKVPool:
    """Host pages of `page_size` token slots, `capacity_tokens // page_size` of them.

    Pages are handed out from the head of the free list and returned to its tail. Pages read
    by a swap-in stay held until `commit()` (the scheduler calls it when it commits the step),
    so a swap-out planned in the same step can never write a page that step still reads.
    """

    def __init__(self, capacity_tokens: int, page_size: int) -> None:
        self.page_size = page_size
        self.num_pages = capacity_tokens // page_size
        self.free_pages: deque[int] = deque(range(self.num_pages))
        self.swapped: dict[str, SwappedKV] = {}
        self.releasing: list[int] = []
        self.num_fallbacks = 0

    def num_pages_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.page_size)

    def swapped_tokens(self, request_id: str) -> int:
        """Tokens of `request_id` held on the host (0 when none)."""
        kv = self.swapped.get(request_id)
        return kv.num_tokens if kv is not None else 0

    def swap_out(self, request_id: str, device_page_ids: list[int], num_tokens: int
                 ) -> SwapOp | None:
        """Take host pages for the first `num_tokens` positions of `device_page_ids`; None (a
        fallback to recompute, counted) when the pool has too few free pages."""
        assert num_tokens > 0 and request_id not in self.swapped, request_id
        n = self.num_pages_for(num_tokens)
        assert len(device_page_ids) >= n, (request_id, len(device_page_ids), n)
        if n > len(self.free_pages):
            self.num_fallbacks += 1
            return None
        pop = self.free_pages.popleft
        host = [pop() for _ in range(n)]
        self.swapped[request_id] = SwappedKV(host, num_tokens)
        return SwapOp(request_id, list(device_page_ids[:n]), list(host), num_tokens)

    def swap_in(self, request_id: str, device_page_ids: list[int]) -> SwapOp:
        """Copy the request's KV back into `device_page_ids` (at least as many pages as it
        has on the host); its host pages are released at the next `commit()`."""
        kv = self.swapped.pop(request_id)
        n = len(kv.host_page_ids)
        assert len(device_page_ids) >= n, (request_id, len(device_page_ids), n)
        self.releasing.extend(kv.host_page_ids)
        return SwapOp(request_id, list(device_page_ids[:n]), kv.host_page_ids, kv.num_tokens)

    def drop(self, request_id: str) -> None:
        """Forget a request's host copy (it finished or was aborted while swapped)."""
        kv = self.swapped.pop(request_id, None)
        if kv is not None:
            self.releasing.extend(kv.host_page_ids)

    def commit(self) -> None:
        """The step is committed: pages it read (or dropped) are free again."""
        if self.releasing:
            self.free_pages.extend(self.releasing)
            self.releasing = []

    def check(self) -> None:
        """Raise AssertionError unless free, swapped and releasing pages partition the pool
        (no host page leaked or held twice)."""
        held = list(self.free_pages) + self.releasing
        for rid, kv in self.swapped.items():
            if len(kv.host_page_ids) != self.num_pages_for(kv.num_tokens):
                raise AssertionError(f"host pool: {rid} holds {len(kv.host_page_ids)} pages "
                                     f"for {kv.num_tokens} tokens")
            held.extend(kv.host_page_ids)
        if len(held) != self.num_pages or len(set(held)) != len(held):
            raise AssertionError(f"host pool: {len(held)} page references "
                                 f"({len(set(held))} distinct) for {self.num_pages} pages: "
                                 "host pages leaked or double-owned")
