"""Write a run's outputs into its job folder, each file atomically.

`requests.parquet` and `steps.parquet` (pyarrow, the tables of `engines.records`) and
`summary.json` (the metrics, sorted keys, NaN written as null). Each file is written to a
temporary name in the same folder and moved into place with `os.replace`, so a reader never
sees a half-written file. A replay spools its parquet files under `temp_path` names as it runs
and `experiments.results.job_folder.commit_run` moves them into place behind a completion marker.
`write_text` and `atomic_path` do the same for reports and figures.
"""

from __future__ import annotations

import json
import math
import os
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

REQUESTS_FILE = "requests.parquet"
STEPS_FILE = "steps.parquet"
SUMMARY_FILE = "summary.json"


def _atomic_write(path: Path, write: Callable[[str], None]) -> None:
    with atomic_path(path) as tmp:
        write(tmp)


def temp_path(path: str | Path) -> Path:
    """A fresh hidden temporary name next to `path` (`.NAME.<pid>.<id>.tmp`), its folder
    created: write there, then `commit_file` it onto `path`."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    # A fresh name in the same folder (so os.replace is atomic), created with the umask's
    # permissions (unlike mkstemp's 0600).
    return p.with_name(f".{p.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp")


def commit_file(tmp: str | Path, path: str | Path) -> Path:
    """Move the complete file `tmp` onto `path` atomically (same folder)."""
    os.replace(tmp, path)
    return Path(path)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[str]:
    """A temporary file name next to `path`; on a clean exit it is moved onto `path`, on an
    error it is removed. (The name ends in .tmp: tell writers the format, e.g.
    `savefig(tmp, format="png")`.)"""
    p = Path(path)
    tmp = str(temp_path(p))
    try:
        yield tmp
        os.replace(tmp, p)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_table(table: pa.Table, path: str | Path) -> Path:
    """Write an Arrow table to parquet atomically."""
    p = Path(path)
    _atomic_write(p, lambda tmp: pq.write_table(table, tmp))
    return p


def json_safe(x: Any) -> Any:
    """`x` with NaN and infinities replaced by None, tuples as lists, keys as strings."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, Mapping):
        return {str(k): json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [json_safe(v) for v in x]
    return x


def write_json(data: Mapping[str, Any], path: str | Path) -> Path:
    """Write a mapping as JSON atomically (sorted keys; NaN and inf become null)."""
    p = Path(path)
    text = json.dumps(json_safe(data), indent=2, sort_keys=True, allow_nan=False) + "\n"

    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            f.write(text)

    _atomic_write(p, write)
    return p


def write_text(text: str, path: str | Path) -> Path:
    """Write text atomically."""
    p = Path(path)

    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            f.write(text)

    _atomic_write(p, write)
    return p


def write_run(out_dir: str | Path, requests: pa.Table, steps: pa.Table,
              summary: Mapping[str, Any]) -> dict[str, Path]:
    """Write the three files of a run into `out_dir`; returns their paths."""
    d = Path(out_dir)
    return {
        "requests": write_table(requests, d / REQUESTS_FILE),
        "steps": write_table(steps, d / STEPS_FILE),
        "summary": write_json(summary, d / SUMMARY_FILE),
    }
