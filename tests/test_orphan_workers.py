"""After `kill -9` of a joblib sweep's main process its loky workers end too (issue 15,
item 10), instead of running their jobs on and idling for minutes."""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from experiments.run.orphan_guard import EXIT_CODE

ROOT = Path(__file__).resolve().parents[1]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in state  # a zombie has ended (nobody may reap it here)


def worker_pids(sweep: Path) -> list[int]:
    pids = []
    for lock in sweep.glob("*/.schedbench.lock"):
        m = re.match(r"pid (\d+) on host", lock.read_text())
        if m:
            pids.append(int(m.group(1)))
    return pids


def test_loky_workers_end_with_a_killed_sweep(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = subprocess.Popen(
        [sys.executable, "-m", "experiments.run", "-m", "hydra/launcher=local",
         f"hydra.sweep.dir={sweep}", "progress=off", "scheduler=vllm",
         "workload.num_requests=2000000", "workload.request_rate=1000", "seed=0,1"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "CI": "1"})
    pids: list[int] = []
    try:
        end = time.monotonic() + 90
        while len(pids) < 2:
            assert proc.poll() is None, "the sweep ended before the kill"
            assert time.monotonic() < end, "the jobs did not start"
            time.sleep(0.2)
            pids = worker_pids(sweep)
        assert proc.pid not in pids  # the jobs run in worker processes
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        end = time.monotonic() + 15
        while any(alive(p) for p in pids) and time.monotonic() < end:
            time.sleep(0.2)
        assert not any(alive(p) for p in pids), "a worker outlived the sweep"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in pids:
            if alive(p):
                os.kill(p, signal.SIGKILL)


def session_processes(sid: int) -> list[str]:
    """The live processes of session `sid` (pid and command line): what a sweep started in
    its own session left running, whoever their parent is now."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # ended meanwhile
        if int(fields[3]) == sid and fields[0] != "Z":
            out.append(f"{d.name} (parent {fields[1]}): {cmd[:120]}")
    return out


def kill_session(sid: int) -> None:
    for line in session_processes(sid):
        with contextlib.suppress(OSError):
            os.kill(int(line.split()[0]), signal.SIGKILL)


KILL_TRIES = 3


def test_a_sweep_killed_while_its_workers_start_leaves_no_process(tmp_path: Path) -> None:
    """kill -9 of the sweep's main process at a random moment while its loky workers start
    (before their jobs do): within seconds no worker and no resource tracker is left (issue
    24, item 10: the guard once read the parent's pid in the job, after it had died)."""
    rng = random.Random()
    for i in range(KILL_TRIES):
        proc = subprocess.Popen(
            [sys.executable, "-m", "experiments.run", "-m", "hydra/launcher=local",
             f"hydra.sweep.dir={tmp_path / str(i)}", "progress=off",
             "workload.num_requests=3000"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, env={**os.environ, "CI": "1"})
        delay = rng.uniform(0.0, 1.5)
        try:
            end = time.monotonic() + 90
            while len(session_processes(proc.pid)) < 2:  # the first helper process started
                assert proc.poll() is None, "the sweep ended before the kill"
                assert time.monotonic() < end, "no worker started"
                time.sleep(0.05)
            time.sleep(delay)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            end = time.monotonic() + 10
            while session_processes(proc.pid) and time.monotonic() < end:
                time.sleep(0.1)
            left = session_processes(proc.pid)
            assert not left, (f"try {i}, killed {delay:.2f} s after its first helper process "
                              f"started; still running: {left}")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            kill_session(proc.pid)


def test_a_worker_whose_sweep_is_already_gone_exits_in_its_initializer() -> None:
    """The initializer compares with the pid the sweep recorded, not with whatever parent the
    worker has when it runs: a worker started just before the kill never takes a job."""
    code = ("import os\nfrom experiments.run.orphan_guard import watch_sweep\n"
            "watch_sweep(os.getppid() + 1_000_000)  # not this process's parent: gone\n"
            "print('still running')\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == EXIT_CODE, proc.stderr
    assert "still running" not in proc.stdout
    assert "the sweep's main process" in proc.stderr
