#!/usr/bin/env python3
"""Replay speed of the simulated executor: whole traces through each scheduler.

    python scripts/bench_replay.py [--traces azure_conv,mooncake] [--schedulers vllm,sglang]
        [--max-requests N] [--kv-capacity-tokens 8192] [--repeat 1] [--profile OUT.prof]

For every (scheduler, trace) pair, one child process builds the workload as
`experiments.run` does (the conf/workload/<trace>.yaml group, `max_requests` null: the whole
trace; traces from $SCHEDBENCH_TRACE_DIR, default ../shared/data/traces), replays it on the
sim executor (llama3_8b on h200, roofline) with a KV pool of `--kv-capacity-tokens` slots
(default per trace, small enough that vLLM preempts often), at the trace's load times
RATE_SCALE and with max_model_len MAX_MODEL_LEN (both per trace, below), and reports:

    requests/s   simulated requests per wall second of the replay (Engine.run, tables
                 included; building the workload and importing libraries are not counted),
                 and per CPU second
    peak RSS     the child's peak resident memory (resource.getrusage ru_maxrss), MiB
    evictions    preemptions (vLLM) / retractions (SGLang) in the run
    rejected     requests refused (a prompt the pool or the context length cannot hold)
    digest       sha256 of the request and step tables (Arrow IPC): equal digests on a rerun
                 mean the same results to the byte

A child per pair keeps one replay's memory out of the next one's peak. `--repeat K` replays
each pair K times (fresh children) and reports the median rate and whether every digest
agreed. `--profile` runs one pair in this process under cProfile instead.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_TRACE_DIR = ROOT.parent / "shared" / "data" / "traces"
TRACES = ("azure_conv", "mooncake")
# KV pool per trace, small enough that vLLM preempts often (Azure conv: prompts ~1.2k tokens;
# Mooncake: ~15k, up to the 32k input cap).
DEFAULT_KV_CAPACITY = {"azure_conv": 8192, "mooncake": 32768}
SCHEDULERS = ("vllm", "sglang")
# Load per trace (workload.rate_scale): at the recorded load Mooncake's long prompts rarely
# overlap on a simulated H200; at 16x they queue and vLLM preempts (tens of times: outputs are
# short next to the prompts, so decode growth seldom outruns the pool; SGLang's reservation
# never has to retract). Azure conv at 1x is the eviction-heavy case.
RATE_SCALE = {"azure_conv": 1.0, "mooncake": 16.0}
# Context length per trace (max_model_len for both schedulers): every prompt the pool can hold.
MAX_MODEL_LEN = {"azure_conv": 8192, "mooncake": 32768}


def compose(scheduler: str, trace: str, max_requests: int | None,
            kv_capacity_tokens: int) -> Any:
    """The run config of `experiments.run` for this pair (Hydra compose, no job folder)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from experiments.config import register_configs

    register_configs()
    os.environ.setdefault("SCHEDBENCH_TRACE_DIR", str(DEFAULT_TRACE_DIR))
    overrides = [f"scheduler={scheduler}", f"workload={trace}", "executor=sim",
                 f"workload.rate_scale={RATE_SCALE.get(trace, 1.0)}",
                 f"max_model_len={MAX_MODEL_LEN.get(trace, 'null')}",
                 f"workload.max_requests={'null' if max_requests is None else max_requests}",
                 f"kv_capacity_tokens={kv_capacity_tokens}", "progress=off"]
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        return hydra_compose(config_name="config", overrides=overrides)


def table_digest(*tables: Any) -> str:
    """sha256 over the tables' Arrow IPC stream bytes."""
    import pyarrow as pa

    h = hashlib.sha256()
    for t in tables:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, t.schema) as w:
            w.write_table(t)
        h.update(sink.getvalue().to_pybytes())
    return h.hexdigest()


def replay_once(scheduler: str, trace: str, max_requests: int | None,
                kv_capacity_tokens: int) -> dict[str, Any]:
    """Build and replay one pair in this process; the measurements as a dict."""
    from engines.engine import Engine
    from experiments.build import (
        as_dict,
        build_executor,
        build_hardware,
        build_model,
        build_scheduler,
    )
    from experiments.workloads import build_workload

    cfg = compose(scheduler, trace, max_requests, kv_capacity_tokens)
    requests = build_workload(as_dict(cfg.workload), int(cfg.seed))
    max_len = cfg.get("max_model_len")
    sched = build_scheduler(cfg.scheduler, kv_capacity_tokens,
                            int(max_len) if max_len is not None else None)
    executor = build_executor(cfg.executor, build_model(cfg.model), build_hardware(cfg.hardware),
                              num_slots=kv_capacity_tokens + sched.page_size)
    # Arrow loads its pandas shim on first use (~0.4 s): once per process, not replay work.
    import pyarrow as pa

    pa.array([0.0]).to_pandas()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    w0, c0 = time.perf_counter(), time.process_time()
    result = Engine(sched, executor, requests).run()
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    rss_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    n = len(requests)
    preempt = result.requests.column("num_preemptions").to_pylist()
    return {
        "scheduler": scheduler,
        "trace": trace,
        "requests": n,
        "steps": result.num_steps,
        "evictions": int(sum(preempt)),
        "rejected": sum(1 for r in result.requests.column("finish_reason").to_pylist()
                        if r.startswith("rejected")),
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "req_per_wall_s": round(n / wall, 1),
        "req_per_cpu_s": round(n / cpu, 1),
        "peak_rss_mib": round(rss_peak / 1024, 1),
        "rss_before_replay_mib": round(rss_before / 1024, 1),
        "sim_duration_s": round(result.duration_s, 3),
        "digest": table_digest(result.requests, result.steps),
    }


def run_child(scheduler: str, trace: str, max_requests: int | None,
              kv_capacity_tokens: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", "--schedulers", scheduler, "--traces", trace,
           "--kv-capacity-tokens", str(kv_capacity_tokens)]
    if max_requests is not None:
        cmd += ["--max-requests", str(max_requests)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        raise SystemExit(f"bench_replay: {scheduler} on {trace} failed (exit {out.returncode})")
    out_line: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return out_line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces", default=",".join(TRACES))
    ap.add_argument("--schedulers", default=",".join(SCHEDULERS))
    ap.add_argument("--max-requests", type=int, default=None,
                    help="the first N requests of each trace (default: all)")
    ap.add_argument("--kv-capacity-tokens", type=int, default=None,
                    help="KV slots (default per trace: " + ", ".join(
                        f"{k} {v}" for k, v in DEFAULT_KV_CAPACITY.items()) + ")")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--profile", default=None, help="cProfile one pair in-process to this file")
    ap.add_argument("--json", default=None, help="also write the rows to this file")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    traces = [t for t in args.traces.split(",") if t]
    scheds = [s for s in args.schedulers.split(",") if s]

    def kv(trace: str) -> int:
        return int(args.kv_capacity_tokens or DEFAULT_KV_CAPACITY.get(trace, 16384))

    if args.child:
        print(json.dumps(replay_once(scheds[0], traces[0], args.max_requests, kv(traces[0]))))
        return 0
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        row = replay_once(scheds[0], traces[0], args.max_requests, kv(traces[0]))
        prof.disable()
        prof.dump_stats(args.profile)
        print(json.dumps(row))
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        return 0

    rows: list[dict[str, Any]] = []
    print(f"{'trace':<11} {'scheduler':<7} {'requests':>8} {'steps':>8} {'evict':>7} {'rej':>5} "
          f"{'req/wall s':>10} {'req/cpu s':>10} {'peak MiB':>9}  same")
    for trace in traces:
        for sched in scheds:
            runs = [run_child(sched, trace, args.max_requests, kv(trace))
                    for _ in range(args.repeat)]
            row = dict(runs[0])
            row["req_per_wall_s"] = statistics.median(r["req_per_wall_s"] for r in runs)
            row["req_per_cpu_s"] = statistics.median(r["req_per_cpu_s"] for r in runs)
            row["peak_rss_mib"] = max(r["peak_rss_mib"] for r in runs)
            row["same_digest"] = len({r["digest"] for r in runs}) == 1
            rows.append(row)
            print(f"{trace:<11} {sched:<7} {row['requests']:>8} {row['steps']:>8} "
                  f"{row['evictions']:>7} {row['rejected']:>5} {row['req_per_wall_s']:>10.0f} "
                  f"{row['req_per_cpu_s']:>10.0f} {row['peak_rss_mib']:>9.1f}  "
                  f"{'yes' if row['same_digest'] else 'NO'}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if all(r["same_digest"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
