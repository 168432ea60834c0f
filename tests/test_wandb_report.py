"""W&B, read back from real offline runs (issue 25): a job run's summary holds its totals
(summary.json's values) and nothing binned; the sweep run holds the answers as charts against
the load, and the comparison as a table."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import wandb
from omegaconf import DictConfig

from experiments.results.sinks import json_safe
from experiments.run.config import compose_run_config
from experiments.run.main import run_experiment
from experiments.run.wandb_log import (
    HISTORY_PREFIX,
    TIME_KEY,
    OfflineRun,
    WandbOptions,
    grouped_summary,
    log_sweep_dir,
    offline_runs,
    read_offline_run,
)

ROOT = Path(__file__).resolve().parents[1]
# 60 short requests on a 4,096-token pool: vLLM preempts, and more at the higher rate.
EVICTING = ["workload.num_requests=60", "kv_capacity_tokens=4096", "workload.prompt_len.mean=200",
            "workload.output_len.mean=40", "progress=off"]
RATES = (50, 400)


def job_config(*overrides: str) -> DictConfig:
    return compose_run_config(list(overrides), str(ROOT / "conf"))


def read_back(run_dir: Path) -> OfflineRun:
    """The offline run as W&B wrote it: its service process writes the last records after
    `run.finish()` returns, so stop the service first (a job process exits instead)."""
    wandb.teardown()
    run = read_offline_run(run_dir)
    assert run.exited
    return run


def is_media(value: Any) -> bool:
    """A logged table, image or chart as the summary holds it (a reference to its file)."""
    return isinstance(value, dict) and "_type" in value


@pytest.fixture(scope="module")
def rate_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both schedulers at two request rates, laid out as a multirun (no W&B per job)."""
    sweep = tmp_path_factory.mktemp("rate_sweep")
    num = 0
    for rate in RATES:
        for sched in ("vllm", "sglang"):
            overrides = [f"scheduler={sched}", f"workload.request_rate={rate}"]
            run_experiment(job_config(*overrides, *EVICTING), sweep / str(num),
                           overrides=overrides)
            num += 1
    return sweep


def test_job_run_summary_holds_the_run_totals_and_no_history_bin(tmp_path: Path) -> None:
    summary = run_experiment(job_config("scheduler=vllm", "workload.request_rate=400",
                                        "logger=wandb", *EVICTING), tmp_path / "job")
    wb = read_back(offline_runs(tmp_path / "job")[0])
    on_disk = json.loads((tmp_path / "job" / "summary.json").read_text())
    expected = json.loads(json.dumps(json_safe(grouped_summary(on_disk))))
    values = {k: v for k, v in wb.summary.items() if not k.startswith("_") and not is_media(v)}
    assert values == expected  # every summary value is summary.json's, and only those
    # the history: binned series under their own names, none of them in the summary
    media = tuple(f"{k}/" for k, v in wb.summary.items() if is_media(v))
    history = {k for row in wb.history for k in row
               if not k.startswith(("_", *media))}
    assert history and all(k.startswith(HISTORY_PREFIX) or k == TIME_KEY for k in history)
    assert not history & set(wb.summary)
    rows = [r for r in wb.history if TIME_KEY in r]
    evictions = [r.get("timeline/evictions_in_bin", 0) for r in rows]
    assert summary["num_preemptions"] > 0 and sum(evictions) == summary["num_preemptions"]
    assert evictions[-1] < summary["num_preemptions"]  # the last bin is not the total
    assert wb.summary["eviction/num_preemptions"] == summary["num_preemptions"]
    assert wb.summary["requests/completed"] == summary["completed"] == 60
    assert wb.summary["kv/max_kv_used_tokens"] == summary["max_kv_used_tokens"]


def sweep_run(sweep: Path, load_param: str | None = None) -> OfflineRun:
    opts = WandbOptions(dir=str(sweep / "wandb_test"))
    run_dir = log_sweep_dir(sweep, opts, "g", "sweep test", {"name": "test"},
                            load_param=load_param)
    assert run_dir is not None
    return read_back(run_dir)


def test_sweep_run_charts_the_answers_against_the_load(rate_sweep: Path) -> None:
    wb = sweep_run(rate_sweep)  # the load parameter is guessed: the varied request rate
    x = "request_rate"
    answers = {f"charts/{stem}_vs_{x}" for stem in (
        "evictions", "requests_evicted", "recomputed_prefill", "victim_e2el", "slo_attainment",
        "goodput", "prefix_recovery", "scheduler_gap_evictions")}
    assert answers <= set(wb.charts)
    line = wb.charts[f"charts/evictions_vs_{x}"]["panel_config"]
    assert line["panelDefId"] == "wandb/line/v0"
    assert line["fieldSettings"] == {"x": x, "y": "evictions", "stroke": "series"}
    # the chart's table: a point per job, a line per scheduler, the jobs' own totals
    columns, data = wb.table(f"charts/evictions_vs_{x}_table")
    rows = [dict(zip(columns, r, strict=True)) for r in data]
    summaries = {int(p.name): json.loads((p / "summary.json").read_text())
                 for p in rate_sweep.iterdir() if (p / "summary.json").is_file()}
    assert sorted(r["job"] for r in rows) == sorted(summaries)
    for r in rows:
        s = summaries[r["job"]]
        assert r["series"] == s["scheduler"] and r[x] == int(s["overrides"][1].split("=")[1])
        assert r["evictions"] == s["num_preemptions"]
    # victims' and others' latency: two lines per scheduler; no point where nothing was measured
    columns, data = wb.table(f"charts/victim_e2el_vs_{x}_table")
    series = {r[columns.index("series")] for r in data}
    assert {"vllm victims", "vllm others", "sglang others"} <= series
    assert all(not math.isnan(r[columns.index("median E2E latency (ms)")]) for r in data)
    # and the comparison as a table
    columns, data = wb.table("tables/comparison")
    assert len(data) == 4 and "scheduler" in columns and "num_preemptions" in columns


def test_every_key_of_the_sweep_run_reads_as_a_section_and_a_name(rate_sweep: Path) -> None:
    wb = sweep_run(rate_sweep, load_param="workload.request_rate")
    keys = {k for k in wb.summary if not k.startswith("_")}
    sections = {k.split("/")[0] for k in keys}
    assert sections == {"charts", "tables", "sweep"}
    assert {"tables/comparison", "tables/side_by_side", "sweep/jobs"} <= keys
    assert all(k.islower() and " " not in k for k in keys)
    titles = [c["panel_config"]["stringSettings"]["title"] for c in wb.charts.values()]
    assert all(t.endswith(" vs request_rate") for t in titles)
