"""Cheap consistency checks of the SGLang scheduler's KV bookkeeping (for tests and opt-in
runs: `check_invariants=true`)."""

from __future__ import annotations

from schedulers.sglang.radix_cache import TreeNode
from schedulers.sglang.scheduler import SglangScheduler


class InvariantError(AssertionError):
    """A scheduler's state broke one of its invariants."""


def check_sglang_invariants(sched: SglangScheduler) -> None:
    """Raise InvariantError when pages leak, are held twice, or the tree's counters disagree.

    - free pages, the radix tree's pages and each live request's own (unprotected) pages
      partition the pool: every page is held exactly once;
    - every tree node holds one page per `page_size` tokens of its key;
    - no node has a negative lock count, and the tree's evictable + protected sizes equal the
      tokens it holds;
    - in swap mode, host pages are free, held by exactly one swapped-out waiting request
      (which holds no row), or waiting for the step that read them to be committed.
    """
    ps = sched.page_size
    held: list[int] = list(sched.allocator.free_pages)
    stack: list[TreeNode] = [sched.tree_cache.root_node]
    tree_tokens = 0
    while stack:
        node = stack.pop()
        if node.lock_ref < 0:
            raise InvariantError(f"tree node {node.id}: negative lock_ref {node.lock_ref}")
        if len(node.value) * ps != len(node.key):
            raise InvariantError(f"tree node {node.id}: {len(node.value)} pages for "
                                 f"{len(node.key)} tokens (page size {ps})")
        held.extend(node.value)
        tree_tokens += len(node.key)
        stack.extend(node.children.values())
    rows = sched.req_to_token_pool.req_to_token
    for r in sched._live.values():
        if r.req_pool_idx is not None:
            held.extend(rows[r.req_pool_idx][r.cache_protected_len // ps:])
    num_pages = sched.allocator.num_pages
    if len(held) != num_pages:
        raise InvariantError(f"{len(held)} pages accounted for (free + tree + requests), pool "
                             f"has {num_pages}: pages leaked or duplicated")
    if len(set(held)) != len(held):
        dup = sorted({p for p in held if held.count(p) > 1})[:10]
        raise InvariantError(f"page(s) held twice: {dup}")
    tree = sched.tree_cache
    if tree.evictable_size() + tree.protected_size() != tree_tokens:
        raise InvariantError(f"tree holds {tree_tokens} tokens, evictable "
                             f"{tree.evictable_size()} + protected {tree.protected_size()}")
    host = sched.host_pool
    if host is not None:
        try:
            host.check()
        except AssertionError as e:
            raise InvariantError(str(e)) from None
        waiting = {r.rid: r for r in sched.waiting_queue}
        for rid in host.swapped:
            w = waiting.get(rid)
            if w is None or w.req_pool_idx is not None:
                raise InvariantError(f"host pages held by {rid}, which is not a waiting "
                                     "request without a row")
