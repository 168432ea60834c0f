"""Per-request block tables on top of the block pool: prefix hits, slot allocation, free.

Mirrors vllm/v1/core/kv_cache_manager.py (KVCacheManager) together with the single-group path
it delegates to: kv_cache_coordinator.py (UnitaryKVCacheCoordinator) and
single_type_kv_cache_manager.py (FullAttentionManager).
"""

from __future__ import annotations

from schedulers.vllm.block_pool import BlockPool
from schedulers.vllm.kv_cache_utils import KVCacheBlock
from schedulers.vllm.request import RequestStatus, VllmRequest


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class KVCacheManager:
    """Owns `req_to_blocks` (each request's block table) and the block pool."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        max_model_len: int,
        enable_caching: bool = True,
        watermark: float = 0.0,
    ) -> None:
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.enable_caching = enable_caching
        self.block_pool = BlockPool(num_blocks, enable_caching)
        # mirrors KVCacheManager.__init__: the watermark counts all blocks, null block included
        self.watermark_blocks = int(watermark * num_blocks)
        self.req_to_blocks: dict[str, list[KVCacheBlock]] = {}
        # Block ids beside the blocks: the executor's page table, shared with the plan.
        self.req_to_block_ids: dict[str, list[int]] = {}
        # mirrors SingleTypeKVCacheManager.num_cached_block: blocks already hashed, per request
        self.num_cached_block: dict[str, int] = {}
        # The last prefix lookup: (request, its num_tokens, cache version) -> result. A waiting
        # head that does not fit is looked up again every step; while neither it nor the hash
        # map changed, the answer is the same.
        self._last_lookup: tuple[VllmRequest, int, int, list[KVCacheBlock], int] | None = None

    def get_computed_blocks(self, request: VllmRequest) -> tuple[list[KVCacheBlock], int]:
        """The longest run of cached full blocks that prefixes the request, and its length.

        mirrors kv_cache_manager.py: KVCacheManager.get_computed_blocks and
        single_type_kv_cache_manager.py: FullAttentionManager.find_longest_cache_hit. The hit
        is capped at `num_tokens - 1`: the last token is always recomputed to get logits.
        """
        if not self.enable_caching:
            return [], 0
        version = self.block_pool.cache_version
        last = self._last_lookup
        if (last is not None and last[0] is request and last[1] == request.num_tokens
                and last[2] == version):
            return list(last[3]), last[4]
        max_cache_hit_length = request.num_tokens - 1
        get_cached = self.block_pool.get_cached_block
        computed: list[KVCacheBlock] = []
        hashes = request.block_hashes
        for i in range(min(len(hashes), max_cache_hit_length // self.block_size)):
            block = get_cached(hashes[i])
            if block is None:
                break
            computed.append(block)
        num_hit = len(computed) * self.block_size
        self._last_lookup = (request, request.num_tokens, version, computed, num_hit)
        return list(computed), num_hit

    def _get_num_blocks_to_allocate(
        self, request_id: str, num_tokens: int, new_computed_blocks: list[KVCacheBlock]
    ) -> int:
        # mirrors single_type_kv_cache_manager.py:
        # SingleTypeKVCacheManager.get_num_blocks_to_allocate (full attention: nothing skipped)
        num_required_blocks = cdiv(num_tokens, self.block_size)
        num_req_blocks = len(self.req_to_blocks.get(request_id, ()))
        num_new_blocks = max(num_required_blocks - len(new_computed_blocks) - num_req_blocks, 0)
        # A hit on a free block takes it out of the free queue: it counts against the free ones.
        if not new_computed_blocks:  # the common case: a running request asks for more
            return num_new_blocks
        num_evictable = sum(1 for b in new_computed_blocks if b.ref_cnt == 0 and not b.is_null)
        return num_new_blocks + num_evictable

    def fits(self, request: VllmRequest, num_new_tokens: int, num_new_computed_tokens: int,
             new_computed: list[KVCacheBlock], full_sequence_must_fit: bool,
             has_scheduled_reqs: bool, num_free: int) -> bool:
        """Whether `allocate_slots` with these arguments would succeed with `num_free` free
        blocks (its admission checks alone, no side effect)."""
        request_id = request.request_id
        total_computed_tokens = min(request.num_computed_tokens + num_new_computed_tokens,
                                    self.max_model_len)
        watermark_blocks = 0
        if has_scheduled_reqs and request.status in (
            RequestStatus.WAITING,
            RequestStatus.PREEMPTED,
        ):
            watermark_blocks = self.watermark_blocks
        if full_sequence_must_fit:
            full_num_tokens = min(request.num_tokens, self.max_model_len)
            needed = self._get_num_blocks_to_allocate(request_id, full_num_tokens, new_computed)
            if needed + watermark_blocks > num_free:
                return False
        num_tokens_need_slot = min(total_computed_tokens + num_new_tokens, self.max_model_len)
        needed = self._get_num_blocks_to_allocate(request_id, num_tokens_need_slot, new_computed)
        return needed + watermark_blocks <= num_free

    def allocate_slots(
        self,
        request: VllmRequest,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: list[KVCacheBlock] | None = None,
        full_sequence_must_fit: bool = False,
        has_scheduled_reqs: bool = True,
    ) -> list[KVCacheBlock] | None:
        """Give the request slots for `num_new_tokens` more tokens, or return None.

        mirrors kv_cache_manager.py: KVCacheManager.allocate_slots. With
        `full_sequence_must_fit` (the scheduler's `scheduler_reserve_full_isl`), an admission
        also checks that the whole known sequence would fit. The watermark holds back blocks
        from waiting or preempted requests, and only when some request is already running.
        """
        new_computed = new_computed_blocks if new_computed_blocks is not None else []
        request_id = request.request_id
        num_local_computed_tokens = request.num_computed_tokens + num_new_computed_tokens
        total_computed_tokens = min(num_local_computed_tokens, self.max_model_len)
        if not self.fits(request, num_new_tokens, num_new_computed_tokens, new_computed,
                         full_sequence_must_fit, has_scheduled_reqs,
                         self.block_pool.get_num_free_blocks()):
            return None
        num_tokens_need_slot = min(total_computed_tokens + num_new_tokens, self.max_model_len)

        blocks = self.req_to_blocks.get(request_id)
        if blocks is None:
            blocks = self.req_to_blocks[request_id] = []
            self.req_to_block_ids[request_id] = []
        block_ids = self.req_to_block_ids[request_id]
        if new_computed and request_id not in self.num_cached_block:
            # mirrors SingleTypeKVCacheManager.add_local_computed_blocks
            self.block_pool.touch(new_computed)
            blocks.extend(new_computed)
            block_ids.extend(b.block_id for b in new_computed)
            self.num_cached_block[request_id] = len(blocks)

        num_to_add = cdiv(num_tokens_need_slot, self.block_size) - len(blocks)
        new_blocks = self._add_new_blocks(request_id, blocks, num_to_add)
        self._cache_blocks(request, blocks, total_computed_tokens + num_new_tokens)
        return new_blocks

    def _add_new_blocks(self, request_id: str, blocks: list[KVCacheBlock], num_to_add: int
                        ) -> list[KVCacheBlock]:
        # mirrors SingleTypeKVCacheManager.allocate_new_blocks (the caller checked the room)
        if num_to_add <= 0:
            return []
        new_blocks = self.block_pool.get_new_blocks(num_to_add)
        blocks.extend(new_blocks)
        self.req_to_block_ids[request_id].extend(b.block_id for b in new_blocks)
        return new_blocks

    def _cache_blocks(self, request: VllmRequest, blocks: list[KVCacheBlock],
                      num_tokens: int) -> None:
        # mirrors SingleTypeKVCacheManager.cache_blocks: hash the blocks that became full, up to
        # the finalized tokens only
        if not self.enable_caching:
            return
        num_full_blocks = min(num_tokens, len(request.all_token_ids)) // self.block_size
        num_cached = self.num_cached_block.get(request.request_id, 0)
        if num_cached < num_full_blocks:
            self.block_pool.cache_full_blocks(
                blocks, request.block_hashes, num_cached, num_full_blocks
            )
            self.num_cached_block[request.request_id] = num_full_blocks

    def cache_blocks(self, request: VllmRequest, num_computed_tokens: int) -> None:
        """mirrors kv_cache_manager.py: KVCacheManager.cache_blocks: hash the request's blocks
        that `num_computed_tokens` fill (the async scheduler, once an output is committed)."""
        blocks = self.req_to_blocks.get(request.request_id)
        if blocks is not None:
            self._cache_blocks(request, blocks, num_computed_tokens)

    def allocate_slots_running(self, request: VllmRequest, num_new_tokens: int
                               ) -> list[KVCacheBlock] | None:
        """`allocate_slots` for a running request: no prefix hit, no admission gate, no
        watermark (the scheduler's hot path, once per running request per step; the same
        decisions as the general path, without its generality)."""
        request_id = request.request_id
        blocks = self.req_to_blocks.get(request_id)
        if blocks is None:
            return self.allocate_slots(request, num_new_tokens)
        max_model_len = self.max_model_len
        total_computed_tokens = min(request.num_computed_tokens, max_model_len)
        end = min(total_computed_tokens + num_new_tokens, max_model_len)
        num_to_add = -(-end // self.block_size) - len(blocks)
        if num_to_add > self.block_pool.free_block_queue.num_free_blocks:
            return None
        new_blocks = self._add_new_blocks(request_id, blocks, num_to_add)
        self._cache_blocks(request, blocks, total_computed_tokens + num_new_tokens)
        return new_blocks

    def free(self, request: VllmRequest) -> None:
        """mirrors kv_cache_manager.py: KVCacheManager.free (tail blocks first: evicted first)."""
        request_id = request.request_id
        blocks = self.req_to_blocks.pop(request_id, None)
        self.req_to_block_ids.pop(request_id, None)
        self.num_cached_block.pop(request_id, None)
        if blocks:
            self.block_pool.free_blocks(reversed(blocks))

    def get_block_ids(self, request_id: str) -> list[int]:
        """The request's block table (block ids by position), shared, not copied."""
        return self.req_to_block_ids[request_id]
