"""A job killed by SIGKILL leaves no file that looks complete: every output is written to a
hidden `.NAME.<pid>.<id>.tmp` in the same folder and renamed, and summary.json comes last."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from experiments.results import sinks
from experiments.run.main import complete_result

ROOT = Path(__file__).resolve().parents[1]
TMP_NAME = re.compile(r"^\.(requests\.parquet|steps\.parquet|summary\.json)\.\d+\.[0-9a-f]+\.tmp$")
ROWS = 1_000_000

# Writes the three outputs again and again, each round with its own content.
WRITER = f"""
import sys
import pyarrow as pa
from experiments.results.sinks import write_run
out = sys.argv[1]
for i in range(1000):
    t = pa.table({{"x": pa.array(range({ROWS}), pa.int64()), "round": [i] * {ROWS}}})
    write_run(out, t, t, {{"status": "ok", "round": i, "rows": {ROWS}}})
"""


def wait_for(pred, proc: subprocess.Popen[bytes], limit: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + limit
    while not pred():
        assert proc.poll() is None, "the writer ended before the kill"
        assert time.monotonic() < end, "timed out"
        time.sleep(0.0005)


def has_tmp(d: Path) -> bool:
    return d.is_dir() and any(p.name.endswith(".tmp") for p in d.iterdir())


def started(d: Path) -> bool:
    """A write began: a temporary, or (were writes not atomic) a file under its name."""
    return d.is_dir() and any(d.iterdir())


def mtime(p: Path) -> int:
    try:
        return p.stat().st_mtime_ns
    except FileNotFoundError:
        return 0


def check_folder(d: Path) -> dict[str, int]:
    """Every file under a final name is whole; leftovers are hidden .tmp files only."""
    rounds: dict[str, int] = {}
    for p in d.iterdir():
        if p.name.endswith(".tmp"):
            assert TMP_NAME.match(p.name), p.name
            continue
        if p.suffix == ".parquet":
            t = pq.read_table(p)  # a truncated parquet fails here (no footer)
            assert t.num_rows == ROWS
            assert len(set(t.column("round").to_pylist())) == 1
            rounds[p.name] = t.column("round")[0].as_py()
        elif p.name == "summary.json":
            s = json.loads(p.read_text())
            assert s["rows"] == ROWS
            rounds[p.name] = s["round"]
    return rounds


def kill(proc: subprocess.Popen[bytes]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def test_sigkill_during_writes_leaves_only_whole_files(tmp_path: Path) -> None:
    out = tmp_path / "job"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(out)], cwd=ROOT)
    try:
        # killed while the first requests.parquet is being written: nothing looks complete
        wait_for(lambda: started(out), proc)
        kill(proc)
        assert not (out / "summary.json").exists()
        check_folder(out)
        assert complete_result(out, "any") is None

        # killed mid-write in a later round: the files under their names are whole
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(out)], cwd=ROOT)
        wait_for(lambda: (out / "summary.json").exists(), proc)
        before = mtime(out / "requests.parquet")
        wait_for(lambda: has_tmp(out) or mtime(out / "requests.parquet") != before, proc)
        kill(proc)
        rounds = check_folder(out)
        assert set(rounds) == {"requests.parquet", "steps.parquet", "summary.json"}
        # summary.json is written last: it never names a round newer than the tables
        assert rounds["summary.json"] <= min(rounds["requests.parquet"], rounds["steps.parquet"])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigkill_mid_run_leaves_no_result(tmp_path: Path) -> None:
    out = tmp_path / "job"
    proc = subprocess.Popen(
        [sys.executable, "-m", "experiments.run", f"hydra.run.dir={out}", "progress=off",
         "workload.num_requests=200000", "workload.request_rate=1000"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: (out / ".hydra" / "config.yaml").exists(), proc)
        time.sleep(1.0)  # building the workload or replaying it
        kill(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    names = {p.name for p in out.iterdir()} - {".hydra", "run.log", "experiments.run.log",
                                                 ".schedbench.lock"}
    assert not {"summary.json", "requests.parquet", "steps.parquet"} & names, names
    assert all(TMP_NAME.match(n) for n in names), names
    assert complete_result(out, "any") is None


def test_write_run_renames_in_the_same_folder_and_summary_last(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    moves: list[tuple[str, str]] = []
    real = os.replace

    def spy(src: str, dst: str | Path) -> None:
        moves.append((str(src), str(dst)))
        assert Path(src).parent == Path(dst).parent
        assert TMP_NAME.match(Path(src).name)
        real(src, dst)

    monkeypatch.setattr(sinks.os, "replace", spy)
    t = pa.table({"x": [1]})
    sinks.write_run(tmp_path, t, t, {"status": "ok"})
    assert [Path(d).name for _, d in moves] == ["requests.parquet", "steps.parquet",
                                                "summary.json"]
