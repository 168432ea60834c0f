"""What every paged-attention backend reads: one step's batch (`PagedAttentionMetadata`,
`build_metadata`) and the backend protocol (`AttentionBackend`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch


@dataclass(slots=True)
class PagedAttentionMetadata:
    """One step's batch, as the kernels read it. Tensors live on the KV cache's device.

    `query_start_loc[i] .. query_start_loc[i+1]` are request i's new tokens in `q`;
    `seq_lens[i]` is its sequence length after this step (cached prefix plus new tokens), so
    its new tokens sit at positions `seq_lens[i] - query_len .. seq_lens[i] - 1`.
    `block_table[i, j]` is the page holding positions `j*page_size .. (j+1)*page_size - 1`
    (rows padded with 0 past the request's last page). `slot_mapping[t]` is the slot that
    receives token t's key and value. `query_lens` and `seq_lens_host` are the same lengths
    on the host. `scratch` lets a backend keep what it derives once per step (every layer
    reuses it).
    """

    page_size: int
    query_start_loc: torch.Tensor  # int32 [num_reqs + 1]
    seq_lens: torch.Tensor  # int32 [num_reqs]
    block_table: torch.Tensor  # int32 [num_reqs, max_pages]
    slot_mapping: torch.Tensor  # int64 [num_tokens]
    positions: torch.Tensor  # int64 [num_tokens]
    query_lens: list[int]
    seq_lens_host: list[int]
    max_query_len: int
    max_seq_len: int
    scratch: dict[str, Any] = field(default_factory=dict)

    @property
    def num_reqs(self) -> int:
        return len(self.query_lens)

    @property
    def num_tokens(self) -> int:
        return int(sum(self.query_lens))

    @property
    def is_decode_only(self) -> bool:
        """Every request computes exactly one token."""
        return self.max_query_len == 1


def build_metadata(query_lens: Sequence[int], seq_lens: Sequence[int],
                   page_tables: Sequence[Sequence[int]], page_size: int,
                   device: torch.device | str = "cpu") -> PagedAttentionMetadata:
    """Describe a batch from per-request lengths and page lists.

    `page_tables[i]` lists request i's pages in position order and must cover positions
    `0 .. seq_lens[i] - 1` (extra pages are ignored). Raises ValueError naming the request
    index and the lengths when a page list is short or a query is longer than its sequence.
    """
    n = len(query_lens)
    if len(seq_lens) != n or len(page_tables) != n:
        raise ValueError(f"build_metadata: {n} query_lens, {len(seq_lens)} seq_lens and "
                         f"{len(page_tables)} page tables: counts differ")
    if page_size < 1:
        raise ValueError(f"build_metadata: page_size={page_size}: must be at least 1")
    pages_needed = [-(-s // page_size) for s in seq_lens]
    for i, (q, s, p, need) in enumerate(zip(query_lens, seq_lens, page_tables, pages_needed,
                                            strict=True)):
        if not 0 < q <= s:
            raise ValueError(f"build_metadata: request {i}: query_len={q}, seq_len={s}: need "
                             "0 < query_len <= seq_len")
        if len(p) < need:
            raise ValueError(f"build_metadata: request {i}: {len(p)} pages of {page_size} do "
                             f"not cover seq_len={s} (need {need})")
    max_pages = max(pages_needed, default=0)
    table = np.zeros((n, max(max_pages, 1)), dtype=np.int32)
    for i, (p, need) in enumerate(zip(page_tables, pages_needed, strict=True)):
        table[i, :need] = p[:need]
    q_arr = np.asarray(query_lens, dtype=np.int64)
    s_arr = np.asarray(seq_lens, dtype=np.int64)
    qsl = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(q_arr, out=qsl[1:])
    num_tokens = int(qsl[-1])
    # Token t of request i sits at position seq_len - query_len + (t - query_start).
    req_of_token = np.repeat(np.arange(n), q_arr)
    positions = np.arange(num_tokens, dtype=np.int64) - qsl[req_of_token] + (
        s_arr - q_arr)[req_of_token]
    slots = (table[req_of_token, positions // page_size].astype(np.int64) * page_size
             + positions % page_size)
    dev = torch.device(device)
    return PagedAttentionMetadata(
        page_size=page_size,
        query_start_loc=torch.from_numpy(qsl.astype(np.int32)).to(dev),
        seq_lens=torch.from_numpy(s_arr.astype(np.int32)).to(dev),
        block_table=torch.from_numpy(table).to(dev),
        slot_mapping=torch.from_numpy(slots).to(dev),
        positions=torch.from_numpy(positions).to(dev),
        query_lens=[int(x) for x in query_lens],
        seq_lens_host=[int(x) for x in seq_lens],
        max_query_len=int(q_arr.max(initial=0)),
        max_seq_len=int(s_arr.max(initial=0)),
    )


class AttentionBackend(Protocol):
    """Paged attention over a mixed batch: `q [T, Hq, D]` against the cache, out `[T, Hq, D]`.

    The new tokens' keys and values are already written to their slots.
    """

    name: str

    def __call__(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 meta: PagedAttentionMetadata, scale: float) -> torch.Tensor:
        ...
