"""Worker processes of a local parallel sweep end with their parent.

The joblib launcher runs jobs in loky worker processes. When the sweep's main process is
killed (`kill -9`), nothing tells them: they would finish their job, then idle for minutes.
`exit_with_parent` starts, once per worker, a daemon thread that polls the parent's pid and
ends the worker at once when the parent is gone (the job's folder lock goes with it; its
spool files are removed by the next run into that folder).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading

log = logging.getLogger(__name__)
POLL_S = 0.5
EXIT_CODE = 70
_started = False


def in_pool_worker() -> bool:
    """Whether this process is a loky (joblib) worker."""
    return multiprocessing.current_process().name.startswith("LokyProcess")


def _watch(parent: int) -> None:
    stop = threading.Event()
    while not stop.wait(POLL_S):
        if os.getppid() != parent:
            log.error("sweep worker %d: the sweep's main process %d is gone; exiting",
                      os.getpid(), parent)
            os._exit(EXIT_CODE)


def exit_with_parent(force: bool = False) -> bool:
    """In a loky worker (or with `force`), end this process when its parent dies; returns
    whether the watch runs. Idempotent."""
    global _started
    if _started:
        return True
    if not (force or in_pool_worker()):
        return False
    threading.Thread(target=_watch, args=(os.getppid(),), name="exit-with-parent",
                     daemon=True).start()
    _started = True
    return True
