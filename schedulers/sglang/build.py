"""Which SGLang scheduler class a config builds."""

from __future__ import annotations

from schedulers.sglang.config import SglangSchedulerConfig
from schedulers.sglang.overlap import OverlapSglangScheduler
from schedulers.sglang.scheduler import SglangScheduler


def build_scheduler(config: SglangSchedulerConfig) -> SglangScheduler:
    """mirrors managers/scheduler.py: Scheduler.run_event_loop: `event_loop_overlap` unless
    `disable_overlap_schedule`, else `event_loop_normal`."""
    if config.disable_overlap_schedule:
        return SglangScheduler(config)
    return OverlapSglangScheduler(config)
