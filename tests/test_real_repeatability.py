"""scripts/real_repeatability.py's table: the spread of each statistic over repetitions, the
evictions' gap as a count, the goal's verdict, the timers' names; read back from run folders."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import real_repeatability as rr  # noqa: E402


def row(timer: str, rep: int, throughput: float, evictions: int) -> dict[str, object]:
    return {"timer": timer, "scheduler": "vllm", "rep": rep, "wall_s": 10.0,
            "load_average_at_end": 1.0, "request_throughput": throughput,
            "median_ttft_ms": 100.0, "p99_ttft_ms": 200.0, "median_e2el_ms": 300.0,
            "p99_e2el_ms": 400.0, "num_preemptions": evictions,
            "median_e2el_victim_ms": float("nan") if evictions == 0 else 500.0}


def test_spread_gap_and_verdict() -> None:
    df = pd.DataFrame([row("cpu", 1, 1.0, 4), row("cpu", 2, 0.9, 7),
                       row("min_of_k:3", 1, 1.0, 4), row("min_of_k:3", 2, 1.02, 5)])
    text = rr.table(df)
    lines = {tuple(c.strip() for c in line.split("|")[1:4]): line for line in text.splitlines()
             if line.startswith("| ")}
    # (1.0 - 0.9) / median 0.95 = 10.5 %: over the goal, not bold
    assert "| 10.5 % |" in lines[("cpu", "vllm", "request throughput (req/s)")]
    assert "**1.98 %**" in lines[("min_of_k:3", "vllm", "request throughput (req/s)")]
    assert "| 54.5 % (3) |" in lines[("cpu", "vllm", "evictions")]  # gap 3 > 2
    assert "**22.2 % (1)**" in lines[("min_of_k:3", "vllm", "evictions")]
    assert "- cpu, vllm: 5 of 7 statistics within the goal" in text
    assert "- min_of_k:3, vllm: 7 of 7 statistics within the goal" in text


def test_a_statistic_undefined_in_a_run_counts_over_the_others() -> None:
    df = pd.DataFrame([row("cpu", 1, 1.0, 0), row("cpu", 2, 1.0, 2), row("cpu", 3, 1.0, 2)])
    line = next(x for x in rr.table(df).splitlines() if "victims' median E2E" in x)
    assert "| - | 500 | 500 | 500 | **0 %** |" in line


def test_timer_names() -> None:
    assert rr.parse_timer("cpu") == ("cpu", 1)
    assert rr.parse_timer("min_of_k") == ("min_of_k", 3)
    assert rr.parse_timer("min_of_k:5") == ("min_of_k", 5)
    with pytest.raises(SystemExit, match=r"--timers 'median': valid"):
        rr.parse_timer("median")
    with pytest.raises(SystemExit, match=r"--timers 'min_of_k:x': k must be an integer"):
        rr.parse_timer("min_of_k:x")


def test_collect_reads_the_finished_runs(tmp_path: Path) -> None:
    for rep in (1, 2):
        run = tmp_path / "runs" / f"cpu_vllm_{rep}"
        run.mkdir(parents=True)
        r = row("cpu", rep, 1.0 + rep / 10, rep)
        meta = {k: r[k] for k in ("timer", "scheduler", "rep", "wall_s", "load_average_at_end")}
        (run / "repeatability.json").write_text(json.dumps(meta))
        (run / "summary.json").write_text(json.dumps({k: v for k, v in r.items()
                                                      if k not in meta}))
    (tmp_path / "runs" / "unfinished").mkdir()  # no repeatability.json: left out
    df = rr.collect(tmp_path)
    assert list(df["rep"]) == [1, 2] and list(df["request_throughput"]) == [1.1, 1.2]
    with pytest.raises(SystemExit, match="holds no finished run"):
        rr.collect(tmp_path / "empty")
