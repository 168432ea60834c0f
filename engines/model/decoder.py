"""A Llama-family decoder (Llama 2/3, Qwen2, Mistral) on the paged KV cache.

Per layer: RMSNorm, fused q/k/v projection (with bias for Qwen2), RoPE, the new tokens' keys
and values written to their slots, paged attention over each request's whole sequence (any
backend of `kernels`), output projection and residual; RMSNorm, SwiGLU MLP and residual.
After the last layer, the final norm and the LM head run only on the rows that sample.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from engines.model.config import CheckpointError, DecoderConfig, load_config
from engines.model.kv_cache import PagedKVCache
from engines.model.rope import Rotary, apply_rotary
from engines.model.weights import (
    DecoderWeights,
    load_weights,
    random_weights,
    resolve_dtype,
)
from kernels import AttentionBackend, PagedAttentionMetadata


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x / rms(x) * weight, the statistics in float32, the result in x's dtype."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


class PagedDecoder:
    """The model: weights, rotary tables, and a forward pass over a paged batch."""

    def __init__(self, config: DecoderConfig, weights: DecoderWeights,
                 device: torch.device, dtype: torch.dtype) -> None:
        self.config = config
        self.weights = weights
        self.device = device
        self.dtype = dtype
        self.rotary = Rotary(config.rope, config.head_dim, device)
        self.scale = config.head_dim ** -0.5

    @classmethod
    def from_pretrained(cls, path: str | Path, dtype: str | torch.dtype | None = None,
                        device: str | torch.device | None = None) -> PagedDecoder:
        """Load a Hugging Face checkpoint folder (config.json + *.safetensors).

        Defaults: the GPU when there is one, float32 on a CPU and bfloat16 on a GPU.
        """
        dev = torch.device(device if device is not None else
                           ("cuda" if torch.cuda.is_available() else "cpu"))
        dt = resolve_dtype(dtype, dev)
        cfg = load_config(path)
        return cls(cfg, load_weights(path, cfg, dt, dev), dev, dt)

    @classmethod
    def random(cls, config: DecoderConfig, dtype: str | torch.dtype | None = None,
               device: str | torch.device = "cpu", seed: int = 0,
               std: float = 0.02) -> PagedDecoder:
        """A model of `config`'s shape with random weights (benchmarks)."""
        dev = torch.device(device)
        dt = resolve_dtype(dtype, dev)
        return cls(config, random_weights(config, dt, dev, seed, std), dev, dt)

    def new_kv_cache(self, num_slots: int, growable: bool = False) -> PagedKVCache:
        """A zeroed KV cache of `num_slots` slots for this model."""
        c = self.config
        return PagedKVCache(c.num_hidden_layers, num_slots, c.num_key_value_heads,
                            c.head_dim, self.dtype, self.device, growable)

    def forward(self, input_ids: torch.Tensor, meta: PagedAttentionMetadata,
                kv_cache: PagedKVCache, attention: AttentionBackend,
                logits_indices: torch.Tensor) -> torch.Tensor:
        """Compute the batch's tokens, write their KV, return float32 logits for the rows
        `logits_indices` of the batch (`[len(logits_indices), vocab_size]`)."""
        c, w = self.config, self.weights
        if c.sliding_window is not None and meta.max_seq_len > c.sliding_window:
            raise CheckpointError(f"config.json: sliding_window={c.sliding_window} is reached "
                                  f"(a sequence of {meta.max_seq_len} tokens); the decoder "
                                  "computes full attention only")
        n = input_ids.shape[0]
        hq, hkv, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        qk_size = c.q_size + c.kv_size
        cos, sin = self.rotary.cos_sin(meta.positions, self.dtype)
        h = w.embed[input_ids]
        for i, lw in enumerate(w.layers):
            x = rms_norm(h, lw.input_norm, c.rms_norm_eps)
            qkv = F.linear(x, lw.qkv, lw.qkv_bias)
            # Rotate queries and keys together: [n, hq + hkv, hd].
            qk = apply_rotary(qkv[:, :qk_size].view(n, hq + hkv, hd), cos, sin)
            q, k = qk[:, :hq], qk[:, hq:]
            kv_cache.write(i, meta.slot_mapping, k, qkv[:, qk_size:].view(n, hkv, hd))
            o = attention(q, kv_cache.keys(i), kv_cache.values(i), meta, self.scale)
            h = h + F.linear(o.reshape(n, c.q_size), lw.o, lw.o_bias)
            x = rms_norm(h, lw.post_norm, c.rms_norm_eps)
            gate, up = F.linear(x, lw.gate_up, lw.gate_up_bias).chunk(2, dim=-1)
            h = h + F.linear(F.silu(gate) * up, lw.down, lw.down_bias)
        h = rms_norm(h[logits_indices], w.norm, c.rms_norm_eps)
        return F.linear(h, w.lm_head).float()
