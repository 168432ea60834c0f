#!/usr/bin/env python3
"""Does a reference step track a prefill step's slowdowns on this machine? (issue 29)

Times, back to back for `--seconds`, one pass each of: a decode reference (4 decodes at
context 64, timer=reference's step), prefill chunks of 32 and 64 tokens, and a prefill chunk of
`--prefill-tokens` (the step whose time matters). Prints the spread (standard deviation over
mean) of the prefill pass alone and of its ratio to each reference, single passes and the
fastest of k consecutive passes (what timer=min_of_k and timer=reference with k passes see),
and the correlation of the prefill pass with each reference. A reference tracks the machine's
slowdowns where the ratio spreads less than the prefill pass alone.

    python scripts/step_timer_tracking.py [--model-path models/smollm2-135m-instruct]
        [--seconds 90] [--prefill-tokens 256] [--ks 1 2 4]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from engines.executors.real import RealExecutor  # noqa: E402
from engines.model.tiny import load_or_tiny  # noqa: E402
from schedulers.contract import ScheduledChunk, StepPlan  # noqa: E402

PAGE = 16


def prefill(tokens: int, first_page: int, rid: str) -> StepPlan:
    """One prefill chunk of `tokens` tokens in pages from `first_page`."""
    pages = list(range(first_page, first_page + -(-tokens // PAGE)))
    return StepPlan(1, PAGE, [ScheduledChunk(rid, list(range(3, 3 + tokens)), 0, pages, True)])


def plans(prefill_tokens: int) -> dict[str, StepPlan]:
    """The step (`P`) and the references (`D`, `R32`, `R64`), on disjoint pages."""
    first = -(-prefill_tokens // PAGE)
    decode = StepPlan(0, PAGE, [ScheduledChunk(f"d{b}", [5], 63,
                                               list(range(first + 8 + 4 * b,
                                                          first + 12 + 4 * b)), True)
                                for b in range(4)])
    return {"D": decode, "R32": prefill(32, first, "r32"), "R64": prefill(64, first + 2, "r64"),
            "P": prefill(prefill_tokens, 0, "p")}


def spread(x: np.ndarray) -> float:
    """Standard deviation over mean, in %."""
    return float(100 * x.std() / x.mean())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-path", default=None,
                    help="a checkpoint folder (default: a tiny random Llama)")
    ap.add_argument("--seconds", type=float, default=90.0)
    ap.add_argument("--prefill-tokens", type=int, default=256)
    ap.add_argument("--ks", type=int, nargs="+", default=[1, 2, 4])
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    model = load_or_tiny(args.model_path)
    ex = RealExecutor(model, kernel="torch", num_slots=8192, timer="wall")
    steps = plans(args.prefill_tokens)
    for plan in steps.values():  # warm-up
        ex.execute(plan)
    rows = []
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        rows.append([ex.execute(plan).duration_s for plan in steps.values()])
    a = np.array(rows)
    names = list(steps)
    p = a[:, names.index("P")]
    print(f"{len(a)} rounds over {args.seconds:.0f} s, load average {os.getloadavg()[0]:.1f} "
          f"at the end; prefill {args.prefill_tokens} tokens, median {np.median(p) * 1e3:.0f} ms")
    print("| estimator | " + " | ".join(f"spread, fastest of {k}" for k in args.ks) + " |")
    print("|---|" + "---|" * len(args.ks))
    for label, ref in (("prefill alone", None), ("over decode reference (D)", "D"),
                       ("over prefill 32 (R32)", "R32"), ("over prefill 64 (R64)", "R64")):
        cells = []
        for k in args.ks:
            g = a[:len(a) // k * k].reshape(-1, k, len(names)).min(axis=1)
            x = g[:, names.index("P")]
            if ref is not None:
                x = x / g[:, names.index(ref)]
            cells.append(f"{spread(x):.1f} % (n={len(g)})")
        print(f"| {label} | " + " | ".join(cells) + " |")
    corr = np.corrcoef(a.T)[names.index("P")]
    print("correlation of the prefill pass with D, R32, R64: "
          + ", ".join(f"{corr[names.index(r)]:.2f}" for r in ("D", "R32", "R64")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
