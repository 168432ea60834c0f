"""The example scheduler's registry entry (DESIGN.md, "Adding a scheduler")."""

from __future__ import annotations

from schedulers.fcfs_reserve.scheduler import FcfsReserveConfig, FcfsReserveScheduler
from schedulers.registry import SchedulerEntry, register


def _context_length(scheduler: FcfsReserveScheduler) -> int:
    return scheduler.max_model_len


ENTRY = register(SchedulerEntry(
    name="fcfs_reserve", config_cls=FcfsReserveConfig, build=FcfsReserveScheduler,
    capacity_field="kv_capacity_tokens", context_field="max_model_len",
    context_length=_context_length, request_limit=_context_length,
    evicts=False, page_field="page_size", self_check=True,
    label="FCFS-reserve", color="#4d9a3a", in_default_comparison=False,
))
