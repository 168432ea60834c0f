#!/usr/bin/env python3
"""Why steps inside an engine run are slower than the profiler's grid (issue 14): one decode
shape (4 sequences, 400 context tokens in all) measured in the layouts a run has and the grid
has not.

    contiguous    equal contexts of 100, each sequence's pages consecutive (the grid)
    scattered     equal contexts, pages drawn at random from the pool (a run's free list)
    ragged        contexts 40, 80, 120, 160 (same sum), pages consecutive: the torch kernel
                  pads the decode group to the longest context and masks
    ragged+scattered
    page1 ...     the same with pages of one slot (SGLang)
    busy          contiguous, with a few ms of Python allocation between steps (the
                  scheduler's and recorder's work in a run)

Each variant runs `--repeats` times, round-robin; prints the median CPU time per variant and
its ratio to `contiguous`. The KV pool is 512 slots, as in scripts/real_vs_sim.py.

    python scripts/kv_layout_bench.py [--model-path models/smollm2-135m-instruct] [--repeats 15]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from engines.executors.real import RealExecutor, RealExecutorConfig  # noqa: E402
from schedulers.contract import ScheduledChunk, StepPlan  # noqa: E402

POOL = 512


def plan(contexts: list[int], page_size: int, scatter: bool, rng: np.random.Generator,
         step: int) -> StepPlan:
    """A decode step of one token per sequence at these context lengths."""
    pages_total = POOL // page_size
    order = rng.permutation(pages_total) if scatter else np.arange(pages_total)
    chunks, nxt = [], 0
    for i, c in enumerate(contexts):
        n = -(-c // page_size)
        ids = [int(p) for p in order[nxt:nxt + n]]
        nxt += n
        chunks.append(ScheduledChunk(f"r{i}", [7], c - 1, ids, sample=True))
    return StepPlan(step=step, page_size=page_size, chunks=chunks)


def busy(ms: float) -> None:
    """Python allocation for about `ms` of CPU time (dicts and lists, as a scheduler makes)."""
    import time

    t0 = time.process_time()
    while time.process_time() - t0 < ms / 1000:
        _ = [{"a": i, "b": [i] * 8} for i in range(2000)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-path", default=str(ROOT / "models" / "smollm2-135m-instruct"))
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--out", type=Path, default=None, help="JSON of the medians")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    ex = RealExecutor.from_config(RealExecutorConfig(model_path=args.model_path, kernel="torch",
                                                     num_slots=POOL, timer="cpu"))
    rng = np.random.default_rng(0)
    even, ragged = [100] * 4, [40, 80, 120, 160]
    variants = {
        "contiguous": (even, 16, False, 0.0), "scattered": (even, 16, True, 0.0),
        "ragged": (ragged, 16, False, 0.0), "ragged+scattered": (ragged, 16, True, 0.0),
        "page1 contiguous": (even, 1, False, 0.0), "page1 scattered": (even, 1, True, 0.0),
        "page1 ragged+scattered": (ragged, 1, True, 0.0), "busy 3 ms": (even, 16, False, 3.0),
    }
    times: dict[str, list[float]] = {k: [] for k in variants}
    step = 0
    for _ in range(3):  # warm-up
        step += 1
        ex.execute(plan(even, 16, False, rng, step))
    for _ in range(args.repeats):
        for name, (ctx, ps, scatter, busy_ms) in variants.items():
            step += 1
            p = plan(ctx, ps, scatter, rng, step)
            if busy_ms:
                busy(busy_ms)
            times[name].append(ex.execute(p).duration_s)
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in med.items():
        print(f"{k:24s} {v * 1e3:7.1f} ms  x{v / med['contiguous']:.3f}")
    if args.out:
        args.out.write_text(json.dumps({k: round(v, 6) for k, v in med.items()}, indent=1)
                            + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
