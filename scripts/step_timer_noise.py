#!/usr/bin/env python3
"""How much does each step timer move from step to step, and with the machine's load? (issue 29)

Times the same steps of the real executor (a decode batch and a prefill chunk, SmolLM2-135M
or a tiny random model) `--steps` times under each timer (`wall`, `cpu`, `min_of_k:k`), the
timers interleaved step by step so that the machine's load falls on all of them alike, and
prints per step shape and timer the median, min, max and spread ((max - min) / median) of the
measured step times, and the drift: the spread of the medians of consecutive blocks of
`--block` steps (what moves a whole run's clock when the machine's load changes, where the
step-to-step noise averages out). `--load N` starts N processes spinning on a core meanwhile.
A timer is `name` or `name:k` (k passes for min_of_k and reference; reference measures its
unit once at start, so that every step of the run shares it).

    python scripts/step_timer_noise.py [--model-path models/smollm2-135m-instruct]
        [--timers wall cpu min_of_k:3 reference:3] [--steps 20] [--block 10] [--load 0]
        [--prefill-tokens 128] [--shapes decode prefill]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from engines.executors.real import RealExecutor  # noqa: E402
from engines.model.tiny import load_or_tiny  # noqa: E402
from schedulers.contract import ScheduledChunk, StepPlan  # noqa: E402

PAGE = 16


def plans(prefill_tokens: int = 128) -> dict[str, StepPlan]:
    """The steps timed: 8 decodes at context 128, and one prefill chunk of `prefill_tokens`
    tokens."""
    per = 128 // PAGE
    decode = StepPlan(0, PAGE, [ScheduledChunk(f"d{b}", [5], 127,
                                               list(range(b * per, (b + 1) * per)), True)
                                for b in range(8)])
    pages = -(-prefill_tokens // PAGE)
    prefill = StepPlan(1, PAGE, [ScheduledChunk("p", list(range(3, 3 + prefill_tokens)), 0,
                                                list(range(8 * per, 8 * per + pages)), True)])
    return {"decode 8 x ctx 128": decode, f"prefill {prefill_tokens}": prefill}


def spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-path", default=None,
                    help="a checkpoint folder (default: a tiny random Llama)")
    ap.add_argument("--timers", nargs="+", default=["wall", "cpu", "min_of_k:3"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--load", type=int, default=0, help="processes spinning on a core")
    ap.add_argument("--block", type=int, default=10,
                    help="steps per block of the drift statistic")
    ap.add_argument("--prefill-tokens", type=int, default=128,
                    help="tokens of the prefill chunk timed")
    ap.add_argument("--shapes", nargs="+", choices=("decode", "prefill"),
                    default=["decode", "prefill"], help="which of the two steps to time")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    model = load_or_tiny(args.model_path)
    executors = {}
    for t in args.timers:
        name, _, k = t.partition(":")
        executors[t] = RealExecutor(model, kernel="torch", num_slots=4096, timer=name,
                                    timer_repeats=int(k) if k else 3)
    hogs = [mp.Process(target=spin, args=(3600.0,), daemon=True) for _ in range(args.load)]
    for h in hogs:
        h.start()
    try:
        times: dict[tuple[str, str], list[float]] = {}
        for shape, plan in plans(args.prefill_tokens).items():
            if shape.split()[0] not in args.shapes:
                continue
            for ex in executors.values():
                ex.execute(plan)  # warm-up
            for _ in range(args.steps):
                for t, ex in executors.items():
                    times.setdefault((shape, t), []).append(ex.execute(plan).duration_s)
    finally:
        for h in hogs:
            h.terminate()
    print(f"{args.steps} steps each, {args.load} spinning process(es), load average "
          f"{os.getloadavg()[0]:.1f} at the end")
    print(f"| step | timer | median (ms) | min | max | spread | drift ({args.block}-step "
          "block medians) |")
    print("|---|---|---|---|---|---|---|")
    for (shape, t), xs in times.items():
        med = statistics.median(xs)
        blocks = [statistics.median(xs[i:i + args.block])
                  for i in range(0, len(xs) - args.block + 1, args.block)]
        drift = (f"{100 * (max(blocks) - min(blocks)) / statistics.median(blocks):.1f} %"
                 if len(blocks) > 1 else "n/a")
        print(f"| {shape} | {t} | {med * 1e3:.2f} | {min(xs) * 1e3:.2f} | "
              f"{max(xs) * 1e3:.2f} | {100 * (max(xs) - min(xs)) / med:.1f} % | {drift} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
