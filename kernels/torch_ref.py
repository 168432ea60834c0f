"""Paged attention in plain PyTorch: the truth the other kernels are checked against.

For each request, the new tokens (`q`) attend to positions `0 .. seq_len - 1` of the request,
read from the paged cache through its page table, with a causal mask: the new token at
position p sees keys at positions <= p. Scores, softmax and the weighted sum are computed in
float32 whatever the input dtype; the output has the input dtype.

Requests are grouped for speed, not for a different result: one-token queries (decode) in
one padded batch, longer ones (prefill, extend) in another. (PyTorch's fused
scaled_dot_product_attention is faster on a CPU but not invariant to the padding, so a
recomputed position would not get the same bits; it is not used.)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels.metadata import PagedAttentionMetadata


@dataclass(slots=True)
class _Group:
    """Requests padded together: query token indices, key slots and the mask."""

    token_index: torch.Tensor  # int64 [G, Qmax] into q (padding repeats a valid index)
    token_valid: torch.Tensor  # bool [G, Qmax]
    slots: torch.Tensor  # int64 [G, Lmax] into the cache (padding: slot 0)
    key_valid: torch.Tensor | None  # bool [G, Lmax]: position < seq_len; None: all are
    rows_by_head: dict[int, torch.Tensor]  # KV heads -> int64 [G * Hkv * Lmax] cache rows
    bias: torch.Tensor | None  # float32 [G, 1, 1, Qmax, Lmax]: 0 or -inf; None: no mask
    whole: bool  # the group is every token of the batch, in order, unpadded


def _slots_for(block_table: torch.Tensor, page_size: int, length: int) -> torch.Tensor:
    """Slots of positions 0 .. length-1 for every row of `block_table`: [rows, length]."""
    pos = torch.arange(length, device=block_table.device)
    pages = block_table[:, pos // page_size].long()
    return pages * page_size + pos % page_size


def _make_group(meta: PagedAttentionMetadata, rows: list[int]) -> _Group:
    dev = meta.block_table.device
    q_host = [meta.query_lens[r] for r in rows]
    s_host = [meta.seq_lens_host[r] for r in rows]
    q_lens = torch.tensor(q_host, device=dev)
    s_lens = torch.tensor(s_host, device=dev)
    q_start = meta.query_start_loc[rows].long()
    q_max, l_max = max(q_host), max(s_host)
    qi = torch.arange(q_max, device=dev)
    token_valid = qi[None, :] < q_lens[:, None]
    token_index = q_start[:, None] + torch.minimum(qi[None, :], (q_lens - 1)[:, None])
    slots = _slots_for(meta.block_table[rows], meta.page_size, l_max)
    key_pos = torch.arange(l_max, device=dev)
    # Query i of a request sits at position seq_len - q_len + i (padding rows: the last one).
    q_pos = (s_lens - q_lens)[:, None] + torch.minimum(qi[None, :], (q_lens - 1)[:, None])
    allowed = key_pos[None, None, :] <= q_pos[:, :, None]  # causal, and < seq_len
    padded_keys = min(s_host) < l_max
    key_valid = key_pos[None, :] < s_lens[:, None] if padded_keys else None
    if key_valid is not None:
        slots = torch.where(key_valid, slots, torch.zeros_like(slots))
    bias = None
    if q_max > 1 or padded_keys:
        bias = torch.zeros(allowed.shape, device=dev).masked_fill_(~allowed, float("-inf"))
        bias = bias[:, None, None]
    whole = len(rows) == meta.num_reqs and min(q_host) == q_max
    return _Group(token_index, token_valid, slots, key_valid, {}, bias, whole)


def _gather(cache: torch.Tensor, g: _Group) -> torch.Tensor:
    """The group's keys or values, `[G, Hkv, Lmax, D]`, contiguous (one index_select over
    the cache's rows `slot * Hkv + head`)."""
    n_kv, d = cache.shape[1], cache.shape[2]
    idx = g.rows_by_head.get(n_kv)
    if idx is None:
        heads = torch.arange(n_kv, device=g.slots.device)
        idx = (g.slots[:, None, :] * n_kv + heads[None, :, None]).reshape(-1)
        g.rows_by_head[n_kv] = idx
    rows, l_max = g.slots.shape
    return cache.reshape(-1, d).index_select(0, idx).view(rows, n_kv, l_max, d)


def _groups(meta: PagedAttentionMetadata) -> list[_Group]:
    cached = meta.scratch.get("torch_ref")
    if cached is not None:
        return cached
    decode = [i for i, q in enumerate(meta.query_lens) if q == 1]
    extend = [i for i, q in enumerate(meta.query_lens) if q > 1]
    groups = [_make_group(meta, rows) for rows in (decode, extend) if rows]
    meta.scratch["torch_ref"] = groups
    return groups


def _attend(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, g: _Group,
            scale: float) -> torch.Tensor:
    """Attention of one padded group: returns [G, Qmax, Hq, D] in float32."""
    n_kv = k_cache.shape[1]
    rows, q_max = g.token_index.shape
    hq, d = q.shape[1], q.shape[2]
    grp = hq // n_kv
    qg = q.view(rows, q_max, hq, d) if g.whole else q[g.token_index]
    # [G, Hkv, grp * Qmax, D]: the query heads of a KV head side by side
    qg = (qg.float() * scale).view(rows, q_max, n_kv, grp, d).permute(0, 2, 3, 1, 4)
    qg = qg.reshape(rows, n_kv, grp * q_max, d)
    k = _gather(k_cache, g).float()  # [G, Hkv, L, D]
    v = _gather(v_cache, g).float()
    if g.key_valid is not None:
        # Padding reads slot 0, whatever it holds: zero it so that it cannot poison the sum.
        v = v.masked_fill(~g.key_valid[:, None, :, None], 0.0)
    scores = torch.matmul(qg, k.transpose(-1, -2))  # [G, Hkv, grp * Qmax, L]
    if g.bias is not None:
        scores.view(rows, n_kv, grp, q_max, -1).add_(g.bias)
    probs = torch.softmax(scores, dim=-1)
    out = torch.matmul(probs, v)  # [G, Hkv, grp * Qmax, D]
    return out.view(rows, n_kv, grp, q_max, d).permute(0, 3, 1, 2, 4).reshape(
        rows, q_max, hq, d)


def paged_attention_ref(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                        meta: PagedAttentionMetadata, scale: float) -> torch.Tensor:
    """Causal paged attention for a mixed batch.

    `q` is `[num_tokens, num_heads, head_dim]`, `k_cache` / `v_cache` are `[num_slots,
    num_kv_heads, head_dim]` and already hold every key and value the batch reads (the new
    tokens' included). `num_heads` must be a multiple of `num_kv_heads` (grouped-query
    attention: query head h reads KV head h // (num_heads // num_kv_heads)).

    A request's result depends only on its own query, keys and values: not on the other
    requests of the batch nor on how its prompt was chunked (padding adds exact zeros), so a
    recomputed position gets bit-identical keys and values.
    """
    if q.shape[1] % k_cache.shape[1]:
        raise ValueError(f"paged_attention_ref: q has {q.shape[1]} heads, not a multiple of "
                         f"the cache's {k_cache.shape[1]} KV heads")
    groups = _groups(meta)
    if len(groups) == 1 and groups[0].whole:
        return _attend(q, k_cache, v_cache, groups[0], scale).reshape(q.shape).to(q.dtype)
    out = torch.empty_like(q)
    for g in groups:
        res = _attend(q, k_cache, v_cache, g, scale)
        out[g.token_index[g.token_valid]] = res[g.token_valid].to(q.dtype)
    return out


class TorchRefBackend:
    """`kernel=torch`: the reference implementation as an attention backend."""

    name = "torch"

    def __call__(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 meta: PagedAttentionMetadata, scale: float) -> torch.Tensor:
        return paged_attention_ref(q, k_cache, v_cache, meta, scale)
