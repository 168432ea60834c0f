"""A sweep's report files as one set, behind their own marker `report.json`.

`experiments.report.tables.write_report` writes the tables and figures of a sweep, then the
marker last. The marker records what the set was made from and what it holds:
- `jobs`: every job folder of the sweep by name, with the SHA-256 of its completion marker
  (`complete.json`, which vouches for the hashes of the job's own files; null when it had
  none), taken before the jobs were read: a job that ran again since changes it;
- `files`: every file of the set, with its size and SHA-256.

Before a new set is written, the old marker goes first and then the files it lists
(`retract_report`; a multirun does this when it starts, so a killed or resumed sweep never
shows the numbers of an earlier invocation beside job folders that hold new ones). A kill at
any point leaves either a whole set whose marker checks out, or files without a marker.
`report_state` says whether a set can be trusted: its marker's jobs are the sweep's job
folders as they are now, and every file is the one the marker vouches for.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.results.job_folder import MARKER_FILE, file_entry, file_sha256, job_folders
from experiments.results.sinks import write_json

REPORT_MARKER = "report.json"
REPORT_FORMAT = 1
# Files a report writes whatever the sweep: their presence without a marker is a set cut off
# while being written (or written by an older schedbench).
ALWAYS_WRITTEN = ("comparison.csv", "comparison.md", "side_by_side.md")


def job_fingerprints(sweep_dir: str | Path) -> dict[str, str | None]:
    """Every job folder of the sweep (`job_folders`) by name, with the SHA-256 of its
    completion marker (None: it has none)."""
    out: dict[str, str | None] = {}
    for d in job_folders(sweep_dir):
        try:
            out[d.name] = file_sha256(d / MARKER_FILE)
        except FileNotFoundError:
            out[d.name] = None
    return out


def retract_report(out_dir: str | Path) -> list[Path]:
    """Withdraw the set in `out_dir`: its marker first, then the files it lists (never other
    files); returns what was removed."""
    d = Path(out_dir)
    marker = _read_marker(d) or {}
    listed = marker.get("files") if marker.get("format") == REPORT_FORMAT else None
    removed = []
    for name in [REPORT_MARKER, *(listed if isinstance(listed, dict) else {})]:
        p = d / Path(str(name)).name  # a marker names files of its own folder only
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)
            removed.append(p)
    return removed


def commit_report(out_dir: str | Path, files: Mapping[str, Path],
                  jobs: Mapping[str, str | None]) -> Path:
    """Write the marker of the set `files` (all in `out_dir`), made from `jobs`
    (`job_fingerprints` taken before the jobs were read)."""
    d = Path(out_dir)
    return write_json({"format": REPORT_FORMAT, "jobs": dict(jobs),
                       "files": {p.name: file_entry(p) for p in files.values()}},
                      d / REPORT_MARKER)


@dataclass(frozen=True)
class ReportState:
    """Whether the report set in a folder can be trusted: `state` is `ok`, `none` (no set),
    `incomplete` (report files without a marker, or a marker whose files are missing or
    differ) or `stale` (made from other job results than the sweep's folders hold now);
    `reason` says why."""

    state: str
    reason: str = ""


def _read_marker(d: Path) -> dict[str, Any] | None:
    try:
        marker = json.loads((d / REPORT_MARKER).read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def report_state(sweep_dir: str | Path, out_dir: str | Path | None = None) -> ReportState:
    """Check the report set in `out_dir` (default: the sweep folder) against its marker and
    the sweep's job folders now (see the module docstring)."""
    d = Path(out_dir) if out_dir is not None else Path(sweep_dir)
    if not (d / REPORT_MARKER).exists():
        present = [n for n in ALWAYS_WRITTEN if (d / n).exists()]
        if present:
            return ReportState("incomplete", f"{', '.join(present)} without {REPORT_MARKER} "
                                             "(cut off while being written, or written by an "
                                             "older schedbench)")
        return ReportState("none", "no report")
    marker = _read_marker(d)
    if marker is None or not isinstance(marker.get("files"), dict) \
            or not isinstance(marker.get("jobs"), dict):
        return ReportState("incomplete", f"{REPORT_MARKER} is unreadable")
    for name, entry in marker["files"].items():
        p = d / Path(str(name)).name
        if not p.is_file():
            return ReportState("incomplete", f"{name} is missing")
        if file_entry(p) != entry:
            return ReportState("incomplete", f"{name} differs from the file {REPORT_MARKER} "
                                             "vouches for")
    changed = _changed_jobs(marker["jobs"], job_fingerprints(sweep_dir))
    if changed:
        return ReportState("stale", f"made from other job results: {changed}")
    return ReportState("ok")


def _changed_jobs(then: Mapping[str, Any], now: Mapping[str, str | None]) -> str:
    """The job folders whose result differs between two fingerprints, in words ('' if
    none)."""
    parts = []
    for name in sorted(set(then) | set(now), key=lambda n: (len(n), n)):
        if name not in now:
            parts.append(f"job {name} is gone")
        elif name not in then:
            parts.append(f"job {name} is new")
        elif then[name] != now[name]:
            parts.append(f"job {name} has a new result" if now[name] else
                         f"job {name} has no complete result now")
    return ", ".join(parts)
