"""vLLM v1 scheduling semantics (pinned to vLLM v0.32.0)."""

from schedulers.vllm.async_scheduler import AsyncVllmScheduler
from schedulers.vllm.build import build_scheduler
from schedulers.vllm.config import VllmSchedulerConfig
from schedulers.vllm.conformance import vllm_scheduler_from_conformance
from schedulers.vllm.scheduler import VllmScheduler

__all__ = ["AsyncVllmScheduler", "VllmScheduler", "VllmSchedulerConfig", "build_scheduler",
           "vllm_scheduler_from_conformance"]
