"""The SGLang scheduler's registry entry (schedulers/registry.py): how the harness builds it,
what it may ask of it, and how its conformance cases replay SGLang's components."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schedulers.device_defaults import FROM_CONFIG, Setting
from schedulers.registry import LoopChoice, LoopFallback, SchedulerEntry, register
from schedulers.sglang.build import build_scheduler
from schedulers.sglang.config import SglangSchedulerConfig
from schedulers.sglang.conformance import sglang_scheduler_from_conformance
from schedulers.sglang.invariants import check_sglang_invariants
from schedulers.sglang.memory_defaults import DEVICE_FIELDS, device_defaults
from schedulers.sglang.scheduler import SglangScheduler


def _context_length(scheduler: SglangScheduler) -> int | None:
    return scheduler.config.context_length


def _request_limit(scheduler: SglangScheduler) -> int:
    return scheduler.config.max_req_len


def _loop_fallback(fields: Mapping[str, Any]) -> LoopFallback | None:
    """`event_loop_normal` for `preemption_mode=swap` (ours: the host pool has no overlap
    variant, schedulers/sglang/overlap.py), resolved with a warning as upstream's launcher
    turns overlap off for a feature that cannot run it (speculative_hook.py:
    _disable_overlap_schedule_for_cpu) instead of refusing the default."""
    if fields.get("preemption_mode") == "swap" and not fields.get("disable_overlap_schedule",
                                                                  True):
        return LoopFallback((("disable_overlap_schedule", True),),
                            "preemption_mode=swap runs only in the synchronous loop, so "
                            "disable_overlap_schedule=true")
    return None


def _derived_limits(config: SglangSchedulerConfig) -> dict[str, Setting]:
    """The running-request cap as the job runs it, and where it came from."""
    cap = config.resolved_max_running_requests
    slots = config.kv_capacity_tokens
    if config.max_running_requests is not None:
        if cap == config.max_running_requests:
            return {"max_running_requests": Setting(cap, FROM_CONFIG)}
        return {"max_running_requests": Setting(cap, (
            f"the config's {config.max_running_requests}, capped at {slots} token slots / 2 "
            "(sglang 0.5.22 resolve_max_num_reqs)"))}
    context = (f"context {config.context_length}" if config.context_length is not None
               else "context unknown: estimate 2048")
    return {"max_running_requests": Setting(cap, (
        f"sglang 0.5.22 resolve_max_num_reqs: {slots} token slots, {context}; "
        "max(min(slots / context x 512, 4096), 2048), at most slots / 2"))}


ENTRY = register(SchedulerEntry(
    name="sglang", config_cls=SglangSchedulerConfig, build=build_scheduler,
    capacity_field="max_total_tokens", context_field="context_length",
    context_length=_context_length, request_limit=_request_limit,
    evicts=True, swaps=True, page_field="page_size", self_check=True,
    check_invariants=check_sglang_invariants,
    upstream="sglang 0.5.22", label="SGLang", color="#e0701b",
    conformance=sglang_scheduler_from_conformance,
    # unset: sized by the GPU's memory as SGLang's launcher sizes it (handle_gpu_memory_settings)
    device_fields=DEVICE_FIELDS, device_defaults=device_defaults,
    derived_limits=_derived_limits,
    # upstream's event_loop_normal, or its event_loop_overlap (a plain SGLang server)
    loops=(LoopChoice("synchronous", (("disable_overlap_schedule", True),)),
           LoopChoice("overlap", (("disable_overlap_schedule", False),))),
    loop_fallback=_loop_fallback,
))
