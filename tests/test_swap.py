"""preemption_mode=swap for both schedulers: the host pool, the sim executor's copy cost, and
engine-level properties on random workloads (invariants every step, nothing leaked at the end,
every request ends, the same outputs as recompute, records and metrics agree)."""

from __future__ import annotations

import os

import pytest
from conftest import TINY_HW, TINY_MODEL, build_scheduler_for, invariant_check_for, page_field
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engines.engine import Engine
from engines.executors.sim import SimExecutor
from experiments.results.metrics import compute_metrics
from schedulers import registry
from schedulers.contract import Request, Scheduler, StepPlan, SwapOp, SwappingScheduler
from schedulers.host_pool import HostKVPool

TINY, HW = TINY_MODEL, TINY_HW
EXAMPLES = int(os.environ.get("SCHEDBENCH_HYPOTHESIS_EXAMPLES", "30"))


# --------------------------------------------------------------------------- host pool
def test_host_pool_falls_back_when_full_and_releases_read_pages_at_commit() -> None:
    pool = HostKVPool(capacity_tokens=32, page_size=8)
    a = pool.swap_out("a", [7, 3, 9], 17)  # 3 pages
    assert a == SwapOp("a", [7, 3, 9], [0, 1, 2], 17)
    assert pool.swap_out("b", [1, 2], 9) is None  # needs 2 pages, 1 free
    assert pool.num_fallbacks == 1 and pool.swapped_tokens("b") == 0
    back = pool.swap_in("a", [4, 5, 6, 8])
    assert back == SwapOp("a", [4, 5, 6], [0, 1, 2], 17)
    # read this step: not reusable until the step is committed
    assert pool.swap_out("b", [1, 2], 9) is None
    pool.commit()
    assert pool.swap_out("b", [1, 2], 9) is not None
    pool.check()
    pool.free_pages.append(pool.swapped["b"].host_page_ids[0])  # a page held twice
    with pytest.raises(AssertionError, match="double-owned"):
        pool.check()


def test_sim_executor_charges_the_copy_over_the_host_link() -> None:
    ex = SimExecutor(TINY, HW, step_overhead_s=0.001)
    ex.register(Request("r0", [5] * 8, max_tokens=4))
    plan = StepPlan(step=0, page_size=4, swap_out=[SwapOp("x", [1, 2], [0, 1], 6)],
                    swap_in=[SwapOp("y", [3], [2], 3)])
    res = ex.execute(plan)
    per_token = TINY.kv_bytes_per_token
    assert (res.swap_out_bytes, res.swap_in_bytes) == (6 * per_token, 3 * per_token)
    assert res.swap_s == pytest.approx(9 * per_token / HW.host_link_bandwidth)
    assert res.duration_s == res.swap_s  # no chunk: only the copy
    from schedulers.contract import ScheduledChunk

    plan.chunks.append(ScheduledChunk("r0", [5] * 8, 0, [0, 1], True))
    res2 = ex.execute(plan)
    no_swap = ex.execute(StepPlan(step=1, page_size=4, chunks=plan.chunks))
    assert res2.duration_s == pytest.approx(no_swap.duration_s + res.swap_s)
    assert no_swap.swap_s == 0.0


# --------------------------------------------------------------------------- engine properties
# Per scheduler, settings that make it evict: vLLM's small budget, SGLang's optimistic
# admission (a low conservativeness and a fast ratio decay), so that decode retracts.
KNOBS: dict[str, dict[str, object]] = {
    "vllm": {"max_num_seqs": 8, "max_num_batched_tokens": 128},
    "sglang": {"chunked_prefill_size": 64, "schedule_conservativeness": 0.05,
               "new_token_ratio_decay_steps": 4, "min_new_token_ratio_factor": 0.05},
}


def build(kind: str, capacity: int, mode: str, host: int, page_size: int
          ) -> tuple[Scheduler, object]:
    sched = build_scheduler_for(kind, capacity, **{page_field(kind): page_size},
                                **KNOBS.get(kind, {}), preemption_mode=mode,
                                host_kv_capacity_tokens=host)
    return sched, invariant_check_for(sched)


def make_requests(spec: list[tuple[float, int, int, int, bool]]) -> list[Request]:
    return [Request(f"r{i}", [3 + (i * 31 + k * 7) % 500 for k in range(plen)], max_tokens=cap,
                    arrival_time=t, eos_output_len=min(eos, cap), ignore_eos=ig)
            for i, (t, plen, cap, eos, ig) in enumerate(spec)]


# Bursty arrivals and long outputs against a small pool, so that both schedulers evict.
workloads = st.lists(
    st.tuples(st.floats(0, 0.05, allow_nan=False).map(lambda x: round(x, 3)),
              st.integers(1, 90), st.integers(16, 80), st.integers(8, 80), st.booleans()),
    min_size=1, max_size=16,
).map(lambda xs: sorted(xs, key=lambda x: x[0]))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(registry.names("swaps")), page_size=st.sampled_from([1, 4, 16]),
       capacity_pages=st.integers(8, 16), host_tokens=st.sampled_from([0, 64, 256, 1024]),
       spec=workloads)
def test_swap_ends_cleanly_with_recompute_outputs(kind: str, page_size: int,
                                                  capacity_pages: int, host_tokens: int,
                                                  spec: list[tuple[float, int, int, int, bool]]
                                                  ) -> None:
    capacity = capacity_pages * 16  # the same slots for every page size
    runs = {}
    for mode in ("recompute", "swap"):
        sched, check = build(kind, capacity, mode, host_tokens, page_size)
        reqs = make_requests(spec)
        result = Engine(sched, SimExecutor(TINY, HW, step_overhead_s=0.001), reqs,
                        check=check).run()  # type: ignore[arg-type]
        runs[mode] = (sched, reqs, result)
    sched, reqs, result = runs["swap"]
    rows = result.requests.to_pylist()
    for row, (_, _, cap, eos, ignore) in zip(rows, spec, strict=True):
        reason = row["finish_reason"]
        if reason == "length":
            assert row["output_len"] == cap
        elif reason == "stop":
            assert not ignore and row["output_len"] == min(eos, cap)
        else:
            assert reason in ("abort", "rejected") and row["finish_detail"], row
    # the sim executor's tokens depend only on request and position: swap changes nothing
    rec_reqs = runs["recompute"][1]
    assert [r.output_token_ids for r in reqs] == [r.output_token_ids for r in rec_reqs]
    # nothing held at the end: every host page free, every device slot free or cached
    assert isinstance(sched, SwappingScheduler)
    host = sched.host_pool
    assert host is not None and not host.swapped and not host.releasing
    assert len(host.free_pages) == host.num_pages
    stats = sched.stats()
    assert stats.kv_used_tokens == 0 and stats.num_running == stats.num_waiting == 0
    # records and metrics tell the same story
    steps = result.steps.to_pydict()
    m = compute_metrics(result.requests, result.steps)
    assert m["num_swap_out"] == sum(r["num_swaps"] for r in rows) == sum(steps["num_swap_out"])
    assert m["num_swap_in"] == m["num_swap_out"]  # every swapped request came back
    assert m["num_swap_out"] + m["num_swap_fallbacks"] <= m["num_preemptions"]
    assert m["swap_out_bytes"] == m["swap_out_tokens"] * TINY.kv_bytes_per_token
    assert m["swap_time_s"] == pytest.approx(
        (m["swap_out_bytes"] + m["swap_in_bytes"]) / HW.host_link_bandwidth)
    if host_tokens == 0:
        assert m["num_swap_out"] == 0 and m["num_swap_fallbacks"] == m["num_preemptions"]
    if m["num_swap_out"] and m["num_swap_fallbacks"] == 0:
        # a swapped request resumes where it stopped: it recomputes nothing
        assert m["recomputed_tokens"] == 0


def test_some_random_case_swaps() -> None:
    """The property above is not vacuous: a small pool under load does swap, on every
    scheduler that declares swaps."""
    spec = [(0.0, 40 + 5 * i, 60, 60, False) for i in range(10)]
    assert registry.names("swaps")
    for kind in registry.names("swaps"):
        sched, check = build(kind, 256, "swap", 256, 1 if kind == "sglang" else 16)
        result = Engine(sched, SimExecutor(TINY, HW), make_requests(spec),
                        check=check).run()  # type: ignore[arg-type]
        m = compute_metrics(result.requests, result.steps)
        assert m["num_swap_out"] >= 1 and m["num_swap_in"] == m["num_swap_out"], kind
        assert m["num_swapped_requests"] >= 1 and m["swap_time_s"] > 0


def test_a_swap_job_writes_swap_records_and_summary(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """conf/ accepts the fields; the job's steps, requests and summary carry the swap numbers."""
    import json
    from pathlib import Path

    import pyarrow.parquet as pq

    from experiments.run.config import compose_run_config
    from experiments.run.main import run_experiment

    conf = Path(__file__).resolve().parents[1] / "conf"
    cfg = compose_run_config([
        "workload.num_requests=5", "progress=off", "scheduler=sglang",
        "scheduler.preemption_mode=swap", "scheduler.host_kv_capacity_tokens=4096"], str(conf))
    run_experiment(cfg, tmp_path / "job")
    summary = json.loads((tmp_path / "job" / "summary.json").read_text())
    for key in ("num_swap_out", "num_swap_in", "num_swap_fallbacks", "swap_out_bytes",
                "swap_in_bytes", "swap_time_s", "num_swapped_requests"):
        assert key in summary, key
    assert "swap_s" in pq.read_schema(tmp_path / "job" / "steps.parquet").names
    assert "num_swaps" in pq.read_schema(tmp_path / "job" / "requests.parquet").names
