#!/usr/bin/env python3
"""Regenerate the SGLang conformance cases: workloads and the real components' decision logs.

    python scripts/record_sglang_conformance.py ORACLE_VENV [--oracle-dir DIR] [--out DIR]
                                                [--only NAME ...]

ORACLE_VENV is the virtual environment `shared/oracles/sglang/install.sh` built (its
bin/python imports sglang 0.5.22); DIR defaults to ../shared/oracles/sglang and the output to
tests/conformance/sglang/. For each case it writes NAME.workload.jsonl (`drive.py gen` with the
flags below, or a hand-built workload) and NAME.ref.jsonl, traced by
scripts/sglang_oracle_trace.py (drive.py's Oracle, stopping only at a true stall). It also runs
`drive.py trace` and checks that its step records are a byte-identical prefix of the reference
(the whole log unless drive.py stopped at its early stall check).
Any Python >= 3.9 runs this script; only the oracle venv needs sglang.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# name -> (drive.py gen flags, extra environment for the trace, summary expectations)
GEN_CASES: dict[str, tuple[list[str], dict[str, str], dict[str, int]]] = {
    # each queue policy
    "fcfs_default": (["--seed", "12", "--policy", "fcfs", "--num-reqs", "12", "--out-min", "5",
                      "--out-max", "60", "--kv-size", "300", "--arrival-span", "20"], {},
                     {"retractions": 1, "readmissions_with_prefix_hit": 1}),
    "lpm_shared_prefix": (["--seed", "10", "--policy", "lpm", "--shared-frac", "0.9",
                           "--num-reqs", "16", "--out-min", "20", "--out-max", "40",
                           "--kv-size", "400", "--arrival-span", "10"], {},
                          {"first_admissions_with_prefix_hit": 10, "retractions": 1}),
    "lpm_in_batch_prefix": (["--seed", "21", "--policy", "lpm", "--shared-frac", "1.0",
                             "--num-prefixes", "2", "--prefix-min", "40", "--prefix-max", "60",
                             "--arrival-span", "0", "--num-reqs", "24", "--out-min", "10",
                             "--out-max", "40", "--kv-size", "900"], {},
                            {"first_admissions_with_prefix_hit": 20}),
    "dfs_weight": (["--seed", "8", "--policy", "dfs-weight", "--shared-frac", "0.8",
                    "--num-prefixes", "4", "--num-reqs", "24", "--out-min", "5",
                    "--out-max", "40", "--kv-size", "400", "--arrival-span", "5"], {},
                   {"first_admissions_with_prefix_hit": 8, "retractions": 1}),
    "lof": (["--seed", "2", "--policy", "lof", "--num-reqs", "12", "--out-min", "20",
             "--out-max", "40", "--kv-size", "300", "--arrival-span", "10"], {},
            {"retractions": 1}),
    "random_seeded": (["--seed", "2", "--policy", "random", "--random-seed", "7",
                       "--num-reqs", "12", "--out-min", "20", "--out-max", "40",
                       "--kv-size", "300", "--arrival-span", "10"], {}, {"retractions": 1}),
    # ignore_eos mixes
    # (chosen so that treating every request as not ignore_eos changes the decisions)
    "ignore_eos_half": (["--seed", "686", "--policy", "lpm", "--ignore-eos-frac", "0.5",
                         "--num-reqs", "20", "--out-min", "20", "--out-max", "40",
                         "--kv-size", "300", "--arrival-span", "20",
                         "--schedule-conservativeness", "0.3"], {}, {"retractions": 1}),
    "ignore_eos_all": (["--seed", "10", "--policy", "fcfs", "--ignore-eos-frac", "1.0",
                        "--num-reqs", "12", "--out-min", "10", "--out-max", "40",
                        "--kv-size", "400", "--arrival-span", "5"], {}, {}),
    # steps that retract several requests
    "multi_retract_identical_prompts": (
        ["--seed", "33", "--policy", "fcfs", "--kv-size", "150", "--num-prefixes", "1",
         "--prefix-min", "60", "--prefix-max", "60", "--suffix-min", "0", "--suffix-max", "0",
         "--shared-frac", "1.0", "--out-min", "5", "--out-max", "20",
         "--schedule-conservativeness", "0.05", "--arrival-span", "20", "--num-reqs", "60"],
        {}, {"multi_retraction_steps": 2}),
    "multi_retract_short_prompts": (
        ["--seed", "99", "--policy", "lpm", "--kv-size", "200", "--num-prefixes", "1",
         "--prefix-min", "10", "--prefix-max", "10", "--suffix-min", "0", "--suffix-max", "2",
         "--shared-frac", "1.0", "--out-min", "5", "--out-max", "20",
         "--schedule-conservativeness", "0.1", "--arrival-span", "20", "--num-reqs", "60"],
        {}, {"multi_retraction_steps": 1}),
    # conservativeness other than 1
    "conservativeness_0_3": (["--seed", "2", "--policy", "lpm", "--num-reqs", "12",
                              "--out-min", "20", "--out-max", "40", "--kv-size", "300",
                              "--arrival-span", "10", "--schedule-conservativeness", "0.3"],
                             {}, {"retractions": 2}),
    "conservativeness_2": (["--seed", "11", "--policy", "fcfs", "--num-reqs", "12",
                            "--out-min", "5", "--out-max", "40", "--kv-size", "400",
                            "--arrival-span", "5", "--schedule-conservativeness", "2.0"], {}, {}),
    # chunked prefill, and none
    "chunked_small": (["--seed", "1", "--policy", "lpm", "--chunked-prefill-size", "32",
                       "--prefix-min", "40", "--prefix-max", "120", "--suffix-max", "80",
                       "--num-reqs", "12", "--out-min", "5", "--out-max", "20",
                       "--kv-size", "700", "--arrival-span", "10"], {}, {}),
    "chunked_tight_retract": (["--seed", "4", "--policy", "fcfs", "--chunked-prefill-size",
                               "48", "--prefix-min", "30", "--prefix-max", "90",
                               "--suffix-max", "60", "--num-reqs", "16", "--out-min", "10",
                               "--out-max", "40", "--kv-size", "400", "--arrival-span", "10",
                               "--schedule-conservativeness", "0.3"], {}, {"retractions": 1}),
    # (a prefill token cap of 100 that binds: with 16384 the decisions differ)
    "no_chunking_small_prefill_budget": (["--seed", "391", "--policy", "lpm",
                                          "--chunked-prefill-size", "-1",
                                          "--max-prefill-tokens", "100", "--num-reqs", "16",
                                          "--out-min", "10", "--out-max", "40",
                                          "--kv-size", "400", "--arrival-span", "0",
                                          "--schedule-conservativeness", "0.3"], {},
                                         {"retractions": 1}),
    # request-row exhaustion
    "req_slots_4": (["--seed", "2", "--policy", "fcfs", "--req-slots", "4", "--num-reqs", "12",
                     "--out-min", "5", "--out-max", "20", "--kv-size", "800",
                     "--arrival-span", "0"], {}, {}),
    # pages larger than one token
    "page_size_4": (["--seed", "12", "--policy", "lpm", "--page-size", "4", "--num-reqs", "16",
                     "--out-min", "20", "--out-max", "40", "--kv-size", "320",
                     "--arrival-span", "5"], {}, {"retractions": 1}),
    "page_size_16_chunked": (["--seed", "12", "--policy", "lpm", "--page-size", "16",
                              "--chunked-prefill-size", "64", "--prefix-min", "40",
                              "--prefix-max", "120", "--num-reqs", "20", "--out-min", "10",
                              "--out-max", "40", "--kv-size", "800", "--arrival-span", "10"],
                             {}, {"retractions": 1}),
    "page_size_8_multi_retract": (["--seed", "2", "--policy", "fcfs", "--page-size", "8",
                                   "--num-prefixes", "1", "--prefix-min", "40",
                                   "--prefix-max", "40", "--suffix-min", "0",
                                   "--suffix-max", "0", "--shared-frac", "1.0",
                                   "--schedule-conservativeness", "0.05", "--num-reqs", "30",
                                   "--out-min", "5", "--out-max", "20", "--kv-size", "240",
                                   "--arrival-span", "5"], {}, {"multi_retraction_steps": 1}),
    # every 32nd ordering pass of a cache-agnostic policy touches the waiting requests' cached
    # prefixes (head last), which changes what LRU evicts later; 2 request rows
    "lof_waiting_prefix_refresh": (["--seed", "972", "--policy", "lof", "--num-reqs", "40",
                                    "--out-min", "5", "--out-max", "20", "--kv-size", "250",
                                    "--arrival-span", "20", "--req-slots", "2",
                                    "--shared-frac", "0.9", "--num-prefixes", "3"], {}, {}),
    # more than 128 waiting: lpm falls back to fcfs (and refreshes waiting prefixes)
    "lpm_fallback_long_queue": (["--seed", "28", "--policy", "lpm", "--num-reqs", "150",
                                 "--arrival-span", "0", "--out-min", "2", "--out-max", "8",
                                 "--suffix-min", "2", "--suffix-max", "10", "--prefix-min",
                                 "10", "--prefix-max", "30", "--kv-size", "300",
                                 "--req-slots", "16"], {}, {}),
}


def _req(i: int, arrival: int, prompt: list[int], max_tokens: int, ignore_eos: bool = False
         ) -> dict[str, object]:
    return {"type": "request", "id": f"r{i}", "arrival_step": arrival, "prompt": prompt,
            "max_tokens": max_tokens, "priority": 0, "ignore_eos": ignore_eos}


def _tokens(seed: int, n: int) -> list[int]:
    x = seed
    out = []
    for _ in range(n):
        x = (x * 1103515245 + 12345) % (2**31)
        out.append(3 + x % 29000)
    return out


def hand_built() -> dict[str, tuple[list[dict[str, object]], dict[str, str], dict[str, int]]]:
    """Workloads `gen` cannot make: a head that can never fit, and an out-of-memory abort."""
    cases: dict[str, tuple[list[dict[str, object]], dict[str, str], dict[str, int]]] = {}
    # The last request needs prompt + max_tokens + 1 >= kv_size slots: once the others are
    # done nothing runs and it can never be admitted. The oracle stops there (a true stall);
    # our scheduler aborts it at that step.
    cfg = {"type": "config", "scheduler": "sglang", "kv_size": 300, "req_slots": 16,
           "page_size": 1, "schedule_policy": "fcfs", "chunked_prefill_size": 64,
           "max_prefill_tokens": 16384, "schedule_conservativeness": 1.0}
    reqs = [_req(i, i, _tokens(100 + i, 20 + 3 * i), 30 + 5 * i) for i in range(6)]
    reqs.append(_req(6, 8, _tokens(200, 120), 200))
    cases["stall_never_fits"] = ([cfg, *reqs], {}, {"stalled": 1})
    # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION=32 lets admission reserve 32 of 280 output tokens:
    # the requests outgrow the pool, retract each other and the last one left is aborted.
    cfg2 = {"type": "config", "scheduler": "sglang", "kv_size": 200, "req_slots": 8,
            "page_size": 1, "schedule_policy": "fcfs", "chunked_prefill_size": 64,
            "max_prefill_tokens": 16384, "schedule_conservativeness": 1.0,
            "clip_max_new_tokens_estimation": 32}
    reqs2 = [_req(0, 0, _tokens(300, 30), 280, ignore_eos=True),
             _req(1, 0, _tokens(301, 25), 280),
             _req(2, 4, _tokens(302, 20), 40)]
    cases["oom_abort_last_request"] = ([cfg2, *reqs2],
                                       {"SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION": "32"},
                                       {"aborted": 1})
    return cases


def _summary(path: Path) -> dict[str, object]:
    with open(path) as f:
        lines = f.read().splitlines()
    return json.loads(lines[-1])


def _check_expectations(name: str, summary: dict[str, object], expect: dict[str, int]) -> None:
    for key, low in expect.items():
        value = summary.get(key)
        if isinstance(value, bool):
            value = int(value)
        if not isinstance(value, int) or value < low:
            raise SystemExit(f"{name}: summary {key}={value!r}, expected at least {low}; "
                             "the case no longer exercises what it is for")


def record(name: str, workload: Path, ref: Path, python: str, oracle_dir: Path,
           env_extra: dict[str, str], expect: dict[str, int]) -> dict[str, object]:
    env = dict(os.environ, **env_extra)
    tracer = ROOT / "scripts" / "sglang_oracle_trace.py"
    subprocess.run([python, str(tracer), "--oracle-dir", str(oracle_dir), "--workload",
                    str(workload), "--out", str(ref)], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "drive.jsonl"
        subprocess.run([python, str(oracle_dir / "drive.py"), "trace", "--workload",
                        str(workload), "--out", str(plain)], check=True, env=env,
                       stdout=subprocess.DEVNULL)
        a = plain.read_text().splitlines()[:-1]  # drive.py's records before its summary
        b = ref.read_text().splitlines()
        if b[: len(a)] != a:
            raise SystemExit(f"{name}: the tracer's log is not drive.py trace's log")
        truncated = len(b) - 1 > len(a)
    summary = _summary(ref)
    _check_expectations(name, summary, expect)
    summary["drive_py_stopped_early"] = truncated
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("oracle_venv", help="venv built by shared/oracles/sglang/install.sh")
    ap.add_argument("--oracle-dir", default=str(ROOT.parent / "shared" / "oracles" / "sglang"))
    ap.add_argument("--out", default=str(ROOT / "tests" / "conformance" / "sglang"))
    ap.add_argument("--only", nargs="*", help="record these cases only")
    a = ap.parse_args()
    python = str(Path(a.oracle_venv) / "bin" / "python")
    oracle_dir = Path(a.oracle_dir).resolve()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    handmade = hand_built()
    names = list(GEN_CASES) + list(handmade)
    for name in a.only or names:
        workload = out / f"{name}.workload.jsonl"
        ref = out / f"{name}.ref.jsonl"
        if name in GEN_CASES:
            flags, env_extra, expect = GEN_CASES[name]
            subprocess.run([python, str(oracle_dir / "drive.py"), "gen", *flags, "--out",
                            str(workload)], check=True, stdout=subprocess.DEVNULL)
        elif name in handmade:
            records, env_extra, expect = handmade[name]
            with open(workload, "w") as f:
                for rec in records:
                    f.write(json.dumps(rec) + "\n")
        else:
            raise SystemExit(f"unknown case {name!r}; cases: {', '.join(names)}")
        s = record(name, workload, ref, python, oracle_dir, env_extra, expect)
        print(f"{name}: steps {s['steps']}, retractions {s['retractions']} "
              f"(multi-retraction steps {s['multi_retraction_steps']}), aborted {s['aborted']}, "
              f"stalled {s['stalled']}, drive.py stopped early {s['drive_py_stopped_early']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
