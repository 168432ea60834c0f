#!/usr/bin/env python3
"""Where the two victim choices differ most (Q3, scripts/reproduce_victim_choice.sh): vLLM's
(latest arrival) against SGLang's (fewest outputs, then longest prompt), per load, paired by
realisation (the same trace window under both schedulers, each at that fraction of its own
capacity).

    python scripts/victim_contrast.py SETTING_DIR [--load-param workload.load]

reads SETTING_DIR/comparison.csv (written by `python -m experiments.report`) and writes
SETTING_DIR/contrast.csv and `.md`, per load:
- evictions per window of each scheduler, their ratio vLLM / SGLang (ratio of the means over
  realisations, 95 % percentile-bootstrap CI resampling the windows together:
  `realizations.ratio_ci`, paired; n, SGLang's evictions over all realisations, flagged
  under 30; n/a where SGLang evicts nowhere) and their difference
  (mean of the per-window differences, `realizations.bootstrap_ci`);
- what each scheduler's victims pay against the same request under the other scheduler
  (`paired_victim_e2el_ratio`: per job the median over its victims; mean over realisations
  with its CI, n the victims over all realisations, flagged under 30), and the gap between
  the two (SGLang's minus vLLM's, mean of the per-window gaps where both have victims).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pandas as pd

from experiments.report.realizations import (
    CI_NOTE,
    REALIZATION,
    bootstrap_ci,
    few_victims,
    ratio_ci,
)

SCHEDULERS = ("vllm", "sglang")
FLAG = "*"


def paired_windows(comparison: pd.DataFrame, load_param: str) -> pd.DataFrame:
    """One row per (load, realisation) holding both schedulers' evictions and victims' paired
    ratios (columns `<metric>_<scheduler>`); a window one scheduler lacks is refused."""
    need = {"scheduler", "status", REALIZATION, load_param, "num_preemptions",
            "paired_victim_e2el_ratio", "paired_victims"}
    missing = sorted(need - set(comparison.columns))
    if missing:
        raise ValueError(f"comparison.csv: no column {', '.join(missing)}")
    ok = comparison[comparison["status"] == "ok"]
    sides = []
    for sched in SCHEDULERS:
        part = ok[ok["scheduler"] == sched][[load_param, REALIZATION, "num_preemptions",
                                             "paired_victim_e2el_ratio", "paired_victims"]]
        if part.empty:
            raise ValueError(f"comparison.csv: no completed job of scheduler={sched}")
        sides.append(part.rename(columns={c: f"{c}_{sched}" for c in part.columns
                                          if c not in (load_param, REALIZATION)}))
    both = sides[0].merge(sides[1], on=[load_param, REALIZATION], how="outer")
    lone = both[both.isna()[["num_preemptions_vllm", "num_preemptions_sglang"]].any(axis=1)]
    if not lone.empty:
        first = lone.iloc[0]
        raise ValueError(f"comparison.csv: {load_param}={first[load_param]:g} "
                         f"{REALIZATION}={first[REALIZATION]:g} ran under one scheduler only")
    return both.sort_values([load_param, REALIZATION]).reset_index(drop=True)


def contrast(windows: pd.DataFrame, load_param: str) -> pd.DataFrame:
    """Per load: the statistics of the module docstring (NaN where undefined)."""
    rows = []
    for load, g in windows.groupby(load_param, sort=True):
        v = g["num_preemptions_vllm"].to_numpy(dtype=np.float64)
        s = g["num_preemptions_sglang"].to_numpy(dtype=np.float64)
        ratio, r_lo, r_hi = ratio_ci(s, v, paired=True)
        diff = v - s
        d_lo, d_hi = bootstrap_ci(diff)
        row: dict[str, float | int] = {
            "load": float(load), "windows": len(g),
            "evictions_vllm": float(v.mean()), "evictions_sglang": float(s.mean()),
            "ratio": ratio, "ratio_ci_lo": r_lo, "ratio_ci_hi": r_hi,
            "ratio_n": int(s.sum()),
            "difference": float(diff.mean()), "difference_ci_lo": d_lo,
            "difference_ci_hi": d_hi}
        for sched in SCHEDULERS:
            x = g[f"paired_victim_e2el_ratio_{sched}"].to_numpy(dtype=np.float64)
            lo, hi = bootstrap_ci(x)
            row[f"paired_{sched}"] = float(np.nanmean(x)) if (~np.isnan(x)).any() else math.nan
            row[f"paired_{sched}_ci_lo"], row[f"paired_{sched}_ci_hi"] = lo, hi
            row[f"paired_{sched}_n"] = int(g[f"paired_victims_{sched}"].fillna(0).sum())
        gap = (g["paired_victim_e2el_ratio_sglang"] - g["paired_victim_e2el_ratio_vllm"]
               ).to_numpy(dtype=np.float64)
        lo, hi = bootstrap_ci(gap)
        row["gap"] = float(np.nanmean(gap)) if (~np.isnan(gap)).any() else math.nan
        row["gap_ci_lo"], row["gap_ci_hi"] = lo, hi
        row["gap_windows"] = int((~np.isnan(gap)).sum())
        rows.append(row)
    return pd.DataFrame(rows)


def _num(x: float, digits: int) -> str:
    return "n/a" if math.isnan(x) else f"{x:,.{digits}f}"


def _cell(df: pd.Series, key: str, digits: int, n: int | None = None) -> str:
    mean, lo, hi = df[key], df[f"{key}_ci_lo"], df[f"{key}_ci_hi"]
    text = _num(mean, digits)
    if math.isnan(mean):
        return text if n is None else f"{text} (n={n})"
    if not math.isnan(lo):
        text += f" [{_num(lo, digits)}, {_num(hi, digits)}]"
    if n is not None:
        text += f" n={n}" + (FLAG if few_victims(n) else "")
    return text


def table(c: pd.DataFrame) -> str:
    """The markdown table of `contrast`."""
    head = ("| load (x capacity) | windows | vLLM evictions | SGLang evictions | vLLM / SGLang "
            "| vLLM - SGLang | vLLM victim / same request under SGLang | SGLang victim / "
            "same request under vLLM | SGLang's - vLLM's (windows) |\n"
            "|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for _, r in c.iterrows():
        lines.append(
            f"| {r['load']:g} | {int(r['windows'])} | {_num(r['evictions_vllm'], 1)} | "
            f"{_num(r['evictions_sglang'], 1)} | {_cell(r, 'ratio', 1, int(r['ratio_n']))} | "
            f"{_cell(r, 'difference', 1)} | "
            f"{_cell(r, 'paired_vllm', 3, int(r['paired_vllm_n']))} | "
            f"{_cell(r, 'paired_sglang', 3, int(r['paired_sglang_n']))} | "
            f"{_cell(r, 'gap', 3)} ({int(r['gap_windows'])}) |")
    return head + "\n".join(lines) + "\n"


def write(setting_dir: str | Path, load_param: str) -> tuple[Path, Path]:
    """contrast.csv and contrast.md beside SETTING_DIR/comparison.csv."""
    folder = Path(setting_dir)
    source = folder / "comparison.csv"
    if not source.is_file():
        raise FileNotFoundError(f"{source}: no comparison.csv (run python -m "
                                "experiments.report on the sweep first)")
    c = contrast(paired_windows(pd.read_csv(source), load_param), load_param)
    csv_path, md_path = folder / "contrast.csv", folder / "contrast.md"
    c.to_csv(csv_path, index=False, float_format="%.6g")
    md_path.write_text(
        "# Where the victim choices differ: vLLM against SGLang, paired by window\n\n"
        "Evictions per 1,000-request window (vLLM preemptions, SGLang retractions); their "
        "ratio (of the means, CI resampling windows together; n: SGLang's retractions over "
        "all windows, n/a where it retracts in none) and difference (mean of the "
        "per-window differences). Victims' E2E latency against the same request under "
        "the other scheduler (per job the median over its victims); the last column is "
        "SGLang's minus vLLM's over the windows where both have victims.\n\n"
        + table(c) + "\n" + CI_NOTE + ".\n")
    return csv_path, md_path


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("setting_dir")
    ap.add_argument("--load-param", default="workload.load")
    args = ap.parse_args(argv)
    for path in write(args.setting_dir, args.load_param):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
