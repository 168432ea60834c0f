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
