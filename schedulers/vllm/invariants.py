"""Cheap consistency checks of the vLLM scheduler's KV bookkeeping (for tests and opt-in runs)."""

from __future__ import annotations

from collections import Counter

from schedulers.vllm.request import RequestStatus
from schedulers.vllm.scheduler import VllmScheduler


class InvariantError(AssertionError):
    """A scheduler's state broke one of its invariants."""


def check_vllm_invariants(sched: VllmScheduler) -> None:
    """Raise InvariantError when blocks leak, are shared wrongly, or counts disagree.

    - every usable block is either free (ref count 0, in the free queue) or referenced;
    - a block's ref count equals the number of live block tables holding it (a block is
      shared only as a cached prefix, so a shared block must carry a hash);
    - only running requests hold blocks, and a running request's table covers its computed
      tokens;
    - every block with a hash is in the prefix cache under it, and nothing else is;
    - in swap mode, host pages are free, held by exactly one swapped waiting request (whose
      computed tokens they hold), or waiting for the step that read them to be committed.
    """
    kv = sched.kv_cache_manager
    pool = kv.block_pool
    try:
        pool.free_block_queue.check()
    except AssertionError as e:
        raise InvariantError(str(e)) from None
    free_ids = set(pool.free_block_queue.block_ids())
    holders: Counter[int] = Counter()
    for rid, blocks in kv.req_to_blocks.items():
        req = sched.requests.get(rid)
        if req is None or req.status != RequestStatus.RUNNING:
            raise InvariantError(f"request {rid} holds blocks but is not running")
        if len(blocks) * kv.block_size < req.num_computed_tokens:
            raise InvariantError(
                f"request {rid}: {len(blocks)} blocks cannot hold {req.num_computed_tokens} "
                "computed tokens"
            )
        if [b.block_id for b in blocks] != kv.req_to_block_ids[rid]:
            raise InvariantError(f"request {rid}: block ids out of sync with its blocks")
        holders.update(b.block_id for b in blocks)
    for block in pool.blocks[1:]:
        n = holders.get(block.block_id, 0)
        if block.ref_cnt != n:
            raise InvariantError(f"block {block.block_id}: ref_cnt {block.ref_cnt}, held by {n}")
        if n > 1 and block.block_hash is None:
            raise InvariantError(f"block {block.block_id} shared by {n} requests without a hash")
        if (n == 0) != (block.block_id in free_ids):
            raise InvariantError(f"block {block.block_id}: held by {n}, in free queue "
                                 f"{block.block_id in free_ids}")
    if 0 in free_ids or pool.null_block.ref_cnt != 0:
        raise InvariantError("the null block was handed out")
    hashed = [b for b in pool.blocks if b.block_hash is not None]
    for block in hashed:
        assert block.block_hash is not None
        if block not in pool.cached_blocks(block.block_hash):
            raise InvariantError(f"block {block.block_id} has a hash the prefix cache lacks")
    for h, first in pool.cached_block_hash_to_block.items():
        if first.block_hash != h or pool.cached_blocks(h)[0] is not first:
            raise InvariantError(f"the prefix cache looks up block {first.block_id} for a "
                                 "hash it does not hold first")
    num_entries = sum(len(pool.cached_blocks(h)) for h in pool.cached_block_hash_to_block)
    if num_entries != len(hashed):
        raise InvariantError(f"the prefix cache maps {num_entries} blocks, {len(hashed)} "
                             "have a hash")
    cached_free = sum(1 for i in free_ids if pool.blocks[i].block_hash is not None)
    if cached_free != pool.num_free_cached_blocks:
        raise InvariantError(f"{cached_free} cached free blocks, counter says "
                             f"{pool.num_free_cached_blocks}")
    for req in sched.running:
        if req.status != RequestStatus.RUNNING:
            raise InvariantError(f"{req.request_id} in running with status {req.status.name}")
    host = sched.host_pool
    for req in sched.waiting:
        swapped = host.swapped_tokens(req.request_id) if host is not None else 0
        if req.num_computed_tokens != swapped or req.request_id in kv.req_to_blocks:
            raise InvariantError(f"waiting request {req.request_id} holds device KV "
                                 f"(computed {req.num_computed_tokens}, on host {swapped})")
    if host is not None:
        try:
            host.check()
        except AssertionError as e:
            raise InvariantError(str(e)) from None
        waiting_ids = {r.request_id for r in sched.waiting}
        stray = sorted(set(host.swapped) - waiting_ids)
        if stray:
            raise InvariantError(f"host pages held by requests not waiting: {stray[:10]}")
