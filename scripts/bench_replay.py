#!/usr/bin/env python3
"""Replay speed of the simulated executor: whole traces through each scheduler.

    python scripts/bench_replay.py [--traces azure_conv,mooncake,synthetic]
        [--schedulers vllm,sglang] [--max-requests N] [--kv-capacity-tokens 8192]
        [--records spool|memory] [--request-rate R] [--repeat 1] [--profile OUT.prof]

For every (scheduler, trace) pair, one child process builds the workload as
`experiments.run` does (the conf/workload/<trace>.yaml group, `max_requests` null: the whole
trace; traces from $SCHEDBENCH_TRACE_DIR, default ../shared/data/traces), replays it on the
sim executor (llama3_8b on h200, roofline) with a KV pool of `--kv-capacity-tokens` slots
(default per trace, small enough that vLLM preempts often), at the trace's load times
RATE_SCALE and with max_model_len MAX_MODEL_LEN (both per trace, below), and reports:

`--traces synthetic` replays `--max-requests` (default 10,000) synthetic requests at
`--request-rate` (default 8/s). `--records spool` (default) measures what experiments.run
does: requests built as the clock reaches them, records streamed to parquet in a temporary
folder, the summary computed from the files; `--records memory` builds every request and
keeps the tables in memory (its digest compares with earlier versions of the harness).

    requests/s   simulated requests per wall second of the replay: Engine.run, with (spool)
                 the requests built as the clock reaches them and the records written to
                 parquet; importing libraries and composing the config are not counted; and
                 per CPU second
    summary s    wall seconds to compute summary.json's metrics from the records afterwards
    peak RSS     the child's peak resident memory (resource.getrusage ru_maxrss), MiB
    evictions    preemptions (vLLM) / retractions (SGLang) in the run
    rejected     requests refused (a prompt the pool or the context length cannot hold)
    digest       sha256 of the request and step tables' values (Arrow IPC of each table in
                 one chunk; spool: the parquet files read back): equal digests mean the
                 same results to the byte, however the rows were batched

A child per pair keeps one replay's memory out of the next one's peak. `--repeat K` replays
each pair K times (fresh children) and reports the median rate and whether every digest
agreed. `--profile` runs one pair in this process under cProfile instead.
"""

from __future__ import annotations

import argparse
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

import experiments  # noqa: E402, F401  (first: SCHEDBENCH_CORE=compiled installs its finder)
from experiments.results.record_source import table_digest  # noqa: E402
from schedulers import registry  # noqa: E402

DEFAULT_TRACE_DIR = ROOT.parent / "shared" / "data" / "traces"
TRACES = ("azure_conv", "mooncake")
# KV pool per trace, small enough that vLLM preempts often (Azure conv: prompts ~1.2k tokens;
# Mooncake: ~15k, up to the 32k input cap).
DEFAULT_KV_CAPACITY = {"azure_conv": 8192, "mooncake": 32768}
SCHEDULERS = registry.names()  # every scheduler of the registry (vllm, sglang)
# `--traces synthetic`: conf/workload/synthetic.yaml (lognormal lengths, mean 512 in / 256
# out) with N = --max-requests requests at a rate both schedulers keep up with on the
# default pool, so the number of live requests stays bounded however long the replay.
# Load per trace (workload.rate_scale): at the recorded load Mooncake's long prompts rarely
# overlap on a simulated H200; at 16x they queue and vLLM preempts (tens of times: outputs are
# short next to the prompts, so decode growth seldom outruns the pool; SGLang's reservation
# never has to retract). Azure conv at 1x is the eviction-heavy case.
RATE_SCALE = {"azure_conv": 1.0, "mooncake": 16.0}
# Context length per trace (max_model_len for both schedulers): every prompt the pool can hold.
MAX_MODEL_LEN = {"azure_conv": 8192, "mooncake": 32768}
DEFAULT_SYNTHETIC_REQUESTS = 10_000
DEFAULT_SYNTHETIC_RATE = 8.0


def compose(scheduler: str, trace: str, max_requests: int | None,
            kv_capacity_tokens: int, request_rate: float | None = None) -> Any:
    """The run config of `experiments.run` for this pair (Hydra compose, no job folder)."""
    from experiments.run.config import compose_run_config

    os.environ.setdefault("SCHEDBENCH_TRACE_DIR", str(DEFAULT_TRACE_DIR))
    overrides = [f"scheduler={scheduler}", f"workload={trace}", "executor=sim",
                 f"kv_capacity_tokens={kv_capacity_tokens}", "progress=off"]
    if trace == "synthetic":
        overrides.append(f"workload.num_requests={max_requests or DEFAULT_SYNTHETIC_REQUESTS}")
        overrides.append(f"workload.request_rate={request_rate or DEFAULT_SYNTHETIC_RATE}")
    else:
        overrides.append(
            f"workload.max_requests={'null' if max_requests is None else max_requests}")
        overrides.append(f"workload.rate_scale={RATE_SCALE.get(trace, 1.0)}")
        overrides.append(f"max_model_len={MAX_MODEL_LEN.get(trace, 'null')}")
        if request_rate is not None:
            raise SystemExit("bench_replay: --request-rate is for --traces synthetic")
    return compose_run_config(overrides, str(ROOT / "conf"))


def _replay_memory(cfg: Any, sched: Any, executor: Any) -> dict[str, Any]:
    """Today's in-memory path: the whole workload as a list, tables built at the end."""
    from engines.engine import Engine
    from experiments.inputs.workloads import build_workload
    from experiments.run.build import as_dict

    requests = build_workload(as_dict(cfg.workload), int(cfg.seed))
    w0, c0 = time.perf_counter(), time.process_time()
    result = Engine(sched, executor, requests).run()
    reqs, steps = result.requests, result.steps
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    reasons = reqs.column("finish_reason").to_pylist()
    return {"requests": len(requests), "steps": result.num_steps,
            "evictions": int(sum(reqs.column("num_preemptions").to_pylist())),
            "rejected": sum(1 for r in reasons if r.startswith("rejected")),
            "sim_duration_s": result.duration_s, "wall_s": wall, "cpu_s": cpu,
            "summary_s": 0.0, "digest": table_digest(reqs, steps)}


def _replay_spool(cfg: Any, sched: Any, executor: Any) -> dict[str, Any]:
    """What experiments.run does: a lazy workload, records spooled to parquet, the summary
    computed from the files."""
    import tempfile

    import pyarrow.parquet as pq

    from engines.engine import Engine
    from engines.records import Recorder
    from experiments.inputs.workloads import stream_workload
    from experiments.results.metrics import compute_metrics_from_files
    from experiments.run.build import as_dict

    stream = stream_workload(as_dict(cfg.workload), int(cfg.seed))
    with tempfile.TemporaryDirectory(prefix="bench_replay.") as d:
        spool = (Path(d) / "requests.parquet", Path(d) / "steps.parquet")
        w0, c0 = time.perf_counter(), time.process_time()
        result = Engine(sched, executor, stream, recorder=Recorder(spool=spool)).run()
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        m = compute_metrics_from_files(*spool)
        summary_s = time.perf_counter() - w0 - wall
        rss_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # before the read-back
        return {"rss_peak": rss_peak, "requests": len(stream), "steps": result.num_steps,
                "evictions": int(m["num_preemptions"]),
                "rejected": int(m["rejected"]) + int(m["rejected_503"]),
                "sim_duration_s": result.duration_s, "wall_s": wall, "cpu_s": cpu,
                "summary_s": summary_s,
                "digest": table_digest(*(pq.read_table(p) for p in spool))}


def replay_once(scheduler: str, trace: str, max_requests: int | None,
                kv_capacity_tokens: int, records: str = "spool",
                request_rate: float | None = None) -> dict[str, Any]:
    """Build and replay one pair in this process; the measurements as a dict.

    `records`: "spool" (as experiments.run: lazy requests, parquet spool, metrics from the
    files; digest of the files) or "memory" (the whole list, in-memory tables; digest of the
    tables, comparable across versions)."""
    from experiments.run.build import (
        build_executor,
        build_hardware,
        build_model,
        build_scheduler,
        job_context_length,
    )

    cfg = compose(scheduler, trace, max_requests, kv_capacity_tokens, request_rate)
    model = build_model(cfg.model)
    ctx = job_context_length(cfg, model.max_position_embeddings, None)  # as experiments.run
    hardware = build_hardware(cfg.hardware)
    sched = build_scheduler(cfg.scheduler, kv_capacity_tokens, ctx.value, hardware.device)
    executor = build_executor(cfg.executor, model, hardware,
                              num_slots=kv_capacity_tokens + sched.page_size)
    # Arrow loads its pandas shim on first use (~0.4 s): once per process, not replay work.
    import pyarrow as pa

    pa.array([0.0]).to_pandas()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    run = _replay_spool if records == "spool" else _replay_memory
    row = run(cfg, sched, executor)
    wall, cpu = row["wall_s"], row["cpu_s"]
    rss_peak = row.get("rss_peak", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    n = row["requests"]
    return {
        "scheduler": scheduler,
        "trace": trace,
        "records": records,
        "requests": n,
        "steps": row["steps"],
        "evictions": row["evictions"],
        "rejected": row["rejected"],
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "summary_s": round(row["summary_s"], 3),
        "req_per_wall_s": round(n / wall, 1),
        "req_per_cpu_s": round(n / cpu, 1),
        "peak_rss_mib": round(rss_peak / 1024, 1),
        "rss_before_replay_mib": round(rss_before / 1024, 1),
        "sim_duration_s": round(row["sim_duration_s"], 3),
        "digest": row["digest"],
    }


def run_child(scheduler: str, trace: str, max_requests: int | None,
              kv_capacity_tokens: int, records: str = "spool",
              request_rate: float | None = None) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", "--schedulers", scheduler, "--traces", trace,
           "--kv-capacity-tokens", str(kv_capacity_tokens), "--records", records]
    if max_requests is not None:
        cmd += ["--max-requests", str(max_requests)]
    if request_rate is not None:
        cmd += ["--request-rate", str(request_rate)]
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
    ap.add_argument("--records", choices=("spool", "memory"), default="spool",
                    help="spool: as experiments.run (lazy requests, records streamed to "
                         "parquet, metrics from the files); memory: all requests and "
                         "tables in memory (digests comparable across versions)")
    ap.add_argument("--request-rate", type=float, default=None,
                    help=f"requests/s of --traces synthetic (default {DEFAULT_SYNTHETIC_RATE})")
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
        print(json.dumps(replay_once(scheds[0], traces[0], args.max_requests, kv(traces[0]),
                                     args.records, args.request_rate)))
        return 0
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        row = replay_once(scheds[0], traces[0], args.max_requests, kv(traces[0]),
                                     args.records, args.request_rate)
        prof.disable()
        prof.dump_stats(args.profile)
        print(json.dumps(row))
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        return 0

    rows: list[dict[str, Any]] = []
    print(f"{'trace':<11} {'scheduler':<7} {'requests':>8} {'steps':>8} {'evict':>7} "
          f"{'rej':>5} {'req/wall s':>10} {'req/cpu s':>10} {'summary s':>9} "
          f"{'peak MiB':>9}  same")
    for trace in traces:
        for sched in scheds:
            runs = [run_child(sched, trace, args.max_requests, kv(trace), args.records,
                              args.request_rate)
                    for _ in range(args.repeat)]
            row = dict(runs[0])
            row["req_per_wall_s"] = statistics.median(r["req_per_wall_s"] for r in runs)
            row["req_per_cpu_s"] = statistics.median(r["req_per_cpu_s"] for r in runs)
            row["peak_rss_mib"] = max(r["peak_rss_mib"] for r in runs)
            row["same_digest"] = len({r["digest"] for r in runs}) == 1
            rows.append(row)
            print(f"{trace:<11} {sched:<7} {row['requests']:>8} {row['steps']:>8} "
                  f"{row['evictions']:>7} {row['rejected']:>5} {row['req_per_wall_s']:>10.0f} "
                  f"{row['req_per_cpu_s']:>10.0f} {row['summary_s']:>9.1f} "
                  f"{row['peak_rss_mib']:>9.1f}  "
                  f"{'yes' if row['same_digest'] else 'NO'}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if all(r["same_digest"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
