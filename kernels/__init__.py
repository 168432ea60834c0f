"""Paged attention kernels and the choice among them (DESIGN.md, "Layout": `kernels/`).

Every backend computes the same thing: for a batch of requests, each request's new tokens
(`q`, packed as `[num_tokens, num_heads, head_dim]`) attend causally to the request's whole
sequence, whose keys and values are already in the paged KV cache (`[num_slots, num_kv_heads,
head_dim]`, slot = page_id * page_size + offset). `PagedAttentionMetadata` describes the batch.

Backends: `torch` (kernels.torch_ref, the truth, any device), `triton` (kernels.triton_paged;
on a CPU only under `TRITON_INTERPRET=1`, which that module sets when no GPU is present) and
`flash_attn` (kernels.flash_attn, a GPU with flash-attn installed). `auto` picks the fastest
available one.
"""

from kernels.choice import (
    KERNEL_CHOICES,
    available_kernels,
    get_attention_backend,
    resolve_kernel,
)
from kernels.metadata import AttentionBackend, PagedAttentionMetadata, build_metadata

__all__ = [
    "KERNEL_CHOICES",
    "AttentionBackend",
    "PagedAttentionMetadata",
    "available_kernels",
    "build_metadata",
    "get_attention_backend",
    "resolve_kernel",
]
