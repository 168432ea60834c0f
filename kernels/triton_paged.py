"""Triton kernels for paged attention: a split-KV decode kernel and a prefill/extend kernel.

Both read keys and values through the page table (slot = page * page_size + offset), so the
same code serves page size 1 (SGLang) and 16 (vLLM); grouped-query attention maps query head
h to KV head h // group. Inputs may be float32, bfloat16 or float16; softmax statistics and
accumulators are float32 (float32 dot products use IEEE precision, not TF32).

Without a GPU the kernels run in Triton's interpreter: this module sets `TRITON_INTERPRET=1`
before defining them when CUDA is unavailable (the variable is read when a kernel is
defined). The interpreter has no native bfloat16 arithmetic, so loaded values are upcast to
float32 there; on a GPU they enter the dot products in their own dtype.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton
import triton.language as tl

from kernels.metadata import PagedAttentionMetadata

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
_SUPPORTED = (torch.float32, torch.bfloat16, torch.float16)
# The kernels call only builtins of triton.language and reduce with the combine functions of
# tl.max / tl.sum: the interpreter runs those reductions in numpy, and the kernels keep
# working when another library imported triton before TRITON_INTERPRET was set (device
# functions such as tl.zeros, tl.max or tl.cdiv are then compiled-mode objects that the
# interpreter cannot call).
_MAX = tl.standard._elementwise_max
_SUM = tl.standard._sum_combine


@triton.jit
def _dot(a, b, PREC: tl.constexpr, EXACT: tl.constexpr):
    """a @ b. With EXACT (the interpreter) it is a broadcast product summed over the shared
    axis: the interpreter would run `tl.dot` as `np.matmul`, i.e. through the host's BLAS,
    whose kernel (chosen per CPU) may sum a row differently depending on where the row sits in
    the matrix, so one token's attention would depend on its neighbours in the block. The
    product is exact and numpy's sum over that axis adds each output element's terms in an
    order fixed by the (constexpr) block shape alone, so a row's result is the same bits
    wherever it sits and whatever the other rows hold."""
    if EXACT:
        return tl.reduce(a[:, :, None] * b[None, :, :], 1, _SUM)
    else:
        return tl.dot(a, b, input_precision=PREC)


@triton.jit
def _load_kv_block(k_ptr, v_ptr, bt_ptr, b, kvh, n0, end, d, dmask,
                   stride_ks, stride_kh, stride_vs, stride_vh, stride_bt,
                   PAGE: tl.constexpr, BLOCK_N: tl.constexpr, UPCAST: tl.constexpr):
    """Positions n0 .. n0 + BLOCK_N - 1 of request b (those below `end`), KV head kvh: the
    positions, their mask, and their keys and values gathered through the page table."""
    pos = n0 + tl.arange(0, BLOCK_N)
    pmask = pos < end
    page = tl.load(bt_ptr + b * stride_bt + pos // PAGE, mask=pmask, other=0).to(tl.int64)
    slot = page * PAGE + pos % PAGE
    kv_mask = pmask[:, None] & dmask[None, :]
    k = tl.load(k_ptr + slot[:, None] * stride_ks + kvh * stride_kh + d[None, :],
                mask=kv_mask, other=0.0)
    v = tl.load(v_ptr + slot[:, None] * stride_vs + kvh * stride_vh + d[None, :],
                mask=kv_mask, other=0.0)
    if UPCAST:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    return pos, pmask, k, v


@triton.jit
def _decode_split_kernel(
    q_ptr, k_ptr, v_ptr, bt_ptr, seq_ptr, mid_o_ptr, mid_lse_ptr,
    scale,
    stride_qt, stride_qh, stride_ks, stride_kh, stride_vs, stride_vh, stride_bt,
    stride_mo_t, stride_mo_h, stride_mo_s, stride_ml_t, stride_ml_h,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
    D_PAD: tl.constexpr, PAGE: tl.constexpr, BLOCK_N: tl.constexpr,
    UPCAST: tl.constexpr, PREC: tl.constexpr, EXACT_DOT: tl.constexpr,
):
    """One (request, KV head, split): the request's single query token, for every query head
    of the group, against its share of the sequence; writes the partial output and its
    log-sum-exp."""
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    num_splits = tl.num_programs(2)
    seq_len = tl.load(seq_ptr + b)
    blocks_per_split = ((seq_len + BLOCK_N - 1) // BLOCK_N + num_splits - 1) // num_splits
    start = split * blocks_per_split * BLOCK_N
    end = tl.minimum(start + blocks_per_split * BLOCK_N, seq_len)

    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, D_PAD)
    gmask = g < GROUP
    dmask = d < HEAD_DIM
    heads = kvh * GROUP + g
    q = tl.load(q_ptr + b * stride_qt + heads[:, None] * stride_qh + d[None, :],
                mask=gmask[:, None] & dmask[None, :], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.full([GROUP_PAD], 0.0, tl.float32)
    acc = tl.full([GROUP_PAD, D_PAD], 0.0, tl.float32)
    for n0 in range(start, end, BLOCK_N):
        _pos, pmask, k, v = _load_kv_block(k_ptr, v_ptr, bt_ptr, b, kvh, n0, end, d, dmask,
                                           stride_ks, stride_kh, stride_vs, stride_vh,
                                           stride_bt, PAGE, BLOCK_N, UPCAST)
        s = _dot(q, tl.trans(k), PREC, EXACT_DOT) * scale
        s = tl.where(pmask[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.reduce(s, 1, _MAX))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.reduce(p, 1, _SUM)
        acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, PREC, EXACT_DOT)
        m_i = m_new
    has = l_i > 0.0
    l_safe = tl.where(has, l_i, 1.0)
    out = acc / l_safe[:, None]
    lse = tl.where(has, m_i + tl.log(l_safe), float("-inf"))
    tl.store(mid_o_ptr + b * stride_mo_t + heads[:, None] * stride_mo_h
             + split * stride_mo_s + d[None, :], out, mask=gmask[:, None] & dmask[None, :])
    tl.store(mid_lse_ptr + b * stride_ml_t + heads * stride_ml_h + split, lse, mask=gmask)


@triton.jit
def _decode_reduce_kernel(
    mid_o_ptr, mid_lse_ptr, o_ptr, num_splits,
    stride_mo_t, stride_mo_h, stride_mo_s, stride_ml_t, stride_ml_h, stride_ot, stride_oh,
    S_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr,
):
    """Combine the splits of one (request, query head) by their log-sum-exp weights."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    s = tl.arange(0, S_PAD)
    d = tl.arange(0, D_PAD)
    smask = s < num_splits
    dmask = d < HEAD_DIM
    lse = tl.load(mid_lse_ptr + b * stride_ml_t + h * stride_ml_h + s, mask=smask,
                  other=float("-inf"))
    w = tl.exp(lse - tl.reduce(lse, 0, _MAX))
    part = tl.load(mid_o_ptr + b * stride_mo_t + h * stride_mo_h + s[:, None] * stride_mo_s
                   + d[None, :], mask=smask[:, None] & dmask[None, :], other=0.0)
    out = tl.reduce(w[:, None] * part, 0, _SUM) / tl.reduce(w, 0, _SUM)
    tl.store(o_ptr + b * stride_ot + h * stride_oh + d, out.to(o_ptr.dtype.element_ty),
             mask=dmask)


@triton.jit
def _extend_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, bt_ptr, qsl_ptr, seq_ptr,
    scale,
    stride_qt, stride_qh, stride_ks, stride_kh, stride_vs, stride_vh, stride_ot, stride_oh,
    stride_bt,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
    D_PAD: tl.constexpr, PAGE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    UPCAST: tl.constexpr, PREC: tl.constexpr, EXACT_DOT: tl.constexpr,
):
    """One (request, KV head, block of BLOCK_M new tokens): causal attention of those tokens,
    for every query head of the group (rows = token x head), over the request's cached
    prefix and its new tokens, all read from the paged cache."""
    ROWS: tl.constexpr = BLOCK_M * GROUP_PAD
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    mb = tl.program_id(2)
    q_start = tl.load(qsl_ptr + b)
    q_len = tl.load(qsl_ptr + b + 1) - q_start
    if mb * BLOCK_M >= q_len:
        return
    seq_len = tl.load(seq_ptr + b)
    ctx = seq_len - q_len

    r = tl.arange(0, ROWS)
    tok = mb * BLOCK_M + r // GROUP_PAD
    g = r % GROUP_PAD
    d = tl.arange(0, D_PAD)
    rmask = (tok < q_len) & (g < GROUP)
    dmask = d < HEAD_DIM
    row_off = (q_start + tok) * stride_qt + (kvh * GROUP + g) * stride_qh
    q = tl.load(q_ptr + row_off[:, None] + d[None, :], mask=rmask[:, None] & dmask[None, :],
                other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    q_pos = ctx + tok
    end = tl.minimum(ctx + (mb + 1) * BLOCK_M, seq_len)
    m_i = tl.full([ROWS], float("-inf"), tl.float32)
    l_i = tl.full([ROWS], 0.0, tl.float32)
    acc = tl.full([ROWS, D_PAD], 0.0, tl.float32)
    for n0 in range(0, end, BLOCK_N):
        pos, pmask, k, v = _load_kv_block(k_ptr, v_ptr, bt_ptr, b, kvh, n0, end, d, dmask,
                                          stride_ks, stride_kh, stride_vs, stride_vh,
                                          stride_bt, PAGE, BLOCK_N, UPCAST)
        s = _dot(q, tl.trans(k), PREC, EXACT_DOT) * scale
        allowed = pmask[None, :] & (pos[None, :] <= q_pos[:, None])
        s = tl.where(allowed, s, float("-inf"))
        # Position 0 is allowed for every row, so m_new is finite from the first block on.
        m_new = tl.maximum(m_i, tl.reduce(s, 1, _MAX))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.reduce(p, 1, _SUM)
        acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, PREC, EXACT_DOT)
        m_i = m_new
    out = acc / l_i[:, None]
    out_off = (q_start + tok) * stride_ot + (kvh * GROUP + g) * stride_oh
    tl.store(o_ptr + out_off[:, None] + d[None, :], out.to(o_ptr.dtype.element_ty),
             mask=rmask[:, None] & dmask[None, :])


def _check(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dtype not in _SUPPORTED:
            raise ValueError(f"triton paged attention: {name}.dtype={t.dtype}: supported: "
                             "float32, bfloat16, float16")
        if t.dim() != 3 or t.stride(-1) != 1:
            raise ValueError(f"triton paged attention: {name} has shape {tuple(t.shape)} and "
                             f"strides {t.stride()}: need [rows, heads, head_dim] with a "
                             "contiguous last dimension")
    if k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        raise ValueError(f"triton paged attention: q.dtype={q.dtype} but k_cache.dtype="
                         f"{k_cache.dtype}, v_cache.dtype={v_cache.dtype}")
    if q.shape[1] % k_cache.shape[1]:
        raise ValueError(f"triton paged attention: q has {q.shape[1]} heads, not a multiple "
                         f"of the cache's {k_cache.shape[1]} KV heads")


def _common(dtype: torch.dtype, head_dim: int) -> dict[str, object]:
    upcast = INTERPRETED or dtype == torch.float32
    return {"HEAD_DIM": head_dim, "D_PAD": max(16, triton.next_power_of_2(head_dim)),
            "UPCAST": upcast, "PREC": "ieee" if upcast else "tf32",  # PREC: float32 operands
            "EXACT_DOT": INTERPRETED}


def decode_config(dtype: torch.dtype, head_dim: int, group: int, page_size: int
                  ) -> tuple[dict[str, object], dict[str, int]]:
    """Constexprs and launch options of the decode kernel for this shape."""
    consts = {**_common(dtype, head_dim), "GROUP": group,
              "GROUP_PAD": max(16, triton.next_power_of_2(group)), "PAGE": page_size,
              "BLOCK_N": 64}
    return consts, {"num_warps": 4}


def extend_config(dtype: torch.dtype, head_dim: int, group: int, page_size: int
                  ) -> tuple[dict[str, object], dict[str, int]]:
    """Constexprs and launch options of the extend kernel for this shape. A program holds
    BLOCK_M tokens x GROUP_PAD query heads as the rows of its dot products (at least 16)."""
    consts = {**_common(dtype, head_dim), "GROUP": group,
              "GROUP_PAD": triton.next_power_of_2(group), "PAGE": page_size}
    if INTERPRETED:
        rows, block_n, opts = 64, 64, {"num_warps": 4, "num_stages": 1}
    elif dtype == torch.float32 or int(consts["D_PAD"]) > 128:
        rows, block_n, opts = 64, 32, {"num_warps": 4, "num_stages": 2}
    else:
        rows, block_n, opts = 128, 64, {"num_warps": 8, "num_stages": 2}
    group_pad = int(consts["GROUP_PAD"])
    consts.update(BLOCK_M=max(rows, group_pad) // group_pad, BLOCK_N=block_n)
    return consts, opts


def default_num_splits(num_reqs: int, num_kv_heads: int, max_seq_len: int,
                       device: torch.device) -> int:
    """Splits of the sequence per (request, KV head) in decode: enough programs to fill the
    GPU (two per multiprocessor), at least 256 positions per split, at most 32 splits."""
    if device.type != "cuda" or INTERPRETED:
        return 1
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    want = triton.cdiv(2 * sms, max(num_reqs * num_kv_heads, 1))
    return max(1, min(want, triton.cdiv(max_seq_len, 256), 32))


def paged_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 meta: PagedAttentionMetadata, scale: float,
                 num_splits: int | None = None) -> torch.Tensor:
    """Decode attention: one new token per request (`q` row i is request i).

    The sequence is cut into `num_splits` parts (default: `default_num_splits`) computed in
    parallel and combined by their log-sum-exp (flash-decoding).
    """
    _check(q, k_cache, v_cache)
    if not meta.is_decode_only or q.shape[0] != meta.num_reqs:
        raise ValueError(f"paged_decode: {q.shape[0]} query rows for {meta.num_reqs} requests "
                         f"with max_query_len={meta.max_query_len}: needs one token each")
    n, hq, dim = q.shape
    hkv = k_cache.shape[1]
    splits = num_splits or default_num_splits(n, hkv, meta.max_seq_len, q.device)
    consts, opts = decode_config(q.dtype, dim, hq // hkv, meta.page_size)
    mid_o = torch.empty((n, hq, splits, dim), dtype=torch.float32, device=q.device)
    mid_lse = torch.empty((n, hq, splits), dtype=torch.float32, device=q.device)
    _decode_split_kernel[(n, hkv, splits)](
        q, k_cache, v_cache, meta.block_table, meta.seq_lens, mid_o, mid_lse, scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1),
        v_cache.stride(0), v_cache.stride(1), meta.block_table.stride(0),
        mid_o.stride(0), mid_o.stride(1), mid_o.stride(2), mid_lse.stride(0), mid_lse.stride(1),
        **consts, **opts,
    )
    if splits == 1:
        return mid_o[:, :, 0].to(q.dtype)
    out = torch.empty_like(q)
    _decode_reduce_kernel[(n, hq)](
        mid_o, mid_lse, out, splits,
        mid_o.stride(0), mid_o.stride(1), mid_o.stride(2), mid_lse.stride(0), mid_lse.stride(1),
        out.stride(0), out.stride(1),
        S_PAD=max(2, triton.next_power_of_2(splits)), HEAD_DIM=dim, D_PAD=consts["D_PAD"],
        num_warps=4,
    )
    return out


def paged_extend(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 meta: PagedAttentionMetadata, scale: float) -> torch.Tensor:
    """Prefill / extend attention for a mixed batch (any query lengths)."""
    _check(q, k_cache, v_cache)
    if q.shape[0] != meta.num_tokens:
        raise ValueError(f"paged_extend: q has {q.shape[0]} rows, the metadata "
                         f"{meta.num_tokens} tokens")
    _, hq, dim = q.shape
    hkv = k_cache.shape[1]
    consts, opts = extend_config(q.dtype, dim, hq // hkv, meta.page_size)
    out = torch.empty_like(q)
    grid = (meta.num_reqs, hkv, triton.cdiv(meta.max_query_len, int(consts["BLOCK_M"])))  # type: ignore[call-overload]
    _extend_kernel[grid](
        q, k_cache, v_cache, out, meta.block_table, meta.query_start_loc, meta.seq_lens, scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1),
        v_cache.stride(0), v_cache.stride(1), out.stride(0), out.stride(1),
        meta.block_table.stride(0),
        **consts, **opts,
    )
    return out


class TritonBackend:
    """`kernel=triton`: the decode kernel for all-decode batches, the extend kernel otherwise."""

    name = "triton"

    def __call__(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 meta: PagedAttentionMetadata, scale: float) -> torch.Tensor:
        if meta.is_decode_only:
            return paged_decode(q, k_cache, v_cache, meta, scale)
        return paged_extend(q, k_cache, v_cache, meta, scale)


_TRITON_TYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def compile_for(capability: int = 90, dtype: torch.dtype = torch.bfloat16, head_dim: int = 128,
                group: int = 4, page_size: int = 16) -> dict[str, int]:
    """Compile the three kernels ahead of time for a CUDA architecture (90: Hopper), without
    a GPU: checks that they compile as well as interpret. Returns each kernel's shared memory
    in bytes. Needs TRITON_INTERPRET=0 when this module was imported."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if INTERPRETED:
        raise RuntimeError("compile_for: kernels.triton_paged was imported with "
                           "TRITON_INTERPRET set; import it with TRITON_INTERPRET=0")
    target = GPUTarget("cuda", capability, 32)
    t = "*" + _TRITON_TYPES[dtype]
    i32 = "i32"

    def build(fn: object, ptrs: dict[str, str], ints: list[str], consts: dict[str, object],
              opts: dict[str, int]) -> int:
        sig = {**ptrs, "scale": "fp32", **{n: i32 for n in ints},
               **{c: "constexpr" for c in consts}}
        compiled = triton.compile(ASTSource(fn, sig, consts), target=target, options=opts)
        return int(compiled.metadata.shared)

    dec, dec_opts = decode_config(dtype, head_dim, group, page_size)
    ext, ext_opts = extend_config(dtype, head_dim, group, page_size)
    out = {
        "decode": build(_decode_split_kernel,
                        {"q_ptr": t, "k_ptr": t, "v_ptr": t, "bt_ptr": "*i32", "seq_ptr": "*i32",
                         "mid_o_ptr": "*fp32", "mid_lse_ptr": "*fp32"},
                        ["stride_qt", "stride_qh", "stride_ks", "stride_kh", "stride_vs",
                         "stride_vh", "stride_bt", "stride_mo_t", "stride_mo_h", "stride_mo_s",
                         "stride_ml_t", "stride_ml_h"], dec, dec_opts),
        "extend": build(_extend_kernel,
                        {"q_ptr": t, "k_ptr": t, "v_ptr": t, "o_ptr": t, "bt_ptr": "*i32",
                         "qsl_ptr": "*i32", "seq_ptr": "*i32"},
                        ["stride_qt", "stride_qh", "stride_ks", "stride_kh", "stride_vs",
                         "stride_vh", "stride_ot", "stride_oh", "stride_bt"], ext, ext_opts),
    }
    red = {"S_PAD": 8, "HEAD_DIM": head_dim, "D_PAD": dec["D_PAD"]}
    sig = {"mid_o_ptr": "*fp32", "mid_lse_ptr": "*fp32", "o_ptr": t, "num_splits": i32}
    sig.update({n: i32 for n in ["stride_mo_t", "stride_mo_h", "stride_mo_s", "stride_ml_t",
                                 "stride_ml_h", "stride_ot", "stride_oh"]})
    sig.update({c: "constexpr" for c in red})
    out["reduce"] = int(triton.compile(ASTSource(_decode_reduce_kernel, sig, red),
                                       target=target, options={"num_warps": 4}).metadata.shared)
    return out
