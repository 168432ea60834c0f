"""The paged KV cache of DESIGN.md: one tensor per layer, indexed by slot.

Layer l holds `kv[l]` of shape `[2, num_slots, num_kv_heads, head_dim]`; `kv[l][0]` are keys
and `kv[l][1]` values, and slot = page_id * page_size + offset. The layout does not depend on
the page size, so one cache serves page size 1 (SGLang) and 16 (vLLM); flash-attn reads it as
`[num_pages, page_size, num_kv_heads, head_dim]` without a copy.
"""

from __future__ import annotations

import torch


class PagedKVCache:
    """KV storage for every layer. With `growable`, `ensure_slots` enlarges it on demand
    (doubling); otherwise a slot past the end is an error naming it."""

    def __init__(self, num_layers: int, num_slots: int, num_kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device, growable: bool = False) -> None:
        if num_slots < 1:
            raise ValueError(f"kv cache: num_slots={num_slots}: must be at least 1")
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.dtype = dtype
        self.device = device
        self.growable = growable
        self.kv = [torch.zeros((2, num_slots, num_kv_heads, head_dim), dtype=dtype,
                               device=device) for _ in range(num_layers)]

    @property
    def num_slots(self) -> int:
        return self.kv[0].shape[1]

    @property
    def num_layers(self) -> int:
        return len(self.kv)

    def num_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.kv)

    def keys(self, layer: int) -> torch.Tensor:
        """`[num_slots, num_kv_heads, head_dim]` keys of `layer` (a view)."""
        return self.kv[layer][0]

    def values(self, layer: int) -> torch.Tensor:
        """`[num_slots, num_kv_heads, head_dim]` values of `layer` (a view)."""
        return self.kv[layer][1]

    def ensure_slots(self, needed: int) -> None:
        """Make slots `0 .. needed - 1` addressable (grow, or raise naming the slot)."""
        have = self.num_slots
        if needed <= have:
            return
        if not self.growable:
            raise ValueError(f"kv cache: slot {needed - 1} is past the end of the cache "
                             f"(num_slots={have})")
        size = max(needed, 2 * have)
        for i, old in enumerate(self.kv):
            new = torch.zeros((2, size, self.num_kv_heads, self.head_dim), dtype=self.dtype,
                              device=self.device)
            new[:, :have] = old
            self.kv[i] = new

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store `k`, `v` `[num_tokens, num_kv_heads, head_dim]` at `slots` `[num_tokens]`."""
        kv = self.kv[layer]
        kv[0].index_copy_(0, slots, k)
        kv[1].index_copy_(0, slots, v)
