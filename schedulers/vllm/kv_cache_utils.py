"""Block hashing and the free-block queue.

Mirrors vllm/v1/core/kv_cache_utils.py: KVCacheBlock, FreeKVCacheBlockQueue, hash_block_tokens.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

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
    """mirrors vllm/v1/core/kv_cache_utils.py: KVCacheBlock (id, ref count, hash, null flag,
    and its links in the free queue while it is free)."""

    __slots__ = ("block_hash", "block_id", "is_null", "next_free_block", "prev_free_block",
                 "ref_cnt")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self.block_hash: BlockHash | None = None
        self.is_null = False
        self.prev_free_block: KVCacheBlock | None = None
        self.next_free_block: KVCacheBlock | None = None

    def __repr__(self) -> str:
        return f"KVCacheBlock({self.block_id}, ref={self.ref_cnt}, hash={self.block_hash})"


class FreeKVCacheBlockQueue:
    """The free blocks in eviction order: the head is reused (and its cache entry evicted) first.

    mirrors vllm/v1/core/kv_cache_utils.py: FreeKVCacheBlockQueue: a doubly linked list through
    the blocks' own `prev_free_block` / `next_free_block`, between two sentinel blocks, so a
    block leaves from the middle (a prefix hit on a free block) in O(1).
    """

    __slots__ = ("_head", "_tail", "num_free_blocks")

    def __init__(self, blocks: list[KVCacheBlock]) -> None:
        self.num_free_blocks = len(blocks)
        self._head = KVCacheBlock(-1)
        self._tail = KVCacheBlock(-1)
        prev = self._head
        for block in blocks:
            prev.next_free_block = block
            block.prev_free_block = prev
            prev = block
        prev.next_free_block = self._tail
        self._tail.prev_free_block = prev

    def popleft(self) -> KVCacheBlock:
        if self.num_free_blocks == 0:
            raise ValueError("No free blocks available")
        block = self._head.next_free_block
        assert block is not None
        self.remove(block)
        return block

    def popleft_n(self, n: int) -> list[KVCacheBlock]:
        """The first `n` free blocks, head first, taken out of the queue."""
        if n > self.num_free_blocks:
            raise ValueError(f"Cannot pop {n} of {self.num_free_blocks} free blocks")
        out: list[KVCacheBlock] = []
        block = self._head.next_free_block
        for _ in range(n):
            assert block is not None
            out.append(block)
            nxt = block.next_free_block
            block.prev_free_block = block.next_free_block = None
            block = nxt
        assert block is not None
        self._head.next_free_block = block
        block.prev_free_block = self._head
        self.num_free_blocks -= n
        return out

    def peek_n(self, n: int) -> list[KVCacheBlock]:
        """The first `n` free blocks, head first, left in the queue."""
        out: list[KVCacheBlock] = []
        block = self._head.next_free_block
        tail = self._tail
        while len(out) < n and block is not tail:
            assert block is not None
            out.append(block)
            block = block.next_free_block
        return out

    def remove(self, block: KVCacheBlock) -> None:
        prev, nxt = block.prev_free_block, block.next_free_block
        if prev is None or nxt is None:
            raise RuntimeError(f"remove() called on a block not in the free queue: {block}")
        prev.next_free_block = nxt
        nxt.prev_free_block = prev
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1

    def append_n(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Put `blocks` at the tail, in order (evicted last)."""
        tail = self._tail
        last = tail.prev_free_block
        assert last is not None
        n = 0
        for block in blocks:
            last.next_free_block = block
            block.prev_free_block = last
            last = block
            n += 1
        last.next_free_block = tail
        tail.prev_free_block = last
        self.num_free_blocks += n

    def prepend_n(self, blocks: list[KVCacheBlock]) -> None:
        """Put `blocks` at the head, `blocks[0]` first (reused first)."""
        if not blocks:
            return
        head = self._head
        first = head.next_free_block
        assert first is not None
        prev = head
        for block in blocks:
            prev.next_free_block = block
            block.prev_free_block = prev
            prev = block
        prev.next_free_block = first
        first.prev_free_block = prev
        self.num_free_blocks += len(blocks)

    def __contains__(self, block: KVCacheBlock) -> bool:
        return block.prev_free_block is not None

    def block_ids(self) -> list[int]:
        """The free block ids, head first (for tests and invariant checks)."""
        return [b.block_id for b in self.peek_n(self.num_free_blocks)]

    def check(self) -> None:
        """Raise AssertionError unless the links run head to tail both ways through exactly
        `num_free_blocks` blocks (for invariant checks)."""
        n = 0
        prev, block = self._head, self._head.next_free_block
        while block is not self._tail:
            assert block is not None, "free queue: a link ends before the tail"
            assert block.prev_free_block is prev, f"free queue: {block} links back wrongly"
            n += 1
            assert n <= self.num_free_blocks, "free queue: more blocks than counted"
            prev, block = block, block.next_free_block
        assert self._tail.prev_free_block is prev, "free queue: the tail links back wrongly"
        assert n == self.num_free_blocks, f"free queue: {n} blocks, {self.num_free_blocks} counted"
