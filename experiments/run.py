"""The Hydra entry point: one job = one scheduler x one workload x one executor.

    python -m experiments.run                                  # the default (conf/config.yaml)
    python -m experiments.run scheduler.max_num_seqs=32 kv_capacity_tokens=32768
    python -m experiments.run -m scheduler.max_num_batched_tokens=512,2048   # a sweep

Writes requests.parquet, steps.parquet and summary.json into the job's folder (Hydra's
runtime.output_dir) and prints the summary.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from engines.engine import Engine
from experiments.build import (
    as_dict,
    build_executor,
    build_hardware,
    build_model,
    build_scheduler,
)
from experiments.metrics import compute_metrics
from experiments.sinks import write_run
from experiments.workloads import build_workload

log = logging.getLogger(__name__)


def run_experiment(cfg: DictConfig, out_dir: str | Path) -> dict[str, Any]:
    """Build everything from `cfg`, run the engine, write the outputs; returns the summary."""
    seed = int(cfg.seed)
    kv_capacity = int(cfg.kv_capacity_tokens)
    requests = build_workload(as_dict(cfg.workload), seed)
    scheduler = build_scheduler(cfg.scheduler, kv_capacity)
    model = build_model(cfg.model)
    hardware = build_hardware(cfg.hardware)
    executor = build_executor(cfg.executor, model, hardware)
    t0 = time.perf_counter()
    result = Engine(scheduler, executor, requests).run()
    wall = time.perf_counter() - t0
    slo = as_dict(cfg.get("slo")) or None
    summary: dict[str, Any] = {
        "scheduler": scheduler.name,
        "executor": str(cfg.executor.name),
        "model": model.name,
        "hardware": hardware.name,
        "workload": str(cfg.workload.name),
        "seed": seed,
        "kv_capacity_tokens": kv_capacity,
        **compute_metrics(result.requests, result.steps, slo_ms=slo),
    }
    paths = write_run(out_dir, result.requests, result.steps, summary)
    log.info("%d requests, %d steps replayed in %.2f s wall; wrote %s", len(requests),
             result.num_steps, wall, ", ".join(str(p) for p in paths.values()))
    return summary


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return "nan" if v != v else f"{v:.2f}"
    return str(v)


_TABLE: list[tuple[str, list[tuple[str, str]]]] = [
    ("Serving Benchmark Result", [
        ("Scheduler", "scheduler"), ("Model / hardware", "_model_hw"),
        ("Successful requests", "completed"), ("Rejected / aborted", "_rej_abort"),
        ("Benchmark duration (s)", "duration"), ("Total input tokens", "total_input_tokens"),
        ("Total generated tokens", "total_output_tokens"),
        ("Request throughput (req/s)", "request_throughput"),
        ("Output token throughput (tok/s)", "output_throughput"),
        ("Total Token throughput (tok/s)", "total_token_throughput"),
    ]),
    ("Time to First Token", [("Mean TTFT (ms)", "mean_ttft_ms"),
                             ("Median TTFT (ms)", "median_ttft_ms"),
                             ("P99 TTFT (ms)", "p99_ttft_ms")]),
    ("Time per Output Token (excl. 1st token)", [("Mean TPOT (ms)", "mean_tpot_ms"),
                                                 ("Median TPOT (ms)", "median_tpot_ms"),
                                                 ("P99 TPOT (ms)", "p99_tpot_ms")]),
    ("Inter-token Latency", [("Mean ITL (ms)", "mean_itl_ms"), ("Median ITL (ms)", "median_itl_ms"),
                             ("P99 ITL (ms)", "p99_itl_ms")]),
    ("End-to-end Latency", [("Mean E2EL (ms)", "mean_e2el_ms"),
                            ("Median E2EL (ms)", "median_e2el_ms"),
                            ("P99 E2EL (ms)", "p99_e2el_ms")]),
    ("Preemption and recompute", [
        ("Preemptions", "num_preemptions"), ("Preemptions per 1k requests",
                                             "preemptions_per_1k_requests"),
        ("Share of requests preempted", "preempted_request_share"),
        ("Median E2EL victims/others (ms)", "_victim_e2el"),
        ("Recomputed tokens", "recomputed_tokens"),
        ("Recomputed share of prefill", "recomputed_token_share"),
        ("Prefix-cache hit tokens", "prefix_cache_hit_tokens"),
        ("Prefix recovery on resume", "prefix_recovery_on_resume"),
        ("Steps", "num_steps"), ("Peak KV slots used", "_kv_peak"),
    ]),
]


def format_summary(s: Mapping[str, Any]) -> str:
    """The summary as a `vllm bench serve`-style text table."""
    derived = {
        "_model_hw": f"{s.get('model')} / {s.get('hardware')} ({s.get('executor')})",
        "_rej_abort": f"{s.get('rejected')} / {s.get('aborted')}",
        "_victim_e2el": f"{_fmt(s.get('median_e2el_victim_ms'))} / "
                        f"{_fmt(s.get('median_e2el_nonvictim_ms'))}",
        "_kv_peak": f"{s.get('max_kv_used_tokens')} / {s.get('kv_capacity_tokens')}",
    }
    lines: list[str] = []
    for i, (title, rows) in enumerate(_TABLE):
        fill = "=" if i == 0 else "-"
        lines.append(f" {title} ".center(50, fill))
        for label, key in rows:
            v = derived[key] if key in derived else _fmt(s.get(key))
            lines.append(f"{label}:" + v.rjust(max(50 - len(label) - 1, len(v) + 1)))
    lines.append("=" * 50)
    return "\n".join(lines)


@hydra.main(config_path="../conf", config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    """Run one job and print its summary."""
    out_dir = HydraConfig.get().runtime.output_dir
    summary = run_experiment(cfg, out_dir)
    print(format_summary(summary))
    print(f"outputs: {out_dir}")


if __name__ == "__main__":
    main()
