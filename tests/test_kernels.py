"""Paged attention kernels: the reference against a naive loop, Triton and flash-attn against
the reference, metadata checks and backend selection.

Without a GPU the Triton kernels run under TRITON_INTERPRET=1 (set by kernels.triton_paged), so
the shapes here stay tiny.
"""

from __future__ import annotations

import random

import pytest
import torch

from kernels import available_kernels, build_metadata, get_attention_backend, resolve_kernel
from kernels import flash_attn as fa
from kernels.torch_ref import paged_attention_ref

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# (query_lens, seq_lens, num_heads, num_kv_heads, head_dim)
SHAPES = [
    ([1, 5, 17, 1], [9, 5, 40, 33], 4, 2, 16),  # mixed: decode, fresh prefill, extend
    ([3, 1, 20], [3, 70, 36], 6, 2, 24),  # group of 3, head_dim not a power of two
    ([2, 16], [18, 16], 4, 4, 32),  # no grouping
]
DECODE_SHAPES = [
    ([1, 1, 1, 1, 1], [1, 9, 16, 33, 90], 4, 2, 16),
    ([1, 1], [70, 17], 6, 2, 24),
    ([1, 1, 1], [5, 64, 65], 8, 1, 32),  # multi-query attention
]
TOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}


def make_batch(query_lens: list[int], seq_lens: list[int], hq: int, hkv: int, d: int,
               page_size: int, dtype: torch.dtype, seed: int = 0, device: str = "cpu"
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[list[int]]]:
    """Random q and caches, each request's pages scattered across the pool."""
    gen = torch.Generator().manual_seed(seed)
    pages_per = [-(-s // page_size) for s in seq_lens]
    num_pages = sum(pages_per) + 3
    order = list(range(num_pages))
    random.Random(seed).shuffle(order)
    tables, i = [], 0
    for n in pages_per:
        tables.append(order[i:i + n])
        i += n
    slots = num_pages * page_size
    q = torch.randn(sum(query_lens), hq, d, generator=gen).to(device, dtype)
    k = torch.randn(slots, hkv, d, generator=gen).to(device, dtype)
    v = torch.randn(slots, hkv, d, generator=gen).to(device, dtype)
    return q, k, v, tables


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, query_lens: list[int],
                    seq_lens: list[int], tables: list[list[int]], page_size: int,
                    scale: float) -> torch.Tensor:
    """Token by token, head by head, in float64."""
    out = torch.zeros(q.shape, dtype=torch.float64)
    group = q.shape[1] // k.shape[1]
    t = 0
    for ql, sl, table in zip(query_lens, seq_lens, tables, strict=True):
        slots = [table[p // page_size] * page_size + p % page_size for p in range(sl)]
        for i in range(ql):
            pos = sl - ql + i
            for h in range(q.shape[1]):
                keys = k[slots[:pos + 1], h // group].double()
                vals = v[slots[:pos + 1], h // group].double()
                w = torch.softmax(keys @ q[t + i, h].double() * scale, dim=0)
                out[t + i, h] = w @ vals
        t += ql
    return out


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double().cpu() - ref.double().cpu()).abs().max()
                 / ref.double().cpu().abs().max())


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("shape", SHAPES + DECODE_SHAPES)
def test_reference_matches_naive_loop(page_size: int, shape: tuple) -> None:
    qlens, slens, hq, hkv, d = shape
    q, k, v, tables = make_batch(qlens, slens, hq, hkv, d, page_size, torch.float32)
    meta = build_metadata(qlens, slens, tables, page_size)
    out = paged_attention_ref(q, k, v, meta, d ** -0.5)
    assert rel_err(out, naive_attention(q, k, v, qlens, slens, tables, page_size,
                                        d ** -0.5)) < 1e-6


def test_reference_reads_only_the_request_pages() -> None:
    qlens, slens, hq, hkv, d = SHAPES[0]
    q, k, v, tables = make_batch(qlens, slens, hq, hkv, d, 16, torch.float32)
    meta = build_metadata(qlens, slens, tables, 16)
    before = paged_attention_ref(q, k, v, meta, 0.25)
    used = {p for t in tables for p in t}
    for page in set(range(k.shape[0] // 16)) - used:  # garbage elsewhere changes nothing
        k[page * 16:(page + 1) * 16] = 1e4
        v[page * 16:(page + 1) * 16] = float("nan")
    meta = build_metadata(qlens, slens, tables, 16)
    assert torch.equal(paged_attention_ref(q, k, v, meta, 0.25), before)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("shape", SHAPES[:2])
def test_triton_extend_matches_reference(dtype: torch.dtype, page_size: int,
                                         shape: tuple) -> None:
    from kernels.triton_paged import paged_extend

    qlens, slens, hq, hkv, d = shape
    q, k, v, tables = make_batch(qlens, slens, hq, hkv, d, page_size, dtype, seed=1,
                                 device=DEVICE)
    meta = build_metadata(qlens, slens, tables, page_size, DEVICE)
    ref = paged_attention_ref(q, k, v, meta, d ** -0.5)
    out = paged_extend(q, k, v, meta, d ** -0.5)
    assert out.dtype == dtype and out.shape == q.shape
    assert rel_err(out, ref) < TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("shape,splits", [(DECODE_SHAPES[0], 1), (DECODE_SHAPES[1], 3),
                                          (DECODE_SHAPES[2], 2)])
def test_triton_decode_matches_reference(dtype: torch.dtype, page_size: int, shape: tuple,
                                         splits: int) -> None:
    from kernels.triton_paged import paged_decode

    qlens, slens, hq, hkv, d = shape
    q, k, v, tables = make_batch(qlens, slens, hq, hkv, d, page_size, dtype, seed=2,
                                 device=DEVICE)
    meta = build_metadata(qlens, slens, tables, page_size, DEVICE)
    ref = paged_attention_ref(q, k, v, meta, d ** -0.5)
    out = paged_decode(q, k, v, meta, d ** -0.5, num_splits=splits)
    assert out.dtype == dtype
    assert rel_err(out, ref) < TOL[dtype]


def test_triton_decode_rejects_a_prefill_batch() -> None:
    from kernels.triton_paged import paged_decode

    qlens, slens, hq, hkv, d = SHAPES[0]
    q, k, v, tables = make_batch(qlens, slens, hq, hkv, d, 16, torch.float32)
    with pytest.raises(ValueError, match="one token each"):
        paged_decode(q, k, v, build_metadata(qlens, slens, tables, 16), 0.25)


def test_triton_rejects_mismatched_dtypes() -> None:
    from kernels.triton_paged import paged_extend

    qlens, slens, hq, hkv, d = SHAPES[0]
    q, k, v, tables = make_batch(qlens, slens, hq, hkv, d, 16, torch.float32)
    with pytest.raises(ValueError, match=r"k_cache.dtype=torch.bfloat16"):
        paged_extend(q, k.bfloat16(), v, build_metadata(qlens, slens, tables, 16), 0.25)


@pytest.mark.skipif(not fa.usable(16) or not fa.usable(1),
                    reason="flash-attn (paged, any page size) needs a GPU and flash-attn 3")
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("shape", SHAPES + DECODE_SHAPES)
def test_flash_attn_matches_reference(page_size: int, shape: tuple) -> None:
    qlens, slens, hq, hkv, d = shape
    if d not in (64, 96, 128, 256) and d % 8:
        pytest.skip(f"flash-attn head_dim={d}")
    q, k, v, tables = make_batch(qlens, slens, hq, hkv, d, page_size, torch.bfloat16,
                                 device="cuda")
    meta = build_metadata(qlens, slens, tables, page_size, "cuda")
    ref = paged_attention_ref(q, k, v, meta, d ** -0.5)
    out = fa.FlashAttnBackend()(q, k, v, meta, d ** -0.5)
    assert rel_err(out, ref) < TOL[torch.bfloat16]


def test_metadata_positions_and_slots() -> None:
    meta = build_metadata([2, 1], [5, 17], [[7], [3, 9]], page_size=16)
    assert meta.positions.tolist() == [3, 4, 16]
    assert meta.slot_mapping.tolist() == [7 * 16 + 3, 7 * 16 + 4, 9 * 16 + 0]
    assert meta.query_start_loc.tolist() == [0, 2, 3]
    assert meta.max_query_len == 2 and meta.max_seq_len == 17 and not meta.is_decode_only


def test_metadata_errors_name_the_request() -> None:
    with pytest.raises(ValueError, match=r"request 1: 1 pages of 16 do not cover seq_len=17"):
        build_metadata([1, 1], [5, 17], [[7], [3]], page_size=16)
    with pytest.raises(ValueError, match=r"request 0: query_len=6, seq_len=5"):
        build_metadata([6], [5], [[0]], page_size=16)


def test_backend_selection_on_this_machine() -> None:
    assert resolve_kernel("torch", "cpu") == "torch"
    assert resolve_kernel("auto", "cpu") == "torch"  # interpreted Triton is slower
    assert "triton" in available_kernels("cpu")
    assert get_attention_backend("triton", "cpu").name == "triton"
    with pytest.raises(ValueError, match=r"kernel='cuda_magic': valid: auto, torch"):
        resolve_kernel("cuda_magic", "cpu")
    with pytest.raises(ValueError, match=r"kernel='flash_attn' cannot run on device='cpu'"):
        resolve_kernel("flash_attn", "cpu")
    if torch.cuda.is_available():
        assert resolve_kernel("auto", "cuda", 16) in ("flash_attn", "triton")


def test_triton_kernels_compile_for_hopper_without_a_gpu() -> None:
    """The interpreter does not type-check like the compiler: compile the kernels for sm_90
    (and sm_80 with odd shapes) in a fresh process with TRITON_INTERPRET=0."""
    import os
    import subprocess
    import sys

    code = (
        "import torch\n"
        "from kernels.triton_paged import compile_for\n"
        "print(compile_for(90, torch.bfloat16, 128, 4, 16))\n"
        "print(compile_for(80, torch.float32, 24, 3, 1))\n"
    )
    env = {**os.environ, "TRITON_INTERPRET": "0", "CUDA_VISIBLE_DEVICES": ""}
    res = subprocess.run([sys.executable, "-W", "ignore", "-c", code], env=env,
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.count("'extend'") == 2


_ROW_INVARIANCE_CHECK = """
import torch
from kernels import build_metadata
from kernels.triton_paged import INTERPRETED, paged_decode, paged_extend
assert INTERPRETED
g = torch.Generator().manual_seed(7)
hq, hkv, d, page = 4, 2, 16, 16
a_q, a_k, a_v = (torch.randn(41, n, d, generator=g) for n in (hq, hkv, hkv))
b_q, b_k, b_v = (torch.randn(15, n, d, generator=g) for n in (hq, hkv, hkv))
k = torch.randn(8 * page, hkv, d, generator=g)
v = torch.randn(8 * page, hkv, d, generator=g)
def place(pages, keys, vals):
    for p, page_no in enumerate(pages):
        n = min(page, len(keys) - p * page)
        k[page_no * page:page_no * page + n] = keys[p * page:p * page + n]
        v[page_no * page:page_no * page + n] = vals[p * page:p * page + n]
def run(fn, qs, qlens, slens, tables):
    return fn(torch.cat(qs), k, v, build_metadata(qlens, slens, tables, page, "cpu"), 0.25)
# Prompt a (40 tokens) alone in one chunk, pages 0-2.
place([0, 1, 2], a_k[:40], a_v[:40])
alone = run(paged_extend, [a_q[:40]], [40], [40], [[0, 1, 2]])
# Again into pages 5-7, in two chunks, each beside request b at another row offset.
place([4], b_k, b_v)
place([5, 6, 7], a_k[:40], a_v[:40])
first = run(paged_extend, [b_q[:14], a_q[:17]], [14, 17], [14, 17], [[4], [5, 6, 7]])
second = run(paged_extend, [a_q[17:40], b_q[14:15]], [23, 1], [40, 15], [[5, 6, 7], [4]])
chunked = torch.cat([first[14:], second[:23]])
# One decode step of a at position 40, alone and third in a batch of decodes.
place([2], a_k[32:41], a_v[32:41])
place([7], a_k[32:41], a_v[32:41])
dec_alone = run(paged_decode, [a_q[40:41]], [1], [41], [[0, 1, 2]])
dec_batch = run(paged_decode, [b_q[14:15], b_q[:1], a_q[40:41]], [1, 1, 1], [15, 15, 41],
                [[4], [4], [5, 6, 7]])
print("extend", torch.equal(alone, chunked), float((alone - chunked).abs().max()))
dec_diff = float((dec_alone - dec_batch[2:]).abs().max())
print("decode", torch.equal(dec_alone, dec_batch[2:]), dec_diff)
"""


@pytest.mark.skipif(DEVICE == "cuda", reason="checks the interpreter's arithmetic")
@pytest.mark.parametrize("coretype", ["", "Haswell"])
def test_interpreted_triton_is_bitwise_invariant_to_batch_and_chunking(coretype: str) -> None:
    """Under the interpreter a token's attention output is the same bits whatever chunk,
    row of the block and batch it is computed in, on every host: the kernels' dot products
    must not go through the host BLAS (OpenBLAS picks its sgemm kernel per CPU; with the
    Haswell kernel, which AVX2-only x86 machines such as Zen 2/3 get, a row's sum depends on
    its position in the matrix). The check runs in a fresh process so that OPENBLAS_CORETYPE
    takes effect; "" is the host's own kernel."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": "",
           "OPENBLAS_CORETYPE": coretype}
    res = subprocess.run([sys.executable, "-W", "ignore", "-c", _ROW_INVARIANCE_CHECK],
                         env=env, capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split("\n")[:2] == ["extend True 0.0", "decode True 0.0"], res.stdout
