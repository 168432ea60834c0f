"""Replay every SGLang conformance case and require each step to agree with the real components.

The cases and their reference logs come from scripts/record_sglang_conformance.py (see
tests/conformance/sglang/README.md). A step agrees when `scheduled` (as a set), `preempted` (as a
list), `finished` (as a set) and `aborted` (as a set) are equal. The one expected difference: at
a true stall (a request that can never fit, nothing running) the oracle stops with nothing
aborted, and our scheduler aborts that request in that very step, which must be its last.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from experiments.conformance.replay import compare_logs, load_workload, replay

CASES_DIR = Path(__file__).parent / "conformance" / "sglang"
CASES = sorted(p.name[: -len(".workload.jsonl")] for p in CASES_DIR.glob("*.workload.jsonl"))


def _read(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    steps, summary = [], {}
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if rec["type"] == "step":
                steps.append(rec)
            elif rec["type"] == "summary":
                summary = rec
    return steps, summary


def test_enough_cases() -> None:
    assert len(CASES) >= 16, CASES


@pytest.mark.parametrize("case", CASES)
def test_every_step_agrees(case: str) -> None:
    cfg, reqs = load_workload(CASES_DIR / f"{case}.workload.jsonl")
    ref_steps, ref_summary = _read(CASES_DIR / f"{case}.ref.jsonl")
    ours = [rec for rec in replay(cfg, reqs) if rec["type"] == "step"]
    cmp = compare_logs(ref_steps, ours)
    assert cmp.identical, (
        f"{case}: first differing step {cmp.first_diff} of {cmp.steps_ref} (ours "
        f"{cmp.steps_ours}), {cmp.agreeing} agree\nreference: {cmp.ref_entry}\n"
        f"ours:      {cmp.ours_entry}")
    stalled = bool(ref_summary.get("stalled"))
    for i, (a, b) in enumerate(zip(ref_steps, ours, strict=True)):
        if stalled and i == len(ref_steps) - 1:
            assert not a["aborted"] and len(b["aborted"]) == 1, (case, i, b["aborted"])
            assert "forever" in b["abort_reasons"][b["aborted"][0]], b["abort_reasons"]
            continue
        assert set(a["aborted"]) == set(b["aborted"]), (case, i, a["aborted"], b["aborted"])
