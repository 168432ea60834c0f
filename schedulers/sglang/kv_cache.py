"""The life of a request's KV across the row pool, the allocator and the radix tree.

Mirrors python/sglang/srt/mem_cache/common.py (checkpoint_kv_cache, release_kv_cache,
evict_from_tree_cache), python/sglang/srt/mem_cache/allocation.py (alloc_for_extend,
alloc_for_decode), RadixCache.checkpoint / _insert_cache and release_req of
python/sglang/srt/managers/schedule_batch.py. Rows hold pages (see memory_pool.py).

With a host pool (`preemption_mode=swap`, not upstream), a retracted request's computed KV is
swapped out before its row is released, and swapped back in by the extend that readmits it:
it skips the prefix match, gets its own pages for every position and computes only what it
had not computed. The swap ops of a step wait in `swap_out_ops` / `swap_in_ops`.
"""

from __future__ import annotations

from collections.abc import Sequence

from schedulers.contract import SwapOp
from schedulers.host_pool import HostKVPool
from schedulers.sglang.memory_pool import ReqToTokenPool, TokenToKVPoolAllocator
from schedulers.sglang.radix_cache import RadixCache
from schedulers.sglang.req import Req


class KVCache:
    """One job: move KV between a request's row, the free list and the prefix tree."""

    __slots__ = ("allocator", "host_pool", "page_size", "req_to_token_pool",
                 "retract_decode_steps", "swap_fallbacks", "swap_in_ops", "swap_out_ops",
                 "tree_cache")

    def __init__(self, tree_cache: RadixCache, allocator: TokenToKVPoolAllocator,
                 req_to_token_pool: ReqToTokenPool, retract_decode_steps: int = 20,
                 host_pool: HostKVPool | None = None) -> None:
        self.tree_cache = tree_cache
        self.allocator = allocator
        self.req_to_token_pool = req_to_token_pool
        self.page_size = allocator.page_size
        self.retract_decode_steps = retract_decode_steps
        self.host_pool = host_pool
        self.swap_out_ops: list[SwapOp] = []
        self.swap_in_ops: list[SwapOp] = []
        self.swap_fallbacks: list[str] = []

    def available_size(self) -> int:
        return self.allocator.available_size()

    # ------------------------------------------------------------------ eviction
    def evict_to_free_tokens(self, num_tokens: int) -> None:
        # mirrors allocator/base.py: evict_to_free_tokens (via common.py: evict_from_tree_cache)
        shortfall = num_tokens - self.allocator.available_size()
        if shortfall > 0:
            self.tree_cache.evict(shortfall)

    # ------------------------------------------------------------------ tree checkpoints
    def checkpoint(self, req: Req, up_to: int) -> None:
        """Insert fill_ids[:up_to] (page-aligned) into the tree, point the row at the tree's
        pages, free the duplicates and move the request's lock to the new last node.

        mirrors radix_cache.py: RadixCache.checkpoint and RadixCache._insert_cache
        """
        tree = self.tree_cache
        ps = self.page_size
        token_ids = req.fill_ids
        assert req.req_pool_idx is not None
        row = self.req_to_token_pool.req_to_token[req.req_pool_idx]
        key_len = up_to // ps * ps
        values = row[: key_len // ps]
        prefix_len, _ = tree.insert(token_ids, key_len, values)
        if key_len > req.cache_inserted_len:
            req.cache_inserted_len = key_len
        # split the leaf at the prompt boundary (split_prompt=True)
        prompt_len = min(len(req.origin_input_ids), up_to) // ps * ps
        if 0 < prompt_len < key_len:
            tree.insert(token_ids, prompt_len, values)
        protected = req.cache_protected_len
        if prefix_len > protected:
            self.allocator.free(row[protected // ps: prefix_len // ps])
        # the prefix indices could be updated: re-match and reuse the tree's pages
        _, new_last_node = tree.match_prefix(token_ids, key_len)
        new_pages = tree.path_pages(new_last_node)
        assert len(new_pages) * ps == key_len, (len(new_pages), key_len)
        row[protected // ps: key_len // ps] = new_pages[protected // ps:]
        req.cache_protected_len = key_len
        if req.lock is not None:
            tree.dec_lock_ref(req.lock)
        tree.inc_lock_ref(new_last_node)
        req.lock = new_last_node
        req.last_node = new_last_node

    def checkpoint_kv_cache(self, req: Req) -> None:
        # mirrors mem_cache/common.py: checkpoint_kv_cache
        assert not req.finished(), f"checkpointing finished request {req.rid}"
        assert req.extend_end is not None
        self.checkpoint(req, req.extend_end)
        req.prefix_len = req.extend_end

    def release_kv_cache(self, req: Req, checkpoint: bool) -> None:
        """Give the request's row back; with `checkpoint` the tree first keeps what it can key.

        mirrors mem_cache/common.py: release_kv_cache
        """
        if req.req_pool_idx is None:
            return
        ps = self.page_size
        owned_kv_len = req.owned_kv_len()
        if checkpoint:
            req.refresh_fill_ids()
            self.checkpoint(req, owned_kv_len)
        row = self.req_to_token_pool.req_to_token[req.req_pool_idx]
        protected = req.cache_protected_len
        # the protected prefix is not this request's to free (free_kv_row)
        if owned_kv_len > protected:
            self.allocator.free(row[protected // ps: -(-owned_kv_len // ps)])
        if req.lock is not None:
            self.tree_cache.dec_lock_ref(req.lock)
        req.lock = None
        # _release_overallocated_kv_indices
        start = -(-owned_kv_len // ps) * ps
        if start < req.kv_allocated_len:
            self.allocator.free(row[start // ps: -(-req.kv_allocated_len // ps)])
        self.req_to_token_pool.free_row(req.req_pool_idx)
        req.req_pool_idx = None
        req.kv_allocated_len = 0

    def release_req(self, req: Req, remaining_req_count: int, swap: bool = True) -> None:
        """Retract: free the KV without inserting it into the tree, then evict room for the
        remaining requests' next decode steps. With a host pool and `swap`, the computed KV
        is first swapped out (or, the pool full, the fallback to recompute is recorded).

        mirrors managers/schedule_batch.py: release_req
        """
        host = self.host_pool
        if host is not None and swap and req.req_pool_idx is not None and req.kv_committed_len:
            row = self.req_to_token_pool.req_to_token[req.req_pool_idx]
            op = host.swap_out(req.rid, row, req.kv_committed_len)
            if op is None:
                self.swap_fallbacks.append(req.rid)
            else:
                self.swap_out_ops.append(op)
        self.release_kv_cache(req, checkpoint=False)
        self.evict_to_free_tokens(remaining_req_count * self.retract_decode_steps)
        req.reset_for_retract()

    # ------------------------------------------------------------------ swap
    def swapped_tokens(self, req: Req) -> int:
        """Tokens of `req` waiting on the host (0 without a host pool or a copy there)."""
        host = self.host_pool
        return host.swapped_tokens(req.rid) if host is not None else 0

    def resume_from_host(self, req: Req) -> bool:
        """If `req` is swapped out, set it up to resume from its host copy (instead of
        `init_next_round_input`'s prefix match) and return True: its `prefix_len` is the
        swapped tokens, it locks no tree node and owns every page it will get."""
        swapped = self.swapped_tokens(req)
        if not swapped:
            return False
        req.init_next_round_input(None)
        req.prefix_len = swapped
        req.last_node = self.tree_cache.root_node
        req.num_matched_prefix_tokens = 0
        req.cache_protected_len = 0
        return True

    def take_swap_ops(self) -> tuple[list[SwapOp], list[SwapOp], list[str]]:
        """This step's swap-outs, swap-ins and fallbacks, handed over once."""
        ops = (self.swap_out_ops, self.swap_in_ops, self.swap_fallbacks)
        self.swap_out_ops, self.swap_in_ops, self.swap_fallbacks = [], [], []
        return ops

    def drop_swapped(self, req: Req) -> None:
        """Forget the host copy of a request that ends while swapped out."""
        if self.host_pool is not None:
            self.host_pool.drop(req.rid)

    # ------------------------------------------------------------------ allocation
    def alloc_for_extend(self, reqs: Sequence[Req]) -> None:
        """Rows, then KV for every request's [prefix_len, extend_end).

        mirrors mem_cache/allocation.py: alloc_for_extend (alloc_req_slots, alloc_token_slots
        or alloc_paged_token_slots_extend, write_cache_indices)
        """
        ps = self.page_size
        tree = self.tree_cache
        pool = self.req_to_token_pool
        # prefix pages: a request holding its row reads them there, a new one off the tree;
        # a swapped-out one gets pages for its swapped tokens too (allocated from 0)
        swapped = [self.swapped_tokens(r) if r.req_pool_idx is None else 0 for r in reqs] \
            if self.host_pool is not None else [0] * len(reqs)
        prefix_pages: list[list[int] | None] = []
        for r, sw in zip(reqs, swapped, strict=True):
            if r.req_pool_idx is not None:
                prefix_pages.append(None)
            elif r.prefix_len == 0 or sw:
                prefix_pages.append([])
            else:
                assert r.last_node is not None
                path = tree.path_pages(r.last_node)
                assert len(path) * ps >= r.prefix_len
                prefix_pages.append(path[: r.prefix_len // ps])
        need_rows = sum(1 for r in reqs if r.req_pool_idx is None)
        rows = pool.alloc_rows(need_rows)
        if rows is None:
            raise RuntimeError(
                "alloc_req_slots runs out of memory: max_running_requests is too large for the "
                f"request-row pool (available {pool.available_size()}, needed {need_rows})")
        it = iter(rows)
        for r in reqs:
            if r.req_pool_idx is None:
                r.req_pool_idx = next(it)
        extend_num_tokens = 0
        new_pages_per_req: list[int] = []
        for r, sw in zip(reqs, swapped, strict=True):
            assert r.extend_end is not None
            base = 0 if sw else r.prefix_len
            extend_num_tokens += r.extend_end - base
            if ps == 1:
                new_pages_per_req.append(r.extend_end - base)
            else:
                new_pages_per_req.append(-(-r.extend_end // ps) - (-(-base // ps)))
        if ps == 1:
            self.evict_to_free_tokens(extend_num_tokens)
        else:
            self.evict_to_free_tokens(extend_num_tokens + len(reqs) * ps)
        total_pages = sum(new_pages_per_req)
        pages = self.allocator.alloc(total_pages)
        if pages is None:
            raise RuntimeError(
                f"Prefill out of memory: need {total_pages} pages of {ps} tokens, "
                f"{self.allocator.available_size()} tokens free, "
                f"{tree.evictable_size()} evictable")
        pos = 0
        for r, pre, n_new, sw in zip(reqs, prefix_pages, new_pages_per_req, swapped,
                                     strict=True):
            assert r.req_pool_idx is not None and r.extend_end is not None
            if pre is None:
                row = pool.req_to_token[r.req_pool_idx]
                del row[(r.prefix_len + ps - 1) // ps:]
            else:
                row = pre
                pool.req_to_token[r.req_pool_idx] = row
            row.extend(pages[pos:pos + n_new])
            pos += n_new
            if sw:
                assert self.host_pool is not None
                self.swap_in_ops.append(self.host_pool.swap_in(r.rid, row))
            r.kv_allocated_len = r.extend_end
            r.kv_committed_len = r.extend_end

    def alloc_for_decode(self, reqs: Sequence[Req]) -> None:
        """One KV slot per request for the token being decoded.

        mirrors mem_cache/allocation.py: alloc_for_decode_default (token_per_req=1)
        """
        ps = self.page_size
        req_to_token = self.req_to_token_pool.req_to_token
        bs = len(reqs)
        if ps == 1:
            self.evict_to_free_tokens(bs)
            slots = self.allocator.alloc(bs)
            if slots is None:
                raise RuntimeError(f"Decode out of memory: need {bs} tokens")
            for r, s in zip(reqs, slots):
                req_to_token[r.req_pool_idx].append(s)  # type: ignore[index]
                r.kv_allocated_len += 1
                r.kv_committed_len += 1
            return
        self.evict_to_free_tokens(bs * ps)
        needing = [r for r in reqs if r.kv_committed_len % ps == 0]
        pages = self.allocator.alloc(len(needing))
        if pages is None:
            raise RuntimeError(f"Decode out of memory: need {len(needing)} pages")
        for r, p in zip(needing, pages):
            req_to_token[r.req_pool_idx].append(p)  # type: ignore[index]
        for r in reqs:
            r.kv_allocated_len += 1
            r.kv_committed_len += 1
