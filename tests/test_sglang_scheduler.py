"""The SGLang scheduler on the contract: plans, prefix hits, EOS, the stall abort, rejections,
client aborts, stats and the config."""

from __future__ import annotations

import pytest
from sglang_helpers import Run, drive, req, sched, step

from schedulers.contract import Scheduler
from schedulers.sglang import SglangScheduler, SglangSchedulerConfig


def test_satisfies_the_protocol_and_from_capacity() -> None:
    cfg = SglangSchedulerConfig.from_capacity(1024, page_size=16, schedule_policy="lpm")
    assert cfg.max_total_tokens == 1024 and cfg.num_pages == 64
    s = SglangScheduler(cfg)
    assert isinstance(s, Scheduler) and s.page_size == 16 and s.name == "sglang"
    assert cfg.resolved_max_running_requests == 512  # min(2048, capacity // 2)
    with pytest.raises(ValueError, match="page_size=16"):
        SglangSchedulerConfig.from_capacity(1000, page_size=16)


def test_a_given_running_cap_is_capped_at_half_the_slots() -> None:
    # sglang 0.5.22 resolve_max_num_reqs: min(requested, token_capacity // 2), and
    # summary.json's scheduler_limits says where a capped value came from
    from schedulers.sglang.entry import ENTRY
    capped = SglangSchedulerConfig(max_total_tokens=1024, max_running_requests=4096)
    assert capped.resolved_max_running_requests == 512
    assert SglangScheduler(capped).max_running_requests == 512
    kept = SglangSchedulerConfig(max_total_tokens=1024, max_running_requests=100)
    assert kept.resolved_max_running_requests == 100
    assert ENTRY.derived_limits is not None
    assert ENTRY.derived_limits(kept)["max_running_requests"].source == "config"
    assert "capped at 1024 token slots / 2" in (
        ENTRY.derived_limits(capped)["max_running_requests"].source)


@pytest.mark.parametrize(("fields", "name"), [
    ({"page_size": 0}, "page_size"),
    ({"schedule_policy": "sjf"}, "schedule_policy"),
    ({"chunked_prefill_size": 2, "page_size": 4}, "chunked_prefill_size"),
    ({"max_running_requests": 0}, "max_running_requests"),
    ({"schedule_conservativeness": 0}, "schedule_conservativeness"),
    ({"max_prefill_tokens": 0}, "max_prefill_tokens"),
    ({"retraction_policy": "random"}, "retraction_policy"),
])
def test_config_errors_name_field_and_value(fields: dict[str, object], name: str) -> None:
    with pytest.raises(ValueError, match=rf"{name}=") as e:
        SglangSchedulerConfig(max_total_tokens=512, **fields)  # type: ignore[arg-type]
    assert repr(fields[name]) in str(e.value)


def test_chunked_prefill_off_values() -> None:
    for off in (None, -1, 0):
        assert SglangSchedulerConfig(512, chunked_prefill_size=off).chunked_prefill_enabled is False


def test_prefill_first_then_decode_and_a_prefix_hit() -> None:
    s = sched(1000, page_size=1)
    shared = list(range(100, 140))
    run = drive(s, [(0, req(0, [*shared, 1, 2], 4)), (2, req(1, [*shared, 3, 4, 5], 3))])
    modes = [p.forward_mode for p in run.plans]
    assert modes[:2] == ["extend", "decode"] and modes[2] == "extend"  # prefill first
    first = run.plans[0].chunks[0]
    assert first.admitted and first.start_pos == 0 and first.sample
    assert first.token_ids == [*shared, 1, 2] and len(first.page_ids) == 42
    hit = run.plans[2].chunks[0]
    assert hit.request_id == "r1" and hit.admitted and hit.start_pos == 40
    assert hit.token_ids == [3, 4, 5] and len(hit.page_ids) == 43
    assert hit.page_ids[:40] == first.page_ids[:40]  # the cached prefix's slots
    dec = run.plans[1].chunks[0]
    assert dec.token_ids == [run.requests["r0"].output_token_ids[0]] and dec.start_pos == 42
    assert run.finished == {"r0": "length", "r1": "length"}


def test_chunked_prefill_samples_only_at_the_last_chunk() -> None:
    s = sched(1000, chunked_prefill_size=16)
    run = drive(s, [(0, req(0, list(range(1, 41)), 2))])
    chunks = [p.chunks[0] for p in run.plans[:3]]
    assert [(c.start_pos, len(c.token_ids), c.sample, c.admitted) for c in chunks] == [
        (0, 16, False, True), (16, 16, False, False), (32, 8, True, False)]
    assert len(chunks[2].page_ids) == 40


def test_paged_page_ids_cover_every_position() -> None:
    s = sched(256, page_size=8, chunked_prefill_size=16)
    run = drive(s, [(0, req(0, list(range(1, 30)), 20)), (1, req(1, list(range(1, 25)), 9))])
    for plan in run.plans:
        assert plan.page_size == 8
        for c in plan.chunks:
            last = c.start_pos + len(c.token_ids) - 1
            assert len(c.page_ids) == last // 8 + 1
    assert set(run.finished) == {"r0", "r1"}


def test_eos_finishes_with_stop_unless_ignore_eos() -> None:
    s = sched(500)
    eos = 77
    run = drive(s, [(0, req(0, [1, 2, 3], 10, eos_token_id=eos)),
                    (0, req(1, [4, 5, 6], 10, eos_token_id=eos, ignore_eos=True))],
                token=lambda rid, n: eos if n >= 5 else 9)
    assert run.finished == {"r0": "stop", "r1": "length"}
    assert run.requests["r0"].output_token_ids == [9, 9, eos]
    assert len(run.requests["r1"].output_token_ids) == 10


def test_stall_abort_of_a_head_that_can_never_fit() -> None:
    s = sched(100, chunked_prefill_size=32)
    run = drive(s, [(0, req(0, list(range(1, 11)), 5)),
                    (0, req(1, list(range(20, 60)), 60)),  # 40 + 60 + 1 > 100
                    (0, req(2, list(range(70, 80)), 5))])
    assert set(run.aborted) == {"r1"} and "forever" in run.aborted["r1"]
    assert s.num_stall_aborts == 1
    assert set(run.finished) == {"r0", "r2"}
    # never an empty plan while work is pending, except the one-iteration lag upstream has
    empties = [i for i, p in enumerate(run.plans) if p.is_empty and not p.aborted]
    assert all(i + 1 < len(run.plans) and not run.plans[i + 1].is_empty for i in empties)


def test_rejections() -> None:
    s = sched(100)
    assert s.add_request(req(0, [], 5)) == "empty prompt"
    assert "max_tokens" in (s.add_request(req(1, [1], 0)) or "")
    assert "exceeds the maximum allowed length" in (s.add_request(req(2, [1] * 94, 5)) or "")
    assert s.add_request(req(3, [1] * 93, 5)) is None
    assert "already" in (s.add_request(req(3, [1], 5)) or "")
    ctx = sched(1000, context_length=50)
    assert ctx.add_request(req(0, [1] * 44, 5)) is not None
    assert ctx.add_request(req(1, [1] * 43, 5)) is None


def test_client_abort_releases_everything() -> None:
    s = sched(300, chunked_prefill_size=8)
    run = Run()
    for i, n in enumerate((20, 5, 5)):
        r = req(i, list(range(10 * i + 1, 10 * i + 1 + n)), 50)
        s.add_request(r)
        run.requests[r.request_id] = r
    step(s, run)  # r0's first chunk: r0 is the chunked request
    s.abort("r0", "client went away")  # mid-prefill
    step(s, run)
    step(s, run)
    s.abort("r1", "client went away")  # decoding
    s.abort("r2", "client went away")
    s.abort("r9", "unknown: ignored")
    assert not s.has_unfinished()
    step(s, run)
    st = s.stats()
    assert st.num_running == 0 and st.num_waiting == 0
    assert s.allocator.available_size() + s.tree_cache.evictable_size() == 300
    assert s.tree_cache.protected_size() == 0


def test_stats() -> None:
    s = sched(200)
    run = Run()
    r = req(0, list(range(1, 21)), 5)
    s.add_request(r)
    run.requests["r0"] = r
    assert s.stats().num_waiting == 1
    step(s, run)
    st = s.stats()
    assert (st.num_running, st.num_waiting, st.kv_capacity_tokens) == (1, 0, 200)
    # the prompt's slots are locked by the running request: used, not evictable cache
    assert st.kv_used_tokens == 20 and st.kv_cached_tokens == 0


def test_paged_decode_steps_counts_the_pages_each_step_allocates() -> None:
    # a decode run's memory bound with pages: step j allocates one page for every request
    # whose committed length plus j is a multiple of the page size
    import random

    from schedulers.sglang.decode_run import paged_decode_steps

    rng = random.Random(7)
    for _ in range(2000):
        ps = rng.choice([2, 3, 4, 16])
        lens = [rng.randrange(1, 200) for _ in range(rng.randrange(1, 9))]
        limit, room = rng.randrange(0, 60), rng.randrange(0, 400)
        expected, need = limit, 0
        for j in range(limit):
            need += ps * sum(1 for n in lens if (n + j) % ps == 0)
            if need > room:
                expected = j
                break
        assert paged_decode_steps(lens, ps, limit, room) == expected, (lens, ps, limit, room)
