"""Comparisons that cannot mislead (issue 12): the same context length for both schedulers,
every refused or dropped request counted and said out loud, no statistic over no data shown
as a measurement, and summary.json naming what really ran."""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from conftest import compose_config
from omegaconf import DictConfig

from engines.model.tiny import save_tiny_checkpoint
from experiments.inputs.workloads import stream_workload
from experiments.report import figures
from experiments.report.tables import (
    comparison_frame,
    completion_warnings,
    load_sweep,
    terminal_summary,
    write_report,
)
from experiments.results.metrics import rejection_kind
from experiments.run.build import build_scheduler
from experiments.run.main import format_summary, run_experiment
from experiments.run.provenance import git_state
from experiments.run.wandb_log import offline_runs, read_offline_run
from schedulers import registry
from schedulers.contract import Request

ROOT = Path(__file__).resolve().parents[1]
# Llama-3-8B (an 8,192-token context) on an H200, timed by the ideal roofline (the pair has
# no measured profile): what LONG's requests need.
LLAMA3 = ["model=llama3_8b", "hardware=h200", "executor.cost_model=roofline"]
# Four requests whose prompts (5,000-6,000 tokens) fit llama3_8b's 8,192-token context but
# not the 4,096 that vLLM's config class defaults to.
LONG = ["workload.num_requests=4", "workload.request_rate=50", "kv_capacity_tokens=32768",
        "workload.prompt_len={dist:uniform,low:5000,high:6000,max:6000}",
        "workload.output_len={dist:uniform,low:4,high:8}", "progress=off"]
# Twelve short requests; `max_model_len=16` refuses them all.
SHORT = ["workload.num_requests=12", "workload.request_rate=50", "kv_capacity_tokens=4096",
         "workload.prompt_len={dist:uniform,low:40,high:120,max:120}",
         "workload.output_len={dist:uniform,low:4,high:8}", "progress=off"]


def job_config(*overrides: str) -> DictConfig:
    return compose_config(list(overrides))


def write_job(sweep: Path, num: int, overrides: list[str], *cfg: str) -> dict[str, Any]:
    """Run one job into `sweep/num` as a multirun would lay it out (the report labels a job
    by the overrides its summary records)."""
    out = sweep / str(num)
    summary = run_experiment(job_config(*cfg), out, overrides=overrides)
    (out / ".hydra").mkdir(parents=True, exist_ok=True)
    (out / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    return summary


# --- 1. the same context length ---------------------------------------------------------

@pytest.mark.parametrize("scheduler", registry.names())
def test_both_schedulers_default_to_the_models_context_length(tmp_path: Path,
                                                              scheduler: str) -> None:
    s = run_experiment(job_config(f"scheduler={scheduler}", *LLAMA3, *LONG), tmp_path / "job")
    # vLLM's 4096 would have refused every one of these prompts
    assert s["completed"] == 4 and s["rejected"] == 0
    assert s["max_model_len"] == 8192
    assert s["max_model_len_source"] == "model.max_position_embeddings"
    on_disk = json.loads((tmp_path / "job" / "summary.json").read_text())
    assert on_disk["max_model_len"] == 8192


def test_context_length_overrides_name_their_source(tmp_path: Path) -> None:
    both = run_experiment(job_config("scheduler=sglang", "max_model_len=2048", *LLAMA3, *LONG),
                          tmp_path / "top")
    assert (both["max_model_len"], both["max_model_len_source"]) == (2048, "max_model_len")
    assert both["rejected_too_long"] == 4 and both["completed"] == 0
    own = run_experiment(job_config("scheduler.max_model_len=6500", *LLAMA3, *LONG),
                         tmp_path / "own")
    assert (own["max_model_len"], own["max_model_len_source"]) == (
        6500, "scheduler.max_model_len")
    llama2 = run_experiment(job_config("model=llama2_7b", *LONG), tmp_path / "llama2")
    assert llama2["max_model_len"] == 4096 and llama2["rejected_too_long"] == 4
    # no context length anywhere: each scheduler's built-in default, recorded and warned of
    unknown = run_experiment(job_config("model.max_position_embeddings=null", *LLAMA3, *LONG),
                             tmp_path / "unknown")
    assert (unknown["max_model_len"], unknown["max_model_len_source"]) == (
        4096, "scheduler default")
    assert any("built-in default" in w for w in unknown["warnings"])


# --- 2. offered / completed / rejected by reason / aborted, and different sets ------------

def test_rejection_reasons_of_both_schedulers_are_classified() -> None:
    def reason(name: str, prompt_len: int, **kw: Any) -> str:
        sched = build_scheduler({"name": name, **kw}, 1024, 256)
        req = Request(request_id="r", prompt_token_ids=[1] * prompt_len, max_tokens=4)
        return sched.add_request(req) or ""

    assert rejection_kind(reason("vllm", 300)) == "too_long"
    assert rejection_kind(reason("sglang", 300)) == "too_long"
    big = build_scheduler({"name": "vllm"}, 1024, 4096)
    pool = big.add_request(Request(request_id="p", prompt_token_ids=[1] * 2000, max_tokens=4))
    assert rejection_kind(pool or "") == "kv_pool"
    assert rejection_kind(reason("vllm", 0)) == "other"


def test_report_counts_requests_and_warns_when_completed_sets_differ(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    # vLLM at max_model_len=96 refuses the longer prompts; SGLang at the model's 8192 does not
    write_job(sweep, 0, ["scheduler=vllm"], "scheduler=vllm", "max_model_len=96", *SHORT)
    write_job(sweep, 1, ["scheduler=sglang"], "scheduler=sglang", *SHORT)
    paths = write_report(sweep, figures=False)
    frame = comparison_frame(load_sweep(sweep))
    v, s = frame.iloc[0], frame.iloc[1]
    assert v["offered"] == s["offered"] == 12
    assert 0 < v["rejected_too_long"] < 12 and s["rejected_too_long"] == 0
    assert v["completed"] + v["rejected_too_long"] == 12 and s["completed"] == 12
    for col in ("rejected_kv_pool", "rejected_other", "rejected_503", "aborted"):
        assert v[col] == s[col] == 0, col
    csv_head = paths["comparison.csv"].read_text().splitlines()[0].split(",")
    assert {"offered", "completed", "rejected_too_long", "rejected_503", "aborted"} <= set(
        csv_head)
    side = paths["side_by_side.md"].read_text()
    warning = side.index("> **Warning**: the schedulers completed different requests")
    assert warning < side.index("| metric |")
    assert f"| Rejected: too long (count) | {v['rejected_too_long']} | 0 |" in side
    assert "| Requests offered (count) | 12 | 12 |" in side
    assert "completed by only some" in side
    assert terminal_summary(load_sweep(sweep)).startswith("WARNING: the schedulers completed")

    same = tmp_path / "same"
    write_job(same, 0, ["scheduler=vllm"], "scheduler=vllm", *SHORT)
    write_job(same, 1, ["scheduler=sglang"], "scheduler=sglang", *SHORT)
    assert completion_warnings(load_sweep(same)) == []
    assert "Warning" not in write_report(same, figures=False)["side_by_side.md"].read_text()


# --- 3. requests dropped by the workload's transforms ---------------------------------------

def _azure_csv(folder: Path) -> Path:
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for i, n in enumerate([50, 900, 60, 1200, 70, 80, 2000, 90]):
        rows.append(f"2023-11-16 18:17:{i:02d}.0000000,{n},6")
    path = folder / "azure2023" / "AzureLLMInferenceTrace_code.csv"
    path.parent.mkdir(parents=True)
    path.write_text("\n".join(rows) + "\n")
    return folder


def test_dropped_requests_are_logged_and_recorded(tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    traces = _azure_csv(tmp_path / "traces")
    cfg = {"name": "azure", "trace_dir": str(traces),
           "file": "azure2023/AzureLLMInferenceTrace_code.csv", "max_requests": 7,
           "max_input_len": 500}
    with caplog.at_level(logging.INFO, logger="experiments.inputs.workloads.transforms"):
        stream = stream_workload(cfg, 0)
    assert len(stream) == 4 and stream.dropped == {"max_requests": 1, "max_input_len": 3}
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "dropped 3 requests" in warned[0].getMessage()
    assert "max_input_len=500" in warned[0].getMessage()
    clipped = stream_workload({**cfg, "long_inputs": "clip"}, 0)
    assert len(clipped) == 7 and clipped.clipped == 3

    s = run_experiment(job_config("workload=azure_code", f"workload.trace_dir={traces}",
                                  "workload.max_requests=7", "workload.max_input_len=500",
                                  "progress=off"), tmp_path / "job")
    assert s["offered"] == 4 and s["num_requests"] == 4
    assert s["workload_dropped"] == {"max_requests": 1, "max_input_len": 3}
    assert any("3 requests dropped before the run" in w for w in s["warnings"])


# --- 4. a run where many requests are refused warns ------------------------------------------

def test_a_mostly_rejected_run_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="experiments.run"):
        s = run_experiment(job_config("max_model_len=96", *SHORT), tmp_path / "job")
    assert s["rejected_too_long"] > s["offered"] * 0.1
    assert len(s["warnings"]) == 1
    assert s["warnings"][0].startswith(f"{s['completed']} of 12 requests completed;")
    assert f"{s['rejected_too_long']} too long for max_model_len" in s["warnings"][0]
    assert any("too long for max_model_len" in r.getMessage() for r in caplog.records)
    assert "WARNING: " in format_summary(s)
    ok = run_experiment(job_config(*SHORT), tmp_path / "ok")
    assert ok["warnings"] == [] and ok["completed"] == 12


# --- 5. statistics over no data --------------------------------------------------------------

def test_statistics_over_no_data_are_null_never_zero(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    job = tmp_path / "sweep" / "0"
    s = run_experiment(job_config("max_model_len=16", "logger=wandb",
                                  "logger.log_requests_table=false", "logger.log_figures=false",
                                  *SHORT), job)
    assert s["completed"] == 0 and s["rejected_too_long"] == 12
    on_disk = json.loads((job / "summary.json").read_text())
    for key in ("median_ttft_ms", "mean_tpot_ms", "median_itl_ms", "p99_itl_ms", "median_e2el_ms",
                "mean_batch_size"):
        assert on_disk[key] is None, key
    assert next(ln for ln in format_summary(on_disk).splitlines()
                if ln.startswith("Median TTFT (ms):")).endswith("n/a")
    # W&B: absent or not a number, never 0
    wb = read_offline_run(offline_runs(job)[0])
    assert wb.summary.get("latency/median_ttft_ms") is None
    # the tables
    (job / ".hydra").mkdir(exist_ok=True)
    (job / ".hydra" / "overrides.yaml").write_text("- scheduler=vllm\n")
    side = write_report(tmp_path / "sweep", figures=False)["side_by_side.md"].read_text()
    assert "| Median TTFT (ms) | n/a |" in side
    # the figures: nothing plotted at 0
    plotted: list[Any] = []
    monkeypatch.setattr(figures, "_save", lambda fig, path: plotted.append(fig) or Path(path))
    frame = comparison_frame(load_sweep(tmp_path / "sweep"))
    figures.metric_vs_load(frame, None, [("median_ttft_ms", "TTFT")], tmp_path / "m.png")
    ys = [y for ax in plotted[0].axes for line in ax.get_lines() for y in line.get_ydata()]
    assert all(math.isnan(y) for y in ys)
    assert any(t.get_text() == "no data" for ax in plotted[0].axes for t in ax.texts)


# --- 6. what really ran ----------------------------------------------------------------------

def test_git_state_of_a_checkout_and_of_a_plain_folder(tmp_path: Path) -> None:
    assert git_state(tmp_path) == {"git_commit": None, "git_dirty": None}
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "x"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, text=True,
                          capture_output=True).stdout.strip()
    assert git_state(repo) == {"git_commit": head, "git_dirty": False}
    (repo / "new.py").write_text("x = 1\n")
    assert git_state(repo) == {"git_commit": head, "git_dirty": True}
    assert git_state(repo / ".git") == {"git_commit": None, "git_dirty": None}


def test_real_executor_summary_names_the_checkpoint(tmp_path: Path) -> None:
    ckpt = save_tiny_checkpoint(tmp_path / "ckpt")
    s = run_experiment(job_config(
        "executor=real", f"executor.model_path={ckpt}", "executor.kernel=torch",
        "scheduler=sglang", "workload.num_requests=3", "workload.vocab_size=256",
        "kv_capacity_tokens=256", "workload.prompt_len={dist:uniform,low:8,high:16}",
        "workload.output_len={dist:uniform,low:2,high:4}", "progress=off"), tmp_path / "job")
    assert s["model"] not in ("llama3_8b",) and s["hardware"] != "h200"
    assert s["model_path"] == str(ckpt)
    assert (s["num_hidden_layers"], s["hidden_size"]) == (2, 64)
    assert s["dtype"] == "float32" and s["device"] == "cpu"
    assert s["hardware"].startswith("cpu")
    # the checkpoint's own context length, not the sim model group's
    assert s["max_model_len"] == 512
    assert s["max_model_len_source"] == "checkpoint config.json max_position_embeddings"


def test_cli_summary_names_the_workload_config_and_the_commit(tmp_path: Path) -> None:
    traces = _azure_csv(tmp_path / "traces")
    out = tmp_path / "job"
    subprocess.run([sys.executable, "-m", "experiments.run", "workload=azure_code",
                    f"workload.trace_dir={traces}", "workload.max_requests=4",
                    f"hydra.run.dir={out}"], cwd=ROOT, check=True, capture_output=True,
                   text=True, timeout=120, env={**os.environ, "CI": "true"})
    s = json.loads((out / "summary.json").read_text())
    assert s["workload"] == "azure_code" and s["workload_generator"] == "azure"
    assert s["workload_file"] == "azure2023/AzureLLMInferenceTrace_code.csv"
    assert (s["git_commit"], s["git_dirty"]) == tuple(git_state(ROOT).values())
    assert pq.read_table(out / "requests.parquet").num_rows == 4
