"""vLLM v1 scheduling semantics (pinned to vLLM v0.32.0)."""

from schedulers.vllm.config import VllmSchedulerConfig
from schedulers.vllm.conformance import vllm_scheduler_from_conformance
from schedulers.vllm.scheduler import VllmScheduler

__all__ = ["VllmScheduler", "VllmSchedulerConfig", "vllm_scheduler_from_conformance"]
