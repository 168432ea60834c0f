"""Block hashing and the free-block queue.

Mirrors vllm/v1/core/kv_cache_utils.py: KVCacheBlock, FreeKVCacheBlockQueue, hash_block_tokens.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from itertools import islice

# A block's hash chains its parent's hash with its own tokens, so equal hashes mean equal
# prefixes. Upstream hashes with sha256 by default; we use Python's tuple hash, which is
# deterministic for ints (no PYTHONHASHSEED salt) and 64 bits wide: a collision among a
# million distinct blocks has a probability of about 3e-8.
BlockHash = int

# The parent hash of a request's first block (a fixed constant, like upstream's NONE_HASH).
NONE_HASH: BlockHash = 0x5EED_0B10C


def hash_block_tokens(parent_block_hash: BlockHash | None, block_token_ids: Sequence[int]
                      ) -> BlockHash:
    """mirrors vllm/v1/core/kv_cache_utils.py: hash_block_tokens (parent hash + block tokens)."""
    parent = NONE_HASH if parent_block_hash is None else parent_block_hash
    return hash((parent, tuple(block_token_ids)))


class KVCacheBlock:
    """mirrors vllm/v1/core/kv_cache_utils.py: KVCacheBlock (id, ref count, hash, null flag)."""

    __slots__ = ("block_hash", "block_id", "is_null", "ref_cnt")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self.block_hash: BlockHash | None = None
        self.is_null = False

    def __repr__(self) -> str:
        return f"KVCacheBlock({self.block_id}, ref={self.ref_cnt}, hash={self.block_hash})"


class FreeKVCacheBlockQueue:
    """The free blocks in eviction order: the head is reused (and its cache entry evicted) first.

    mirrors vllm/v1/core/kv_cache_utils.py: FreeKVCacheBlockQueue. Upstream links the blocks in
    a doubly linked list for O(1) removal from the middle (a prefix hit on a free block); an
    insertion-ordered dict keyed by block id gives the same operations in O(1).
    """

    __slots__ = ("_blocks", "_queue")

    def __init__(self, blocks: list[KVCacheBlock]) -> None:
        self._blocks = blocks
        self._queue: OrderedDict[int, None] = OrderedDict.fromkeys(b.block_id for b in blocks)

    @property
    def num_free_blocks(self) -> int:
        return len(self._queue)

    def popleft(self) -> KVCacheBlock:
        block_id, _ = self._queue.popitem(last=False)
        return self._blocks[block_id]

    def popleft_n(self, n: int) -> list[KVCacheBlock]:
        pop = self._queue.popitem
        blocks = self._blocks
        return [blocks[pop(False)[0]] for _ in range(n)]  # False: from the head

    def peek_n(self, n: int) -> list[KVCacheBlock]:
        """The first `n` free blocks, head first, left in the queue."""
        blocks = self._blocks
        return [blocks[i] for i in islice(self._queue, n)]

    def remove(self, block: KVCacheBlock) -> None:
        del self._queue[block.block_id]

    def append_n(self, blocks: Iterable[KVCacheBlock]) -> None:
        queue = self._queue
        for block in blocks:
            queue[block.block_id] = None

    def prepend_n(self, blocks: list[KVCacheBlock]) -> None:
        """Put `blocks` at the head, `blocks[0]` first (reused first)."""
        queue = self._queue
        for block in reversed(blocks):
            queue[block.block_id] = None
            queue.move_to_end(block.block_id, last=False)

    def __contains__(self, block: KVCacheBlock) -> bool:
        return block.block_id in self._queue

    def block_ids(self) -> list[int]:
        """The free block ids, head first (for tests and invariant checks)."""
        return list(self._queue)
