"""The victim-policy study (scripts/reproduce_victim_policies.sh) in miniature: its preset
sweeps policy x preemption mode x scheduler x load on a trace, and its reports (per-trace
tables with the swap columns, then scripts/policy_report.py) run end to end."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.report.tables import write_report

ROOT = Path(__file__).resolve().parents[1]
TRACES = Path(os.environ.get("SCHEDBENCH_TRACE_DIR")
              or ROOT.parent / "shared" / "data" / "traces")
CODE = TRACES / "azure2023" / "AzureLLMInferenceTrace_code.csv"


@pytest.mark.skipif(not CODE.is_file(), reason=f"{CODE} absent")
def test_tiny_victim_policy_study_runs_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "victim_policies"
    sweep = out / "azure_code" / "runs"
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.run", "-m", "experiment=victim_policies",
         f"hydra.sweep.dir={sweep}", "hydra.launcher.n_jobs=1",
         "hydra.callbacks.comparison.figures=false", "hydra.callbacks.comparison.print_table=false",
         "workload.max_requests=20", "workload.rate_scale=4",
         "scheduler.victim_policy=default,most_kv"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "CI": "true", "SCHEDBENCH_TRACE_DIR": str(TRACES)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    columns = ["num_preemptions", "recomputed_token_share", "p99_e2el_victim_ms",
               "p99_e2el_nonvictim_ms", "slo_attainment", "num_swap_out",
               "num_swap_fallbacks", "swap_time_share"]
    write_report(sweep, out / "azure_code", figures=False, columns=columns)
    with open(out / "azure_code" / "comparison.csv") as f:
        rows = list(csv.DictReader(f))
    # 2 schedulers x 2 modes x 2 policies, the same pool, a host pool as large in swap mode
    assert len(rows) == 8 and all(r["status"] == "ok" for r in rows)
    assert {(r["scheduler"], r["scheduler.preemption_mode"], r["scheduler.victim_policy"])
            for r in rows} == {(s, m, p) for s in ("vllm", "sglang")
                               for m in ("recompute", "swap") for p in ("default", "most_kv")}
    done = {int(r["completed"]) for r in rows}
    assert len(done) == 1 and 0 < done.pop() <= 20  # prompts over 512 tokens are dropped
    assert all(int(r["num_swap_out"]) == 0 for r in rows
               if r["scheduler.preemption_mode"] == "recompute")
    head = (out / "azure_code" / "headline.md").read_text()
    assert "num_swap_out[vllm]" in head and "p99_e2el_nonvictim_ms[sglang]" in head
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "policy_report.py"), str(out),
                           "azure_code"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    paths = {name: out / name for name in ("runs.csv", "best.csv", "azure_code_policies.png",
                                           "azure_code_swap_vs_recompute.png")}
    with open(paths["runs.csv"]) as f:
        runs = list(csv.DictReader(f))
    assert len(runs) == 8 and {r["trace"] for r in runs} == {"azure_code"}
    assert {"policy", "mode", "load", "p99_e2el_victim_ms", "swap_time_share"} <= set(runs[0])
    with open(paths["best.csv"]) as f:
        best = list(csv.DictReader(f))
    assert len(best) == 4  # per scheduler and mode, one load
    for name in ("azure_code_policies.png", "azure_code_swap_vs_recompute.png"):
        assert paths[name].read_bytes()[:4] == b"\x89PNG"
