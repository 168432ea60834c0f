#!/usr/bin/env python3
"""Record the SGLang conformance cases of the overlap loop and of priority scheduling.

    python3 scripts/record_sglang_loops.py ORACLE_VENV [--out DIR] [--only NAME ...]

ORACLE_VENV is the virtual environment `shared/oracles/sglang/install.sh` built (its
bin/python imports sglang 0.5.22). For each case it writes NAME.workload.jsonl and
NAME.ref.jsonl (default: tests/conformance/sglang/), the reference traced by
scripts/sglang_oracle_loops.py in the loop the config line names. `overlap_*` cases replay a
recorded synchronous workload with `"disable_overlap_schedule": false`, or a priority workload
built here; `priority_*` cases are priority workloads in the synchronous loop. Each case's
summary must still show what the case is for (retractions, steps that retract several
requests, skipped decodes, priority preemptions). Any Python >= 3.9 runs this script.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES_DIR = ROOT / "tests" / "conformance" / "sglang"
OVERLAP = {"disable_overlap_schedule": False}

# name -> (synchronous case whose workload it replays, config changes, environment,
#          summary expectations)
FROM_SYNC: dict[str, tuple[str, dict, dict[str, str], dict[str, int]]] = {
    "overlap_fcfs_default": ("fcfs_default", OVERLAP, {}, {"retractions": 1}),
    "overlap_lpm_shared_prefix": ("lpm_shared_prefix", OVERLAP, {}, {}),
    "overlap_lpm_in_batch_prefix": ("lpm_in_batch_prefix", OVERLAP, {}, {}),
    "overlap_multi_retract_identical_prompts": ("multi_retract_identical_prompts", OVERLAP, {},
                                                {"retractions": 1, "skip_decode_steps": 1}),
    "overlap_multi_retract_short_prompts": ("multi_retract_short_prompts", OVERLAP, {}, {}),
    "overlap_page_size_8_multi_retract": ("page_size_8_multi_retract", OVERLAP, {}, {}),
    "overlap_chunked_tight_retract": ("chunked_tight_retract", OVERLAP, {}, {}),
    "overlap_chunked_small": ("chunked_small", OVERLAP, {}, {}),
    "overlap_conservativeness_0_3": ("conservativeness_0_3", OVERLAP, {}, {}),
    "overlap_req_slots_4": ("req_slots_4", OVERLAP, {}, {}),
    "overlap_page_size_4": ("page_size_4", OVERLAP, {}, {}),
    "overlap_ignore_eos_half": ("ignore_eos_half", OVERLAP, {}, {}),
    "overlap_oom_abort_last_request": ("oom_abort_last_request", OVERLAP,
                                       {"SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION": "32"}, {}),
    "overlap_stall_never_fits": ("stall_never_fits", OVERLAP, {}, {"stalled": 1}),
}


def _tokens(seed: int, n: int) -> list[int]:
    x = seed
    out = []
    for _ in range(n):
        x = (x * 1103515245 + 12345) % (2**31)
        out.append(3 + x % 29000)
    return out


def priority_workload(seed: int, cfg: dict, num_reqs: int, priorities: list[int],
                      prompt: tuple[int, int], output: tuple[int, int], span: int,
                      shared_prefix: int = 0) -> list[dict]:
    """A workload whose requests carry priorities (drawn from `priorities`), with prompts of
    `prompt` tokens (a shared prefix of `shared_prefix` first), outputs of `output`, arriving
    over `span` steps."""
    x = seed
    prefix = _tokens(seed * 31 + 7, shared_prefix)

    def draw(lo: int, hi: int) -> int:
        nonlocal x
        x = (x * 6364136223846793005 + 1442695040888963407) % (2**64)
        return lo + (x >> 33) % (hi - lo + 1)

    reqs = []
    for i in range(num_reqs):
        n = draw(*prompt)
        reqs.append({"type": "request", "id": f"r{i}", "arrival_step": draw(0, span),
                     "prompt": prefix + _tokens(seed * 1000 + i, n),
                     "max_tokens": draw(*output),
                     "priority": priorities[draw(0, len(priorities) - 1)],
                     "ignore_eos": False})
    reqs.sort(key=lambda r: (r["arrival_step"], int(r["id"][1:])))
    return [{"type": "config", "scheduler": "sglang", "page_size": 1,
             "chunked_prefill_size": 8192, "max_prefill_tokens": 16384,
             "schedule_conservativeness": 1.0, "enable_priority_scheduling": True, **cfg},
            *reqs]


# name -> (workload records, environment, summary expectations)
def priority_cases() -> dict[str, tuple[list[dict], dict[str, str], dict[str, int]]]:
    """Priority scheduling: the queue order, and preemption above the threshold."""
    no_preempt = {"disable_priority_preemption": True}
    return {
        # the waiting queue ordered by priority (higher first), no preemption; 3 rows
        "priority_order": (priority_workload(
            1, {"kv_size": 2000, "req_slots": 3, "schedule_policy": "fcfs", **no_preempt},
            24, [0, 3, 7, 12, 20], (10, 40), (5, 30), 12), {}, {}),
        # lower values first, and lof under priority
        "priority_low_values_first_lof": (priority_workload(
            2, {"kv_size": 2000, "req_slots": 3, "schedule_policy": "lof",
                "schedule_low_priority_values_first": True, **no_preempt},
            24, [0, 3, 7, 12, 20], (10, 40), (5, 30), 12), {}, {}),
        # full request rows: a request more than 10 above a running one preempts it
        "priority_preemption_rows": (priority_workload(
            3, {"kv_size": 2000, "req_slots": 4, "schedule_policy": "fcfs"},
            30, [0, 5, 30, 60], (10, 40), (10, 40), 20), {},
            {"priority_preemptions": 1}),
        # a tight pool: preemption to free tokens, and retractions
        "priority_preemption_tight": (priority_workload(
            10, {"kv_size": 300, "req_slots": 4, "schedule_policy": "fcfs"},
            30, [0, 5, 30, 60], (20, 50), (10, 40), 15, shared_prefix=16), {},
            {"priority_preemptions": 1}),
        # lower values first with preemption, threshold 3
        "priority_preemption_low_first": (priority_workload(
            5, {"kv_size": 600, "req_slots": 4, "schedule_policy": "fcfs",
                "schedule_low_priority_values_first": True,
                "priority_scheduling_preemption_threshold": 3},
            30, [0, 2, 6, 10], (10, 40), (10, 40), 20), {},
            {"priority_preemptions": 1}),
    }


def overlap_priority_cases() -> dict[str, tuple[list[dict], dict[str, str], dict[str, int]]]:
    """The priority cases with preemption, in the overlap loop."""
    out = {}
    for name, (records, env, expect) in priority_cases().items():
        if "preemption" in name:
            out[f"overlap_{name}"] = ([{**records[0], **OVERLAP}, *records[1:]], env, expect)
    return out


def read_records(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def all_cases() -> dict[str, tuple[list[dict], dict[str, str], dict[str, int]]]:
    cases = {}
    for name, (source, change, env, expect) in FROM_SYNC.items():
        records = read_records(CASES_DIR / f"{source}.workload.jsonl")
        cases[name] = ([{**records[0], **change}, *records[1:]], env, expect)
    cases.update(priority_cases())
    cases.update(overlap_priority_cases())
    return cases


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("oracle_venv", help="venv built by shared/oracles/sglang/install.sh")
    ap.add_argument("--out", default=str(CASES_DIR))
    ap.add_argument("--only", nargs="*", help="record these cases only")
    a = ap.parse_args()
    python = str(Path(a.oracle_venv) / "bin" / "python")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    cases = all_cases()
    for name in a.only or list(cases):
        if name not in cases:
            raise SystemExit(f"unknown case {name!r}; cases: {', '.join(cases)}")
        records, env, expect = cases[name]
        workload, ref = out / f"{name}.workload.jsonl", out / f"{name}.ref.jsonl"
        with open(workload, "w") as f:
            for rec in records:
                f.write(json.dumps(rec) + "\n")
        proc = subprocess.run(
            [python, str(ROOT / "scripts" / "sglang_oracle_loops.py"), "--workload",
             str(workload), "--out", str(ref)], check=True, env=dict(os.environ, **env),
            stdout=subprocess.PIPE, text=True)
        summary = json.loads(proc.stdout.strip().splitlines()[-1])
        for key, low in expect.items():
            if int(summary.get(key) or 0) < low:
                raise SystemExit(f"{name}: summary {key}={summary.get(key)!r}, expected at "
                                 f"least {low}; the case no longer shows what it is for")
        print(f"{name}: {summary['loop']}, steps {summary['steps']}, retractions "
              f"{summary['retractions']} (multi-retraction steps "
              f"{summary['multi_retraction_steps']}), priority preemptions "
              f"{summary['priority_preemptions']}, skipped decodes "
              f"{summary['skip_decode_steps']}, aborted {summary['aborted']}, stalled "
              f"{summary['stalled']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
