"""`chunked_prefill_size` as SGLang's launcher resolves it when unset.

`--chunked-prefill-size` defaults to None in `ServerArgs`, and the memory hook replaces it by
a size chosen from the GPU's memory (-1 turns chunked prefill off). The same hook sizes the
decode CUDA-graph batch sizes and `mem_fraction_static`, which change no scheduling decision
here (the pool is `kv_capacity_tokens`, the same for every scheduler of a comparison);
`max_running_requests` is sized from the pool and the context length, not the memory
(schedulers/sglang/config.py: `resolved_max_running_requests`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schedulers.device_defaults import FROM_CONFIG, DeviceSpec, Setting

UPSTREAM = "sglang 0.5.22"
# The fields this module resolves when a config leaves them unset (null).
DEVICE_FIELDS = ("chunked_prefill_size",)


def chunked_prefill_size_for(device: DeviceSpec) -> tuple[int, str]:
    """The chunk size for `device` and the memory band that chose it.

    mirrors python/sglang/srt/arg_groups/memory_hook.py: handle_gpu_memory_settings (GPU
    memory in MiB, `get_device_memory_capacity`; None, here 0 bytes, takes the fallback)."""
    mib = device.memory_mib
    if not mib:
        return 4096, "memory unknown"
    for below_gib, size in ((20, 2048), (35, 4096), (60, 4096), (90, 8192), (160, 8192)):
        if mib < below_gib * 1024:
            return size, f"< {below_gib} GiB"
    return 16384, ">= 160 GiB"


def device_defaults(config_fields: Mapping[str, Any], device: DeviceSpec
                    ) -> dict[str, Setting]:
    """The registry entry's hook (`SchedulerEntry.device_defaults`): `chunked_prefill_size`
    of a config's fields (None: unset; -1 or 0: off, as given) on `device`."""
    given = config_fields.get("chunked_prefill_size")
    if given is not None:
        return {"chunked_prefill_size": Setting(given, FROM_CONFIG)}
    size, band = chunked_prefill_size_for(device)
    return {"chunked_prefill_size": Setting(
        size, f"{UPSTREAM} handle_gpu_memory_settings: {device.describe()} ({band})")}
