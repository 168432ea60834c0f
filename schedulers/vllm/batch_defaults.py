"""`max_num_batched_tokens` and `max_num_seqs` as `vllm serve` resolves them when unset.

The scheduler config's class defaults (2048 / 128, vllm/config/scheduler.py: "mainly for
convenience when testing") are not what a server runs: `EngineArgs.create_engine_config`
replaces an unset value by one sized from the device's memory and name, for the usage
context of the OpenAI API server. Mirrored here for a GPU (the TPU and CPU branches of
upstream are left out: the configured hardware is a GPU).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from schedulers.device_defaults import FROM_CONFIG, GIB, DeviceSpec, Setting
from schedulers.vllm.config import VllmSchedulerConfig

UPSTREAM = "vllm 0.32.0"
# The fields this module resolves when a config leaves them unset (null).
DEVICE_FIELDS = ("max_num_batched_tokens", "max_num_seqs")


@dataclass(frozen=True, slots=True)
class BatchDefaults:
    """The server's defaults for one device and the rule of `get_batch_defaults` that chose
    them (for the summary's source)."""

    max_num_batched_tokens: int
    max_num_seqs: int
    rule: str


def server_batch_defaults(device: DeviceSpec) -> BatchDefaults:
    """The `UsageContext.OPENAI_API_SERVER` defaults for `device`.

    mirrors vllm/engine/arg_utils.py: EngineArgs.get_batch_defaults (device memory from
    NVML, 0 when unknown; the A100 exception of vLLM PR #17885)."""
    memory = device.memory_bytes
    name = device.name.lower()
    if memory >= 160 * GIB:
        return BatchDefaults(16384, 1024, ">= 160 GiB")
    if memory >= 70 * GIB and "a100" not in name:
        return BatchDefaults(8192, 1024, ">= 70 GiB, not an A100")
    if memory >= 70 * GIB:
        return BatchDefaults(2048, 256, ">= 70 GiB but an A100")
    return BatchDefaults(2048, 256, "< 70 GiB" if memory else "memory unknown")


def resolve_batch_limits(max_num_batched_tokens: int | None, max_num_seqs: int | None,
                         max_model_len: int, device: DeviceSpec,
                         enable_chunked_prefill: bool = True) -> dict[str, Setting]:
    """Both limits as the server runs them: an explicit value as given, an unset one from
    `server_batch_defaults`, then the caps upstream applies to defaulted values only.

    mirrors vllm/engine/arg_utils.py: EngineArgs._set_default_max_num_seqs_and_batched_tokens_args
    (performance_mode "balanced", no data-parallel MoE, a text-only model): an unset
    `max_num_batched_tokens` is raised to `max_model_len` without chunked prefill (chunked
    prefill is on by default for generative models), then capped at `max_num_seqs *
    max_model_len`; an unset `max_num_seqs` is capped at `max_num_batched_tokens`."""
    defaults = server_batch_defaults(device)
    where = f"{UPSTREAM} get_batch_defaults: {device.describe()} ({defaults.rule})"
    tokens_source = seqs_source = FROM_CONFIG
    tokens = max_num_batched_tokens
    seqs = max_num_seqs
    if tokens is None:
        tokens, tokens_source = defaults.max_num_batched_tokens, where
    if seqs is None:
        seqs, seqs_source = defaults.max_num_seqs, where
    if max_num_batched_tokens is None:
        if not enable_chunked_prefill and max_model_len > tokens:
            tokens = max_model_len
            tokens_source += "; raised to max_model_len (no chunked prefill)"
        if seqs * max_model_len < tokens:
            tokens = seqs * max_model_len
            tokens_source += "; capped at max_num_seqs x max_model_len"
    if max_num_seqs is None and tokens < seqs:
        seqs = tokens
        seqs_source += "; capped at max_num_batched_tokens"
    return {"max_num_batched_tokens": Setting(tokens, tokens_source),
            "max_num_seqs": Setting(seqs, seqs_source)}


def _class_default(name: str) -> Any:
    return next(f.default for f in fields(VllmSchedulerConfig) if f.name == name)


def device_defaults(config_fields: Mapping[str, Any], device: DeviceSpec
                    ) -> dict[str, Setting]:
    """The registry entry's hook (`SchedulerEntry.device_defaults`): the batch limits of a
    config's fields (None: unset) on `device`, with the context length the scheduler gets
    (its `max_model_len`, else the config class's default)."""
    max_model_len = config_fields.get("max_model_len")
    if max_model_len is None:
        max_model_len = _class_default("max_model_len")
    return resolve_batch_limits(config_fields.get("max_num_batched_tokens"),
                                config_fields.get("max_num_seqs"), int(max_model_len), device)
