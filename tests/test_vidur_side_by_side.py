"""scripts/vidur_side_by_side.py: reading a Vidur 0.0.26 output folder (its column names)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_script(name: str) -> ModuleType:
    """scripts/<name>.py as a module, registered in sys.modules (its dataclass needs that)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _vidur_run(tmp_path: Path, with_batches: bool = True) -> Path:
    run = tmp_path / "vidur" / "2026-12-03_08-05-03-405625"
    run.mkdir(parents=True)
    # as vidur/metrics/metrics_store.py writes them: an outer merge on "Request Id"
    (run / "request_metrics.csv").write_text(
        "Request Id,request_e2e_time,prefill_e2e_time,request_num_restarts\n"
        "0,2.5,0.25,0\n1,4.0,0.5,2\n2,,0.75,1\n")
    if with_batches:
        (run / "batch_metrics.csv").write_text(
            "Batch Id,batch_num_tokens,batch_size,batch_execution_time\n"
            "0,512,1,0.05\n1,3,3,0.02\n")
    return tmp_path / "vidur"


def test_reads_vidurs_request_and_batch_metrics(tmp_path: Path) -> None:
    r = load_script("vidur_side_by_side").read_vidur(_vidur_run(tmp_path))
    assert r.ttft_s.tolist() == [0.25, 0.5, 0.75]
    assert r.e2e_s[:2].tolist() == [2.5, 4.0] and np.isnan(r.e2e_s[2])
    assert r.step_s.tolist() == [0.05, 0.02]
    assert r.step_tokens.tolist() == [512, 3]
    # evictions are restart events summed over requests; two requests restarted
    assert (r.evictions, r.evicted_requests, r.max_evictions_per_request) == (3, 2, 2)
    assert r.incomplete == 1


def test_refuses_a_run_without_per_batch_metrics(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="keep_individual_batch_metrics"):
        load_script("vidur_side_by_side").read_vidur(_vidur_run(tmp_path, with_batches=False))


def test_refuses_a_folder_without_one_run(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="found 0"):
        load_script("vidur_side_by_side").read_vidur(tmp_path)
