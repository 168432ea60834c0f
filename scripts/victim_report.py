#!/usr/bin/env python3
"""What an eviction costs and what the victims pay, per config across realisations
(Q3, scripts/reproduce_victim_choice.sh).

    python scripts/victim_report.py SWEEP OUT [--load-param workload.load]

reads the job folders of SWEEP (a multirun with `workload.realization` among its varied
parameters) and writes into OUT:
- `per_eviction.csv` / `.md`: per scheduler and load, prefill tokens recomputed per eviction
  (vLLM preemption, SGLang retraction): all recomputed tokens of the config's realisations
  over all their evictions, with a 95 % percentile-bootstrap CI over realisations
  (`realizations.ratio_ci`, paired: a realisation's tokens and evictions resampled together)
  and n, the evictions it rests on (flagged under 30);
- `breakdown.csv` / `.md`: per scheduler and load, the mean E2E latency parts (queued,
  evicted, recompute, prefill, decode; requests.parquet's `<part>_s`) of the victims and of
  the other completed requests: per realisation the mean over its requests, then the mean
  over realisations with a 95 % bootstrap CI (`realizations.bootstrap_ci`), n the requests
  (victims flagged under 30).
Tokens per eviction are rounded to integers, times to 0.1 ms.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
from experiments.report.tables import load_sweep, markdown
from experiments.report.victims import PARTS, completed
from experiments.results.sinks import write_text

NAMES = {"vllm": "vLLM", "sglang": "SGLang"}
ORDER = {"vllm": 0, "sglang": 1}


def job_rows(sweep: Path, load_param: str) -> pd.DataFrame:
    """One row per ok job: scheduler, load, realisation, evictions, recomputed tokens, and
    per part the mean over victims and over the others (s), with their counts."""
    rows: list[dict[str, Any]] = []
    for job in load_sweep(sweep):
        if job.summary.get("status", "ok") != "ok":
            continue
        df = completed(job.requests())
        victims, others = df[df["victim"]], df[~df["victim"]]
        row: dict[str, Any] = {
            "scheduler": job.scheduler, "load": float(job.overrides[load_param]),
            "realization": int(job.overrides.get(REALIZATION, 0)),
            "evictions": int(job.summary.get("num_preemptions") or 0),
            "recomputed_tokens": int(job.summary.get("recomputed_tokens") or 0),
            "victims": len(victims), "others": len(others)}
        for part in PARTS:
            for who, frame in (("victims", victims), ("others", others)):
                col = f"{part}_s"
                row[f"{who}_{part}_s"] = float(frame[col].mean()) if len(frame) else math.nan
        rows.append(row)
    out = pd.DataFrame(rows)
    out["_s"] = out["scheduler"].map(ORDER).fillna(len(ORDER))
    return out.sort_values(["_s", "load", "realization"]).drop(columns="_s")


def _fmt(x: float, digits: int) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) \
        else f"{x:,.{digits}f}"


def _cell(mean: float, lo: float, hi: float, n: int, digits: int) -> str:
    text = _fmt(mean, digits)
    if not math.isnan(lo):
        text += f" [{_fmt(lo, digits)}, {_fmt(hi, digits)}]"
    return text + f" n={n}" + ("*" if few_victims(n) else "")


def per_eviction(jobs: pd.DataFrame) -> pd.DataFrame:
    """Per scheduler and load: recomputed tokens per eviction (pooled ratio, paired
    bootstrap CI over realisations) and the evictions n."""
    rows = []
    for (sched, load), g in jobs.groupby(["scheduler", "load"], sort=False):
        ratio, lo, hi = ratio_ci(g["evictions"].to_numpy(dtype=float),
                                 g["recomputed_tokens"].to_numpy(dtype=float), paired=True)
        rows.append({"scheduler": sched, "load": load, "realizations": len(g),
                     "evictions": int(g["evictions"].sum()),
                     "recomputed_tokens": int(g["recomputed_tokens"].sum()),
                     "tokens_per_eviction": ratio, "ci_lo": lo, "ci_hi": hi})
    return pd.DataFrame(rows)


def breakdown(jobs: pd.DataFrame) -> pd.DataFrame:
    """Per scheduler, load and group (victims, others): each E2E part's mean over
    realisations (ms) with its bootstrap CI, and the requests it rests on."""
    rows = []
    for (sched, load), g in jobs.groupby(["scheduler", "load"], sort=False):
        for who in ("victims", "others"):
            row: dict[str, Any] = {"scheduler": sched, "load": load, "group": who,
                                   "n": int(g[who].sum())}
            for part in PARTS:
                vals = 1000.0 * g[f"{who}_{part}_s"].to_numpy(dtype=float)
                defined = vals[~np.isnan(vals)]
                row[f"{part}_ms"] = float(defined.mean()) if defined.size else math.nan
                row[f"{part}_ms_ci_lo"], row[f"{part}_ms_ci_hi"] = bootstrap_ci(vals)
            rows.append(row)
    return pd.DataFrame(rows)


def per_eviction_table(pe: pd.DataFrame) -> pd.DataFrame:
    """`per_eviction`'s rows as the markdown table's cells."""
    return pd.DataFrame({
        "scheduler": pe["scheduler"].map(lambda s: NAMES.get(s, s)), "load": pe["load"],
        "evictions (all realisations)": pe["evictions"],
        "recomputed tokens (all)": pe["recomputed_tokens"].map(lambda x: f"{x:,}"),
        "recomputed tokens per eviction": [
            _cell(float(r["tokens_per_eviction"]), float(r["ci_lo"]), float(r["ci_hi"]),
                  int(r["evictions"]), 0)
            for r in pe.to_dict("records")]})


def breakdown_table(bd: pd.DataFrame) -> pd.DataFrame:
    """`breakdown`'s rows as the markdown table's cells."""
    cells: dict[str, list[str]] = {"scheduler": [], "load": [], "requests": []}
    for part in PARTS:
        cells[f"{part} (ms)"] = []
    for r in bd.to_dict("records"):
        cells["scheduler"].append(NAMES.get(r["scheduler"], r["scheduler"]))
        cells["load"].append(f"{r['load']:g}")
        flag = "*" if r["group"] == "victims" and few_victims(r["n"]) else ""
        cells["requests"].append(f"{r['group']} (n={r['n']}{flag})")
        for part in PARTS:
            mean, lo, hi = r[f"{part}_ms"], r[f"{part}_ms_ci_lo"], r[f"{part}_ms_ci_hi"]
            text = _fmt(mean, 1)
            if not math.isnan(lo):
                text += f" [{_fmt(lo, 1)}, {_fmt(hi, 1)}]"
            cells[f"{part} (ms)"].append(text)
    return pd.DataFrame(cells)


def write(sweep: str | Path, out: str | Path, load_param: str) -> dict[str, Path]:
    """Write `per_eviction.*` and `breakdown.*` of the sweep into `out`."""
    root = Path(out)
    jobs = job_rows(Path(sweep), load_param)
    pe, bd = per_eviction(jobs), breakdown(jobs)
    n_real = int(jobs.groupby(["scheduler", "load"]).size().max())
    note = (f"{CI_NOTE}; here the CI is over {n_real} realisations and n counts the "
            "evictions (per eviction) or the requests (breakdown).\n")
    return {
        "per_eviction.csv": write_text(pe.to_csv(index=False), root / "per_eviction.csv"),
        "per_eviction.md": write_text(
            "# Prefill tokens recomputed per eviction (vLLM preemption, SGLang retraction)\n\n"
            "All recomputed tokens of a config's realisations over all its evictions; CI: "
            "paired bootstrap over realisations (tokens and evictions of a realisation "
            "resampled together).\n\n" + markdown(per_eviction_table(pe)) + "\n" + note,
            root / "per_eviction.md"),
        "breakdown.csv": write_text(bd.to_csv(index=False), root / "breakdown.csv"),
        "breakdown.md": write_text(
            "# E2E latency parts: victims against the other completed requests\n\n"
            "Per realisation the mean over its requests, then the mean over realisations; "
            "the five parts sum to a request's E2E latency (engines/records.py). queued: "
            "arrival to first scheduled; prefill: first scheduled to first token; decode: "
            "first token to finish; evicted: each eviction to its readmission; recompute: "
            "each readmission to the step that reaches the position it had computed again "
            "(prefill and decode less the evicted and recompute time).\n\n"
            + markdown(breakdown_table(bd)) + "\n" + note,
            root / "breakdown.md"),
    }


def main(argv: Sequence[str] | None = None) -> None:
    """Command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweep")
    ap.add_argument("out")
    ap.add_argument("--load-param", default="workload.load")
    args = ap.parse_args(argv)
    paths = write(args.sweep, args.out, args.load_param)
    print("wrote " + ", ".join(str(p) for p in paths.values()))


if __name__ == "__main__":
    main()
