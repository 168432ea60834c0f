"""Adapter to flash-attn's paged API (GPU only, used when flash-attn is installed).

Two generations are recognised:
- FlashAttention-3 (`flash_attn_interface`, Hopper): `flash_attn_with_kvcache` with a
  `page_table`, packed varlen queries (`cu_seqlens_q`) and `cache_seqlens`; any page size.
- FlashAttention-2 (`flash_attn`): `flash_attn_varlen_func` with a `block_table`, which
  requires the page size to be a multiple of 256, so it cannot serve the page sizes 1 and 16
  the schedulers use; `usable` reports that and `auto` then picks Triton.

The cache `[num_slots, num_kv_heads, head_dim]` is viewed as `[num_pages, page_size,
num_kv_heads, head_dim]`, flash-attn's paged layout, without a copy. Causal masks in
flash-attn align the last query with the last key, which is this project's convention.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import torch

from kernels.metadata import PagedAttentionMetadata

FA2_PAGE_MULTIPLE = 256


def _import(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except Exception:  # ImportError, or a CUDA extension that fails to load
        return None


def flavour() -> str | None:
    """'fa3', 'fa2', or None when flash-attn is not installed (or there is no GPU)."""
    if not torch.cuda.is_available():
        return None
    fa3 = _import("flash_attn_interface")
    if fa3 is not None and hasattr(fa3, "flash_attn_with_kvcache"):
        return "fa3"
    fa2 = _import("flash_attn")
    if fa2 is not None and hasattr(fa2, "flash_attn_varlen_func"):
        return "fa2"
    return None


def usable(page_size: int) -> bool:
    """Whether the installed flash-attn can run paged attention with `page_size` here."""
    kind = flavour()
    if kind == "fa3":
        return True
    return kind == "fa2" and page_size % FA2_PAGE_MULTIPLE == 0


class FlashAttnBackend:
    """`kernel=flash_attn`: one flash-attn call per layer for the whole mixed batch."""

    name = "flash_attn"

    def __init__(self) -> None:
        kind = flavour()
        if kind is None:
            raise RuntimeError("kernel=flash_attn: flash-attn is not installed or no GPU is "
                               "available (modules tried: flash_attn_interface, flash_attn)")
        self.kind = kind
        mod = _import("flash_attn_interface" if kind == "fa3" else "flash_attn")
        assert mod is not None
        self._fn: Any = (mod.flash_attn_with_kvcache if kind == "fa3"
                         else mod.flash_attn_varlen_func)

    def __call__(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 meta: PagedAttentionMetadata, scale: float) -> torch.Tensor:
        ps = meta.page_size
        if k_cache.shape[0] % ps:
            raise ValueError(f"kernel=flash_attn: num_slots={k_cache.shape[0]} is not a "
                             f"multiple of page_size={ps}")
        hkv, dim = k_cache.shape[1], k_cache.shape[2]
        kc = k_cache.view(-1, ps, hkv, dim)
        vc = v_cache.view(-1, ps, hkv, dim)
        q = q.contiguous()  # the decoder's q is a view of the rotated q/k buffer
        if self.kind == "fa3":
            out = self._fn(q, kc, vc, cache_seqlens=meta.seq_lens,
                           page_table=meta.block_table, cu_seqlens_q=meta.query_start_loc,
                           max_seqlen_q=meta.max_query_len, softmax_scale=scale, causal=True)
        else:
            if ps % FA2_PAGE_MULTIPLE:
                raise ValueError(f"kernel=flash_attn: flash-attn 2 needs page_size to be a "
                                 f"multiple of {FA2_PAGE_MULTIPLE}, got page_size={ps}")
            cu_k = torch.zeros(meta.num_reqs + 1, dtype=torch.int32, device=q.device)
            torch.cumsum(meta.seq_lens, 0, out=cu_k[1:])
            out = self._fn(q, kc, vc, meta.query_start_loc, cu_k, meta.max_query_len,
                           meta.max_seq_len, softmax_scale=scale, causal=True,
                           block_table=meta.block_table)
        if isinstance(out, tuple):  # some versions return (out, softmax_lse)
            out = out[0]
        return out
