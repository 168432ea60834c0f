"""The job folder seen from the command line (issue 15, items 2, 4, 5, 10; issue 24, items 12
and 14): resume notices an edited trace, a failed job keeps no older tables, a second run into
a busy folder fails at once and touches nothing of the holder's, stale spool files of a killed
run are removed, nothing is written through a planted link, a folder of someone else's
results is left alone."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.results.job_folder import (
    FolderBusyError,
    JobLock,
    UnsafeFolderError,
    foreign_results,
    remove_stale_spools,
    restore_files,
    snapshot_files,
    verify_folder,
)

ROOT = Path(__file__).resolve().parents[1]
TINY = ["workload.num_requests=12", "workload.request_rate=200", "kv_capacity_tokens=4096",
        "workload.prompt_len.mean=100", "workload.output_len.mean=20", "progress=off"]
AZURE = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
         "2023-11-16 18:15:46.6805900,374,44\n"
         "2023-11-16 18:15:50.9951690,396,109\n"
         "2023-11-16 18:15:51.1080680,879,34\n")


def run(out: Path, *overrides: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.run", f"hydra.run.dir={out}", *overrides],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "CI": "1"})
    assert (proc.returncode == 0) == ok, proc.stderr[-3000:]
    return proc


def test_resume_reruns_a_job_whose_trace_file_changed(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    trace = traces / "t.csv"
    trace.write_text(AZURE)
    args = ["workload=azure_code", f"workload.trace_dir={traces}", "workload.file=t.csv",
            "kv_capacity_tokens=4096", "progress=off", "resume=true"]
    out = tmp_path / "job"
    run(out, *args)
    first = json.loads((out / "summary.json").read_text())
    assert "skipped (resume=true)" in run(out, *args).stdout
    trace.write_text(AZURE.replace(",879,34", ",879,35"))  # same path and size, new content
    again = run(out, *args)
    assert "skipped" not in again.stdout
    second = json.loads((out / "summary.json").read_text())
    assert second["config_hash"] != first["config_hash"]
    assert second["total_output_tokens"] == first["total_output_tokens"] + 1


def test_a_failed_job_leaves_no_older_tables(tmp_path: Path) -> None:
    out = tmp_path / "job"
    run(out, *TINY)
    assert verify_folder(out).state == "ok"
    run(out, *TINY, "on_error=record", "workload.request_rate=-1")
    assert not (out / "requests.parquet").exists() and not (out / "steps.parquet").exists()
    state = verify_folder(out)
    assert state.state == "failed" and "request_rate" in state.summary["error"]
    assert "workload.request_rate=-1" in state.summary["overrides"]


def test_a_second_run_into_a_busy_folder_fails_at_once(tmp_path: Path) -> None:
    out = tmp_path / "job"
    with JobLock(out):
        with pytest.raises(FolderBusyError, match=f"pid {os.getpid()} on host"):
            JobLock(out).acquire()
        proc = run(out, *TINY, ok=False)
        assert str(out) in proc.stderr and f"pid {os.getpid()}" in proc.stderr
        assert socket.gethostname() in proc.stderr
        assert not (out / "summary.json").exists()
    run(out, *TINY)  # released: the folder is free again
    assert verify_folder(out).state == "ok"


def test_stale_spool_files_of_dead_runs_are_removed(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead_pid = int(dead.stdout)
    out = tmp_path / "job"
    out.mkdir()
    stale = [out / f".requests.parquet.{dead_pid}.0123456789ab.tmp",
             out / f".steps.parquet.{dead_pid}.0123456789ab.tmp"]
    live = out / f".steps.parquet.{os.getpid()}.0123456789ab.tmp"  # a live writer's
    other = [out / ".notes.txt.123.tmp", out / "keep.tmp"]  # not ours
    for p in [*stale, live, *other]:
        p.write_bytes(b"x" * 100)
    with JobLock(out):
        assert sorted(remove_stale_spools(out)) == sorted(stale)
    assert live.exists() and all(p.exists() for p in other)
    live.unlink()
    for p in stale:
        p.write_bytes(b"x")
    run(out, *TINY)  # the next run into the folder cleans up too
    assert not any(p.exists() for p in stale)
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp") and p.name.startswith(".s")]


def test_the_holder_puts_back_a_hydra_config_rewritten_meanwhile(tmp_path: Path) -> None:
    """The fallback for a run that slipped in between the callback's check and the lock:
    the holder restores its .hydra/ when it ends."""
    hydra = tmp_path / ".hydra"
    hydra.mkdir()
    (hydra / "overrides.yaml").write_text("- seed=3\n")
    snapshot = snapshot_files(hydra)
    (hydra / "overrides.yaml").write_text("- seed=4\n")
    assert restore_files(snapshot) == [hydra / "overrides.yaml"]
    assert (hydra / "overrides.yaml").read_text() == "- seed=3\n"


def test_a_refused_run_leaves_the_holders_hydra_config_alone(tmp_path: Path) -> None:
    """A second run into a held folder is refused before Hydra writes into it (issue 24,
    item 14): the holder's .hydra/ stays its own even when the holder is then killed."""
    out = tmp_path / "job"
    holder = subprocess.Popen(
        [sys.executable, "-m", "experiments.run", f"hydra.run.dir={out}", "progress=off",
         "seed=3", "workload.num_requests=2000000", "workload.request_rate=1000"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "CI": "1"})
    try:
        lock = out / ".schedbench.lock"
        end = time.monotonic() + 60
        while not (lock.exists() and lock.read_text().startswith(f"pid {holder.pid} ")):
            assert holder.poll() is None and time.monotonic() < end, "the holder did not start"
            time.sleep(0.1)
        hydra = {p.name: p.read_text() for p in (out / ".hydra").iterdir()}
        assert "seed=3" in hydra["overrides.yaml"]
        refused = run(out, *TINY, "seed=4", ok=False)
        assert refused.stderr.strip().splitlines()[-1].startswith(
            f"error: job folder {out} is in use by another run (pid {holder.pid} on host")
        holder.kill()  # no clean-up of the holder's: nothing to put back
        holder.wait()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert {p.name: p.read_text() for p in (out / ".hydra").iterdir()} == hydra


def plant_links(job: Path, outside: Path) -> dict[Path, str]:
    """Links at the lock, Hydra's config and the job log of `job`, each to its own file in
    `outside`; returns those files with their content."""
    (job / ".hydra").mkdir(parents=True)
    outside.mkdir()
    targets = {}
    for name in (".schedbench.lock", ".hydra/config.yaml", "run.log"):
        target = outside / name.replace("/", "_")
        target.write_text(f"not yours: {name}\n")
        (job / name).symlink_to(target)
        targets[target] = target.read_text()
    return targets


def test_a_run_never_writes_through_a_planted_link(tmp_path: Path) -> None:
    """Issue 24, item 12: links at the lock, .hydra/config.yaml and the log are refused,
    named, before anything is written through them."""
    job = tmp_path / "job"
    targets = plant_links(job, tmp_path / "outside")
    proc = run(job, *TINY, ok=False)
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: job folder {job} holds symbolic links where a run writes")
    for name in (".schedbench.lock", ".hydra/config.yaml", "run.log"):
        assert f"{name} -> {tmp_path / 'outside'}" in last
    assert {t: t.read_text() for t in targets} == targets
    assert not (job / "summary.json").exists()


def test_a_sweep_never_writes_through_a_link_planted_in_a_job_folder(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    targets = plant_links(sweep / "0", tmp_path / "outside")
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.run", "-m", f"hydra.sweep.dir={sweep}",
         "scheduler=vllm", *TINY], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "CI": "1"})
    assert proc.returncode != 0
    assert f"error: job folder {sweep / '0'} holds symbolic links" in proc.stderr
    assert {t: t.read_text() for t in targets} == targets
    assert not (sweep / "multirun.yaml").exists()  # refused before Hydra wrote anything


def test_the_lock_is_never_taken_through_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_text("keep me\n")
    job = tmp_path / "job"
    job.mkdir()
    (job / ".schedbench.lock").symlink_to(outside)
    with pytest.raises(UnsafeFolderError, match=r"lock file .* is a symbolic link"):
        JobLock(job).acquire()
    assert outside.read_text() == "keep me\n"


def test_a_folder_that_was_never_a_job_folder_is_left_alone(tmp_path: Path) -> None:
    """Issue 24, item 14: on_error=record into a folder of someone's own results (no marker,
    no lock file) neither deletes nor overwrites them; the run is refused, naming them."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    files = {"requests.parquet": b"PAR1 their table", "summary.json": b'{"theirs": 1}\n'}
    for name, data in files.items():
        (theirs / name).write_bytes(data)
    proc = run(theirs, *TINY, "on_error=record", "workload.request_rate=-1", ok=False)
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: folder {theirs} holds requests.parquet, summary.json but was never a job "
        "folder (no complete.json, no .schedbench.lock): a run would replace them; move them "
        "away, or write into another folder")
    assert {n: (theirs / n).read_bytes() for n in files} == files
    empty = tmp_path / "empty"
    empty.mkdir()
    assert foreign_results(empty) == [] and foreign_results(tmp_path / "absent") == []
