"""SGLang v0.5.22's scheduler (radix prefix cache, PrefillAdder, decode retraction) on the
project's Scheduler contract. See DESIGN.md and tests/conformance/sglang/README.md."""

from schedulers.sglang.config import SglangSchedulerConfig
from schedulers.sglang.conformance import sglang_scheduler_from_conformance
from schedulers.sglang.scheduler import SglangScheduler

__all__ = ["SglangScheduler", "SglangSchedulerConfig", "sglang_scheduler_from_conformance"]
