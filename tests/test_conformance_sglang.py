"""Replay every SGLang conformance case and require each step to agree with the real components.

The cases and their reference logs come from scripts/record_sglang_conformance.py and, for
the overlap loop (`overlap_*`) and priority scheduling (`priority_*`),
scripts/record_sglang_loops.py (see tests/conformance/sglang/README.md). A step agrees when
`scheduled` (as a set), `preempted` (as a list), `finished` (as a set) and `aborted` (as a
set) are equal. The one expected difference: at
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


def _summaries(prefix: str) -> dict[str, dict[str, Any]]:
    return {c: _read(CASES_DIR / f"{c}.ref.jsonl")[1] for c in CASES if c.startswith(prefix)}


def test_the_overlap_and_priority_cases_show_what_they_are_for() -> None:
    """The overlap cases run the overlap loop and, together, skip a decode for requests
    finishing in flight, retract several requests in one step and preempt by priority; the
    priority cases preempt above the threshold."""
    overlap = _summaries("overlap_")
    assert len(overlap) >= 12, sorted(overlap)
    for case in overlap:
        cfg, _ = load_workload(CASES_DIR / f"{case}.workload.jsonl")
        assert cfg["disable_overlap_schedule"] is False, case
    assert all(s["loop"] == "overlap" for s in overlap.values())
    assert sum(s["skip_decode_steps"] for s in overlap.values()) > 0
    assert sum(s["multi_retraction_steps"] for s in overlap.values()) > 0
    assert sum(s["priority_preemptions"] for s in overlap.values()) > 0
    priority = _summaries("priority_")
    assert len(priority) >= 4 and all(s["loop"] == "synchronous" for s in priority.values())
    assert sum(s["priority_preemptions"] > 0 for s in priority.values()) >= 2


def test_priority_decides_the_priority_cases() -> None:
    """With priority scheduling off, our replay of a priority case disagrees with the
    reference: the cases check the ordering and the preemption, not FCFS."""
    for case in ("priority_order", "priority_preemption_rows"):
        cfg, reqs = load_workload(CASES_DIR / f"{case}.workload.jsonl")
        ref_steps, _ = _read(CASES_DIR / f"{case}.ref.jsonl")
        off = dict(cfg, enable_priority_scheduling=False)
        ours = [rec for rec in replay(off, reqs) if rec["type"] == "step"]
        assert not compare_logs(ref_steps, ours).identical, case
