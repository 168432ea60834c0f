"""The victim-policy study (scripts/reproduce_victim_policies.sh) in miniature: its preset
sweeps policy x preemption mode x scheduler x load x realisation on a trace, and its reports
(the sweep's tables with the swap columns, then scripts/policy_report.py with loads as
fractions of a capacity file) run end to end."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.report.tables import write_report

ROOT = Path(__file__).resolve().parents[1]
TRACES = Path(os.environ.get("SCHEDBENCH_TRACE_DIR")
              or ROOT.parent / "shared" / "data" / "traces")
CONV = TRACES / "azure2023" / "AzureLLMInferenceTrace_conv.csv"


@pytest.mark.skipif(not CONV.is_file(), reason=f"{CONV} absent")
def test_tiny_victim_policy_study_runs_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "victim_policies"
    sweep = out / "runs" / "both"
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.run", "-m", "experiment=victim_policies",
         f"hydra.sweep.dir={sweep}", "hydra.launcher.n_jobs=2",
         "hydra.callbacks.comparison.figures=false", "hydra.callbacks.comparison.print_table=false",
         "workload.max_requests=12", "workload.rate_scale=2,4", "repeats=2",
         "scheduler.victim_policy=default,most_kv"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "CI": "true", "SCHEDBENCH_TRACE_DIR": str(TRACES)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    columns = ["num_preemptions", "recomputed_token_share", "p99_e2el_victim_ms",
               "p99_e2el_nonvictim_ms", "slo_attainment", "num_swap_out",
               "num_swap_fallbacks", "swap_time_share"]
    write_report(sweep, out / "both", figures=False, columns=columns)
    with open(out / "both" / "comparison.csv") as f:
        rows = list(csv.DictReader(f))
    # 2 schedulers x 2 modes x 2 policies x 2 rates x 2 realisations, a host pool in swap mode
    assert len(rows) == 32 and all(r["status"] == "ok" for r in rows)
    assert {(r["scheduler"], r["scheduler.preemption_mode"], r["scheduler.victim_policy"])
            for r in rows} == {(s, m, p) for s in ("vllm", "sglang")
                               for m in ("recompute", "swap") for p in ("default", "most_kv")}
    assert all(int(r["num_swap_out"]) == 0 for r in rows
               if r["scheduler.preemption_mode"] == "recompute")
    capacity = tmp_path / "capacity.json"  # made-up capacities: loads 0.5 / 1 and 1 / 2
    capacity.write_text(json.dumps({"schedulers": {"vllm": {"capacity": 4.0},
                                                   "sglang": {"capacity": 2.0}}}))
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "policy_report.py"), str(out),
                           "both", "--capacity", str(capacity)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with open(out / "runs.csv") as f:
        runs = list(csv.DictReader(f))
    assert len(runs) == 32
    assert {(r["scheduler"], float(r["load"])) for r in runs} == {
        ("vllm", 0.5), ("vllm", 1.0), ("sglang", 1.0), ("sglang", 2.0)}
    with open(out / "policies.csv") as f:
        stats = list(csv.DictReader(f))
    assert len(stats) == 16 and {r["n_realizations"] for r in stats} == {"2"}
    assert {"slo_attainment_ci_lo", "p99_e2el_victim_ms_n"} <= set(stats[0])
    with open(out / "vs_default.csv") as f:
        vs = list(csv.DictReader(f))
    assert len(vs) == 8 and {r["policy"] for r in vs} == {"most_kv"}  # the default left out
    for name in ("policies.png", "swap_vs_recompute.png", "vs_default.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"


def test_policy_report_refuses_a_sweep_without_rates(tmp_path: Path) -> None:
    part = tmp_path / "part"
    part.mkdir()
    (part / "comparison.csv").write_text("job,scheduler,status\n0,vllm,ok\n")
    capacity = tmp_path / "capacity.json"
    capacity.write_text(json.dumps({"schedulers": {"vllm": {"capacity": 1.0}}}))
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "policy_report.py"),
                           str(tmp_path), "part", "--capacity", str(capacity)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "--load" in proc.stderr
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "policy_report.py"),
                           str(tmp_path), "part", "--capacity", str(capacity), "--load", "1.25",
                           "--no-figures"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "runs.csv").read_text().splitlines()[1].startswith("vllm,recompute,1.25,")
