"""The request-row pool and the token-slot allocator.

Mirrors python/sglang/srt/mem_cache/memory_pool.py (ReqToTokenPool) and
python/sglang/srt/mem_cache/allocator/{token,paged}.py (TokenToKVPoolAllocator,
PagedTokenToKVPoolAllocator). Indices here start at 0 where upstream keeps slot, page and row 0
as padding, so slot addresses fit a KV tensor of exactly `max_total_tokens` entries; the order in
which ids are handed out and returned is upstream's.

Every allocation of a paged pool is page-aligned, so a request's KV is described by the list of
its pages (slot of position p = row[p // page_size] * page_size + p % page_size). The allocators
therefore count in pages; with page_size 1 a page is a slot.
"""

from __future__ import annotations

from collections.abc import Iterator


class ReqToTokenPool:
    """Request rows. `req_to_token[row]` is the list of pages of the request holding the row."""

    __slots__ = ("free_slots", "req_to_token", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self.free_slots: list[int] = list(range(size))
        self.req_to_token: list[list[int]] = [[] for _ in range(size)]

    def available_size(self) -> int:
        return len(self.free_slots)

    def num_used_rows(self) -> int:
        """Rows held by requests (every request with a `req_pool_idx`), in O(1)."""
        return self.size - len(self.free_slots)

    def alloc_rows(self, need_size: int) -> list[int] | None:
        # mirrors memory_pool.py: ReqToTokenPool.alloc_rows (pops from the tail)
        if need_size > len(self.free_slots):
            return None
        if need_size == 0:
            return []
        select = self.free_slots[-need_size:]
        del self.free_slots[-need_size:]
        for idx in select:
            self.req_to_token[idx] = []
        return select

    def free_row(self, idx: int) -> None:
        # mirrors memory_pool.py: ReqToTokenPool.free_rows
        self.free_slots.append(idx)


class FreeList:
    """A FIFO of free page ids: taken from the head, returned to the tail (or the head).

    A list with a head index: taking n ids is one slice, not n pops, which matters when a
    prefill takes thousands of slots at once. The consumed prefix is dropped once it is
    larger than what is left.
    """

    __slots__ = ("_head", "_ids")

    def __init__(self, ids: list[int]) -> None:
        self._ids = ids
        self._head = 0

    def __len__(self) -> int:
        return len(self._ids) - self._head

    def __iter__(self) -> Iterator[int]:
        return iter(self._ids[self._head:])

    def __getitem__(self, i: int) -> int:
        return self._ids[self._head:][i]

    def take(self, n: int) -> list[int]:
        """Remove and return the first `n` ids (the caller checked there are enough)."""
        head = self._head
        out = self._ids[head:head + n]
        head += n
        if head > len(self._ids) - head:
            del self._ids[:head]
            head = 0
        self._head = head
        return out

    def append(self, page: int) -> None:
        self._ids.append(page)

    def extend(self, pages: list[int]) -> None:
        """Return `pages` to the tail, in order."""
        self._ids.extend(pages)

    def prepend(self, pages: list[int]) -> None:
        """Return `pages` to the head, `pages[0]` first."""
        head, n = self._head, len(pages)
        if n <= head:
            self._ids[head - n:head] = pages
            self._head = head - n
        else:
            self._ids[:head] = pages
            self._head = 0


class TokenToKVPoolAllocator:
    """Page-size-1 allocator: takes slots from the head of the free list, returns them to its
    tail (mirrors allocator/token.py: TokenToKVPoolAllocator with need_sort=False)."""

    __slots__ = ("free_group", "free_pages", "num_pages", "page_size", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self.page_size = 1
        self.num_pages = size
        self.free_pages = FreeList(list(range(size)))
        # None: free right away; a list: hold frees until free_group_end() (base.py)
        self.free_group: list[int] | None = None

    def available_size(self) -> int:
        return len(self.free_pages)

    def alloc(self, num_pages: int) -> list[int] | None:
        # mirrors allocator/token.py: TokenToKVPoolAllocator.alloc
        fp = self.free_pages
        if num_pages > len(fp):
            return None
        return fp.take(num_pages)

    def free(self, pages: list[int]) -> None:
        # mirrors allocator/token.py: TokenToKVPoolAllocator.free
        if not pages:
            return
        if self.free_group is not None:
            self.free_group.extend(pages)
        else:
            self._release(pages)

    def _release(self, pages: list[int]) -> None:
        """Return freed pages to the free list: at its tail (reused last)."""
        self.free_pages.extend(pages)

    def free_group_begin(self) -> None:
        # mirrors allocator/base.py: BaseTokenToKVPoolAllocator.free_group_begin
        assert self.free_group is None, "free groups cannot be nested"
        self.free_group = []

    def free_group_end(self) -> None:
        pending, self.free_group = self.free_group, None
        if pending:
            self.free(pending)


class PagedTokenToKVPoolAllocator(TokenToKVPoolAllocator):
    """Paged allocator: takes pages from the head of the free list and puts freed pages back at
    its head (mirrors allocator/paged.py: PagedTokenToKVPoolAllocator._release_page_ids)."""

    __slots__ = ()

    def __init__(self, size: int, page_size: int) -> None:
        super().__init__(size // page_size)
        self.size = size
        self.page_size = page_size
        self.num_pages = size // page_size

    def available_size(self) -> int:
        return len(self.free_pages) * self.page_size

    def _release(self, pages: list[int]) -> None:
        # mirrors allocator/paged.py: _release_page_ids (prepended, in order: reused first)
        self.free_pages.prepend(pages)


def make_allocator(size: int, page_size: int) -> TokenToKVPoolAllocator:
    """The allocator upstream picks for this page size (model_runner: page_size == 1 or not)."""
    if page_size == 1:
        return TokenToKVPoolAllocator(size)
    return PagedTokenToKVPoolAllocator(size, page_size)
