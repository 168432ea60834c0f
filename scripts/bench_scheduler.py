#!/usr/bin/env python3
"""Per-step cost of our schedulers against the real ones, same setup, same run.

    python scripts/bench_scheduler.py [--num-reqs 256] [--steps 300]
        [--vllm-oracle ~/oracle-vllm/bin/python] [--sglang-oracle-venv ~/oracle-sglang]

vLLM: `num_reqs` requests with 32-token prompts all decoding (the setup of the oracle's
`drive.py bench`: a pool large enough that nothing is preempted, budget for every request);
we time `schedule()` + `update_from_output()` per step, excluding the fake model, and print
the median and p90 in microseconds. When the vLLM oracle venv exists, the real vLLM v0.32.0
Scheduler is timed on the same setup by `drive.py bench` (with and without log_stats), and the
ratio ours / real is printed (below 1.0: ours is faster).

SGLang: 256 requests decoding (the setup of scripts/bench_sglang.py); ours `schedule()` +
`update_from_output()` against the real SGLang v0.5.22 components driven by the oracle's
`Oracle` (`get_next_batch_to_run()` + `run_batch()`) when the SGLang oracle venv exists.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experiments.conformance.replay import fake_token  # noqa: E402
from schedulers.contract import Request, StepResult  # noqa: E402
from schedulers.vllm import VllmScheduler, VllmSchedulerConfig  # noqa: E402

VLLM_DRIVER = ROOT.parent / "shared" / "oracles" / "vllm" / "drive.py"
DEFAULT_VLLM_ORACLE = Path.home() / "oracle-vllm" / "bin" / "python"
DEFAULT_SGLANG_ORACLE = Path.home() / "oracle-sglang"


def _bench_sglang_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("bench_sglang",
                                                  ROOT / "scripts" / "bench_sglang.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def summarize(samples_us: list[float]) -> dict[str, float]:
    ordered = sorted(samples_us)
    return {
        "median_us": round(statistics.median(ordered), 1),
        "p90_us": round(ordered[int(0.9 * len(ordered))], 1),
    }


def bench_vllm(num_reqs: int, steps: int, prompt_len: int = 32, block_size: int = 16
               ) -> dict[str, float]:
    """Our vLLM scheduler with `num_reqs` requests decoding (the oracle bench's setup)."""
    max_tokens = steps + 200
    blocks_per_req = (prompt_len + max_tokens) // block_size + 2
    sched = VllmScheduler(VllmSchedulerConfig(
        num_blocks=num_reqs * blocks_per_req + 16,
        block_size=block_size,
        max_num_seqs=num_reqs,
        max_num_batched_tokens=max(8192, num_reqs * (prompt_len + block_size)),
        max_model_len=4096,
    ))
    rng = random.Random(0)
    live = {}
    for i in range(num_reqs):
        req = Request(f"r{i}", [rng.randrange(3, 32000) for _ in range(prompt_len)],
                      max_tokens=max_tokens, ignore_eos=True)
        live[req.request_id] = req
        assert sched.add_request(req) is None

    def result_for(plan):  # the fake model, excluded from the timing
        return StepResult({c.request_id: fake_token(c.request_id, live[c.request_id].num_tokens)
                           for c in plan.chunks if c.sample}, 0.0)

    for _ in range(5):
        plan = sched.schedule()
        sched.update_from_output(plan, result_for(plan))
    assert len(sched.running) == num_reqs
    totals = []
    for _ in range(steps):
        t0 = time.perf_counter_ns()
        plan = sched.schedule()
        t1 = time.perf_counter_ns()
        result = result_for(plan)
        t2 = time.perf_counter_ns()
        sched.update_from_output(plan, result)
        t3 = time.perf_counter_ns()
        assert len(plan.chunks) == num_reqs
        totals.append((t1 - t0 + t3 - t2) / 1e3)
    return summarize(totals)


def bench_real_vllm(oracle_python: Path, num_reqs: int, steps: int, log_stats: bool
                    ) -> dict[str, float] | None:
    if not oracle_python.exists() or not VLLM_DRIVER.exists():
        return None
    cmd = [str(oracle_python), str(VLLM_DRIVER), "bench", "--num-reqs", str(num_reqs),
           "--steps", str(steps)]
    if not log_stats:
        cmd.append("--no-log-stats")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                         env={**os.environ, "PYTHONHASHSEED": "0"})
    res = json.loads(out.stdout.strip().splitlines()[-1])
    return {"median_us": res["median_us_schedule_plus_update"],
            "p90_us": res["p90_us_schedule_plus_update"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-reqs", type=int, default=256)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3, help="best median of this many runs")
    ap.add_argument("--vllm-oracle", type=Path, default=DEFAULT_VLLM_ORACLE)
    ap.add_argument("--sglang-oracle-venv", type=Path, default=DEFAULT_SGLANG_ORACLE)
    args = ap.parse_args()

    def best(fn) -> dict[str, float] | None:
        runs = [fn() for _ in range(args.repeats)]
        runs = [r for r in runs if r is not None]
        return min(runs, key=lambda r: r["median_us"]) if runs else None

    rows = [("vllm", "ours", best(lambda: bench_vllm(args.num_reqs, args.steps)))]
    for log_stats in (True, False):
        label = f"real v0.32.0 (log_stats={log_stats})"
        rows.append(("vllm", label, best(
            lambda ls=log_stats: bench_real_vllm(args.vllm_oracle, args.num_reqs, args.steps, ls))))
    sg = _bench_sglang_module()
    sglang_rows = [("sglang", "ours", best(lambda: sg.bench_ours(args.steps)))]
    venv = args.sglang_oracle_venv
    sglang_rows.append(("sglang", "real v0.5.22 components", best(
        lambda: sg.bench_oracle(venv, ROOT.parent / "shared" / "oracles" / "sglang", args.steps)
        if (venv / "bin" / "python").exists() else None)))
    print(f"schedule() + update_from_output() per step, {args.num_reqs} requests decoding, "
          f"{args.steps} steps, best of {args.repeats}")
    print(f"{'scheduler':10s} {'implementation':34s} {'median us':>10s} {'p90 us':>10s}")
    for sched, impl, res in rows:
        if res is None:
            print(f"{sched:10s} {impl:34s} {'(oracle not installed)':>21s}")
        else:
            print(f"{sched:10s} {impl:34s} {res['median_us']:10.1f} {res['p90_us']:10.1f}")
    for sched, impl, res in sglang_rows:
        if res is None:
            print(f"{sched:10s} {impl:34s} {'(oracle not installed)':>21s}")
        else:
            print(f"{sched:10s} {impl:34s} {res['median_us']:10.1f} {res['p90_us']:10.1f}")
    for table in (rows, sglang_rows):
        ours = table[0][2]
        for sched, impl, res in table[1:]:
            if ours and res:
                print(f"{sched} ratio ours / {impl}: "
                      f"{ours['median_us'] / res['median_us']:.3f} (median)")


if __name__ == "__main__":
    main()
