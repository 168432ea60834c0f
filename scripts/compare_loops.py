#!/usr/bin/env python3
"""One experiments.run job in each engine loop a scheduler declares (its registry entry's
`loops`, DESIGN.md "Engine loops"), side by side: preemptions, victims and how far the two
loops pick the same ones, median and p99 end-to-end latency, steps, replay wall time.

    python scripts/compare_loops.py scheduler=vllm kv_capacity_tokens=8192 \\
        workload.num_requests=200 --out outputs/loops

The arguments are experiments.run overrides; each loop's job folder is `--out/<loop>/`, and
the table is printed and written to `--out/loops.json`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SUMMARY_KEYS = ("completed", "num_preemptions", "num_victims", "median_e2el_ms",
                "p99_e2el_ms", "median_ttft_ms", "duration")


def compose(overrides: list[str]) -> Any:
    """experiments.run's config for `overrides` (Hydra compose, no job folder)."""
    from experiments.run.config import compose_run_config

    return compose_run_config(["progress=off", *overrides], str(ROOT / "conf"))


def victims(job: Path) -> set[str]:
    """The ids of the requests evicted at least once in a job."""
    table = pq.read_table(job / "requests.parquet", columns=["request_id", "victim"])
    return {rid for rid, v in zip(table.column("request_id").to_pylist(),
                                  table.column("victim").to_pylist(), strict=True) if v}


def run_loops(overrides: list[str], out: Path) -> dict[str, Any]:
    """Run the job once per declared loop; returns the comparison."""
    from experiments.run.main import run_experiment
    from schedulers import registry

    entry = registry.get(compose(overrides).scheduler.name)
    rows: dict[str, dict[str, Any]] = {}
    picked: dict[str, set[str]] = {}
    for choice in entry.loops:
        fields = [f"scheduler.{k}={str(v).lower() if isinstance(v, bool) else v}"
                  for k, v in choice.fields]
        t0 = time.perf_counter()
        summary = run_experiment(compose([*overrides, *fields]), out / choice.loop)
        rows[choice.loop] = {"engine_loop": summary["engine_loop"],
                             **{k: summary.get(k) for k in SUMMARY_KEYS},
                             "wall_s": round(time.perf_counter() - t0, 2)}
        picked[choice.loop] = victims(out / choice.loop)
    sets = list(picked.values())
    union = set().union(*sets)
    jaccard = len(set.intersection(*sets)) / len(union) if len(sets) > 1 and union else 1.0
    return {"scheduler": entry.name, "overrides": overrides, "loops": rows,
            "victim_jaccard": round(jaccard, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("overrides", nargs="*", help="experiments.run overrides")
    ap.add_argument("--out", type=Path, default=Path("outputs/loops"))
    args = ap.parse_args()
    result = run_loops(args.overrides, args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "loops.json").write_text(json.dumps(result, indent=2) + "\n")
    keys = ["engine_loop", *SUMMARY_KEYS, "wall_s"]
    print(" ".join(f"{k:>16s}" for k in keys))
    for row in result["loops"].values():
        print(" ".join(f"{row[k]:>16.4g}" if isinstance(row[k], float) else f"{row[k]!s:>16s}"
                       for k in keys))
    print(f"victims in both loops / in either (Jaccard): {result['victim_jaccard']}")


if __name__ == "__main__":
    main()
