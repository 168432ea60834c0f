"""What upstream's launchers read of the accelerator to size a scheduler's limits, and the
value each limit gets with where it came from (summary.json `scheduler_limits`).

`vllm serve` sizes `max_num_batched_tokens` / `max_num_seqs` by the device's memory and name
(schedulers/vllm/batch_defaults.py), SGLang's launcher sizes `chunked_prefill_size` by its
memory (schedulers/sglang/memory_defaults.py). A scheduler's registry entry declares the
config fields resolved so when they are unset (`SchedulerEntry.device_fields`) and the
function that resolves them (`SchedulerEntry.device_defaults`); an explicit value always wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GIB = 1 << 30
MIB = 1 << 20
# The source of a value the config set explicitly.
FROM_CONFIG = "config"


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """The accelerator as upstream's launchers query it: its name (vLLM compares the lower-cased
    name, e.g. "nvidia a100-sxm4-80gb") and its total memory in bytes (NVML's total; 0: unknown,
    as when the query fails, which both upstreams answer with their fallback defaults)."""

    name: str
    memory_bytes: float

    def __post_init__(self) -> None:
        if not self.memory_bytes >= 0:
            raise ValueError(f"device {self.name!r}: memory_bytes={self.memory_bytes!r}: "
                             "must be >= 0 (0: unknown)")

    @property
    def memory_gib(self) -> float:
        """The total memory in GiB (what vLLM's thresholds compare)."""
        return self.memory_bytes / GIB

    @property
    def memory_mib(self) -> float:
        """The total memory in MiB (what SGLang's `get_device_memory_capacity` returns)."""
        return self.memory_bytes / MIB

    def describe(self) -> str:
        """"h200 131.3 GiB": the device as a summary's source names it."""
        if not self.memory_bytes:
            return f"{self.name or 'device'} (memory unknown)"
        return f"{self.name} {self.memory_gib:.1f} GiB"


@dataclass(frozen=True, slots=True)
class Setting:
    """One scheduler limit as a job runs it: the value and its source (`FROM_CONFIG`, or the
    upstream function that resolved it, e.g. "vllm 0.32.0 get_batch_defaults: h200 131.3 GiB
    (>= 70 GiB, not an A100)")."""

    value: Any
    source: str

    def as_dict(self) -> dict[str, Any]:
        """The JSON form summary.json holds."""
        return {"value": self.value, "source": self.source}
