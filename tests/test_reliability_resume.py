"""`resume=true` skips a job whose folder holds a complete result for the identical config,
and reruns it when anything in the config changed or the result is not complete."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from experiments.results.job_folder import commit_run
from experiments.results.sinks import temp_path
from experiments.run.main import complete_result

ROOT = Path(__file__).resolve().parents[1]
TINY = ["workload.num_requests=20", "workload.request_rate=200", "kv_capacity_tokens=4096",
        "workload.prompt_len.mean=200", "workload.output_len.mean=40", "progress=off"]
OUTPUTS = ("requests.parquet", "steps.parquet", "summary.json")


def run(out: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.run", f"hydra.run.dir={out}", *TINY, *overrides],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "CI": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def stamps(out: Path) -> dict[str, tuple[int, bytes]]:
    return {n: ((out / n).stat().st_mtime_ns, (out / n).read_bytes()) for n in OUTPUTS}


def test_resume_skips_an_identical_job_and_reruns_a_changed_one(tmp_path: Path) -> None:
    out = tmp_path / "job"
    run(out)
    first = stamps(out)
    digest = json.loads(first["summary.json"][1])["config_hash"]
    assert len(digest) == 64

    again = run(out, "resume=true")
    assert "skipped (resume=true)" in again.stdout
    assert "Serving Benchmark Result" in again.stdout  # the stored summary is shown
    assert stamps(out) == first  # not rewritten: same bytes, same mtimes

    changed = run(out, "resume=true", "seed=1")
    assert "skipped" not in changed.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["seed"] == 1 and summary["config_hash"] != digest
    assert (out / "summary.json").stat().st_mtime_ns != first["summary.json"][0]


def _commit(d: Path, summary: dict[str, object]) -> None:
    tmp = (temp_path(d / "requests.parquet"), temp_path(d / "steps.parquet"))
    for p in tmp:
        pq.write_table(pa.table({"x": [1]}), p)
    commit_run(d, *tmp, summary)


def test_only_a_complete_ok_result_with_the_same_hash_counts(tmp_path: Path) -> None:
    d = tmp_path
    _commit(d, {"status": "ok", "config_hash": "abc"})
    assert complete_result(d, "abc") == {"status": "ok", "config_hash": "abc"}
    assert complete_result(d, "abd") is None  # another config
    _commit(d, {"status": "ok", "config_hash": None})
    assert complete_result(d, "abc") is None  # written before hashes were stored
    _commit(d, {"status": "failed", "config_hash": "abc"})
    assert complete_result(d, "abc") is None  # a failed job is rerun
    _commit(d, {"status": "ok", "config_hash": "abc"})
    (d / "summary.json").write_text('{"status": "ok", "config_h')
    assert complete_result(d, "abc") is None  # unreadable
    _commit(d, {"status": "ok", "config_hash": "abc"})
    (d / "steps.parquet").unlink()
    assert complete_result(d, "abc") is None  # a table is missing
    _commit(d, {"status": "ok", "config_hash": "abc"})
    (d / "complete.json").unlink()
    assert complete_result(d, "abc") is None  # no completion marker: never trusted
    assert complete_result(d / "nowhere", "abc") is None
