"""A multirun with one failing job (on_error=record) runs the others, and the comparison
table marks the failed job with its error."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY = ["workload.num_requests=20", "workload.request_rate=200",
        "workload.prompt_len.mean=200", "workload.output_len.mean=40", "progress=off"]


def multirun(sweep: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "experiments.run", "-m", f"hydra.sweep.dir={sweep}",
         "hydra.callbacks.comparison.figures=false", *TINY, *overrides],
        cwd=ROOT, capture_output=True, text=True, timeout=180, env={**os.environ, "CI": "1"})


def test_a_failing_job_is_recorded_and_the_others_run(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    # job 1 asks for a KV pool that is not a whole number of vLLM blocks: it raises
    proc = multirun(sweep, "scheduler=vllm", "kv_capacity_tokens=4096,1000,2048",
                    "on_error=record")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[job 1 | kv_capacity_tokens=1000] vllm: FAILED (ValueError" in proc.stdout
    with open(sweep / "comparison.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["kv_capacity_tokens"] for r in rows] == ["4096", "1000", "2048"]
    assert [r["status"] for r in rows] == ["ok", "failed", "ok"]
    assert rows[1]["error"].startswith("ValueError: vllm scheduler: kv_capacity_tokens=1000 "
                                       "is not a multiple of block_size=16")
    assert rows[0]["error"] == rows[2]["error"] == ""
    assert float(rows[0]["completed"]) == float(rows[2]["completed"]) == 20
    assert rows[1]["completed"] == ""
    failed = json.loads((sweep / "1" / "summary.json").read_text())
    assert failed["status"] == "failed" and "config_hash" in failed
    assert not (sweep / "1" / "requests.parquet").exists()
    md = (sweep / "comparison.md").read_text()
    assert "| failed | ValueError: vllm scheduler: kv_capacity_tokens=1000" in md
    assert "Error" in (sweep / "side_by_side.md").read_text()
    assert proc.stdout.strip().splitlines()[-1] == (  # said last (issue 25, item 2)
        "1 of 3 jobs failed; first: job 1: ValueError: vllm scheduler: kv_capacity_tokens=1000 "
        "is not a multiple of block_size=16")

    # on_error=fail (the default): the sweep fails, with the error
    proc = multirun(tmp_path / "strict", "scheduler=vllm", "kv_capacity_tokens=1000")
    assert proc.returncode != 0 and "not a multiple of block_size=16" in proc.stderr


def test_a_sweep_whose_every_job_failed_exits_non_zero_and_draws_nothing(tmp_path: Path
                                                                        ) -> None:
    """Issue 25, item 2: no job completed, so there is no result: the sweep exits non-zero
    (even with on_error=record) saying so last, its table gives each job's status, and no
    figure is drawn from the failed jobs."""
    sweep = tmp_path / "sweep"
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.run", "-m", f"hydra.sweep.dir={sweep}", *TINY,
         "scheduler=vllm", "kv_capacity_tokens=1000,1001", "on_error=record"],
        cwd=ROOT, capture_output=True, text=True, timeout=180, env={**os.environ, "CI": "1"})
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: 2 of 2 jobs failed; first: job 0: ValueError: vllm scheduler: "
        "kv_capacity_tokens=1000 is not a multiple of block_size=16")
    assert "| Status | failed | failed |" in (sweep / "side_by_side.md").read_text()
    assert "2 of 2 jobs failed" in (sweep / "comparison.md").read_text()
    assert not list(sweep.glob("*.png")) and not list(sweep.glob("*.pdf"))
