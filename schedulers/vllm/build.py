"""Which vLLM scheduler class a config builds."""

from __future__ import annotations

from schedulers.vllm.async_scheduler import AsyncVllmScheduler
from schedulers.vllm.config import VllmSchedulerConfig
from schedulers.vllm.scheduler import VllmScheduler


def build_scheduler(config: VllmSchedulerConfig) -> VllmScheduler:
    """mirrors vllm/config/scheduler.py: SchedulerConfig.get_scheduler_cls: the
    `AsyncScheduler` when `async_scheduling`, else the `Scheduler`."""
    if config.async_scheduling:
        return AsyncVllmScheduler(config)
    return VllmScheduler(config)
