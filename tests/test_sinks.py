"""Atomic writes: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from experiments.report.figures import JobSeries, kv_use_over_time
from experiments.results.sinks import atomic_path, write_json, write_table, write_text
from experiments.results.timeseries import bin_steps


def leftovers(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.endswith(".tmp"))


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "summary.json"
    write_json({"a": 1, "b": math.nan}, target)
    assert json.loads(target.read_text()) == {"a": 1, "b": None}
    with pytest.raises(RuntimeError, match="disk full"), atomic_path(target) as tmp:
        Path(tmp).write_text('{"a": 2, "trunc')
        raise RuntimeError("disk full")
    assert json.loads(target.read_text()) == {"a": 1, "b": None}
    assert leftovers(tmp_path) == []


def test_the_new_file_appears_whole_under_its_name(tmp_path: Path) -> None:
    target = tmp_path / "out" / "t.parquet"
    with atomic_path(target) as tmp:
        assert not target.exists() and Path(tmp).parent == target.parent
        assert Path(tmp).name.startswith(".t.parquet.") and tmp.endswith(".tmp")
        pq.write_table(pa.table({"x": [1, 2]}), tmp)
        assert not target.exists()  # nothing under the real name until the end
    assert pq.read_table(target).column("x").to_pylist() == [1, 2]
    write_table(pa.table({"x": [3]}), target)
    assert pq.read_table(target).column("x").to_pylist() == [3]
    write_text("hello\n", tmp_path / "out" / "r.md")
    assert (tmp_path / "out" / "r.md").read_text() == "hello\n"
    assert leftovers(target.parent) == []


def test_figures_are_written_atomically_as_png_and_pdf(tmp_path: Path) -> None:
    import numpy as np

    steps = pa.table({"start_time": [0.0, 1.0], "duration_s": [0.5, 0.5],
                      "kv_used_tokens": [0, 8]})
    job = JobSeries("vllm", "", np.array([1.0]), np.array([2.0]), bin_steps(steps, 4), 16)
    p = kv_use_over_time([job], tmp_path / "kv.png")
    assert p.read_bytes()[:4] == b"\x89PNG"
    assert p.with_suffix(".pdf").read_bytes()[:5] == b"%PDF-" and leftovers(tmp_path) == []
