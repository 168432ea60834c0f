"""Worker processes of a local parallel sweep end with the sweep's main process.

The joblib launcher runs jobs in loky worker processes. When the sweep's main process is
killed (`kill -9`), nothing tells them: they would run the jobs already queued, commit them,
then idle for minutes (loky's idle timeout), holding loky's resource trackers alive.

The guard works from the pid of the sweep's main process, recorded before any worker starts,
never read in a worker (a worker started after its parent died sees pid 1 as its parent):
- `guard_sweep_workers`, called by the sweep's main process when the multirun starts, records
  its pid in the environment (`SWEEP_PID_ENV`, inherited by every worker) and makes joblib's
  `loky` backend start each worker with `watch_sweep(<that pid>)` as its initializer;
- `watch_sweep`, first thing in a worker: on Linux, asks the kernel to SIGKILL the worker
  when its parent dies (`prctl(PR_SET_PDEATHSIG)`); then exits at once if the parent is
  already another process, else starts a thread that polls the parent's pid (the portable
  fallback, and the check for a parent that died before the prctl);
- `exit_with_parent`, at the start of each job: the same watch for a worker the initializer
  did not reach (a launcher other than ours), against the recorded pid.
A killed worker's folder lock goes with it; its spool files are removed by the next run into
that folder. The resource trackers end by themselves once every process holding their pipe
(the main process and the workers) is gone.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import threading
from typing import Any

log = logging.getLogger(__name__)
POLL_S = 0.5
EXIT_CODE = 70
SWEEP_PID_ENV = "SCHEDBENCH_SWEEP_PID"
PR_SET_PDEATHSIG = 1  # linux/prctl.h
_started = False


def in_pool_worker() -> bool:
    """Whether this process is a loky (joblib) worker."""
    return multiprocessing.current_process().name.startswith("LokyProcess")


def recorded_sweep_pid() -> int | None:
    """The pid of the sweep's main process as it recorded it (`SWEEP_PID_ENV`), if any."""
    text = os.environ.get(SWEEP_PID_ENV, "")
    return int(text) if text.isdigit() else None


def die_with_parent_signal() -> bool:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux); returns whether
    it took. The request is tied to the thread that started this process: loky starts its
    workers from the sweep's main thread or its executor thread, both alive for the sweep."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _exit_orphan(parent: int) -> None:
    log.error("sweep worker %d: the sweep's main process %d is gone; exiting", os.getpid(),
              parent)
    os._exit(EXIT_CODE)


def _watch(parent: int) -> None:
    stop = threading.Event()
    while not stop.wait(POLL_S):
        if os.getppid() != parent:
            _exit_orphan(parent)


def _start_watch(parent: int) -> None:
    """Exit now if `parent` is no longer this process's parent, else watch it. Idempotent."""
    global _started
    if os.getppid() != parent:
        _exit_orphan(parent)
    if not _started:
        threading.Thread(target=_watch, args=(parent,), name="exit-with-parent",
                         daemon=True).start()
        _started = True


def watch_sweep(sweep_pid: int) -> None:
    """A worker's initializer: end this worker when the sweep's main process `sweep_pid`
    (its parent) dies, including when it died before this worker got here."""
    die_with_parent_signal()
    _start_watch(sweep_pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_parent() -> int:
    """The process whose death ends this worker: the sweep's recorded pid (`SWEEP_PID_ENV`)
    when it is this process's parent or is gone (the parent died before this call), else (a
    pid recorded by some other, live process) the current parent."""
    recorded = recorded_sweep_pid()
    if recorded is not None and (os.getppid() == recorded or not _alive(recorded)):
        return recorded
    return os.getppid()


def exit_with_parent(force: bool = False) -> bool:
    """In a loky worker (or with `force`), end this process when the sweep's main process
    dies (`sweep_parent`). Returns whether the watch runs. Idempotent."""
    if _started:
        return True
    if not (force or in_pool_worker()):
        return False
    _start_watch(sweep_parent())
    return True


def guard_sweep_workers() -> None:
    """In the sweep's main process, before any worker starts: record this process's pid for
    the workers and start every loky worker with `watch_sweep` (see the module docstring).
    Hydra's joblib launcher asks joblib for the backend by the name `loky`; it gets loky
    itself with that initializer."""
    from joblib import register_parallel_backend

    os.environ[SWEEP_PID_ENV] = str(os.getpid())
    register_parallel_backend("loky", _guarded_loky_backend())


def _guarded_loky_backend() -> type:
    from joblib._parallel_backends import LokyBackend

    class GuardedLokyBackend(LokyBackend):
        """joblib's loky backend whose workers run `watch_sweep(<this pid>)` first."""

        def configure(self, *args: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("initializer", watch_sweep)
            kwargs.setdefault("initargs", (os.getpid(),))
            return super().configure(*args, **kwargs)

    return GuardedLokyBackend
