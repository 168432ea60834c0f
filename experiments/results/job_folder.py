"""A job folder's integrity: its lock, its completion marker, its stale spool files.

A job's results (`requests.parquet`, `steps.parquet`, `summary.json`) count only when the
folder's completion marker `complete.json` vouches for them: the marker is written last and
records the status, the config hash and the SHA-256 and size of every file it covers. A
commit removes the old marker (and the old summary) before it moves anything, so a kill at any
point leaves either the old complete result, or no marker at all, never new tables beside an
old summary that looks complete (`commit_run`, `commit_failure`).

`verify_folder` is what resume and the sweep report trust: the marker parses, every covered
file exists with the recorded size and hash, the parquet files open, and summary.json agrees
with the marker on status and config hash.

`JobLock` is an exclusive `flock` on `.schedbench.lock` in the folder (it names the holder's
pid and host), so a second run into the same folder fails at once. Under the lock,
`remove_stale_spools` deletes the hidden `.NAME.<pid>.<id>.tmp` files that a killed run of
ours left behind (only our own output names; never a file of a live process).

`refuse_unsafe_folder` is checked before a run writes anything (by the Hydra callback, before
Hydra writes `.hydra/` and opens the log; again by the job before its lock): a run never
writes through a symbolic link planted where it writes a file (`planted_links`), never into a
folder whose result files no run of ours wrote (no marker, no lock file: `foreign_results`),
and never into a folder another run holds (`holder_of`). The lock file is opened without
following links.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pyarrow.parquet as pq

from experiments.results.sinks import (
    REQUESTS_FILE,
    STEPS_FILE,
    SUMMARY_FILE,
    atomic_path,
    commit_file,
    write_json,
)

log = logging.getLogger(__name__)

MARKER_FILE = "complete.json"
LOCK_FILE = ".schedbench.lock"
RESULT_FILES = (REQUESTS_FILE, STEPS_FILE, SUMMARY_FILE)
MARKER_FORMAT = 1
# The hidden temporaries of `sinks.temp_path` for the files a job writes.
SPOOL_NAME = re.compile(r"^\.(requests\.parquet|steps\.parquet|summary\.json|complete\.json)"
                        r"\.(\d+)\.[0-9a-f]+\.tmp$")


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a file's bytes (read in 1 MiB chunks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_entry(path: str | Path) -> dict[str, Any]:
    """What a marker records of one file: its size and SHA-256."""
    p = Path(path)
    return {"bytes": p.stat().st_size, "sha256": file_sha256(p)}


def marker_record(out_dir: str | Path, status: str, config_hash: str,
                  files: tuple[str, ...]) -> dict[str, Any]:
    """The marker's content for the files `files` (names in `out_dir`), as they are now."""
    d = Path(out_dir)
    return {"format": MARKER_FORMAT, "status": status, "config_hash": config_hash,
            "files": {name: file_entry(d / name) for name in files}}


@dataclass(frozen=True)
class FolderState:
    """What a job folder holds: `state` is `ok` or `failed` (a verified marker), `incomplete`
    (no marker: the job never finished, or was cut off while committing) or `inconsistent`
    (a marker whose files do not match it); `reason` says why; `summary` is the verified
    summary (empty unless ok or failed)."""

    state: str
    reason: str = ""
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def verified(self) -> bool:
        return self.state in ("ok", "failed")


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def verify_folder(out_dir: str | Path) -> FolderState:
    """Check the folder's marker against its files (see the module docstring)."""
    d = Path(out_dir)
    marker_path = d / MARKER_FILE
    if not marker_path.is_file():
        why = ("summary.json without a completion marker (cut off while committing, or "
               "written by an older schedbench)" if (d / SUMMARY_FILE).exists()
               else "no completion marker (the job has not finished)")
        return FolderState("incomplete", why)
    try:
        marker = _read_json(marker_path)
        status = str(marker["status"])
        digest = str(marker["config_hash"])
        files = dict(marker["files"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        return FolderState("inconsistent", f"{MARKER_FILE} is unreadable ({e})")
    if SUMMARY_FILE not in files:
        return FolderState("inconsistent", f"{MARKER_FILE} does not cover {SUMMARY_FILE}")
    for name, entry in files.items():
        p = d / name
        try:
            size = p.stat().st_size
        except OSError:
            return FolderState("inconsistent", f"{name} is missing")
        if size != entry.get("bytes") or file_sha256(p) != entry.get("sha256"):
            return FolderState("inconsistent",
                               f"{name} differs from the file {MARKER_FILE} vouches for")
        if name.endswith(".parquet"):
            try:
                pq.read_metadata(p)
            except Exception as e:  # any read error means unreadable
                return FolderState("inconsistent", f"{name} is not readable parquet ({e})")
    try:
        summary = _read_json(d / SUMMARY_FILE)
    except (OSError, ValueError) as e:
        return FolderState("inconsistent", f"{SUMMARY_FILE} is unreadable ({e})")
    if not isinstance(summary, dict):
        return FolderState("inconsistent", f"{SUMMARY_FILE} is not a JSON object")
    if summary.get("status") != status or summary.get("config_hash") != digest:
        return FolderState("inconsistent", f"{SUMMARY_FILE} disagrees with {MARKER_FILE} on "
                                           "status or config_hash")
    if status == "ok" and not {REQUESTS_FILE, STEPS_FILE} <= set(files):
        return FolderState("inconsistent", f"{MARKER_FILE} of an ok job does not cover both "
                                           "parquet files")
    return FolderState(status, "", summary)


class FolderBusyError(RuntimeError):
    """Another run holds the job folder's lock."""


class UnsafeFolderError(RuntimeError):
    """A run must not write into this folder: a symbolic link where it writes, or result
    files that no run of ours wrote."""


# What a run writes directly in its job folder (its spool files take fresh hidden names):
# the lock, the results, Hydra's `.hydra/` (`HYDRA_FILES`) and its `*.log`, W&B and figures.
WRITTEN_NAMES = (LOCK_FILE, *RESULT_FILES, MARKER_FILE, ".hydra", "wandb", "figures")
HYDRA_FILES = ("config.yaml", "hydra.yaml", "overrides.yaml")


def planted_links(out_dir: str | Path) -> list[Path]:
    """The symbolic links in `out_dir` at a name a run writes (`WRITTEN_NAMES`, a `*.log`,
    `.hydra/`'s files): writing there would write to wherever they point."""
    d = Path(out_dir)
    if not d.is_dir():
        return []
    links = [d / n for n in WRITTEN_NAMES if (d / n).is_symlink()]
    links += sorted(p for p in d.iterdir() if p.suffix == ".log" and p.is_symlink())
    hydra = d / ".hydra"
    if hydra.is_dir() and not hydra.is_symlink():
        links += [hydra / n for n in HYDRA_FILES if (hydra / n).is_symlink()]
    return links


def _describe_links(links: list[Path], folder: Path) -> str:
    return ", ".join(f"{p.relative_to(folder)} -> {os.readlink(p)}" for p in links)


def foreign_results(out_dir: str | Path) -> list[str]:
    """The result files (`RESULT_FILES`) in a folder that no run of ours has written into
    (neither a completion marker nor a lock file): a commit there would replace or delete
    them. Empty for a job folder, an empty folder, or one that does not exist."""
    d = Path(out_dir)
    if (d / MARKER_FILE).exists() or (d / LOCK_FILE).exists():
        return []
    return [n for n in RESULT_FILES if (d / n).exists()]


def holder_of(out_dir: str | Path) -> str | None:
    """Who holds the folder's lock now (pid and host), or None when nobody does; takes
    nothing and creates nothing."""
    try:
        fd = os.open(Path(out_dir) / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None  # no lock file (a link is `planted_links`' to report)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            text = os.read(fd, 4096).decode(errors="replace").strip()
            return text or "an unknown process"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def refuse_unsafe_folder(out_dir: str | Path) -> None:
    """Raise, naming the folder and what to do, when a run must not write into `out_dir`:
    `UnsafeFolderError` for a planted link or foreign result files, `FolderBusyError` when
    another run holds it."""
    d = Path(out_dir)
    links = planted_links(d)
    if links:
        raise UnsafeFolderError(
            f"job folder {d} holds symbolic links where a run writes its own files: "
            f"{_describe_links(links, d)}; a run never writes through a link: remove them, "
            "or write into another folder")
    foreign = foreign_results(d)
    if foreign:
        raise UnsafeFolderError(
            f"folder {d} holds {', '.join(foreign)} but was never a job folder (no "
            f"{MARKER_FILE}, no {LOCK_FILE}): a run would replace them; move them away, or "
            "write into another folder")
    holder = holder_of(d)
    if holder is not None:
        raise busy_error(d, holder)


# What a sweep writes in its own folder, not atomically (Hydra's copy of the sweep config;
# the W&B sweep run); its other files (sweep.json, the report) are renamed into place.
SWEEP_WRITTEN_NAMES = ("multirun.yaml", "wandb")


def is_job_folder(d: Path) -> bool:
    """Whether `d` is a folder a run has written into (a summary, a marker, `.hydra/` or a
    lock file), not a hidden one."""
    return d.is_dir() and not d.name.startswith(".") and any(
        (d / n).exists() for n in (SUMMARY_FILE, MARKER_FILE, ".hydra", LOCK_FILE))


def job_folders(root: str | Path) -> list[Path]:
    """The job folders of a sweep folder `root` (by name), or `[root]` when `root` is itself
    a job folder (holding none)."""
    d = Path(root)
    if not d.is_dir():
        return []
    inside = sorted(p for p in d.iterdir() if is_job_folder(p))
    return inside or ([d] if is_job_folder(d) else [])


def refuse_unsafe_sweep(sweep_dir: str | Path) -> None:
    """`refuse_unsafe_folder` for a sweep before it starts: a link planted where the sweep
    writes, and in every job folder already in it (a resumed sweep) a planted link or another
    run holding it. (A job checks its own folder again, foreign results included.)"""
    d = Path(sweep_dir)
    links = [d / n for n in SWEEP_WRITTEN_NAMES if (d / n).is_symlink()]
    if links:
        raise UnsafeFolderError(
            f"sweep folder {d} holds symbolic links where the sweep writes: "
            f"{_describe_links(links, d)}; a run never writes through a link: remove them, "
            "or write into another folder")
    for job in sorted(p for p in d.iterdir() if is_job_folder(p)) if d.is_dir() else []:
        if planted_links(job) or holder_of(job) is not None:
            refuse_unsafe_folder(job)


def busy_error(out_dir: Path, holder: str) -> FolderBusyError:
    """The error of a run refused because `holder` holds the folder."""
    return FolderBusyError(
        f"job folder {out_dir} is in use by another run ({holder}; lock file "
        f"{out_dir / LOCK_FILE}): wait for it to end, or write into another folder")


def _holder(f: IO[str]) -> str:
    f.seek(0)
    text = f.read().strip()
    return text or "an unknown process"


class JobLock:
    """An exclusive, non-blocking lock on a job folder (`with JobLock(out_dir): ...`).

    The second run into a locked folder raises `FolderBusyError` naming the folder and the
    holder (pid and host). The lock ends with the process (flock), so a killed run never
    leaves a folder locked."""

    def __init__(self, out_dir: str | Path) -> None:
        self.dir = Path(out_dir)
        self.path = self.dir / LOCK_FILE
        self._f: IO[str] | None = None

    def acquire(self) -> None:
        """Take the lock or raise `FolderBusyError` at once."""
        self.dir.mkdir(parents=True, exist_ok=True)
        try:  # never through a link planted at the lock's name
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise UnsafeFolderError(
                    f"job folder {self.dir}: its lock file {self.path} is a symbolic link "
                    f"(-> {os.readlink(self.path)}); a run never writes through a link: "
                    "remove it") from None
            raise
        f = open(fd, "a+")  # noqa: SIM115 - held open while the lock is held
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _holder(f)
            f.close()
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise busy_error(self.dir, holder) from None
            raise
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()} on host {socket.gethostname()}\n")
        f.flush()
        self._f = f

    def release(self) -> None:
        """Release the lock (the lock file stays: removing it would race a new holder)."""
        if self._f is not None:
            with contextlib.suppress(OSError):
                self._f.seek(0)
                self._f.truncate()
            self._f.close()  # closing the descriptor releases the flock
            self._f = None

    def __enter__(self) -> JobLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_spools(out_dir: str | Path) -> list[Path]:
    """Delete the spool temporaries of our own output files whose writer is gone (call it
    under the folder's `JobLock`); returns what was removed. Files of live processes and
    any other file are left alone."""
    d = Path(out_dir)
    removed: list[Path] = []
    if not d.is_dir():
        return removed
    for p in d.iterdir():
        m = SPOOL_NAME.match(p.name)
        if m is None or _alive(int(m.group(2))):
            continue
        with contextlib.suppress(FileNotFoundError):
            size = p.stat().st_size
            p.unlink()
            removed.append(p)
            log.info("removed a stale spool file of a run that ended early: %s (%d bytes)",
                     p, size)
    return removed


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _write_marker(d: Path, status: str, config_hash: str, files: tuple[str, ...]) -> Path:
    return write_json(marker_record(d, status, config_hash, files), d / MARKER_FILE)


def _retract(d: Path) -> None:
    """Withdraw the folder's old result before anything of the new one is moved in: first the
    marker (from here on the folder holds no complete result), then the old summary (so that
    a reader of summary.json alone never pairs it with the new tables)."""
    _unlink(d / MARKER_FILE)
    _unlink(d / SUMMARY_FILE)


def commit_run(out_dir: str | Path, requests_tmp: str | Path, steps_tmp: str | Path,
               summary: dict[str, Any]) -> dict[str, Path]:
    """Commit a run's complete spooled parquet files (written under `sinks.temp_path` names)
    and its summary, all or nothing as `verify_folder` sees it: the old marker and summary
    go first, then the tables are moved into place, the summary written, and the marker that
    vouches for all three written last."""
    d = Path(out_dir)
    _retract(d)
    paths = {"requests": commit_file(requests_tmp, d / REQUESTS_FILE)}
    paths["steps"] = commit_file(steps_tmp, d / STEPS_FILE)
    paths["summary"] = write_json(summary, d / SUMMARY_FILE)
    paths["marker"] = _write_marker(d, str(summary["status"]), str(summary["config_hash"]),
                                    RESULT_FILES)
    return paths


def commit_failure(out_dir: str | Path, summary: dict[str, Any]) -> dict[str, Path]:
    """Record a failed job (`on_error=record`): the old result is withdrawn and its tables
    deleted (a failed job's folder must not hold tables that look like its own), then the
    failed summary and a marker that covers it alone are written."""
    d = Path(out_dir)
    _retract(d)
    for name in (REQUESTS_FILE, STEPS_FILE):
        _unlink(d / name)
    paths = {"summary": write_json(summary, d / SUMMARY_FILE)}
    paths["marker"] = _write_marker(d, str(summary["status"]), str(summary["config_hash"]),
                                    (SUMMARY_FILE,))
    return paths


def snapshot_files(folder: str | Path) -> dict[Path, bytes]:
    """The bytes of every file directly in `folder` (none when it does not exist)."""
    d = Path(folder)
    return {p: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()} if d.is_dir() else {}


def restore_files(snapshot: dict[Path, bytes]) -> list[Path]:
    """Write back every file of `snapshot` whose bytes changed since (atomically); returns
    them. A job keeps its folder's `.hydra/` this way: a second run into the folder, refused
    by the lock, has already had Hydra rewrite it with its own config."""
    changed = []
    for p, data in snapshot.items():
        try:
            same = p.read_bytes() == data
        except OSError:
            same = False
        if not same:
            with atomic_path(p) as tmp, open(tmp, "wb") as f:
                f.write(data)
            changed.append(p)
    if changed:
        log.warning("another run rewrote %s while this job held the folder; restored",
                    ", ".join(str(p) for p in changed))
    return changed
