"""`python -m experiments.run` end to end, in a subprocess, plus the config builders."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from engines.records import REQUEST_SCHEMA, STEP_SCHEMA
from experiments.inputs.workloads import build_workload
from experiments.run.build import build_executor, build_hardware, build_model, build_scheduler

ROOT = Path(__file__).resolve().parents[1]
TINY = ["workload.num_requests=30", "workload.request_rate=200", "kv_capacity_tokens=4096",
        "workload.prompt_len.mean=200", "workload.output_len.mean=40"]


def run(out: Path, *overrides: str, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.run", f"hydra.run.dir={out}", *overrides],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, **(env or {})},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def vllm_available() -> bool:
    try:
        import schedulers.vllm  # noqa: F401
    except ImportError:
        return False
    return True


needs_vllm = pytest.mark.skipif(not vllm_available(), reason="schedulers.vllm not available")


@needs_vllm
def test_default_run_writes_outputs(tmp_path: Path) -> None:
    out = tmp_path / "job"
    proc = run(out, *TINY)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scheduler"] == "vllm" and summary["model"] == "llama2_7b"
    assert summary["completed"] == 30 and summary["num_requests"] == 30
    for key in ("mean_ttft_ms", "median_tpot_ms", "p99_itl_ms", "mean_e2el_ms",
                "request_throughput", "output_throughput", "duration", "num_preemptions",
                "preempted_request_share"):
        assert isinstance(summary[key], int | float), key
    reqs = pq.read_table(out / "requests.parquet")
    assert reqs.schema == REQUEST_SCHEMA and reqs.num_rows == 30
    assert pq.read_table(out / "steps.parquet").schema == STEP_SCHEMA
    assert sum(reqs.column("output_len").to_pylist()) == summary["total_output_tokens"]
    assert "Serving Benchmark Result" in proc.stdout
    assert not list(out.glob("*.tmp")) and not list(out.glob(".*.tmp"))
    assert (out / ".hydra" / "config.yaml").exists()

    # Same config in a fresh process (new hash seed): the same bytes.
    again = tmp_path / "again"
    run(again, *TINY, env={"PYTHONHASHSEED": "123"})
    for name in ("requests.parquet", "steps.parquet", "summary.json"):
        assert (out / name).read_bytes() == (again / name).read_bytes(), name


@needs_vllm
def test_scheduler_fields_from_the_command_line(tmp_path: Path) -> None:
    out = tmp_path / "job"
    run(out, *TINY, "scheduler.max_num_seqs=1", "scheduler.max_num_batched_tokens=64")
    steps = pq.read_table(out / "steps.parquet")
    assert max(steps.column("num_scheduled_reqs").to_pylist()) == 1
    assert max(steps.column("num_tokens").to_pylist()) == 64
    assert json.loads((out / "summary.json").read_text())["completed"] == 30


def sglang_available() -> bool:
    try:
        from schedulers.sglang import SglangScheduler  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not sglang_available(), reason="schedulers.sglang not available")
def test_sglang_with_overrides(tmp_path: Path) -> None:
    out = tmp_path / "job"
    run(out, *TINY, "scheduler=sglang", "scheduler.max_running_requests=2",
        "scheduler.chunked_prefill_size=64")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scheduler"] == "sglang" and summary["completed"] == 30
    steps = pq.read_table(out / "steps.parquet")
    assert max(steps.column("num_scheduled_reqs").to_pylist()) == 2
    assert max(steps.column("num_tokens").to_pylist()) == 64


def test_external_scheduler_through_target(tmp_path: Path) -> None:
    conf = tmp_path / "conf" / "scheduler"
    conf.mkdir(parents=True)
    (conf / "fcfs_double.yaml").write_text(
        "name: fcfs_double\ntarget: fcfs_double:make_scheduler\npage_size: 16\n"
        "max_num_seqs: 8\nmax_num_batched_tokens: 512\n")
    out = tmp_path / "job"
    run(out, *TINY, "scheduler=fcfs_double", f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
        "scheduler.max_num_seqs=2", env={"PYTHONPATH": str(ROOT / "tests")})
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scheduler"] == "fcfs_double" and summary["completed"] == 30
    steps = pq.read_table(out / "steps.parquet")
    assert max(steps.column("num_scheduled_reqs").to_pylist()) == 2


def test_builders_name_bad_fields() -> None:
    with pytest.raises(ValueError,
                       match=r"scheduler.name='orca': unknown; valid: (\w+, )*sglang, vllm"):
        build_scheduler({"name": "orca"}, 1024)
    if vllm_available():
        with pytest.raises(ValueError,
                           match=r"unknown field.*max_seqs; valid: async_scheduling, block_size"):
            build_scheduler({"name": "vllm", "max_seqs": 4}, 1024)
    with pytest.raises(ValueError, match=r"model: unknown field.*layers"):
        build_model({"name": "m", "layers": 2})
    with pytest.raises(ValueError, match=r"hardware: peak_flops='fast': not a number"):
        build_hardware({"name": "h", "peak_flops": "fast"})
    with pytest.raises(ValueError, match=r"executor.name='tpu': unknown; valid: sim, real"):
        build_executor({"name": "tpu"}, None, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"executor=real needs executor.model_path"):
        build_executor({"name": "real"}, None, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"workload.name='trace': unknown; valid: synthetic"):
        build_workload({"name": "trace"})
