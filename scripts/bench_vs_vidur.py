#!/usr/bin/env python3
"""Whole-run replay time against Vidur 0.0.26 on the same work (issue 16).

    python scripts/bench_vs_vidur.py [--rounds 3] [--schedulers vllm,sglang]
        [--cores python,compiled] [--loops sync,pipelined] [--max-requests N] [--out DIR]
        [--startup]
        [--baseline OLD_CHECKOUT] [--vidur VENV_OR_PYTHON [--vidur-dir DIR]] [--json F]

The workload: the 19,366 (prompt, output) pairs of the Azure 2023 conversation trace
($SCHEDBENCH_TRACE_DIR/azure2023/AzureLLMInferenceTrace_conv.csv, in file order; Vidur ships
the same pairs as data/processed_traces/splitwise_conv.csv) as Vidur 0.0.26's
`TraceRequestLengthGenerator` and `PoissonRequestIntervalGenerator` turn them into requests
with their defaults (seed 42, max_tokens 4,096, qps 5.5):
- the clip: a pair whose prompt + output exceeds 4,096 loses the excess from both sides in
  proportion (each side minus ceil(excess x its share)), then each side is at least 1;
- the order: `DataFrame.sample(frac=1, random_state=42)` (this script makes the same pandas
  call on the same frame);
- the arrivals: `random.seed(42)`, then per request an exponential gap at 5.5 req/s
  (`-log(1 - random.random()) / 5.5`) capped at 3 / 5.5 s, summed.
They are written as an Azure-format CSV (`<out>/vidur_conv_pairs.csv`, stamps to the
microsecond; our replay counts time from the first arrival, Vidur from 0) and replayed by
`python -m experiments.run` as a user would (whole process: imports, Hydra, the job folder
with requests.parquet, steps.parquet, summary.json) with: workload=azure_conv on that file,
model=llama2_7b, hardware=a100_80g, executor=sim (roofline), kv_capacity_tokens=16384, the
context 4,096, pages of 16 tokens for both (vLLM block_size, SGLang page_size;
`--sglang-page-size 1` for SGLang's own default) and a batch
cap of 128 (vLLM max_num_seqs, SGLang max_running_requests).

Each scheduler runs in the engine loops `--loops` names, each given by its override (never the
config's default, so a figure says which loop it is for whatever the default is):
- `sync`, the synchronous loops (vLLM `scheduler.async_scheduling=false`, `EngineCore.step`;
  SGLang `scheduler.disable_overlap_schedule=true`, `event_loop_normal`); rounds named
  `vllm`, `sglang`;
- `pipelined`, the loops a plain server runs (vLLM `scheduler.async_scheduling=true`,
  AsyncScheduler with a batch queue of two; SGLang `scheduler.disable_overlap_schedule=false`,
  `event_loop_overlap`); rounds named `vllm-async`, `sglang-overlap`, and the ratio of each
  to the synchronous loop's median is printed.

Per round and scheduler it prints the process's wall seconds, its peak RSS (os.wait4), the
number of steps and evictions (from summary.json) and a digest of the records (sha256 over
requests.parquet and steps.parquet read back as Arrow tables: equal digests, same records);
then the medians (peak RSS: a small launcher forks each command, so the figure is the
command's own). `--startup` also times a one-request run (the fixed cost of a job). Each
scheduler runs on the Python sources (`vllm`) and on the compiled core (`vllm+c`,
SCHEDBENCH_CORE=compiled after `make compiled`), and their records must be equal.

With `--vidur` (a virtual environment folder or a python executable where vidur 0.0.26 is
installed; Vidur is never a dependency of this project) every round also runs
`python -m vidur.main` (in `--vidur-dir`, default the output folder) on the same pairs, as a
trace file in Vidur's format with its own clip (max_tokens 4,096), shuffle (seed 42) and
Poisson generator (qps 5.5), and the ratio ours / Vidur is printed. Vidur 0.0.26 fetches its
profiles from Hugging Face datasets (`snapshot_download` of its
`--*_execution_time_predictor_config_model_profiling_dataset`): it needs them in its cache or
a network. The pairs and arrivals written here were checked equal, pair for pair and to the
bit, to what vidur 0.0.26's own TraceRequestLengthGenerator(max_tokens=4096) and
PoissonRequestIntervalGenerator(qps=5.5) produce after set_seeds(42) from
data/processed_traces/splitwise_conv.csv (the same 19,366 pairs as the Azure CSV).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import os
import random
import statistics
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE_DIR = ROOT.parent / "shared" / "data" / "traces"
AZURE_CONV = "azure2023/AzureLLMInferenceTrace_conv.csv"
# Vidur 0.0.26 defaults (vidur/config/config.py) and the load.
VIDUR_SEED = 42
VIDUR_MAX_TOKENS = 4096
QPS = 5.5
KV_TOKENS = 16384
PAGE = 16
BATCH_CAP = 128
# The override that selects each engine loop, per scheduler, and the suffix of its rounds' names.
LOOP_OVERRIDES = {
    "sync": {"vllm": "scheduler.async_scheduling=false",
             "sglang": "scheduler.disable_overlap_schedule=true"},
    "pipelined": {"vllm": "scheduler.async_scheduling=true",
                  "sglang": "scheduler.disable_overlap_schedule=false"},
}
LOOP_NAMES = {"sync": {"vllm": "vllm", "sglang": "sglang"},
              "pipelined": {"vllm": "vllm-async", "sglang": "sglang-overlap"}}
SUMMARY_VOLATILE = ("git_commit", "git_dirty", "workload_file", "config_hash", "overrides",
                    "core", "core_build")


def vidur_pairs(trace: Path) -> list[tuple[int, int]]:
    """The trace's (prompt, output) pairs clipped and shuffled as Vidur 0.0.26 does."""
    import numpy as np
    import pandas as pd

    with open(trace, newline="") as f:
        rows = list(csv.DictReader(f))
    df = pd.DataFrame({"num_prefill_tokens": [int(r["ContextTokens"]) for r in rows],
                       "num_decode_tokens": [int(r["GeneratedTokens"]) for r in rows]})
    # mirrors vidur/request_generator/trace_request_length_generator.py (scale factors 1)
    total = df["num_prefill_tokens"] + df["num_decode_tokens"]
    diff = (total - VIDUR_MAX_TOKENS).clip(lower=0)
    p_ratio = df["num_prefill_tokens"] / total
    d_ratio = df["num_decode_tokens"] / total
    df["num_prefill_tokens"] -= np.ceil(diff * p_ratio).astype(int)
    df["num_decode_tokens"] -= np.ceil(diff * d_ratio).astype(int)
    df["num_prefill_tokens"] = df["num_prefill_tokens"].clip(lower=1)
    df["num_decode_tokens"] = df["num_decode_tokens"].clip(lower=1)
    df = df.sample(frac=1, random_state=VIDUR_SEED)
    return list(zip(df["num_prefill_tokens"].tolist(), df["num_decode_tokens"].tolist(),
                    strict=True))


def vidur_arrivals(n: int) -> list[float]:
    """Vidur 0.0.26's Poisson arrivals (PoissonRequestIntervalGenerator, seed 42)."""
    random.seed(VIDUR_SEED)
    cap = 3.0 / QPS
    t, out = 0.0, []
    for _ in range(n):
        t += min(-math.log(1.0 - random.random()) / QPS, cap)
        out.append(t)
    return out


def write_workload(out: Path, max_requests: int | None) -> tuple[Path, Path, int]:
    """The Azure-format CSV our replay reads and the Vidur-format one; the request count."""
    trace_dir = Path(os.environ.get("SCHEDBENCH_TRACE_DIR", DEFAULT_TRACE_DIR))
    pairs = vidur_pairs(trace_dir / AZURE_CONV)[:max_requests]
    times = vidur_arrivals(len(pairs))
    out.mkdir(parents=True, exist_ok=True)
    ours, theirs = out / "vidur_conv_pairs.csv", out / "vidur_conv_pairs_vidur.csv"
    t0 = datetime(2023, 11, 16)
    with open(ours, "w") as f:
        f.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        for t, (p, d) in zip(times, pairs, strict=True):
            f.write(f"{(t0 + timedelta(seconds=t)).isoformat(' ', 'microseconds')},{p},{d}\n")
    with open(theirs, "w") as f:
        f.write("arrived_at,num_prefill_tokens,num_decode_tokens\n")
        for t, (p, d) in zip(times, pairs, strict=True):
            f.write(f"{t!r},{p},{d}\n")
    return ours, theirs, len(pairs)


def our_command(scheduler: str, pairs: Path, job_dir: Path, max_requests: int | None,
                sglang_page_size: int = PAGE, loop: str = "sync") -> list[str]:
    """`python -m experiments.run` for one of our schedulers on the pairs, in the engine loop
    `loop` (`LOOP_OVERRIDES`: sync or pipelined)."""
    cap = ([f"scheduler.block_size={PAGE}", f"scheduler.max_num_seqs={BATCH_CAP}"]
           if scheduler == "vllm" else
           [f"scheduler.page_size={sglang_page_size}",
            f"scheduler.max_running_requests={BATCH_CAP}"])
    return [sys.executable, "-m", "experiments.run", f"scheduler={scheduler}",
            "workload=azure_conv", f"workload.file={pairs}",
            f"workload.max_requests={'null' if max_requests is None else max_requests}",
            "model=llama2_7b", "hardware=a100_80g", "executor=sim",
            f"kv_capacity_tokens={KV_TOKENS}", f"max_model_len={VIDUR_MAX_TOKENS}",
            "progress=off", "logger=none", f"hydra.run.dir={job_dir}", *cap,
            LOOP_OVERRIDES[loop][scheduler]]


def vidur_command(python: str, pairs: Path, out: Path, num_requests: int) -> list[str]:
    """`python -m vidur.main` on the same pairs, load and cluster (Vidur's flag names)."""
    return [python, "-m", "vidur.main",
            "--replica_config_model_name", "meta-llama/Llama-2-7b-hf",
            "--replica_config_device", "a100",
            "--cluster_config_num_replicas", "1",
            "--replica_config_tensor_parallel_size", "1",
            "--replica_config_num_pipeline_stages", "1",
            "--request_generator_config_type", "synthetic",
            "--synthetic_request_generator_config_num_requests", str(num_requests),
            "--length_generator_config_type", "trace",
            "--trace_request_length_generator_config_max_tokens", str(VIDUR_MAX_TOKENS),
            "--trace_request_length_generator_config_trace_file", str(pairs),
            "--interval_generator_config_type", "poisson",
            "--poisson_request_interval_generator_config_qps", str(QPS),
            "--replica_scheduler_config_type", "vllm",
            "--vllm_scheduler_config_batch_size_cap", str(BATCH_CAP),
            "--cache_config_block_size", str(PAGE),
            "--cache_config_num_blocks", str(KV_TOKENS // PAGE),
            "--metrics_config_output_dir", str(out)]


# A small launcher forks the measured command and reports its wall time and peak RSS: a
# child forked from this process would start with (and report) this process's peak.
_LAUNCHER = """
import os, sys, time
w0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, 1)
    os.execvp(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
wall = time.perf_counter() - w0
print(wall, usage.ru_maxrss, os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime)
"""


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, float]:
    """Run `cmd` to completion: wall seconds, its peak RSS (MiB), its CPU seconds (user +
    system: steadier than wall time on a shared machine)."""
    p = subprocess.run([sys.executable, "-S", "-c", _LAUNCHER, *cmd], cwd=cwd, env=env,
                       capture_output=True, text=True)
    wall_s, maxrss_kib, rc, cpu_s = p.stdout.split()
    if int(rc) != 0 or p.returncode != 0:
        sys.stderr.write(p.stderr[-4000:])
        raise SystemExit(f"bench_vs_vidur: {' '.join(cmd[:4])}... failed (exit {rc})")
    return float(wall_s), int(maxrss_kib) / 1024, float(cpu_s)


def record_digest(job_dir: Path) -> str:
    """sha256 over requests.parquet and steps.parquet read back (Arrow IPC stream bytes)."""
    import pyarrow.parquet as pq

    from experiments.results.record_source import table_digest

    return table_digest(*(pq.read_table(job_dir / name)
                          for name in ("requests.parquet", "steps.parquet")))


def summary_digest(summary: dict[str, Any]) -> str:
    """sha256 of summary.json's figures (sorted JSON), less the git state, the file path and
    the overrides naming it."""
    kept = {k: v for k, v in summary.items() if k not in SUMMARY_VOLATILE}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()


def our_round(scheduler: str, pairs: Path, job_dir: Path, max_requests: int | None,
              env: dict[str, str], root: Path = ROOT, sglang_page_size: int = PAGE,
              loop: str = "sync") -> dict[str, Any]:
    wall, rss, cpu = timed(our_command(scheduler, pairs, job_dir, max_requests,
                                       sglang_page_size, loop), root, env)
    s = json.loads((job_dir / "summary.json").read_text())
    return {"who": scheduler, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "peak_rss_mib": round(rss, 1),
            "requests": s.get("completed"), "steps": s.get("num_steps"),
            "evictions": s.get("num_preemptions"), "engine_loop": s.get("engine_loop"),
            "digest": record_digest(job_dir),
            "summary_digest": summary_digest(s)}


def _variant_of(who: str) -> str:
    """The scheduler and loop of a round's name (`LOOP_NAMES`), less the core and the
    checkout: vllm+c@base -> vllm, sglang-overlap+c -> sglang-overlap."""
    return who.split("@")[0].split("+")[0]


def _digests(rows: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(x["digest"], x["summary_digest"]) for x in rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--schedulers", default="vllm,sglang")
    ap.add_argument("--max-requests", type=int, default=None,
                    help="the first N of Vidur's order (default: all 19,366)")
    ap.add_argument("--out", default="/tmp/bench_vs_vidur", help="workload and job folders")
    ap.add_argument("--startup", action="store_true",
                    help="also time a one-request run per scheduler each round")
    ap.add_argument("--vidur", default=None,
                    help="a venv folder (or python executable) with vidur 0.0.26 installed")
    ap.add_argument("--vidur-script", default=None,
                    help="instead of --vidur: an executable run as `SCRIPT OUT TRACE N` that runs "
                         "Vidur on the Vidur-format trace (scripts/vidur_offline/run_vidur.sh: "
                         "Vidur offline, set up by scripts/vidur_offline/setup.sh)")
    ap.add_argument("--vidur-dir", default=None,
                    help="the folder Vidur runs in (its cache); default: --out")
    ap.add_argument("--sglang-page-size", type=int, default=PAGE,
                    help=f"SGLang's page_size (default {PAGE}, as vLLM's block; upstream's "
                         "own default is 1)")
    ap.add_argument("--baseline", default=None,
                    help="another checkout of this project (an older commit, say): its "
                         "schedulers run too, alternated with ours, as <scheduler>@base (and "
                         "<scheduler>+c@base with its own `make compiled` build)")
    ap.add_argument("--cores", default="python,compiled",
                    help="our cores to run (SCHEDBENCH_CORE): python, compiled (`make "
                         "compiled` first) or both; compiled rounds are named <scheduler>+c")
    ap.add_argument("--loops", default="sync,pipelined",
                    help="the engine loops to run (sync, pipelined, or both), each by its "
                         "override; pipelined rounds are named vllm-async, sglang-overlap")
    ap.add_argument("--json", default=None, help="also write every round's row to this file")
    args = ap.parse_args(argv)
    out = Path(args.out).resolve()
    scheds = [s for s in args.schedulers.split(",") if s]
    loops = [x for x in args.loops.split(",") if x]
    bad = sorted(set(loops) - set(LOOP_OVERRIDES))
    if bad or not loops:
        ap.error(f"--loops: unknown {', '.join(bad) or 'none given'} (valid: sync, pipelined)")
    bad = sorted(set(scheds) - set(LOOP_NAMES["sync"]))
    if bad:
        ap.error(f"--schedulers: unknown {', '.join(bad)} (valid: vllm, sglang)")
    pairs, vidur_pairs_csv, n = write_workload(out, args.max_requests)
    env = dict(os.environ)
    env.setdefault("SCHEDBENCH_TRACE_DIR", str(DEFAULT_TRACE_DIR))
    vidur_py = None
    if args.vidur:
        v = Path(args.vidur)
        vidur_py = str(v / "bin" / "python") if v.is_dir() else str(v)
    print(f"workload: {n} requests, Poisson {QPS} req/s, KV {KV_TOKENS} tokens, page {PAGE}, "
          f"batch cap {BATCH_CAP}, llama2_7b on a100_80g ({pairs})", flush=True)
    rows: list[dict[str, Any]] = []
    cores = [c for c in args.cores.split(",") if c]
    bad = sorted(set(cores) - {"python", "compiled"})
    if bad:
        ap.error(f"--cores: unknown {', '.join(bad)} (valid: python, compiled)")
    # who -> (the checkout, SCHEDBENCH_CORE, scheduler, loop)
    roots: dict[str, tuple[Path, str, str, str]] = {}
    checkouts = [(ROOT, "")]
    if args.baseline:  # the same cores of the other checkout (compiled: its own build)
        checkouts.append((Path(args.baseline).resolve(), "@base"))
    for s_ in scheds:
        for loop in loops:
            for root, tag in checkouts:
                for core in cores:
                    name = LOOP_NAMES[loop][s_] + ("" if core == "python" else "+c") + tag
                    roots[name] = (root, core, s_, loop)
    if args.vidur_script and vidur_py:
        ap.error("give --vidur or --vidur-script, not both")
    with_vidur = bool(vidur_py or args.vidur_script)
    everyone = [*roots, "vidur"] if with_vidur else [*roots]
    for r in range(args.rounds):
        for who in everyone:
            if who == "vidur":
                vout = out / f"round{r}" / "vidur"
                cmd = ([str(Path(args.vidur_script).resolve()), str(vout), str(vidur_pairs_csv),
                        str(n)] if args.vidur_script else
                       vidur_command(str(vidur_py), vidur_pairs_csv, vout, n))
                wall, rss, cpu = timed(cmd, Path(args.vidur_dir or out), env)
                row: dict[str, Any] = {"who": "vidur", "wall_s": round(wall, 2),
                                       "cpu_s": round(cpu, 2), "peak_rss_mib": round(rss, 1)}
            else:
                root, core, sched, loop = roots[who]
                env_core = {**env, "SCHEDBENCH_CORE": core}
                row = our_round(sched, pairs, out / f"round{r}" / who, None, env_core, root,
                                args.sglang_page_size, loop)
                row["who"] = who
                if args.startup:
                    sw, _, _ = timed(our_command(sched, pairs, out / f"round{r}" / f"{who}_1",
                                                 1, args.sglang_page_size, loop), root,
                                     env_core)
                    row["startup_s"] = round(sw, 2)
            row["round"] = r
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"{'who':<20} {'median wall s':>13} {'rounds':<24} {'cpu s':>6} {'startup s':>9} "
          f"{'peak MiB':>9} {'steps':>8} {'evict':>6}  same records")
    medians: dict[str, float] = {}
    cpu_medians: dict[str, float] = {}
    for who in everyone:
        mine = [x for x in rows if x["who"] == who]
        medians[who] = statistics.median(x["wall_s"] for x in mine)
        cpu_medians[who] = statistics.median(x["cpu_s"] for x in mine)
        st = [x["startup_s"] for x in mine if "startup_s" in x]
        print(f"{who:<20} {medians[who]:>13.2f} {','.join(str(x['wall_s']) for x in mine):<24} "
              f"{cpu_medians[who]:>6.2f} "
              f"{statistics.median(st) if st else float('nan'):>9.2f} "
              f"{max(x['peak_rss_mib'] for x in mine):>9.1f} {mine[0].get('steps', '')!s:>8} "
              f"{mine[0].get('evictions', '')!s:>6}  "
              f"{'' if who == 'vidur' else len(_digests(mine)) == 1}")
    for name in dict.fromkeys(_variant_of(who) for who in roots):
        variants = [who for who in roots if _variant_of(who) == name]
        same = _digests([x for x in rows if x["who"] in variants])
        if len(variants) > 1:
            print(f"{name}: records and summary equal across {', '.join(variants)}: "
                  f"{len(same) == 1}")
    # The pipelined loop's time against the synchronous loop's, per scheduler, core, checkout
    for who, (_, _, s_, loop) in roots.items():
        sync = who.replace(LOOP_NAMES[loop][s_], LOOP_NAMES["sync"][s_], 1)
        if loop != "sync" and sync in roots:
            print(f"{who} / {sync} = {medians[who] / medians[sync]:.3f} wall, "
                  f"{cpu_medians[who] / cpu_medians[sync]:.3f} cpu")
    if "vidur" in medians:
        for who in roots:
            print(f"{who} / vidur = {medians[who] / medians['vidur']:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
