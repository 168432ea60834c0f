"""Step-time cost models for the simulated executor.

`RooflineCostModel` is the fallback when no fitted profile exists (DESIGN.md, "Executors").
A step's shape is summarized by `StepShape`; a cost model maps it to seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from engines.executors.specs import HardwareSpec, ModelSpec
from schedulers.contract import StepPlan


@dataclass(frozen=True, slots=True)
class StepShape:
    """What a step's cost depends on.

    num_tokens:  T = sum over chunks of n (query tokens computed this step).
    attn_pairs:  A = sum over chunks of n*s + n*(n+1)/2, the (query, key) pairs of causal
                 attention for a chunk of n tokens starting at position s.
    kv_read_tokens: R = sum over chunks of (s + n), the context each chunk's attention reads.
    num_seqs:    number of chunks (requests) in the step.
    """

    num_tokens: int
    attn_pairs: int
    kv_read_tokens: int
    num_seqs: int

    @classmethod
    def of(cls, plan: StepPlan) -> StepShape:
        t = a = r = 0
        for c in plan.chunks:
            n = len(c.token_ids)
            s = c.start_pos
            t += n
            a += n * s + n * (n + 1) // 2
            r += s + n
        return cls(t, a, r, len(plan.chunks))


class CostModel(Protocol):
    """Maps a step's shape terms (see `StepShape`) to seconds."""

    def seconds(self, num_tokens: int, attn_pairs: int, kv_read_tokens: int) -> float:
        ...


@dataclass(frozen=True, slots=True)
class StepCost:
    """A step's roofline terms and the resulting time (seconds)."""

    flops: float
    bytes: float
    compute_s: float
    memory_s: float
    overhead_s: float

    @property
    def seconds(self) -> float:
        return max(self.compute_s, self.memory_s) + self.overhead_s


class RooflineCostModel:
    """A roofline estimate of one forward step from the model's shape and the hardware.

    With P parameters, L layers, H query heads, H_kv KV heads, head size d, weight element
    size b_w, KV element size b_kv, and a step shape (T, A, R) (see `StepShape`):

        FLOPs = 2 * P * T                  (every weight multiplies every token; this counts
                                            the embedding and LM head for every token too,
                                            a small overestimate)
              + 4 * L * H * d * A          (QK^T and PV: 2 FLOPs per multiply-add, 2 matmuls,
                                            over the causal (query, key) pairs)
        bytes = P * b_w                    (weights read once per step)
              + kv * R                     (KV read: every chunk reads its whole context)
              + kv * T                     (KV written for the new tokens)
        where kv = 2 * L * H_kv * d * b_kv (K and V bytes per token over all layers)

        time  = max(FLOPs / (peak_flops * flops_efficiency),
                    bytes / (memory_bandwidth * bandwidth_efficiency)) + step_overhead_s

    Activations, communication and kernel launch costs are ignored except through the fixed
    `step_overhead_s`. The efficiencies (0, 1] derate the peaks (1.0 = ideal roofline).
    """

    def __init__(self, model: ModelSpec, hardware: HardwareSpec, step_overhead_s: float = 0.0,
                 flops_efficiency: float = 1.0, bandwidth_efficiency: float = 1.0) -> None:
        if step_overhead_s < 0:
            raise ValueError(f"cost model: step_overhead_s={step_overhead_s!r}: must be >= 0")
        for name, value in (("flops_efficiency", flops_efficiency),
                            ("bandwidth_efficiency", bandwidth_efficiency)):
            if not 0 < value <= 1:
                raise ValueError(f"cost model: {name}={value!r}: must be in (0, 1]")
        self.model = model
        self.hardware = hardware
        self.step_overhead_s = step_overhead_s
        self._params = model.params
        self._weight_bytes = float(model.weight_bytes)
        self._kv_token_bytes = float(model.kv_bytes_per_token)
        self._attn_flops_per_pair = 4.0 * model.num_hidden_layers * model.num_attention_heads \
            * model.head_size
        self._flops_rate = hardware.peak_flops * flops_efficiency
        self._bytes_rate = hardware.memory_bandwidth * bandwidth_efficiency

    def cost(self, shape: StepShape) -> StepCost:
        """The roofline terms of one step."""
        flops = 2.0 * self._params * shape.num_tokens + self._attn_flops_per_pair \
            * shape.attn_pairs
        nbytes = self._weight_bytes + self._kv_token_bytes * (shape.kv_read_tokens
                                                              + shape.num_tokens)
        return StepCost(flops=flops, bytes=nbytes, compute_s=flops / self._flops_rate,
                        memory_s=nbytes / self._bytes_rate, overhead_s=self.step_overhead_s)

    def step_time(self, shape: StepShape) -> float:
        """Seconds for one step of this shape."""
        return self.seconds(shape.num_tokens, shape.attn_pairs, shape.kv_read_tokens)

    def seconds(self, num_tokens: int, attn_pairs: int, kv_read_tokens: int) -> float:
        """`step_time` on the raw shape terms (the executor's hot path)."""
        flops = 2.0 * self._params * num_tokens + self._attn_flops_per_pair * attn_pairs
        nbytes = self._weight_bytes + self._kv_token_bytes * (kv_read_tokens + num_tokens)
        compute = flops / self._flops_rate
        memory = nbytes / self._bytes_rate
        return (compute if compute > memory else memory) + self.step_overhead_s
