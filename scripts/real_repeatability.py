#!/usr/bin/env python3
"""How repeatable is the real-model study under each step timer? (issue 29)

Runs the real-model study's setting (scripts/real_vs_sim.py: `workload=smollm2_prompts`,
`model=smollm2_135m`, Poisson arrivals, a small KV pool, SGLang's optimistic admission
overrides) on the real executor only, `--repeats` times with each timer of `--timers`
(`name` or `name:k`, e.g. `cpu min_of_k:3 reference:3`; reference's unit is measured
once and pinned for every run, or given with `--reference-s`), the timers interleaved
(repetition 1 of every timer, then repetition 2, ...) so that a change in the machine's
load falls on all of them alike. `--load N` starts N processes spinning on a core for the
whole study (the "loaded" condition; the machine's own other work comes on top). Prints,
and writes under `--out` (`repeatability.md`, `repeatability.csv`, runs in `runs/`,
ignored by git): per timer,
scheduler and statistic, every repetition's value, the median, and the spread
(max - min) / median in percent (evictions: also max - min as a count), with the
each run's wall time and the load average at its end.

    python scripts/real_repeatability.py [--timers cpu min_of_k:3] [--repeats 4]
        [--schedulers vllm sglang] [--num-requests 32] [--rate 2] [--max-tokens 128]
        [--kv 512] [--load 0] [--out /tmp/real_repeatability]

`--summarize FOLDER` prints the table of an earlier study's runs without running anything.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

# summary.json key, label: the statistics of the study (scripts/real_vs_sim.py STATS).
STATS = (
    ("request_throughput", "request throughput (req/s)"),
    ("median_ttft_ms", "median TTFT (ms)"),
    ("p99_ttft_ms", "p99 TTFT (ms)"),
    ("median_e2el_ms", "median E2E (ms)"),
    ("p99_e2el_ms", "p99 E2E (ms)"),
    ("num_preemptions", "evictions"),
    ("median_e2el_victim_ms", "victims' median E2E (ms)"),
)
# The study's SGLang: conf/scheduler/sglang_optimistic.yaml, the settings of
# scripts/real_vs_sim.py --sglang (retractions in a short run); summaries still name it sglang.
SCHEDULER_CONFIG = {"sglang": "sglang_optimistic"}
GOAL_PCT = 5.0  # issue 29: every statistic within 5 % across repetitions
GOAL_EVICTIONS = 2  # and evictions within 2 of each other


def parse_timer(text: str) -> tuple[str, int]:
    """`name` or `name:k` -> (name, k); k is 1 but for min_of_k (default 3)."""
    name, _, k = text.partition(":")
    if name not in ("wall", "cpu", "min_of_k", "reference"):
        raise SystemExit(f"real_repeatability: --timers {text!r}: valid: wall, cpu, "
                         "min_of_k[:k], reference[:k]")
    if k and not k.isdigit():
        raise SystemExit(f"real_repeatability: --timers {text!r}: k must be an integer")
    return name, int(k) if k else (3 if name in REPEATED else 1)


REPEATED = ("min_of_k", "reference")


def label(name: str, k: int) -> str:
    return f"{name}:{k}" if name in REPEATED else name


def reference_unit(threads: int) -> float:
    """The reference step's time on this machine now (timer=reference's unit), measured once
    so that every run of the study shares it."""
    import torch

    from engines.executors.real import RealExecutor
    from engines.model import PagedDecoder

    torch.set_num_threads(threads)
    model = PagedDecoder.from_pretrained(ROOT / "models/smollm2-135m-instruct",
                                         dtype="float32", device="cpu")
    unit = RealExecutor(model, kernel="torch", timer="reference").timer.reference_s
    assert unit is not None
    return unit


def run_one(args: argparse.Namespace, sched: str, timer: tuple[str, int], rep: int,
            out: Path) -> dict[str, Any]:
    """One real run through `python -m experiments.run` into `out`; its summary.json."""
    overrides = [f"workload.num_requests={args.num_requests}",
                 f"workload.request_rate={args.rate}", f"workload.max_tokens={args.max_tokens}",
                 f"kv_capacity_tokens={args.kv}", f"seed={args.seed}", "model=smollm2_135m",
                 "workload=smollm2_prompts", "progress=off",
                 f"scheduler={SCHEDULER_CONFIG.get(sched, sched)}", "executor=real",
                 "executor.kernel=torch", f"executor.timer={timer[0]}",
                 f"executor.timer_repeats={timer[1]}", f"hydra.run.dir={out}"]
    if timer[0] == "reference":
        overrides.append(f"executor.timer_reference_s={args.reference_s!r}")
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "CI": "true"}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "experiments.run", *overrides], cwd=ROOT, env=env,
                   check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    summary = json.loads((out / "summary.json").read_text())
    meta = {"timer": label(*timer), "scheduler": sched, "rep": rep, "wall_s": round(wall, 1),
            "load_average_at_end": round(os.getloadavg()[0], 2)}
    (out / "repeatability.json").write_text(json.dumps(meta) + "\n")
    print(f"  {label(*timer)} {sched} rep {rep}: {wall:.0f} s wall, "
          f"{summary['num_preemptions']} evictions, "
          f"{summary['request_throughput']:.3f} req/s, load {meta['load_average_at_end']}",
          flush=True)
    return {**meta, **{k: summary.get(k) for k, _ in STATS}}


def collect(folder: Path) -> pd.DataFrame:
    """The rows of every finished run under `folder`/runs."""
    rows = []
    for meta_path in sorted((folder / "runs").glob("*/repeatability.json")):
        meta = json.loads(meta_path.read_text())
        summary = json.loads((meta_path.parent / "summary.json").read_text())
        rows.append({**meta, **{k: summary.get(k) for k, _ in STATS}})
    if not rows:
        raise SystemExit(f"real_repeatability: {folder}/runs holds no finished run")
    return pd.DataFrame(rows)


def spread_pct(values: np.ndarray) -> float:
    """(max - min) / median in percent over the finite values (nan when none)."""
    ok = values[np.isfinite(values)]
    if not ok.size:
        return float("nan")
    med = float(np.median(ok))
    return 100.0 * float(ok.max() - ok.min()) / med if med else 0.0


def fmt(v: float) -> str:
    if v != v:
        return "-"
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"


def table(df: pd.DataFrame) -> str:
    """The markdown table: per timer, scheduler and statistic, each repetition's value, the
    median and the spread; the goal's verdict per (timer, scheduler)."""
    reps = sorted(df["rep"].unique())
    head = ["timer", "scheduler", "statistic", *[f"rep {r}" for r in reps], "median",
            "spread"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    verdicts = []
    for (timer, sched), g in df.groupby(["timer", "scheduler"], sort=False):
        g = g.set_index("rep").reindex(reps)
        within = 0
        for key, name in STATS:
            vals = g[key].to_numpy(dtype=float)
            spread = spread_pct(vals)
            ok = vals[np.isfinite(vals)]
            cell = f"{fmt(spread)} %"
            if key == "num_preemptions" and ok.size:
                gap = int(ok.max() - ok.min())
                cell += f" ({gap})"
                met = gap <= GOAL_EVICTIONS
            else:
                met = spread <= GOAL_PCT
            within += bool(met)
            lines.append("| " + " | ".join([
                str(timer), str(sched), name, *[fmt(v) for v in vals],
                fmt(float(np.median(ok))) if ok.size else "-",
                f"**{cell}**" if met else cell]) + " |")
        walls = g["wall_s"].to_numpy(dtype=float)
        loads = g["load_average_at_end"].to_numpy(dtype=float)
        verdicts.append(f"- {timer}, {sched}: {within} of {len(STATS)} statistics within the "
                        f"goal; run wall time {walls.min():.0f}-{walls.max():.0f} s, load "
                        f"average at the ends {loads.min():.1f}-{loads.max():.1f}")
    return "\n".join([*lines, "", f"Bold: within {GOAL_PCT:.0f} % across repetitions "
                      f"(evictions: max - min, in parentheses, within {GOAL_EVICTIONS}).", "",
                      *verdicts]) + "\n"


def spin(seconds: float) -> None:
    """Keep one core busy for `seconds` (the --load processes)."""
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        x += 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--timers", nargs="+", default=["cpu", "min_of_k:3"])
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--schedulers", nargs="+", default=["vllm", "sglang"])
    ap.add_argument("--num-requests", type=int, default=32)
    ap.add_argument("--rate", type=float, default=2.0)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--kv", type=int, default=512, help="KV pool, token slots")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reference-s", type=float, default=None,
                    help="timer=reference's unit, pinned for every run (default: measured "
                         "once before the first run)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (OMP_NUM_THREADS)")
    ap.add_argument("--load", type=int, default=0,
                    help="processes spinning on a core during the study")
    ap.add_argument("--out", type=Path, default=Path("/tmp/real_repeatability"))
    ap.add_argument("--summarize", type=Path, default=None,
                    help="print the table of an earlier --out folder; run nothing")
    args = ap.parse_args(argv)
    if args.summarize is not None:
        print(table(collect(args.summarize)))
        return 0
    timers = [parse_timer(t) for t in args.timers]
    if args.reference_s is None and any(name == "reference" for name, _ in timers):
        args.reference_s = reference_unit(args.threads)
        print(f"timer=reference: unit {args.reference_s * 1e3:.2f} ms (measured now, pinned "
              "for every run; --reference-s to give it)", flush=True)
    import multiprocessing as mp

    hogs = [mp.Process(target=spin, args=(24 * 3600.0,), daemon=True) for _ in range(args.load)]
    for h in hogs:
        h.start()
    try:
        for rep in range(1, args.repeats + 1):
            for timer in timers:
                for sched in args.schedulers:
                    run_one(args, sched, timer, rep,
                            args.out / "runs" / f"{label(*timer).replace(':', 'k')}_{sched}"
                                                f"_{rep}")
    finally:
        for h in hogs:
            h.terminate()
            h.join()
    text = table(collect(args.out))
    settings = (f"{args.num_requests} requests at {args.rate} req/s, max_tokens "
                f"{args.max_tokens}, KV pool {args.kv} slots, seed {args.seed}, "
                f"{args.threads} torch thread(s), {args.load} spinning process(es)")
    (args.out / "repeatability.md").write_text(settings + "\n\n" + text)
    collect(args.out).to_csv(args.out / "repeatability.csv", index=False)
    print(settings + "\n\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
