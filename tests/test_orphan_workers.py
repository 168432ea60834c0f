"""After `kill -9` of a joblib sweep's main process its loky workers end too (issue 15,
item 10), instead of running their jobs on and idling for minutes."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

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
