"""The job folder seen from the command line (issue 15, items 2, 4, 5, 10): resume notices an
edited trace, a failed job keeps no older tables, a second run into a busy folder fails at
once, stale spool files of a killed run are removed."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.results.job_folder import (
    FolderBusyError,
    JobLock,
    remove_stale_spools,
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


def _sigint_as_from_a_shell() -> None:
    """In the child before exec: SIGINT handled by default and not blocked, as a shell
    starts a command. A test process may hold another state (libraries block or ignore
    SIGINT around their own helpers), and a child inherits both the disposition and the
    mask: with SIGINT ignored or blocked the holder would never see the interrupt."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _signal_state(pid: int) -> str:
    """SigBlk / SigIgn / SigCgt of a process (for a failure message)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return "?"
    return " ".join(ln for ln in lines if ln.startswith(("SigBlk", "SigIgn", "SigCgt")))


def test_the_holder_puts_back_the_hydra_config_a_refused_run_rewrote(tmp_path: Path) -> None:
    out = tmp_path / "job"
    holder = subprocess.Popen(
        [sys.executable, "-m", "experiments.run", f"hydra.run.dir={out}", "progress=off",
         "seed=3", "workload.num_requests=2000000", "workload.request_rate=1000"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "CI": "1"}, preexec_fn=_sigint_as_from_a_shell)
    try:
        lock = out / ".schedbench.lock"
        end = time.monotonic() + 60
        while not (lock.exists() and lock.read_text().startswith(f"pid {holder.pid} ")):
            assert holder.poll() is None and time.monotonic() < end, "the holder did not start"
            time.sleep(0.1)
        mine = (out / ".hydra" / "overrides.yaml").read_text()
        assert "seed=3" in mine
        refused = run(out, *TINY, "seed=4", ok=False)
        assert "in use by another run" in refused.stderr
        assert "seed=4" in (out / ".hydra" / "overrides.yaml").read_text()  # Hydra's doing
        # Ends the holder through its cleanup. Again every few seconds: a KeyboardInterrupt
        # that lands in a finalizer (__del__, a weakref callback) is printed and dropped by
        # Python, and the holder would replay its two million requests.
        end = time.monotonic() + 60
        while holder.poll() is None:
            assert time.monotonic() < end, (
                f"the holder did not stop on SIGINT: holder {_signal_state(holder.pid)}; "
                f"this test process {_signal_state(os.getpid())}")
            holder.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                holder.wait(timeout=3)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert (out / ".hydra" / "overrides.yaml").read_text() == mine
    assert "seed: 3" in (out / ".hydra" / "config.yaml").read_text()
