"""Build the scheduler from a conformance workload's config line (docs/CONFORMANCE.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schedulers.sglang.config import SglangSchedulerConfig
from schedulers.sglang.scheduler import SglangScheduler


def config_from_conformance(cfg: Mapping[str, Any]) -> SglangSchedulerConfig:
    """The format's names mapped to upstream's: kv_size -> max_total_tokens, req_slots ->
    max_running_requests (the oracle sizes the row pool and the running cap with it)."""
    cps = cfg.get("chunked_prefill_size", 8192)
    return SglangSchedulerConfig(
        max_total_tokens=int(cfg["kv_size"]),
        page_size=int(cfg.get("page_size", 1)),
        max_running_requests=int(cfg["req_slots"]),
        schedule_policy=str(cfg.get("schedule_policy", "fcfs")),
        chunked_prefill_size=None if cps is None else int(cps),
        max_prefill_tokens=int(cfg.get("max_prefill_tokens", 16384)),
        schedule_conservativeness=float(cfg.get("schedule_conservativeness", 1.0)),
        random_seed=int(cfg.get("random_seed", 0)),
        # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION, when the oracle ran with it set
        clip_max_new_tokens_estimation=int(cfg.get("clip_max_new_tokens_estimation", 4096)),
    )


def sglang_scheduler_from_conformance(cfg: Mapping[str, Any]) -> SglangScheduler:
    return SglangScheduler(config_from_conformance(cfg))
