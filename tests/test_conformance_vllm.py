"""Every recorded vLLM workload replays through our scheduler with the real scheduler's decisions.

The workloads and reference logs come from scripts/record_vllm_conformance.py, which ran the
real vLLM v0.32.0 Scheduler (the oracle in ../shared/oracles/vllm).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.conformance.replay import compare_logs, load_workload, read_steps, replay

CASE_DIR = Path(__file__).parent / "conformance" / "vllm"
CASES = sorted(p.name.removesuffix(".workload.jsonl.gz")
               for p in CASE_DIR.glob("*.workload.jsonl.gz"))


def test_enough_cases_recorded() -> None:
    assert len(CASES) >= 16


@pytest.mark.parametrize("case", CASES)
def test_every_step_agrees(case: str) -> None:
    cfg, reqs = load_workload(CASE_DIR / f"{case}.workload.jsonl.gz")
    ours = [rec for rec in replay(cfg, reqs) if rec["type"] == "step"]
    ref = read_steps(CASE_DIR / f"{case}.ref.jsonl.gz")
    cmp = compare_logs(ref, ours)
    assert cmp.identical, (
        f"{case}: {cmp.agreeing}/{cmp.steps_ref} steps agree; first difference at step "
        f"{cmp.first_diff}:\nreference {cmp.ref_entry}\nours      {cmp.ours_entry}"
    )
    assert any(s["preempted"] for s in ref) or "preempt" not in case


ASYNC_CASES = [c for c in CASES if c.startswith("async_")]


def replay_steps(case: str, **config: object) -> list[dict]:
    cfg, reqs = load_workload(CASE_DIR / f"{case}.workload.jsonl.gz")
    return [rec for rec in replay({**cfg, **config}, reqs) if rec["type"] == "step"]


def test_the_batch_queue_loop_has_its_cases() -> None:
    """Cases of vLLM's default deployment loop (AsyncScheduler, batch queue of two): tight
    pools, shared prefixes, several preemptions in one step, priority."""
    assert len(ASYNC_CASES) >= 20
    for case in ASYNC_CASES:
        cfg, _ = load_workload(CASE_DIR / f"{case}.workload.jsonl.gz")
        assert cfg["async_scheduling"] is True, case
    most = {case: max(len(s["preempted"]) for s in read_steps(
        CASE_DIR / f"{case}.ref.jsonl.gz")) for case in ASYNC_CASES}
    assert max(most.values()) >= 4
    assert sum(n >= 2 for n in most.values()) >= 4
    assert any("priority" in c and most[c] for c in ASYNC_CASES)
    assert any("shared_prefix" in c and most[c] for c in ASYNC_CASES)


@pytest.mark.parametrize("case", [c for c in ASYNC_CASES if c.removeprefix("async_") in CASES])
def test_the_loops_differ_where_upstreams_do(case: str) -> None:
    """The same requests through upstream's two loops give different decisions, and ours
    follow each: the synchronous replay of the async case matches the synchronous reference,
    not the async one."""
    sync_ref = read_steps(CASE_DIR / f"{case.removeprefix('async_')}.ref.jsonl.gz")
    async_ref = read_steps(CASE_DIR / f"{case}.ref.jsonl.gz")
    assert not compare_logs(sync_ref, async_ref).identical
    ours_sync = replay_steps(case, async_scheduling=False)
    assert compare_logs(sync_ref, ours_sync).identical
    assert not compare_logs(async_ref, ours_sync).identical
