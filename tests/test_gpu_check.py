"""scripts/gpu_check.py, as far as a CPU can run it (`--cpu`: toy sizes, Triton interpreted):
every section runs or is skipped by name, everything lands in the one output folder, the
profile CSV has the measured-profile columns and both grids, the sim-vs-real table every
statistic. No time is asserted."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import gpu_check  # noqa: E402


def test_profile_shapes_cover_both_grids() -> None:
    shapes = gpu_check.profile_plans(cpu=False)
    decode = [k for k, _ in shapes if k["op"] == "decode"]
    prefill = [k for k, _ in shapes if k["op"] == "prefill"]
    batches, contexts = gpu_check.DECODE_GRID
    chunks, priors = gpu_check.PREFILL_GRID
    assert {(k["batch"], k["context"]) for k in decode} == {
        (b, c) for b in batches for c in contexts}
    assert {(k["chunk"], k["prior"]) for k in prefill} == {(n, p) for n in chunks for p in priors}
    for keys, spec in shapes:  # the chunks are the shape the row says
        assert len(spec) == keys["batch"]
        assert all(n == keys["chunk"] and start == keys["prior"] for n, start in spec)
        assert keys["context"] == keys["prior"] + keys["chunk"]


def test_cpu_run_writes_every_section_under_one_folder(tmp_path: Path) -> None:
    out = tmp_path / "check"
    proc = subprocess.run(
        [sys.executable, "scripts/gpu_check.py", "--cpu", "--reps", "1", "--profile-reps", "2",
         "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert {p.name for p in out.iterdir()} == {
        "results.json", "parity_tests.log", "profile.csv", "profile.json", "sim_vs_real.csv"}
    results = json.loads((out / "results.json").read_text())
    for name in ("kernels", "parity_tests", "copy_bandwidth_gb_s", "decode_kernel", "model",
                 "profile", "sim_vs_real"):
        assert name in results and not (isinstance(results[name], dict)
                                        and ("error" in results[name]
                                             or "skipped" in results[name])), name
    assert set(results["skipped"]) == {"flash_attn", "parity_tests"}  # named, with a reason
    assert "skipped: flash_attn: GPU only" in proc.stdout
    assert all(r["ok"] for r in results["kernels"])
    parity = results["parity_tests"]
    assert parity["collected_only"] and parity["returncode"] == 0
    log = (out / "parity_tests.log").read_text()  # `-q --collect-only`: tests per file
    for path in gpu_check.PARITY_TESTS:
        assert re.search(rf"{re.escape(path)}: [1-9]", log), (path, log)

    with (out / "profile.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == gpu_check.PROFILE_COLUMNS
    assert len(rows) == len(gpu_check.profile_plans(cpu=True))
    assert {r["op"] for r in rows} == {"decode", "prefill"}
    for r in rows:
        assert int(r["n"]) == 2
        assert 0 < float(r["p10_s"]) <= float(r["median_s"]) <= float(r["p90_s"])
    profile = json.loads((out / "profile.json").read_text())
    assert len(profile["measurements"]) == len(rows)

    with (out / "sim_vs_real.csv").open() as f:
        stats = {r["statistic"]: r for r in csv.DictReader(f)}
    assert set(stats) == {"request_throughput", "median_ttft_ms", "p99_ttft_ms",
                          "median_e2el_ms", "p99_e2el_ms", "num_preemptions",
                          "step_time_median_ape_pct"}
    assert float(stats["request_throughput"]["real"]) > 0
    assert float(stats["request_throughput"]["sim"]) > 0


def test_an_unknown_section_is_named() -> None:
    with pytest.raises(SystemExit):
        gpu_check.main(["--cpu", "--out", "/nonexistent/x", "--sections", "kernels,warp"])
