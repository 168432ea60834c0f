#!/usr/bin/env python3
"""Per-step cost of our SGLang scheduler with 256 running requests decoding, against the real
SGLang components driven the same way.

    .venv/bin/python scripts/bench_sglang.py [--oracle-venv ~/oracle-sglang] [--steps 300]

Both sides get the same workload (256 requests, 128-token prompts, all arriving at once, outputs
long enough that none finishes while timed, a pool large enough that none is retracted), are
run until all 256 decode, then timed per decode step: ours `schedule()` + `update_from_output()`
(the fake executor's sampled-token dict is built outside the timer), the oracle's
`get_next_batch_to_run()` + `run_batch()` (scripts/bench_sglang_oracle.py, run with the oracle's
python). Prints median and p90 in microseconds and the ratio oracle / ours.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from schedulers.contract import Request, StepResult  # noqa: E402
from schedulers.sglang import sglang_scheduler_from_conformance  # noqa: E402

NUM_REQS = 256
PROMPT_LEN = 128
MAX_TOKENS = 2000


def workload(seed: int = 0) -> tuple[dict[str, object], list[dict[str, object]]]:
    rng = random.Random(seed)
    cfg: dict[str, object] = {
        "type": "config", "scheduler": "sglang", "kv_size": 1 << 20, "req_slots": NUM_REQS,
        "page_size": 1, "schedule_policy": "fcfs", "chunked_prefill_size": 8192,
        "max_prefill_tokens": 16384, "schedule_conservativeness": 1.0}
    reqs: list[dict[str, object]] = [
        {"type": "request", "id": f"r{i}", "arrival_step": 0,
         # distinct first tokens: no prefix hits, so prefill batches hold exactly 64 prompts
         # and no request is left mid-chunk holding a row
         "prompt": [3 + i] + [rng.randrange(3, 30000) for _ in range(PROMPT_LEN - 1)],
         "max_tokens": MAX_TOKENS, "priority": 0, "ignore_eos": False}
        for i in range(NUM_REQS)]
    return cfg, reqs


def fake_token(request_id: str, seq_len: int) -> int:
    return 3 + (int(request_id[1:]) * 7919 + seq_len * 104729) % 31000


def bench_ours(steps: int) -> dict[str, float]:
    cfg, reqs = workload()
    s = sglang_scheduler_from_conformance(cfg)
    live: dict[str, Request] = {}
    for r in reqs:
        req = Request(request_id=str(r["id"]), prompt_token_ids=list(r["prompt"]),  # type: ignore[call-overload]
                      max_tokens=int(r["max_tokens"]), eos_token_id=None)  # type: ignore[call-overload]
        assert s.add_request(req) is None
        live[req.request_id] = req

    def one_step() -> tuple[float, int, str]:
        t0 = time.perf_counter()
        plan = s.schedule()
        t1 = time.perf_counter()
        sampled = {c.request_id: fake_token(c.request_id, live[c.request_id].num_tokens)
                   for c in plan.chunks if c.sample}
        result = StepResult(sampled, duration_s=0.0)
        t2 = time.perf_counter()
        s.update_from_output(plan, result)
        t3 = time.perf_counter()
        return (t1 - t0) + (t3 - t2), len(plan.chunks), plan.forward_mode

    for _ in range(100):  # until all of them decode
        _, bs, mode = one_step()
        if mode == "decode" and bs == NUM_REQS:
            break
    else:
        raise SystemExit("the requests did not all reach decoding")
    times = []
    bs = 0
    for _ in range(steps):
        dt, bs, mode = one_step()
        if mode != "decode":
            raise SystemExit("expected a decode step")
        times.append(dt * 1e6)
    times.sort()
    return {"median_us": statistics.median(times), "p90_us": times[int(0.9 * (len(times) - 1))],
            "batch_size": bs, "steps": len(times)}


def bench_oracle(venv: Path, oracle_dir: Path, steps: int) -> dict[str, float]:
    cfg, reqs = workload()
    with tempfile.TemporaryDirectory() as tmp:
        w = Path(tmp) / "bench.workload.jsonl"
        with open(w, "w") as f:
            for rec in [cfg, *reqs]:
                f.write(json.dumps(rec) + "\n")
        out = subprocess.run(
            [str(venv / "bin" / "python"), str(ROOT / "scripts" / "bench_sglang_oracle.py"),
             "--oracle-dir", str(oracle_dir), "--workload", str(w), "--steps", str(steps)],
            check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--oracle-venv", type=Path, help="venv built by shared/oracles/sglang")
    ap.add_argument("--oracle-dir", type=Path,
                    default=ROOT.parent / "shared" / "oracles" / "sglang")
    ap.add_argument("--steps", type=int, default=300)
    a = ap.parse_args()
    ours = bench_ours(a.steps)
    print(f"ours:   median {ours['median_us']:8.1f} us, p90 {ours['p90_us']:8.1f} us per step "
          f"({ours['batch_size']} requests decoding, {ours['steps']} steps)")
    if a.oracle_venv is None:
        return 0
    real = bench_oracle(a.oracle_venv, a.oracle_dir, a.steps)
    print(f"oracle: median {real['median_us']:8.1f} us, p90 {real['p90_us']:8.1f} us per step "
          f"({real['batch_size']} requests decoding, {real['steps']} steps)")
    print(f"ratio oracle / ours: median {real['median_us'] / ours['median_us']:.2f}x, "
          f"p90 {real['p90_us'] / ours['p90_us']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
