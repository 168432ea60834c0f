"""A batch of requests and what happens to it before a forward pass.

Mirrors python/sglang/srt/managers/schedule_batch.py: ScheduleBatch (init_new, filter_batch,
merge_batch, prepare_for_extend, prepare_for_decode, new_tokens_required_next_decode,
check_decode_mem, retract_decode, _get_decode_retraction_order, release_req).
"""

from __future__ import annotations

import random

from schedulers.sglang.kv_cache import KVCache
from schedulers.sglang.new_token_ratio import NewTokenRatioTracker
from schedulers.sglang.req import Req
from schedulers.victim_policy import VictimFacts, rank_victims

ABORT_OOM_LAST_REQUEST = (
    "Out of memory even after retracting all other requests in the decode batch. "
    "Aborting the last request."
)


class ScheduleBatch:
    """`forward_mode` is "extend", "decode" or "idle"; `chunked_req` is the scheduler's chunked
    request when the batch was built (it must not join the running batch)."""

    __slots__ = ("batch_is_full", "chunked_req", "forward_mode", "kv", "reqs")

    def __init__(self, reqs: list[Req], kv: KVCache, chunked_req: Req | None = None,
                 batch_is_full: bool = False) -> None:
        self.reqs = reqs
        self.kv = kv
        self.chunked_req = chunked_req
        self.batch_is_full = batch_is_full
        self.forward_mode = "idle"

    def batch_size(self) -> int:
        return len(self.reqs)

    def is_empty(self) -> bool:
        return not self.reqs

    # ------------------------------------------------------------------ membership
    def filter_batch(self, reqs_to_exclude: list[Req] | None = None,
                     keep_indices: list[int] | None = None) -> None:
        # mirrors schedule_batch.py: ScheduleBatch.filter_batch (keep_indices keep their order)
        reqs = self.reqs
        if keep_indices is None:
            if reqs_to_exclude:
                self.reqs = [r for r in reqs if not r.finished() and r not in reqs_to_exclude]
            else:
                for r in reqs:
                    if r.finished_reason is not None:
                        self.reqs = [r for r in reqs if r.finished_reason is None]
                        break
            return
        if len(keep_indices) == len(reqs):
            return
        self.reqs = [reqs[i] for i in keep_indices]

    def merge_batch(self, other: ScheduleBatch) -> None:
        # mirrors schedule_batch.py: ScheduleBatch.merge_batch
        self.reqs = self.reqs + other.reqs

    # ------------------------------------------------------------------ forward preparation
    def prepare_for_extend(self) -> None:
        # mirrors schedule_batch.py: ScheduleBatch.prepare_for_extend
        self.forward_mode = "extend"
        self.kv.alloc_for_extend(self.reqs)
        for r in self.reqs:
            r.is_retracted = False

    def prepare_for_decode(self) -> None:
        # mirrors schedule_batch.py: ScheduleBatch.prepare_for_decode
        self.forward_mode = "decode"
        self.kv.alloc_for_decode(self.reqs)

    # ------------------------------------------------------------------ decode memory
    def new_tokens_required_next_decode(self, selected_indices: list[int] | None = None) -> int:
        # mirrors schedule_batch.py: ScheduleBatch.new_tokens_required_next_decode
        ps = self.kv.page_size
        if ps == 1:
            return len(self.reqs) if selected_indices is None else len(selected_indices)
        reqs = self.reqs
        if selected_indices is None:
            return ps * sum(1 for r in reqs if r.kv_committed_len % ps == 0)
        return ps * sum(1 for i in selected_indices if reqs[i].kv_committed_len % ps == 0)

    def check_decode_mem(self, selected_indices: list[int] | None = None) -> bool:
        """Whether the next decode step fits, after evicting what the tree can give.

        mirrors schedule_batch.py: ScheduleBatch.check_decode_mem and
        allocator/base.py: check_decode_capacity
        """
        num_tokens = self.new_tokens_required_next_decode(selected_indices)
        self.kv.evict_to_free_tokens(num_tokens)
        return self.kv.available_size() >= num_tokens

    @staticmethod
    def get_decode_retraction_order(reqs: list[Req], retraction_policy: str = "length",
                                    schedule_low_priority_values_first: bool = False,
                                    victim_policy: str = "default", page_size: int = 1,
                                    rng: random.Random | None = None) -> list[int]:
        """Indices from most- to least-preferred to keep; retraction pops from the end, so the
        request with the fewest outputs, then the longest input, goes first (ties: the later
        one in the batch). A `victim_policy` other than default replaces this order with its
        ranking (schedulers/victim_policy.py; `rng` feeds its `random`).

        mirrors schedule_batch.py: ScheduleBatch._get_decode_retraction_order
        """
        if victim_policy != "default":
            facts = [victim_facts(r, page_size) for r in reqs]
            ranked = rank_victims(facts, victim_policy, rng or random.Random(0))
            return ranked[::-1]
        order = list(range(len(reqs)))
        if retraction_policy == "priority":
            sign = 1 if schedule_low_priority_values_first else -1
            order.sort(key=lambda i: (reqs[i].priority * (-sign), len(reqs[i].output_ids),
                                      -len(reqs[i].origin_input_ids)), reverse=True)
            return order
        order.sort(key=lambda i: (len(reqs[i].output_ids), -len(reqs[i].origin_input_ids)),
                   reverse=True)
        return order

    def retract_decode(self, tracker: NewTokenRatioTracker, retraction_policy: str = "length",
                       schedule_low_priority_values_first: bool = False,
                       victim_policy: str = "default", rng: random.Random | None = None
                       ) -> tuple[list[Req], float, list[Req]]:
        """Retract decoding requests until the next decode step fits; keep at least one, abort
        it if even it alone does not fit. Returns (retracted, new ratio, aborted).

        mirrors schedule_batch.py: ScheduleBatch.retract_decode
        """
        sorted_indices = self.get_decode_retraction_order(
            self.reqs, retraction_policy, schedule_low_priority_values_first, victim_policy,
            self.kv.page_size, rng)
        retracted: list[Req] = []
        aborted: list[Req] = []
        first_iter = True
        while first_iter or not self.check_decode_mem(sorted_indices):
            if len(sorted_indices) == 1:
                break  # always keep at least one request
            first_iter = False
            idx = sorted_indices.pop()
            req = self.reqs[idx]
            # release memory and don't insert into the tree because we need the space instantly
            self.kv.release_req(req, len(sorted_indices))
            retracted.append(req)
        if len(sorted_indices) <= 1 and not self.check_decode_mem(sorted_indices):
            last_idx = sorted_indices.pop()
            last = self.reqs[last_idx]
            last.to_finish = ABORT_OOM_LAST_REQUEST
            aborted.append(last)
            self.kv.release_req(last, 0, swap=False)
        self.filter_batch(keep_indices=sorted_indices)
        return retracted, tracker.estimate_after_retract(self.reqs), aborted


def victim_facts(req: Req, page_size: int) -> VictimFacts:
    """What `victim_policy` ranks a decoding request by (its row holds
    `kv_allocated_len` slots, in whole pages)."""
    held = -(-req.kv_allocated_len // page_size) * page_size
    return VictimFacts(
        request_id=req.rid,
        arrival_time=req.request.arrival_time,
        num_output_tokens=len(req.output_ids),
        num_prompt_tokens=len(req.origin_input_ids),
        computed_tokens=req.kv_committed_len,
        kv_slots=held,
        remaining_tokens=req.max_new_tokens - len(req.output_ids),
    )
