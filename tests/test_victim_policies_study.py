"""The victim-policy study (scripts/reproduce_victim_policies.sh) in miniature: its preset
sweeps policy x preemption mode x scheduler x load x realisation on a trace, every policy and
mode at load x the default policy's capacity in its window (a capacity file marked
`scheduler_free`), and its reports (the sweep's tables with the swap columns, then
scripts/policy_report.py with each window's capacity and rate) run end to end."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from experiments.capacity.main import compose
from experiments.report.tables import write_report
from experiments.run.load import (
    CAPACITY_FORMAT,
    CAPACITY_KIND,
    capacity_config,
    resolve_load,
    scheduler_config,
)
from experiments.user_error import ConfigError

ROOT = Path(__file__).resolve().parents[1]
TRACES = Path(os.environ.get("SCHEDBENCH_TRACE_DIR")
              or ROOT.parent / "shared" / "data" / "traces")
CONV = TRACES / "azure2023" / "AzureLLMInferenceTrace_conv.csv"


FREE = ["host_kv_capacity_tokens", "preemption_mode", "victim_policy"]
TINY = ["experiment=victim_policies", "workload.max_requests=12", "realizations=[0,4]"]
# made-up per-window capacities (rate_scale) of the default policy in recompute mode
WINDOWS = {"vllm": {0: 2.0, 4: 4.0}, "sglang": {0: 1.0, 4: 3.0}}


def capacity_file(path: Path, free: list[str] | None = FREE) -> Path:
    """A capacity file for the tiny study's config (as `python -m experiments.capacity
    experiment=victim_policies --per-window --scheduler-free ...` writes one), each
    scheduler's capacity per window from `WINDOWS`, marked free of `free`."""
    data: dict[str, Any] = {"kind": CAPACITY_KIND, "format": CAPACITY_FORMAT,
                            "rate_param": "workload.rate_scale", "rate_value": 1.0,
                            "target": 0.9, "realizations": 2, "realization_ids": [0, 4],
                            "per_window": True, "schedulers": {}}
    for sched, windows in WINDOWS.items():
        cfg = compose([*TINY, f"scheduler={sched}"])
        data["config"] = capacity_config(cfg)
        data["schedulers"][sched] = {
            "scheduler_config": scheduler_config(cfg), "capacity": min(windows.values()),
            "capacity_request_rate": None,
            **({"scheduler_free": free} if free else {}),
            "per_realization": {str(k): {"capacity": c, "capacity_request_rate": 2 * c}
                                for k, c in windows.items()}}
    path.write_text(json.dumps(data))
    return path


def test_every_policy_runs_at_the_default_policys_capacity_only_when_free(
        tmp_path: Path) -> None:
    job = [*TINY, "scheduler=vllm", "scheduler.victim_policy=most_kv",
           "scheduler.preemption_mode=swap", "workload.load=1.5", "workload.realization=4"]
    free = capacity_file(tmp_path / "free.json")
    workload, res = resolve_load(compose([*job, f"workload.capacity_file={free}"]))
    assert res is not None and res.source == "window 4"
    assert workload["rate_scale"] == pytest.approx(1.5 * 4.0)
    strict = capacity_file(tmp_path / "strict.json", free=None)
    with pytest.raises(ConfigError, match=r"made for another config: scheduler\.preemption_mode"):
        resolve_load(compose([*job, f"workload.capacity_file={strict}"]))


@pytest.mark.skipif(not CONV.is_file(), reason=f"{CONV} absent")
def test_tiny_victim_policy_study_runs_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "victim_policies"
    sweep = out / "runs" / "both"
    capacity = capacity_file(tmp_path / "capacity.json")
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.run", "-m", *TINY,
         f"hydra.sweep.dir={sweep}", "hydra.launcher.n_jobs=2",
         "hydra.callbacks.comparison.figures=false", "hydra.callbacks.comparison.print_table=false",
         "workload.load=1,2", f"workload.capacity_file={capacity}",
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
    # 2 schedulers x 2 modes x 2 policies x 2 loads x 2 realisations, a host pool in swap mode
    assert len(rows) == 32 and all(r["status"] == "ok" for r in rows)
    assert {(r["scheduler"], r["scheduler.preemption_mode"], r["scheduler.victim_policy"])
            for r in rows} == {(s, m, p) for s in ("vllm", "sglang")
                               for m in ("recompute", "swap") for p in ("default", "most_kv")}
    assert all(int(r["num_swap_out"]) == 0 for r in rows
               if r["scheduler.preemption_mode"] == "recompute")
    # each job at load x its window's capacity (summary.json)
    for summary in sweep.glob("*/summary.json"):
        s = json.loads(summary.read_text())
        k = int(s["realization"])
        assert s["load_capacity_source"] == f"window {k}"
        assert s["load_rate"] == pytest.approx(s["load"] * WINDOWS[s["scheduler"]][k])
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "policy_report.py"), str(out),
                           "both", "--capacity", str(capacity)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with open(out / "runs.csv") as f:
        runs = list(csv.DictReader(f))
    assert len(runs) == 32
    assert {(r["scheduler"], float(r["load"])) for r in runs} == {
        (s, load) for s in ("vllm", "sglang") for load in (1.0, 2.0)}
    for r in runs:  # the window's own capacity and the rate the load meant there
        cap = WINDOWS[r["scheduler"]][int(r["realization"])]
        assert float(r["capacity"]) == cap
        assert float(r["rate_scale"]) == pytest.approx(float(r["load"]) * cap)
    table = (out / "capacity.md").read_text()
    assert "| vLLM | 4 | 4 | 8 | 4 | 8 |" in table  # window 4: capacity, req/s, at 1x, 2x
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
