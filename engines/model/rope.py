"""Rotary position embeddings: inverse frequencies per RoPE type, and their application.

The rotation pairs dimension i with i + head_dim/2 (the "rotate half" layout of Hugging Face
Llama checkpoints). cos and sin are computed in float32 from float32 positions and inverse
frequencies, then cast to the activations' dtype.
"""

from __future__ import annotations

import math

import torch

from engines.model.config import CheckpointError, RopeConfig


def _base_inv_freq(theta: float, dim: int) -> torch.Tensor:
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
    return 1.0 / (theta ** exponents)


def _llama3(inv: torch.Tensor, rope: RopeConfig) -> torch.Tensor:
    orig = rope.original_max_position_embeddings
    assert orig is not None
    low_wavelen = orig / rope.low_freq_factor
    high_wavelen = orig / rope.high_freq_factor
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wavelen, inv / rope.factor, inv)
    smooth = (orig / wavelen - rope.low_freq_factor) / (
        rope.high_freq_factor - rope.low_freq_factor)
    blended = (1 - smooth) * scaled / rope.factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, blended, scaled)


def _yarn_mscale(scale: float, m: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def _yarn(theta: float, dim: int, rope: RopeConfig) -> tuple[torch.Tensor, float]:
    orig = rope.original_max_position_embeddings
    assert orig is not None
    factor = rope.factor

    def correction_dim(rotations: float) -> float:
        return dim * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction_dim(rope.beta_fast), correction_dim(rope.beta_slow)
    if rope.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    pos_freqs = theta ** (torch.arange(0, dim, 2).float() / dim)
    extrapolate = 1 - ramp
    inv = (1.0 / (factor * pos_freqs)) * (1 - extrapolate) + (1.0 / pos_freqs) * extrapolate
    if rope.attention_factor is not None:
        attn = float(rope.attention_factor)
    elif rope.mscale and rope.mscale_all_dim:
        attn = _yarn_mscale(factor, rope.mscale) / _yarn_mscale(factor, rope.mscale_all_dim)
    else:
        attn = _yarn_mscale(factor)
    return inv, attn


def inverse_frequencies(rope: RopeConfig, head_dim: int) -> tuple[torch.Tensor, float]:
    """float32 inverse frequencies `[head_dim // 2]` and the factor applied to cos and sin."""
    if head_dim % 2:
        raise CheckpointError(f"config.json: head_dim={head_dim} must be even for RoPE")
    if rope.rope_type == "default":
        return _base_inv_freq(rope.theta, head_dim), 1.0
    if rope.rope_type == "linear":
        return _base_inv_freq(rope.theta, head_dim) / rope.factor, 1.0
    if rope.rope_type == "llama3":
        return _llama3(_base_inv_freq(rope.theta, head_dim), rope), 1.0
    if rope.rope_type == "yarn":
        return _yarn(rope.theta, head_dim, rope)
    raise CheckpointError(f"config.json: rope_type={rope.rope_type!r} is not supported")


class Rotary:
    """cos / sin for given positions, and the rotation of queries and keys."""

    def __init__(self, rope: RopeConfig, head_dim: int, device: torch.device) -> None:
        inv, attn = inverse_frequencies(rope, head_dim)
        self.inv_freq = inv.to(device)
        self.attention_factor = attn

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin `[num_tokens, 1, head_dim // 2]` in `dtype`."""
        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        cos, sin = freqs.cos(), freqs.sin()
        if self.attention_factor != 1.0:
            cos, sin = cos * self.attention_factor, sin * self.attention_factor
        return cos.to(dtype)[:, None, :], sin.to(dtype)[:, None, :]


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate `x [num_tokens, heads, head_dim]` pairwise (i, i + head_dim/2)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
