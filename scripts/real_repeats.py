#!/usr/bin/env python3
"""The simulator against several real runs of the same workload (issue 14).

Reads the `comparison.csv` and `step_error.csv` that scripts/real_vs_sim.py wrote into each
folder (same workload, seed, pool and profiles; only the real runs differ, because step
times on a shared CPU vary from run to run) and writes a markdown table: per scheduler and
statistic, every real run's value, their spread ((max - min) / median), the simulator's value
and its relative error against the median of the real runs, with the baseline profile's
beside it when the folders have one.

    python scripts/real_repeats.py FOLDER [FOLDER ...] [--out results/real_model/repeats.md]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

GOAL_PCT = 10.0


def pct(sim: float, real: float) -> float:
    """Relative error of `sim` against `real`, in percent (nan when undefined)."""
    if not (np.isfinite(sim) and np.isfinite(real)):
        return float("nan")
    if real == 0:
        return 0.0 if sim == 0 else float("inf")
    return 100.0 * (sim - real) / real


def fmt(v: float) -> str:
    if v != v:
        return "-"
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"


def summarize(folders: list[Path]) -> str:
    """The markdown table over the folders' comparison.csv and step_error.csv."""
    comps = []
    for f in folders:
        path = f / "comparison.csv"
        if not path.is_file():
            raise FileNotFoundError(f"real_repeats: {f}: no comparison.csv "
                                    "(run scripts/real_vs_sim.py --out there first)")
        comps.append(pd.read_csv(path))
    base = comps[0]
    has_baseline = "sim_baseline" in base.columns
    head = ["scheduler", "statistic", *[f"real {i + 1}" for i in range(len(folders))],
            "real spread", "sim", "sim vs real median"]
    if has_baseline:
        head += ["baseline sim", "baseline vs real median"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, row in base.iterrows():
        reals = np.array([float(c.loc[i, "real"]) for c in comps])
        ok = reals[np.isfinite(reals)]  # victims' E2E is undefined in a run without victims
        med = float(np.median(ok)) if ok.size else float("nan")
        spread = (100.0 * (ok.max() - ok.min()) / med if ok.size and med != 0
                  else float("nan"))
        sim = float(row["sim"])
        err = pct(sim, med)
        cells = [row["scheduler"], row["statistic"], *[fmt(r) for r in reals],
                 f"{fmt(spread)} %", fmt(sim),
                 f"{'**' if abs(err) <= GOAL_PCT else ''}{fmt(err)} %"
                 f"{'**' if abs(err) <= GOAL_PCT else ''}"]
        if has_baseline:
            b = float(row["sim_baseline"])
            cells += [fmt(b), f"{fmt(pct(b, med))} %"]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    lines += ["", f"Bold: within {GOAL_PCT:.0f} % of the real runs' median (over the runs "
              "where the statistic is defined).", "",
              "Step time (absolute percentage error of the profile's prediction over each real "
              "run's steps; sum predicted / sum measured):", "",
              "| scheduler | profile | " + " | ".join(
                  f"real {i + 1}: median / p90 APE, sum ratio" for i in range(len(folders)))
              + " |", "|---|---|" + "---|" * len(folders)]
    errs = [pd.read_csv(f / "step_error.csv") for f in folders]
    for j, row in errs[0].iterrows():
        cells = [f"{e.loc[j, 'all_median_ape_pct']:.1f} / {e.loc[j, 'all_p90_ape_pct']:.1f} %, "
                 f"{e.loc[j, 'sum_pred_over_real']:.2f}" for e in errs]
        lines.append(f"| {row['scheduler']} | {Path(str(row.get('profile', '-'))).name} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    text = summarize(args.folders)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
