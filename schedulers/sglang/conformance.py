"""Build the scheduler from a conformance workload's config line (docs/CONFORMANCE.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schedulers.sglang.build import build_scheduler
from schedulers.sglang.config import SglangSchedulerConfig
from schedulers.sglang.scheduler import SglangScheduler


def config_from_conformance(cfg: Mapping[str, Any]) -> SglangSchedulerConfig:
    """The format's names mapped to upstream's: kv_size -> max_total_tokens, req_slots ->
    max_running_requests (the oracle sizes the row pool and the running cap with it); the
    priority keys and `disable_overlap_schedule` by upstream's names. A line without
    `disable_overlap_schedule` (every case recorded before the key) replays
    `event_loop_normal`."""
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
        enable_priority_scheduling=bool(cfg.get("enable_priority_scheduling", False)),
        disable_priority_preemption=bool(cfg.get("disable_priority_preemption", False)),
        schedule_low_priority_values_first=bool(
            cfg.get("schedule_low_priority_values_first", False)),
        priority_scheduling_preemption_threshold=int(
            cfg.get("priority_scheduling_preemption_threshold", 10)),
        disable_overlap_schedule=bool(cfg.get("disable_overlap_schedule", True)),
    )


def sglang_scheduler_from_conformance(cfg: Mapping[str, Any]) -> SglangScheduler:
    """The scheduler a conformance workload's config line describes."""
    return build_scheduler(config_from_conformance(cfg))
