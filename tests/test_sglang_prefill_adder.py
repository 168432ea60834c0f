"""PrefillAdder: the remaining-token budget, locking the matched prefix, chunking, the prefill
token cap and the chunked request's next chunk."""

from __future__ import annotations

import pytest
from sglang_helpers import req

from schedulers.sglang.kv_cache import KVCache
from schedulers.sglang.memory_pool import ReqToTokenPool, make_allocator
from schedulers.sglang.radix_cache import RadixCache
from schedulers.sglang.req import Req
from schedulers.sglang.schedule_batch import ScheduleBatch
from schedulers.sglang.schedule_policy import AddReqResult, PrefillAdder


def _kv(size: int, page_size: int = 1, rows: int = 16) -> KVCache:
    alloc = make_allocator(size, page_size)
    return KVCache(RadixCache(page_size, alloc), alloc, ReqToTokenPool(rows))


def _running(i: int, max_new: int, outputs: int, ignore_eos: bool = False) -> Req:
    r = Req(req(i, [1, 2, 3], max_new, ignore_eos=ignore_eos))
    r.output_ids.extend([7] * outputs)
    return r


def _adder(kv: KVCache, running: list[Req], ratio: float = 1.0, rem_input: int = 10000,
           rem_chunk: int | None = None) -> PrefillAdder:
    batch = ScheduleBatch(running, kv)
    return PrefillAdder(kv.page_size, kv, batch, ratio, rem_input, rem_chunk)


def _waiting(kv: KVCache, i: int, prompt: list[int], max_new: int) -> Req:
    r = Req(req(i, prompt, max_new))
    r.init_next_round_input(kv.tree_cache)
    return r


def test_remaining_tokens_reserve_running_outputs() -> None:
    kv = _kv(5000)
    running = [_running(0, 100, 20), _running(1, 50, 10, ignore_eos=True),
               _running(2, 10000, 0)]
    adder = _adder(kv, running, ratio=0.5)
    # (100-20)*0.5 + (50-10) whole for ignore_eos + min(10000, 4096)*0.5
    assert adder.rem_total_tokens == pytest.approx(5000 - (40 + 40 + 2048))
    assert adder.budget_state() == AddReqResult.CONTINUE


def test_admission_reserves_extend_page_and_output() -> None:
    kv = _kv(200)
    adder = _adder(kv, [])
    r = _waiting(kv, 0, list(range(10, 40)), 50)
    assert adder.add_one_req(r) == AddReqResult.CONTINUE
    assert r.extend_end == 30 and adder.can_run_list == [r]
    assert adder.rem_total_tokens == 200 - (30 + 1 + 50)
    assert adder.cur_rem_tokens == 200 - (30 + 1)
    assert adder.rem_input_tokens == 10000 - 30
    big = _waiting(kv, 1, list(range(50, 100)), 69)  # 50 + 69 + 1 == 120 > 119 left
    assert adder.add_one_req(big) == AddReqResult.NO_TOKEN
    assert adder.can_run_list == [r]


def test_matched_prefix_is_locked_before_the_check() -> None:
    kv = _kv(100)
    tree, alloc = kv.tree_cache, kv.allocator
    prefix = list(range(100, 140))
    pages = alloc.alloc(40)
    assert pages is not None
    tree.insert(prefix, 40, pages)  # 60 free + 40 evictable
    r = _waiting(kv, 0, [*prefix, *range(1, 11)], 55)
    assert r.prefix_len == 40
    adder = _adder(kv, [])
    assert adder.rem_total_tokens == 100
    # needs 10 + 55 + 1 = 66 < 100, but its own prefix cannot be evicted for it: 60 left
    assert adder.add_one_req(r) == AddReqResult.NO_TOKEN
    assert tree.protected_size() == 0  # the temporary lock is gone
    r2 = _waiting(kv, 1, [*prefix, *range(1, 11)], 48)  # 10 + 48 + 1 = 59 < 60
    assert adder.add_one_req(r2) == AddReqResult.CONTINUE
    assert r2.lock is r2.last_node and tree.protected_size() == 40
    assert tree.evictable_size() == 0


def test_chunked_prefill_page_aligned_and_carried() -> None:
    kv = _kv(400, page_size=4)
    adder = _adder(kv, [], rem_chunk=10)
    r = _waiting(kv, 0, list(range(1, 41)), 30)
    assert adder.add_one_req(r) == AddReqResult.CONTINUE  # 10 - 8 = 2 left in the chunk
    assert r.extend_end == 8 and adder.new_chunked_req is r
    assert adder.rem_total_tokens == 400 - (8 + 4)  # no output reserved for a middle chunk
    # the next round continues it, ending where the chunk budget or the prompt ends
    r.prefix_len = 8
    adder2 = _adder(kv, [], rem_chunk=64)
    assert adder2.add_chunked_req(r) is None
    assert r.extend_end == 40 and adder2.rem_total_tokens == 400 - (32 + 4 + 30)
    adder3 = _adder(kv, [], rem_chunk=12)
    assert adder3.add_chunked_req(r) is r and r.extend_end == 20  # 12 more: still chunked


def test_chunk_budget_exhausted_stops_admission() -> None:
    kv = _kv(400)
    adder = _adder(kv, [], rem_chunk=16)
    r = _waiting(kv, 0, list(range(1, 41)), 30)
    assert adder.add_one_req(r) == AddReqResult.OTHER  # rem_chunk_tokens hit 0
    assert r.extend_end == 16


def test_without_chunking_prefill_cap_admits_the_first_anyway() -> None:
    kv = _kv(1000)
    adder = _adder(kv, [], rem_input=20, rem_chunk=None)
    a = _waiting(kv, 0, list(range(1, 31)), 10)
    assert adder.add_one_req(a) == AddReqResult.OTHER  # admitted above the cap; cap spent
    assert adder.can_run_list == [a] and a.extend_end == 30
    adder2 = _adder(kv, [], rem_input=40, rem_chunk=None)
    b = _waiting(kv, 1, list(range(1, 31)), 10)
    c = _waiting(kv, 2, list(range(40, 51)), 10)
    assert adder2.add_one_req(b) == AddReqResult.CONTINUE
    assert adder2.add_one_req(c) == AddReqResult.OTHER  # 11 >= 10 left: not admitted
    assert adder2.can_run_list == [b]


def test_continuing_chunk_takes_what_memory_allows() -> None:
    kv = _kv(100)
    running = [_running(0, 100, 0)]
    adder = _adder(kv, running, ratio=0.8, rem_chunk=64)  # rem_total = 100 - 80 = 20
    r = Req(req(9, list(range(1, 101)), 10))
    r.refresh_fill_ids()
    r.prefix_len = 8
    assert adder.add_chunked_req(r) is r and r.extend_end == 8 + 20
    adder2 = _adder(kv, [_running(0, 200, 0)], ratio=1.0, rem_chunk=64)  # rem_total < 0
    assert adder2.add_chunked_req(r) is r and r.extend_end == 8 + 64  # progress anyway


def test_prefill_max_requests() -> None:
    kv = _kv(1000)
    batch = ScheduleBatch([], kv)
    adder = PrefillAdder(1, kv, batch, 1.0, 10000, None, prefill_max_requests=2)
    rs = [_waiting(kv, i, [10 * i + 1, 10 * i + 2], 5) for i in range(3)]
    assert adder.add_one_req(rs[0]) == AddReqResult.CONTINUE
    assert adder.add_one_req(rs[1]) == AddReqResult.CONTINUE
    assert adder.add_one_req(rs[2]) == AddReqResult.OTHER
    assert adder.can_run_list == rs[:2]
