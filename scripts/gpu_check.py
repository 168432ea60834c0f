"""GPU check of the real executor's kernels and of an 8B-shaped model's decode step.

One script, for a session that has a GPU (it needs only torch, triton and numpy; flash-attn
is used when installed). Sections, each independent (a failure is recorded, the rest runs):

1. kernels: the Triton decode and extend kernels, and flash-attn's paged API when usable,
   against the reference (kernels.torch_ref) on random inputs: float32 / bfloat16 / float16,
   page sizes 1 and 16, small and Llama-3-8B-like head layouts (32 query heads, 8 KV heads,
   head_dim 128), mixed prefill + decode batches. Relative error = max |out - ref| / max |ref|.
2. copy bandwidth: device-to-device `copy_` of a large buffer; bytes read + written / time.
3. decode kernel bandwidth: the Triton paged decode kernel alone (one layer's KV of a batch),
   bytes of K and V read / time, against the copy bandwidth.
4. model: a Llama-3-8B-shaped decoder with random bfloat16 weights, decode steps at batch 1,
   32, 128 and 256 with 1k and 4k contexts, through `RealExecutor.execute` (host preparation
   included, CUDA-event timed), for each usable kernel; the floor is (bytes of the weights a
   decode step reads, i.e. all but the embedding table, plus the KV bytes read) / copy
   bandwidth. When a batch's KV does not fit beside the weights, requests share
   physical pages modulo the pool ("aliased": the same bytes are read, from HBM, since the
   reuse distance is far beyond the L2 cache).

Results go to stdout and, as JSON, to --out. `--smoke` runs every section at toy sizes (also on
a CPU, with Triton interpreted) to check the script itself.

    python scripts/gpu_check.py --out $OUT/gpu_check.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engines.executors.real import RealExecutor
from engines.model import DecoderConfig, PagedDecoder, RopeConfig
from kernels import build_metadata
from kernels import flash_attn as fa
from kernels.torch_ref import paged_attention_ref
from schedulers.contract import ScheduledChunk, StepPlan

LLAMA3_8B = DecoderConfig(
    architecture="LlamaForCausalLM", vocab_size=128256, hidden_size=4096,
    intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
    num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-5,
    rope=RopeConfig(rope_type="llama3", theta=500000.0, factor=8.0, low_freq_factor=1.0,
                    high_freq_factor=4.0, original_max_position_embeddings=8192),
    max_position_embeddings=131072)
TOY = replace(LLAMA3_8B, vocab_size=512, hidden_size=64, intermediate_size=128,
              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16)
TOL = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 3e-2}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class Timer:
    """Median seconds of `fn` over `reps` calls after `warmup`, CUDA events on a GPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def __call__(self, fn: Callable[[], Any], reps: int = 10, warmup: int = 2) -> float:
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(reps):
            if self.cuda:
                a = torch.cuda.Event(enable_timing=True)
                b = torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b) / 1000.0)
            else:
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
        return statistics.median(times)


def random_batch(qlens: list[int], slens: list[int], hq: int, hkv: int, d: int, page: int,
                 dtype: torch.dtype, device: torch.device, seed: int = 0
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[list[int]]]:
    """q, caches and scattered page tables for one batch."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    pages_per = [-(-s // page) for s in slens]
    total = sum(pages_per) + 1
    perm = torch.randperm(total, generator=g).tolist()
    tables, i = [], 0
    for n in pages_per:
        tables.append(perm[i:i + n])
        i += n
    gd = torch.Generator(device=device).manual_seed(seed)  # big tensors made on the device

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gd, device=device).to(dtype)

    return rand(sum(qlens), hq, d), rand(total * page, hkv, d), rand(total * page, hkv, d), tables


def _kernel_errors(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: Any, kind: str,
                   label: dict[str, Any]) -> list[dict[str, Any]]:
    """Every usable kernel on one batch against the reference: one row each."""
    from kernels.triton_paged import paged_decode, paged_extend

    scale = q.shape[2] ** -0.5
    ref = paged_attention_ref(q, k, v, meta, scale).float()
    cands: dict[str, Callable[[], torch.Tensor]] = {}
    if kind == "extend":
        cands["triton"] = lambda: paged_extend(q, k, v, meta, scale)
    else:
        cands["triton"] = lambda: paged_decode(q, k, v, meta, scale)
        cands["triton_split4"] = lambda: paged_decode(q, k, v, meta, scale, num_splits=4)
    if (q.is_cuda and fa.usable(meta.page_size) and q.dtype != torch.float32
            and q.shape[2] in (64, 96, 128, 192, 256)):
        backend = fa.FlashAttnBackend()
        cands[f"flash_attn_{backend.kind}"] = lambda: backend(q, k, v, meta, scale)
    rows = []
    for name, fn in cands.items():
        row: dict[str, Any] = {"kernel": name, "kind": kind, **label}
        try:
            err = float((fn().float() - ref).abs().max() / ref.abs().max())
            row.update(rel_err=err, ok=err < TOL[q.dtype])
        except Exception as e:  # record and go on
            row.update(ok=False, error=f"{type(e).__name__}: {e}"[:300])
        rows.append(row)
    return rows


def check_kernels(device: torch.device, smoke: bool) -> list[dict[str, Any]]:
    """Section 1: every usable kernel against the reference."""
    layouts = [(4, 2, 16), (6, 2, 24)] if smoke else [(4, 2, 16), (32, 8, 128), (28, 4, 128)]
    mixed = ([1, 7, 20, 1], [9, 7, 50, 33]) if smoke else (
        [1, 300, 37, 1, 1, 129], [513, 300, 1100, 2048, 17, 4000])
    decode = ([1] * 4, [1, 33, 64, 90]) if smoke else ([1] * 8, [1, 16, 17, 255, 256, 1000,
                                                                 2049, 4096])
    rows = []
    for hq, hkv, d in layouts:
        for page in (1, 16):
            for dname, dtype in DTYPES.items():
                for kind, (ql, sl) in (("extend", mixed), ("decode", decode)):
                    q, k, v, tables = random_batch(ql, sl, hq, hkv, d, page, dtype, device)
                    meta = build_metadata(ql, sl, tables, page, device)
                    rows += _kernel_errors(q, k, v, meta, kind, {
                        "dtype": dname, "page_size": page, "heads": f"{hq}/{hkv}x{d}"})
    return rows


def copy_bandwidth(device: torch.device, smoke: bool, timer: Timer) -> float:
    """Section 2: bytes read + written per second by a device-to-device copy."""
    n = (1 << 22) if smoke else (1 << 31)  # bytes per buffer: 4 MiB / 2 GiB
    src = torch.empty(n, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    t = timer(lambda: dst.copy_(src), reps=10, warmup=3)
    return 2 * n / t


def decode_kernel_bandwidth(device: torch.device, smoke: bool, timer: Timer,
                            copy_bw: float) -> list[dict[str, Any]]:
    """Section 3: the paged decode kernel alone, K and V bytes read per second."""
    from kernels.triton_paged import paged_decode

    hq, hkv, d = (4, 2, 16) if smoke else (32, 8, 128)
    cases = [(4, 64)] if smoke else [(1, 4096), (32, 1024), (32, 4096), (128, 4096),
                                     (256, 1024)]
    rows = []
    for page in (16, 1):
        for batch, ctx in cases:
            q, k, v, tables = random_batch([1] * batch, [ctx] * batch, hq, hkv, d, page,
                                           torch.bfloat16, device)
            meta = build_metadata([1] * batch, [ctx] * batch, tables, page, device)
            t = timer(partial(paged_decode, q, k, v, meta, d ** -0.5), reps=10)
            nbytes = batch * ctx * 2 * hkv * d * 2
            rows.append({"page_size": page, "batch": batch, "context": ctx, "time_us": t * 1e6,
                         "kv_bytes": nbytes, "bandwidth_gb_s": nbytes / t / 1e9,
                         "fraction_of_copy_bw": nbytes / t / copy_bw})
            del q, k, v
    return rows


def model_decode(device: torch.device, smoke: bool, copy_bw: float,
                 kernels: list[str], reps: int) -> list[dict[str, Any]]:
    """Section 4: decode steps of the 8B-shaped model through the executor."""
    if device.type == "cuda":
        torch.cuda.empty_cache()  # earlier sections' blocks back to the driver before sizing
    cfg = TOY if smoke else LLAMA3_8B
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = PagedDecoder.random(cfg, dtype=dtype, device=device, seed=0)
    w = model.weights
    # Decode reads every weight but the embedding table (only the batch's rows of it).
    weight_bytes = w.num_bytes() - (0 if w.lm_head is w.embed else
                                    w.embed.numel() * w.embed.element_size())
    page = 16
    slot_bytes = cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * cfg.head_dim * (
        torch.finfo(dtype).bits // 8)
    batches = [1, 4] if smoke else [1, 32, 128, 256]
    contexts = [64, 256] if smoke else [1024, 4096]
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        # Leave room for activations, logits and the allocator (batch 256: ~2 GiB).
        pool_pages = int((free - (6 << 30)) // (slot_bytes * page))
    else:
        pool_pages = 4096
    need_pages = max(batches) * -(-max(contexts) // page)
    pool_pages = min(pool_pages, need_pages)
    rows = []
    for kernel in kernels:
        ex = RealExecutor(model, kernel=kernel, num_slots=pool_pages * page)
        for ctx in contexts:
            for batch in batches:
                per = -(-ctx // page)
                aliased = batch * per > pool_pages
                tables = [[(b * per + j) % pool_pages for j in range(per)] for b in range(batch)]
                plan = StepPlan(0, page, [ScheduledChunk(f"r{b}", [1], ctx - 1, tables[b], True)
                                          for b in range(batch)])
                row: dict[str, Any] = {"kernel": kernel, "batch": batch, "context": ctx,
                                       "aliased": aliased}
                try:
                    for _ in range(2):
                        ex.execute(plan)
                    times = [ex.execute(plan).duration_s for _ in range(reps)]
                    t = statistics.median(times)
                    kv_bytes = batch * ctx * slot_bytes
                    floor = (weight_bytes + kv_bytes) / copy_bw
                    row.update(step_ms=t * 1e3, floor_ms=floor * 1e3, step_over_floor=t / floor,
                               weight_gb=weight_bytes / 1e9, kv_read_gb=kv_bytes / 1e9,
                               tokens_per_s=batch / t)
                except Exception as e:
                    row.update(error=f"{type(e).__name__}: {e}"[:300])
                rows.append(row)
        del ex
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def _section(results: dict[str, Any], name: str, fn: Callable[[], Any], deadline: float) -> Any:
    if time.monotonic() > deadline:
        results[name] = {"skipped": "time budget spent"}
        return None
    t0 = time.monotonic()
    try:
        out = fn()
        results[name] = out
    except Exception:
        results[name] = {"error": traceback.format_exc()[-2000:]}
        out = None
    print(f"[{name}] {time.monotonic() - t0:.1f}s", flush=True)
    return out


def _print(results: dict[str, Any]) -> None:
    kern = results.get("kernels")
    if isinstance(kern, list):
        bad = [r for r in kern if not r.get("ok")]
        worst: dict[str, float] = {}
        for r in kern:
            key = f"{r['kernel']}/{r['dtype']}"
            worst[key] = max(worst.get(key, 0.0), r.get("rel_err", math.inf))
        print(f"kernels: {len(kern) - len(bad)}/{len(kern)} within tolerance; worst rel err: "
              + ", ".join(f"{k} {v:.1e}" for k, v in sorted(worst.items())))
        for r in bad[:10]:
            print("  FAIL", r)
    if isinstance(results.get("copy_bandwidth_gb_s"), float):
        print(f"copy bandwidth: {results['copy_bandwidth_gb_s']:.0f} GB/s")
    for r in results.get("decode_kernel") or []:
        if isinstance(r, dict) and "bandwidth_gb_s" in r:
            print(f"decode kernel page {r['page_size']:>2} batch {r['batch']:>3} ctx "
                  f"{r['context']:>4}: {r['time_us']:8.1f} us, {r['bandwidth_gb_s']:6.0f} GB/s "
                  f"({r['fraction_of_copy_bw']:.0%} of copy)")
    for r in results.get("model") or []:
        if isinstance(r, dict) and "step_ms" in r:
            print(f"model {r['kernel']:>10} batch {r['batch']:>3} ctx {r['context']:>4}"
                  f"{' (aliased)' if r['aliased'] else ''}: step {r['step_ms']:7.2f} ms, floor "
                  f"{r['floor_ms']:7.2f} ms, x{r['step_over_floor']:.2f}")
        elif isinstance(r, dict):
            print("model", r)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    ap.add_argument("--smoke", action="store_true", help="toy sizes (runs on a CPU too)")
    ap.add_argument("--budget-s", type=float, default=420.0,
                    help="skip the sections that start after this many seconds")
    ap.add_argument("--reps", type=int, default=5, help="measured decode steps per case")
    ap.add_argument("--sections", default="kernels,copy,decode_kernel,model")
    args = ap.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type != "cuda" and not args.smoke:
        print("no GPU: run with --smoke to check the script on a CPU")
        return 2
    deadline = time.monotonic() + args.budget_s
    timer = Timer(device)
    wanted = set(args.sections.split(","))
    results: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "flash_attn": fa.flavour(), "smoke": args.smoke}
    try:
        import triton
        results["triton"] = triton.__version__
    except ImportError:
        results["triton"] = None
    if "kernels" in wanted:
        _section(results, "kernels", lambda: check_kernels(device, args.smoke), deadline)
    copy_bw = 1e9
    if wanted & {"copy", "decode_kernel", "model"}:
        bw = _section(results, "copy_bandwidth_gb_s",
                      lambda: copy_bandwidth(device, args.smoke, timer) / 1e9, deadline)
        copy_bw = (bw or 1.0) * 1e9
    if "decode_kernel" in wanted:
        _section(results, "decode_kernel",
                 lambda: decode_kernel_bandwidth(device, args.smoke, timer, copy_bw), deadline)
    if "model" in wanted:
        kernels = ["triton"] + (["flash_attn"] if device.type == "cuda" and fa.usable(16)
                                else [])
        _section(results, "model",
                 lambda: model_decode(device, args.smoke, copy_bw, kernels, args.reps), deadline)
    _print(results)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
