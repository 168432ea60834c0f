"""Build the scheduler from a conformance workload's config line (docs/CONFORMANCE.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schedulers.vllm.build import build_scheduler
from schedulers.vllm.config import VllmSchedulerConfig
from schedulers.vllm.scheduler import VllmScheduler


def config_from_conformance(cfg: Mapping[str, Any]) -> VllmSchedulerConfig:
    """The config line's upstream names, with the oracle's defaults for those it omits;
    `num_blocks` counts upstream's reserved null block. `reserve_full_isl` is the oracle's
    name of `scheduler_reserve_full_isl`. `async_scheduling` true replays the AsyncScheduler in
    the batch-queue loop; a line without it, the synchronous loop."""
    return VllmSchedulerConfig(
        num_blocks=cfg["num_blocks"],
        block_size=cfg.get("block_size", 16),
        max_num_seqs=cfg.get("max_num_seqs", 128),
        max_num_batched_tokens=cfg.get("max_num_batched_tokens", 2048),
        max_model_len=cfg.get("max_model_len", 4096),
        long_prefill_token_threshold=cfg.get("long_prefill_token_threshold", 0),
        scheduler_reserve_full_isl=cfg.get("reserve_full_isl", True),
        watermark=cfg.get("watermark", 0.0),
        policy=cfg.get("policy", "fcfs"),
        enable_prefix_caching=cfg.get("enable_prefix_caching", True),
        async_scheduling=bool(cfg.get("async_scheduling", False)),
    )


def vllm_scheduler_from_conformance(cfg: Mapping[str, Any]) -> VllmScheduler:
    """The scheduler a conformance workload's config line describes."""
    return build_scheduler(config_from_conformance(cfg))
