"""The pool of KV blocks and the prefix cache's hash-to-block map.

Mirrors vllm/v1/core/block_pool.py: BlockPool (one KV cache group, full attention).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from schedulers.vllm.kv_cache_utils import BlockHash, FreeKVCacheBlockQueue, KVCacheBlock


class BlockPool:
    """Allocates, frees and caches blocks.

    Block 0 is the null block, never handed out (upstream reserves it the same way), so a pool
    of `num_gpu_blocks` holds `num_gpu_blocks - 1` usable blocks. A cached block is a full block
    with a hash; it stays cached while free until the free queue hands it out again.
    """

    def __init__(self, num_gpu_blocks: int, enable_caching: bool) -> None:
        self.num_gpu_blocks = num_gpu_blocks
        self.enable_caching = enable_caching
        self.blocks = [KVCacheBlock(i) for i in range(num_gpu_blocks)]
        self.free_block_queue = FreeKVCacheBlockQueue(self.blocks)
        # mirrors BlockHashToBlockMap: a hash may map to several blocks (no de-duplication, so
        # block tables stay append-only); lookups return the earliest inserted one still
        # cached. The map holds that block; a hash with more than one (equal prefixes cached
        # twice before either was looked up: rare) also has all of them, in insertion order,
        # in `_more_blocks` (upstream's dict of blocks per hash).
        self.cached_block_hash_to_block: dict[BlockHash, KVCacheBlock] = {}
        self._more_blocks: dict[BlockHash, dict[int, KVCacheBlock]] = {}
        self.null_block = self.free_block_queue.popleft()
        self.null_block.is_null = True
        # Free blocks that still carry a hash (evictable cache), kept for stats.
        self.num_free_cached_blocks = 0
        # Bumped whenever the hash map changes, so a prefix lookup can be reused until then.
        self.cache_version = 0

    # mirrors block_pool.py: BlockPool.get_cached_block
    def get_cached_block(self, block_hash: BlockHash) -> KVCacheBlock | None:
        return self.cached_block_hash_to_block.get(block_hash)

    def has_shared_hashes(self) -> bool:
        """Whether some hash is cached with more than one block."""
        return bool(self._more_blocks)

    def cached_blocks(self, block_hash: BlockHash) -> list[KVCacheBlock]:
        """Every block cached under `block_hash`, earliest inserted first."""
        more = self._more_blocks.get(block_hash)
        if more is not None:
            return list(more.values())
        block = self.cached_block_hash_to_block.get(block_hash)
        return [] if block is None else [block]

    def _uncache(self, block: KVCacheBlock, block_hash: BlockHash) -> None:
        # mirrors BlockPool._maybe_evict_cached_block / BlockHashToBlockMap.pop
        cache = self.cached_block_hash_to_block
        if self._more_blocks:
            more = self._more_blocks.get(block_hash)
            if more is not None:
                del more[block.block_id]
                cache[block_hash] = next(iter(more.values()))
                if len(more) == 1:
                    del self._more_blocks[block_hash]
                return
        del cache[block_hash]  # a hash with one block maps to it

    def cache_full_blocks(
        self,
        blocks: list[KVCacheBlock],
        block_hashes: list[BlockHash],
        num_cached_blocks: int,
        num_full_blocks: int,
    ) -> None:
        """mirrors block_pool.py: BlockPool.cache_full_blocks (hash blocks that became full)."""
        cache = self.cached_block_hash_to_block
        for i in range(num_cached_blocks, num_full_blocks):
            blk = blocks[i]
            if blk.is_null or blk.block_hash is not None:
                continue
            block_hash = block_hashes[i]
            blk.block_hash = block_hash
            self.cache_version += 1
            first = cache.setdefault(block_hash, blk)
            if first is not blk:
                more = self._more_blocks.get(block_hash)
                if more is None:
                    more = self._more_blocks[block_hash] = {first.block_id: first}
                more[blk.block_id] = blk

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        """mirrors block_pool.py: BlockPool.get_new_blocks (pop the head, evict its cache entry)."""
        if num_blocks > self.free_block_queue.num_free_blocks:
            raise ValueError(f"Cannot get {num_blocks} free blocks from the pool")
        ret = self.free_block_queue.popleft_n(num_blocks)
        for block in ret:
            block_hash = block.block_hash
            if block_hash is not None:
                # mirrors block_pool.py: BlockPool._maybe_evict_cached_block
                self.cache_version += 1
                self._uncache(block, block_hash)
                block.block_hash = None
                self.num_free_cached_blocks -= 1
            block.ref_cnt += 1
        return ret

    def touch(self, blocks: Sequence[KVCacheBlock]) -> None:
        """mirrors block_pool.py: BlockPool.touch (a hit takes a free block out of the queue)."""
        for block in blocks:
            if block.ref_cnt == 0 and not block.is_null:
                self.free_block_queue.remove(block)
                if block.block_hash is not None:
                    self.num_free_cached_blocks -= 1
            block.ref_cnt += 1

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        """Release one reference to each block; `ordered_blocks` lists them evict-first first.

        mirrors block_pool.py: BlockPool.free_blocks: blocks without a hash go to the head of
        the free queue (reused first, LIFO), hashed blocks to its tail (evicted last, LRU).
        """
        evict_first: list[KVCacheBlock] = []
        evict_last: list[KVCacheBlock] = []
        caching = self.enable_caching
        for block in ordered_blocks:
            block.ref_cnt -= 1
            if block.ref_cnt == 0 and not block.is_null:
                if block.block_hash is None or not caching:
                    evict_first.append(block)
                else:
                    evict_last.append(block)
        if evict_first:
            self.free_block_queue.prepend_n(evict_first)
        if evict_last:
            self.free_block_queue.append_n(evict_last)
            self.num_free_cached_blocks += len(evict_last)

    def get_num_free_blocks(self) -> int:
        return self.free_block_queue.num_free_blocks

    def get_usage(self) -> float:
        """mirrors block_pool.py: BlockPool.get_usage (the null block does not count)."""
        total = self.num_gpu_blocks - 1
        return 1.0 - self.get_num_free_blocks() / total if total else 0.0
