#!/usr/bin/env python3
"""The simulator against several real runs of the same workload (issue 14).

Reads the `comparison.csv` and `step_error.csv` that scripts/real_vs_sim.py wrote into each
folder (same workload, seed, pool and profiles; only the real runs differ, because step
times on a shared CPU vary from run to run) and writes a markdown table: per scheduler and
statistic, every real run's value, their spread ((max - min) / median), the simulator's value
and its relative error against the median of the real runs, with the baseline profile's
beside it when the folders have one.

With `--figure PATH`, also the TTFT and E2E latency CDFs of every scheduler: the range of
the real runs' CDFs (a band from the lowest to the highest at each latency), their pointwise
median, and the simulator's CDF (read from each folder's runs/<scheduler>_<real|sim>/
requests.parquet; the simulator's from the first folder).

    python scripts/real_repeats.py FOLDER [FOLDER ...] [--out results/real_model/repeats.md]
        [--figure results/real_model/figures/repeats_cdf.png]
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


def latencies_ms(run: Path) -> dict[str, np.ndarray]:
    """TTFT and E2E latency (ms) of every finished request of one run folder."""
    df = pd.read_parquet(run / "requests.parquet")
    return {"TTFT": (df["first_token_time"] - df["arrival_time"]).to_numpy(dtype=float) * 1e3,
            "E2E": (df["finish_time"] - df["arrival_time"]).to_numpy(dtype=float) * 1e3}


def band_figure(folders: list[Path], path: Path) -> Path:
    """TTFT (left) and E2E (right) CDFs per scheduler: the real runs' range as a band, their
    pointwise median as a line, the simulator dashed (module docstring)."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from experiments.report.figures import (
        PAGE_IN,
        SCHEDULER_NAMES,
        _ecdf_on,
        _save,
        fig_legend,
        log_ticks,
        scheduler_color,
        style,
        suptitle,
    )

    runs = folders[0] / "runs"
    scheds = sorted((d.name.removesuffix("_real") for d in runs.glob("*_real")),
                    key=lambda s: (s != "vllm", s))  # vLLM first, as the tables
    if not scheds:
        raise FileNotFoundError(f"real_repeats: {runs}: no <scheduler>_real run folders")
    with style():
        fig, axes = plt.subplots(1, 2, figsize=(PAGE_IN, 2.6), sharey=True,
                                 layout="constrained")
        for sched in scheds:
            color = scheduler_color(sched)
            reals = [latencies_ms(f / "runs" / f"{sched}_real") for f in folders]
            sim = latencies_ms(runs / f"{sched}_sim")
            for ax, metric in zip(axes, ("TTFT", "E2E"), strict=True):
                values = np.concatenate([r[metric] for r in reals] + [sim[metric]])
                values = values[np.isfinite(values) & (values > 0)]
                grid = np.unique(np.geomspace(values.min() * 0.9, values.max() * 1.1, 600))
                cdfs = np.stack([_ecdf_on(grid, r[metric]) for r in reals])
                ax.fill_between(grid, cdfs.min(axis=0), cdfs.max(axis=0), step="post",
                                color=color, alpha=0.25, lw=0)
                ax.step(grid, np.median(cdfs, axis=0), where="post", color=color)
                ax.step(grid, _ecdf_on(grid, sim[metric]), where="post", color=color,
                        ls="--")
        for ax, metric in zip(axes, ("TTFT", "E2E"), strict=True):
            ax.set(xscale="log", xlabel=f"{metric} (ms)")
        axes[0].set_ylabel("share of requests")
        fig.canvas.draw()
        for ax in axes:
            log_ticks(ax, "x")
        handles = [Patch(color=scheduler_color(s), alpha=0.6,
                         label=f"{SCHEDULER_NAMES.get(s, s)}: real, range over {len(folders)} runs")
                   for s in scheds]
        handles += [Line2D([], [], color="0.3", label="real, median"),
                    Line2D([], [], color="0.3", ls="--", label="simulator")]
        fig_legend(fig, handles)
        suptitle(fig, f"Latency per request (CDF): {len(folders)} real runs and the simulator")
        path.parent.mkdir(parents=True, exist_ok=True)
        _save(fig, path, pdf=False)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--figure", type=Path, default=None,
                    help="also draw the latency CDFs with the real runs' band here")
    args = ap.parse_args(argv)
    text = summarize(args.folders)
    if args.out:
        args.out.write_text(text)
    if args.figure:
        band_figure(args.folders, args.figure)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
