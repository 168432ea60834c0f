"""Hydra multiruns: the comparison callback, the W&B offline runs, typo overrides, presets."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from experiments.run.config import register_configs
from experiments.run.wandb_log import offline_runs, read_offline_run

ROOT = Path(__file__).resolve().parents[1]
TINY = ["workload.num_requests=24", "workload.request_rate=200", "kv_capacity_tokens=4096",
        "workload.prompt_len.mean=200", "workload.output_len.mean=40"]


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "experiments.run", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=180,
                          env={**os.environ, "CI": "true", "WANDB_MODE": "offline"})
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def sglang_available() -> bool:
    try:
        from schedulers.sglang import SglangScheduler  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not sglang_available(), reason="schedulers.sglang not available")
def test_default_multirun_compares_both_schedulers_and_logs_wandb(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run("-m", f"hydra.sweep.dir={sweep}", "logger=wandb", *TINY)
    # the callback: one row per job, the varied parameter as a column
    with open(sweep / "comparison.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["scheduler"] for r in rows] == ["vllm", "sglang"]
    assert all(r["completed"] == "24" and r["status"] == "ok" for r in rows)
    md = (sweep / "comparison.md").read_text()
    assert "Varied: `scheduler`" in md and "| job | scheduler |" in md
    side = (sweep / "side_by_side.md").read_text()
    assert "| metric | vllm | sglang |" in side and "| Requests evicted (%) |" in side
    assert "evicted: preempted (vLLM) or retracted (SGLang)" in side
    assert "Median TTFT (ms)" in proc.stdout and "P99 E2EL (ms)" in proc.stdout
    # one labelled line per job (its swept values), no "started" lines nor bars under CI
    assert "[job 0 | vllm] vllm: 24 of 24 done" in proc.stdout
    assert "[job 1 | sglang] sglang: 24 of 24 done" in proc.stdout
    assert "started" not in proc.stdout and "req/s]" not in proc.stderr
    for fig in ("latency_cdf_ttft_e2el", "evictions_by_scheduler", "victim_e2el_by_scheduler",
                "kv_use_vs_time"):
        assert (sweep / f"{fig}.png").read_bytes()[:4] == b"\x89PNG"
        assert (sweep / f"{fig}.pdf").read_bytes()[:5] == b"%PDF-"
    # one offline W&B run per job, in the job folder, in the invocation's group, named after
    # the swept values only (not the fixed overrides of TINY)
    info = json.loads((sweep / "sweep.json").read_text())
    assert info["swept"] == ["scheduler"] and info["group"].startswith("default-")
    for job, sched in ((0, "vllm"), (1, "sglang")):
        runs = offline_runs(sweep / str(job))
        assert len(runs) == 1
        wb = read_offline_run(runs[0])
        summary = json.loads((sweep / str(job) / "summary.json").read_text())
        assert wb.group == info["group"] and wb.project == "schedbench"
        assert wb.name == sched and wb.job_type == sched
        assert wb.config["scheduler.name"] == sched and wb.config["kv_capacity_tokens"] == 4096
        assert wb.config["workload.num_requests"] == 24 and "git_commit" in wb.config
        # summary grouped by prefix
        assert wb.summary["requests/completed"] == 24 and "completed" not in wb.summary
        assert wb.summary["latency/median_e2el_ms"] == pytest.approx(summary["median_e2el_ms"])
        assert wb.summary["eviction/num_preemptions"] == summary["num_preemptions"]
        assert wb.summary["run/scheduler"] == sched
        # history on simulated time: binned KV use, queue and batch series
        rows = [r for r in wb.history if "timeline/busy_share" in r]
        assert 10 <= len(rows) <= 300
        times = [r["sim_time_s"] for r in rows]
        assert times == sorted(times) and times[-1] == pytest.approx(summary["duration"], rel=0.2)
        for key in ("timeline/kv_used_tokens_mean", "timeline/kv_cached_tokens_mean",
                    "timeline/running_requests_mean", "timeline/waiting_requests_mean",
                    "timeline/batch_tokens_mean", "timeline/evictions_in_bin"):
            assert key in wb.history_keys
        assert max(r.get("timeline/kv_used_tokens_max", 0) for r in rows) == summary[
            "max_kv_used_tokens"]
        assert sum(r.get("timeline/evictions_in_bin", 0) for r in rows) == summary[
            "num_preemptions"]
        tables = [f for f in wb.files if f.startswith("media/table/tables/requests")]
        assert tables and any(f.startswith("media/images/figures/") for f in wb.files)
        table = json.loads((runs[0] / "files" / tables[0]).read_text())
        assert len(table["data"]) == 24 and "e2el_ms" in table["columns"]
    # the sweep's own run: the comparison table and figures, in the same group
    (sweep_run,) = offline_runs(sweep / "wandb")
    wb = read_offline_run(sweep_run)
    assert wb.group == info["group"] and wb.job_type == "sweep" and wb.name == "sweep default"
    assert wb.summary["sweep/jobs"] == 2
    table_files = [f for f in wb.files if f.startswith("media/table/tables/comparison")]
    comparison = json.loads((sweep_run / "files" / table_files[0]).read_text())
    assert [row[comparison["columns"].index("scheduler")] for row in comparison["data"]] == [
        "vllm", "sglang"]
    assert {f"figures/{k}" for k in ("latency_cdf_ttft_e2el", "kv_use_vs_time")} <= set(
        wb.summary)
    # only the scheduler varies: the answers as one bar per job
    assert {"charts/evictions_by_job", "charts/victim_e2el_by_job"} <= set(wb.charts)


def test_typo_in_an_override_fails_with_the_valid_keys(tmp_path: Path) -> None:
    proc = run(f"hydra.run.dir={tmp_path}", "scheduler.max_seqs=4", check=False)
    assert proc.returncode != 0
    assert ("override 'scheduler.max_seqs=4': scheduler has no key 'max_seqs'; valid keys: "
            "async_scheduling, block_size, enable_prefix_caching") in proc.stderr
    assert "max_num_seqs" in proc.stderr
    assert not (tmp_path / "summary.json").exists()


@pytest.fixture
def hydra_conf() -> object:
    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        yield compose
    GlobalHydra.instance().clear()


def test_type_errors_and_defaults_compose(hydra_conf: object) -> None:
    cfg = compose(config_name="config")
    assert cfg.scheduler.name == "vllm" and cfg.workload.name == "synthetic"
    assert cfg.slo.ttft == 2000 and cfg.logger.name == "none"
    for override, why in (("seed=lots", "could not be converted to Integer"),
                          ("progress=sometimes", "expected one of [auto, on, off]"),
                          ("workload.request_rate=fast", "could not be converted to Float")):
        with pytest.raises(Exception, match=f"Error merging override {override}") as e:
            compose(config_name="config", overrides=[override])
        assert why in str(e.value.__cause__)


@pytest.mark.parametrize("preset", ["preemption", "prefix_recovery", "victim_choice",
                                    "victim_policies"])
def test_experiment_presets_compose_and_sweep_existing_keys(hydra_conf: object,
                                                            preset: str) -> None:
    cfg = compose(config_name="config", overrides=[f"experiment={preset}"],
                  return_hydra_config=True)
    assert cfg.name == preset and cfg.on_error.name == "record"
    raw = OmegaConf.to_container(cfg.hydra.sweeper.params, resolve=True)  # ${schedulers:}
    assert isinstance(raw, dict) and raw
    params = {str(k): str(v) for k, v in raw.items()}
    groups = {k: v.split(",")[0] for k, v in params.items() if "." not in k}
    job = compose(config_name="config", overrides=[f"experiment={preset}",
                                                   *[f"{k}={v}" for k, v in groups.items()]])
    for key in params:
        node: Any = job
        for part in key.split("."):
            assert part in node, f"{preset}: swept key {key} is not in the config"
            node = node[part]
    assert cfg.hydra.launcher.n_jobs == 2
