"""What a sweep prints (issue 25): the studies' own columns (the others' E2E beside the
victims', the recovery on resume), the KV pool and the offered load, in 100 columns."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from experiments.report.tables import TERMINAL_WIDTH, load_sweep, terminal_summary, text_table
from experiments.results.job_folder import commit_run

ROOT = Path(__file__).resolve().parents[1]


def study_columns(script: str) -> list[str]:
    """The `--columns` a reproduce script passes to the report."""
    text = (ROOT / "scripts" / script).read_text()
    match = re.search(r"^(?:\s+|columns=)([a-z0-9_]+(?:,[a-z0-9_]+)+)\s", text, re.M)
    assert match, script
    return match.group(1).split(",")


def write_job(sweep: Path, num: int, overrides: list[str], **metrics: Any) -> None:
    """A committed job folder whose summary holds `metrics` (every request completed)."""
    out = sweep / str(num)
    out.mkdir(parents=True)
    ids = [f"r{i}" for i in range(4)]
    pq.write_table(pa.table({"request_id": ids, "finish_reason": ["stop"] * 4}),
                   out / "requests.tmp")
    pq.write_table(pa.table({"step": [0]}), out / "steps.tmp")
    sched = overrides[0].split("=")[1]
    summary = {"status": "ok", "config_hash": "x", "scheduler": sched, "overrides": overrides,
               "offered": 4, "completed": 4, "kv_capacity_tokens": 32768, **metrics}
    commit_run(out, out / "requests.tmp", out / "steps.tmp", summary)


def fake_metrics(num: int, rate: float) -> dict[str, Any]:
    return {"offered_request_rate": 4.0 * rate, "num_preemptions": 10 * num,
            "preempted_request_share": 0.01 * num, "max_restarts_per_request": 2,
            "recomputed_token_share": 0.02, "recomputed_tokens": 12345,
            "median_e2el_victim_ms": 12345.6, "median_e2el_nonvictim_ms": 6543.2,
            "victim_e2el_median_ratio": 1.887, "p99_e2el_ms": 99999.9,
            "p99_e2el_victim_ms": 123456.7, "median_e2el_ms": 7000.0,
            "prefix_recovery_on_resume": 0.976, "prefix_cache_hit_rate": 0.0}


def test_the_preemption_study_prints_victims_and_others_in_100_columns(tmp_path: Path) -> None:
    num = 0
    for workload in ("azure_conv", "azure_code"):
        for rate in (1, 1.5, 2, 3, 4):
            for sched in ("vllm", "sglang"):
                write_job(tmp_path, num, [f"scheduler={sched}", f"workload={workload}",
                                          f"workload.rate_scale={rate}"],
                          **fake_metrics(num, rate))
                num += 1
    jobs, columns = load_sweep(tmp_path), study_columns("reproduce_preemption.sh")
    text = terminal_summary(jobs, columns)
    assert max(len(line) for line in text.splitlines()) <= TERMINAL_WIDTH
    assert text.startswith("KV pool: 32,768 tokens; requests offered: 4; offered request "
                           "rate: 4.00 to 16.00 req/s (by job)")
    assert "6,543.2" in text and "12,345.6" in text and "azure_conv" in text
    one_line = terminal_summary(jobs, columns, width=1000)  # headers unwrapped
    header = one_line.splitlines()[1].split("  ")
    for sched in ("vllm", "sglang"):  # the others' latency beside the victims'
        assert {f"{sched} victims p50 (ms)", f"{sched} others p50 (ms)"} <= set(header)
    assert "offered (req/s)" in header


def test_the_prefix_recovery_study_prints_its_recovery_column(tmp_path: Path) -> None:
    num = 0
    for reserve in ("true", "false"):
        for share in ("true", "false"):
            for kv in (32768, 65536, 131072):
                write_job(tmp_path, num, ["scheduler=vllm",
                                          f"scheduler.scheduler_reserve_full_isl={reserve}",
                                          f"workload.share_prefixes={share}",
                                          f"kv_capacity_tokens={kv}"],
                          **{**fake_metrics(num, 1), "kv_capacity_tokens": kv})
                num += 1
    jobs, columns = load_sweep(tmp_path), study_columns("reproduce_prefix_recovery.sh")
    text = terminal_summary(jobs, columns)
    assert max(len(line) for line in text.splitlines()) <= TERMINAL_WIDTH
    assert text.startswith("KV pool: 32,768 to 131,072 tokens (by job);")
    assert "97.60" in text and "131072" in text
    header = terminal_summary(jobs, columns, width=1000).splitlines()[1].split("  ")
    assert {"recovered (%)", "hit, 1st admit (%)", "kv_capacity_tokens"} <= set(header)


def test_a_sweep_without_study_columns_prints_the_others_latency_too(tmp_path: Path) -> None:
    for num, rate in enumerate((1, 2, 3, 4)):
        for k, sched in enumerate(("vllm", "sglang")):
            write_job(tmp_path, 2 * num + k, [f"scheduler={sched}",
                                              f"workload.rate_scale={rate}"],
                      **fake_metrics(num, rate))
    jobs = load_sweep(tmp_path)
    assert max(len(line) for line in terminal_summary(jobs).splitlines()) <= TERMINAL_WIDTH
    header = terminal_summary(jobs, width=1000).splitlines()[1].split("  ")
    assert {"vllm victims p50 (ms)", "vllm others p50 (ms)"} <= set(header)


def test_wide_tables_wrap_their_headers_then_go_in_blocks() -> None:
    import pandas as pd

    df = pd.DataFrame({f"column number {i} with a long name": [f"{i * 1000:,}"]
                       for i in range(12)}, index=["a row"])
    text = text_table(df, width=60)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 60
    assert sum(line.startswith("a row") for line in lines) > 1  # one row per block
    assert "11,000" in text and json.dumps(text)  # every value is there


def test_summaries_written_before_the_offered_rate_existed_print_no_empty_column(
        tmp_path: Path) -> None:
    for num, rate in enumerate((1, 2, 3, 4)):
        for k, sched in enumerate(("vllm", "sglang")):
            metrics = fake_metrics(num, rate)
            del metrics["offered_request_rate"]
            write_job(tmp_path, 2 * num + k, [f"scheduler={sched}",
                                              f"workload.rate_scale={rate}"], **metrics)
    text = terminal_summary(load_sweep(tmp_path), width=1000)
    assert "offered (req/s)" not in text and "offered request rate" not in text
    assert "vllm evictions" in text
