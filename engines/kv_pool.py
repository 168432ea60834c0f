"""The KV pool a GPU leaves for the cache, as vLLM's GPU worker sizes it
(`kv_capacity_tokens=auto`, DESIGN.md "KV memory").

    pool = auto_kv_pool(model, hardware, gpu_memory_utilization=0.92, max_model_len=8192)
    pool.kv_capacity_tokens, pool.as_dict()   # the slots, and the arithmetic for summary.json

vLLM requests `gpu_memory_utilization` x the device's total memory, takes away what its
profile run found in use (the weights, the activation peak of a dummy forward pass), and
cuts the rest into blocks of `block_size` tokens of every layer's K and V. The activation peak
is estimated here from the model's shape (`activation_peak_bytes`), not measured; what a GPU
also holds and this leaves out (the CUDA context and other non-torch memory, the CUDA-graph
estimate, usually a few hundred MiB to about 1.5 GiB together) makes the pool a little larger
than a real server's.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from engines.executors.specs import HardwareSpec, ModelSpec
from schedulers.vllm.batch_defaults import resolve_batch_limits

# vllm/config/cache.py: CacheConfig.gpu_memory_utilization (vLLM 0.32.0's default)
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
# vllm/config/cache.py: CacheConfig.block_size on CUDA; the pool is counted in these blocks
VLLM_BLOCK_SIZE = 16
# The sampler's working set per logit of its dummy run: the logits in the model's dtype, their
# float32 copy (Sampler.forward), the float32 probabilities and the float32 exponential noise
# (topk_topp_sampler.py: forward_native, random_sample).
_SAMPLER_FLOAT32_COPIES = 3
SOURCE = ("vllm 0.32.0 determine_available_memory (v1/worker/gpu_worker.py), weights and an "
          "estimated profile_run activation peak")


@dataclass(frozen=True, slots=True)
class KvPoolEstimate:
    """The pool `kv_capacity_tokens=auto` gives, and every term of its arithmetic (bytes)."""

    kv_capacity_tokens: int
    memory_bytes: int
    gpu_memory_utilization: float
    requested_bytes: int
    weight_bytes: int
    activation_peak_bytes: int
    profile_tokens: int
    profile_seqs: int
    available_kv_bytes: int
    kv_bytes_per_token: int
    block_size: int
    num_blocks: int
    source: str = SOURCE

    def as_dict(self) -> dict[str, Any]:
        """The JSON form summary.json holds (`kv_pool_estimate`)."""
        return asdict(self)


def activation_peak_bytes(model: ModelSpec, num_tokens: int, num_seqs: int) -> int:
    """The peak of the tensors vLLM's profile run holds beyond the weights (an estimate).

    vllm/v1/worker/gpu_model_runner.py: GPUModelRunner.profile_run runs `_dummy_run` over
    `num_tokens` (max_num_batched_tokens) tokens, then `_dummy_sampler_run` over one row per
    request, `min(num_tokens, num_seqs)` rows. The forward pass peaks in a layer's MLP, where
    the residual stream, the normed input (both tokens x hidden), the gate/up output (tokens x
    2 intermediate) and the activation output (tokens x intermediate) are alive together. The
    sampler holds the hidden states of the forward pass, the logits (rows x vocabulary) in the
    model's dtype and three float32 arrays of that shape (the logits converted, the
    probabilities and the exponential noise). The peak is the larger of the two."""
    b = model.dtype_bytes
    h, inter = model.hidden_size, model.intermediate_size
    forward = num_tokens * (2 * h + 3 * inter) * b
    rows = min(num_tokens, num_seqs)
    sampler = num_tokens * h * b + rows * model.vocab_size * (b + 4 * _SAMPLER_FLOAT32_COPIES)
    return max(forward, sampler)


def auto_kv_pool(model: ModelSpec, hardware: HardwareSpec, gpu_memory_utilization: float,
                 max_model_len: int | None, page_size: int = VLLM_BLOCK_SIZE
                 ) -> KvPoolEstimate:
    """The KV pool in token slots that vLLM would leave on `hardware` for `model`.

    mirrors vllm/v1/worker/gpu_worker.py: Worker.determine_available_memory (requested memory
    `ceil(total x gpu_memory_utilization)`, v1/worker/utils.py: request_memory, less the
    non-KV memory of the profile run: the weights, `ModelSpec.weight_bytes`, and the
    activation peak, `activation_peak_bytes`, for the batch limits vLLM's server resolves on
    this device and context length) and v1/core/kv_cache_utils.py:
    get_kv_cache_config_from_groups (`available // bytes per block`, a block being
    `block_size` tokens of every layer's K and V). One block is vLLM's null block, so the
    slots are `(num_blocks - 1) x block_size`, rounded down to a multiple of `page_size` too
    when that is not a divisor. Refuses, as `check_enough_kv_cache_memory` does, a pool that
    is empty or cannot hold one request of `max_model_len` tokens."""
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization={gpu_memory_utilization!r}: must be in "
                         "(0, 1] (vLLM's default: 0.92)")
    memory = int(hardware.memory_bytes)
    if memory <= 0:
        raise ValueError(f"kv_capacity_tokens=auto: hardware {hardware.name!r} has no "
                         "memory_bytes; set hardware.memory_bytes or give kv_capacity_tokens")
    context = max_model_len if max_model_len is not None else 4096  # vLLM's class default
    limits = resolve_batch_limits(None, None, context, hardware.device)
    tokens = int(limits["max_num_batched_tokens"].value)
    seqs = int(limits["max_num_seqs"].value)
    requested = math.ceil(memory * gpu_memory_utilization)
    weights = model.weight_bytes
    activation = activation_peak_bytes(model, tokens, seqs)
    available = requested - weights - activation
    per_token = model.kv_bytes_per_token
    where = (f"kv_capacity_tokens=auto: {model.name} on {hardware.name} "
             f"({memory / 2**30:.1f} GiB x gpu_memory_utilization {gpu_memory_utilization})")
    if available <= 0:
        raise ValueError(f"{where} leaves no memory for the KV cache: weights "
                         f"{weights / 2**30:.2f} GiB and activations "
                         f"{activation / 2**30:.2f} GiB exceed {requested / 2**30:.2f} GiB")
    num_blocks = available // (VLLM_BLOCK_SIZE * per_token)
    step = math.lcm(VLLM_BLOCK_SIZE, page_size)
    slots = max(num_blocks - 1, 0) * VLLM_BLOCK_SIZE // step * step
    if max_model_len is not None and slots < max_model_len:
        raise ValueError(f"{where} leaves {slots} KV token slots, fewer than one request of "
                         f"max_model_len={max_model_len} needs; raise gpu_memory_utilization, "
                         "pick larger hardware or lower max_model_len")
    return KvPoolEstimate(
        kv_capacity_tokens=slots, memory_bytes=memory,
        gpu_memory_utilization=gpu_memory_utilization, requested_bytes=requested,
        weight_bytes=weights, activation_peak_bytes=activation, profile_tokens=tokens,
        profile_seqs=seqs, available_kv_bytes=available, kv_bytes_per_token=per_token,
        block_size=VLLM_BLOCK_SIZE, num_blocks=num_blocks)
