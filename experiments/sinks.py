"""Write a run's outputs into its job folder, each file atomically.

`requests.parquet` and `steps.parquet` (pyarrow, the tables of `engines.records`) and
`summary.json` (the metrics, sorted keys, NaN written as null). Each file is written to a
temporary name in the same folder and moved into place with `os.replace`, so a reader never
sees a half-written file.
"""

from __future__ import annotations

import json
import math
import os
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

REQUESTS_FILE = "requests.parquet"
STEPS_FILE = "steps.parquet"
SUMMARY_FILE = "summary.json"


def _atomic_write(path: Path, write: Callable[[str], None]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # A fresh name in the same folder (so os.replace is atomic), created with the umask's
    # permissions (unlike mkstemp's 0600).
    tmp = str(path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp"))
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_table(table: pa.Table, path: str | Path) -> Path:
    """Write an Arrow table to parquet atomically."""
    p = Path(path)
    _atomic_write(p, lambda tmp: pq.write_table(table, tmp))
    return p


def _json_safe(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, Mapping):
        return {str(k): _json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_json_safe(v) for v in x]
    return x


def write_json(data: Mapping[str, Any], path: str | Path) -> Path:
    """Write a mapping as JSON atomically (sorted keys; NaN and inf become null)."""
    p = Path(path)
    text = json.dumps(_json_safe(data), indent=2, sort_keys=True, allow_nan=False) + "\n"

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
