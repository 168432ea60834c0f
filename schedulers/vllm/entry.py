"""The vLLM scheduler's registry entry (schedulers/registry.py): how the harness builds it,
what it may ask of it, and how its conformance cases replay the real vLLM."""

from __future__ import annotations

from schedulers.registry import ConformanceRules, LoopChoice, SchedulerEntry, register
from schedulers.vllm.batch_defaults import DEVICE_FIELDS, device_defaults
from schedulers.vllm.build import build_scheduler
from schedulers.vllm.config import VllmSchedulerConfig
from schedulers.vllm.conformance import vllm_scheduler_from_conformance
from schedulers.vllm.invariants import check_vllm_invariants
from schedulers.vllm.scheduler import VllmScheduler


def _context_length(scheduler: VllmScheduler) -> int:
    return scheduler.max_model_len


ENTRY = register(SchedulerEntry(
    name="vllm", config_cls=VllmSchedulerConfig, build=build_scheduler,
    capacity_field="num_blocks", context_field="max_model_len",
    context_length=_context_length, request_limit=_context_length,
    evicts=True, swaps=True, page_field="block_size", self_check=True,
    check_invariants=check_vllm_invariants,
    upstream="vllm 0.32.0", label="vLLM", color="#1f5fa8",
    conformance=vllm_scheduler_from_conformance,
    # the vLLM oracle sorts arrivals, loops while `has_requests()` (true for one more step
    # after a finish) and keeps preempted ids in a set (docs/CONFORMANCE.md)
    conformance_rules=ConformanceRules(sort_arrivals=True, flush_finished=True,
                                       preempted_as_set=True),
    # upstream's Scheduler in EngineCore.step, or its AsyncScheduler in
    # EngineCore.step_with_batch_queue (a plain `vllm serve` on a GPU: async_scheduling)
    loops=(LoopChoice("synchronous", (("async_scheduling", False),)),
           LoopChoice("batch_queue", (("async_scheduling", True),))),
    # unset: sized by the device as `vllm serve` sizes them (EngineArgs.get_batch_defaults)
    device_fields=DEVICE_FIELDS, device_defaults=device_defaults,
))
