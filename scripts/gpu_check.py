"""GPU check: the real executor's kernels, its parity tests, a measured profile, sim vs real.

One command, for a session that has a GPU (under 8 minutes on one H200; it needs torch,
triton, numpy, pandas and pytest; flash-attn is used when installed), everything written under
one folder (`--out`). Sections, each independent (a failure is recorded, the rest runs; a
section that starts after `--budget-s` is skipped and named):

1. kernels: the Triton decode and extend kernels, and flash-attn's paged API when usable,
   against the reference (kernels.torch_ref) on random inputs: float32 / bfloat16 / float16,
   page sizes 1 and 16, small and Llama-3-8B-like head layouts (32 query heads, 8 KV heads,
   head_dim 128), mixed prefill + decode batches. Relative error = max |out - ref| / max |ref|.
2. parity_tests: the kernel and real-executor parity tests (`PARITY_TESTS`: tests/test_kernels.py,
   tests/test_real_executor.py: greedy tokens equal `transformers`' generate() through both
   schedulers with the Triton kernel, compiled on the GPU) by pytest; log in
   `parity_tests.log`.
3. copy bandwidth: device-to-device `copy_` of a large buffer; bytes read + written / time.
4. decode kernel bandwidth: the Triton paged decode kernel alone (one layer's KV of a batch),
   bytes of K and V read / time, against the copy bandwidth.
5. model: a Llama-3-8B-shaped decoder with random bfloat16 weights, decode steps at batch 1,
   32, 128 and 256 with 1k and 4k contexts, through `RealExecutor.execute` (host preparation
   included, CUDA-event timed), for each usable kernel (triton, flash_attn); the floor is
   (bytes of the weights a decode step reads, i.e. all but the embedding table, plus the KV
   bytes read) / copy bandwidth. When a batch's KV does not fit beside the weights, requests
   share physical pages modulo the pool ("aliased": the same bytes are read, from HBM, since
   the reuse distance is far beyond the L2 cache).
6. profile: the shapes a measured-profile cost model needs, through `RealExecutor.execute`
   with the auto kernel: decode batch x context (`DECODE_GRID`) and prefill chunk x prior
   context (`PREFILL_GRID`), round-robin, `--profile-reps` times each; `profile.csv` in the
   columns `PROFILE_COLUMNS` (op, batch, context, chunk, prior, median_s, p10_s, p90_s, n;
   decode rows: chunk 1, prior context - 1; prefill rows: batch 1, context prior + chunk),
   and `profile.json` in scripts/profile_executor.py's format (the cost model fits it).
7. sim_vs_real: a short vLLM run (synthetic workload, `SIM_VS_REAL`) on the real executor,
   then on the simulator with the linear cost model fitted to section 6's profile
   (`executor.cost_model=profile`): throughput, TTFT and E2E (median, p99), preemptions and
   the median absolute error of the predicted step times; `sim_vs_real.csv`.

Files under `--out`: results.json (every section), parity_tests.log, profile.csv,
profile.json, sim_vs_real.csv. `--cpu` runs every section at toy sizes on the CPU (Triton
interpreted) to check the script itself; what needs a GPU is skipped and named in
results.json `skipped` (flash-attn, the parity tests' run: only collected, since the CPU
suite runs them anyway).

    python scripts/gpu_check.py --out $OUT/gpu_check
    python scripts/gpu_check.py --cpu --out /tmp/gpu_check_cpu
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

from profile_executor import TimedExecutor  # beside this script

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
    layouts = [(6, 2, 24)] if smoke else [(4, 2, 16), (32, 8, 128), (28, 4, 128)]
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
    t = timer(lambda: dst.copy_(src), reps=2 if smoke else 10, warmup=1 if smoke else 3)
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
            t = timer(partial(paged_decode, q, k, v, meta, d ** -0.5), reps=1 if smoke else 10,
                      warmup=1 if smoke else 2)
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
    contexts = [64] if smoke else [1024, 4096]
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
        # One pass per step (timer=wall): this section takes its own median over `reps`.
        ex = RealExecutor(model, kernel=kernel, num_slots=pool_pages * page, timer="wall")
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
                    for _ in range(1 if smoke else 2):
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


ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("kernels", "parity_tests", "copy", "decode_kernel", "model", "profile",
            "sim_vs_real")
PARITY_TESTS = ["tests/test_kernels.py", "tests/test_real_executor.py"]
# The measured-profile shapes: (batch, context) decode steps and (chunk, prior) prefill steps.
DECODE_GRID = ((1, 8, 32, 64, 128, 256), (256, 1024, 2048, 4096, 8192))
PREFILL_GRID = ((64, 256, 512, 1024, 2048), (0, 1024, 4096))
TOY_DECODE_GRID = ((1, 4), (32, 64))
TOY_PREFILL_GRID = ((8, 24), (0, 16))
PROFILE_COLUMNS = ("op", "batch", "context", "chunk", "prior", "median_s", "p10_s", "p90_s",
                   "n")
# The sim-vs-real run: vLLM, synthetic workload (requests, rate, mean prompt / output
# lengths), KV pool in token slots.
SIM_VS_REAL: dict[str, Any] = {"requests": 96, "rate": 16.0, "prompt": 768, "output": 96,
                               "kv": 65536}
TOY_SIM_VS_REAL: dict[str, Any] = {"requests": 10, "rate": 50.0, "prompt": 24, "output": 8,
                                   "kv": 256}
PAGE = 16


def run_parity_tests(out_dir: Path, cuda: bool) -> dict[str, Any]:
    """Section 2: pytest over PARITY_TESTS (on a CPU: collected only)."""
    import subprocess

    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *PARITY_TESTS]
    if not cuda:
        cmd.append("--collect-only")
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    (out_dir / "parity_tests.log").write_text(proc.stdout + proc.stderr)
    tail = [line for line in proc.stdout.splitlines() if line.strip()][-1:]
    return {"command": " ".join(cmd[1:]), "returncode": proc.returncode,
            "collected_only": not cuda, "summary": tail[0] if tail else ""}


def _shape_model(device: torch.device, cpu: bool) -> PagedDecoder:
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    return PagedDecoder.random(TOY if cpu else LLAMA3_8B, dtype=dtype, device=device, seed=0)


def _pool_pages(model: PagedDecoder, device: torch.device, need_pages: int) -> int:
    """KV pages to allocate: what the grid needs, at most what fits beside the weights."""
    cfg = model.config
    slot_bytes = cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * cfg.head_dim * (
        torch.finfo(model.dtype).bits // 8)
    if device.type != "cuda":
        return need_pages
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info(device)
    return max(1, min(need_pages, int((free - (8 << 30)) // (slot_bytes * PAGE))))


def profile_plans(cpu: bool) -> list[tuple[dict[str, Any], list[tuple[int, int]]]]:
    """The profile's shapes: (CSV key columns, chunks as (tokens, start position))."""
    (batches, contexts), (chunks, priors) = ((TOY_DECODE_GRID, TOY_PREFILL_GRID) if cpu
                                             else (DECODE_GRID, PREFILL_GRID))
    shapes: list[tuple[dict[str, Any], list[tuple[int, int]]]] = []
    for b in batches:
        for c in contexts:
            shapes.append(({"op": "decode", "batch": b, "context": c, "chunk": 1,
                            "prior": c - 1}, [(1, c - 1)] * b))
    for n in chunks:
        for prior in priors:
            shapes.append(({"op": "prefill", "batch": 1, "context": prior + n, "chunk": n,
                            "prior": prior}, [(n, prior)]))
    return shapes


def measure_profile(device: torch.device, cpu: bool, reps: int, out_dir: Path
                    ) -> dict[str, Any]:
    """Section 6: the profile grid through the executor; profile.csv and profile.json."""
    import numpy as np

    from engines.cost_model import FEATURES, PROFILE_FORMAT, FittedCostModel, StepShape

    model = _shape_model(device, cpu)
    shapes = profile_plans(cpu)
    need = max(sum(-(-(n + s) // PAGE) for n, s in spec) for _, spec in shapes)
    pool = _pool_pages(model, device, need)
    ex = RealExecutor(model, kernel="auto", num_slots=pool * PAGE)
    plans = []
    for i, (_, spec) in enumerate(shapes):
        chunks, page = [], 0
        for j, (n, start) in enumerate(spec):
            per = -(-(n + start) // PAGE)
            pages = [(page + k) % pool for k in range(per)]  # aliased when over the pool
            page += per
            chunks.append(ScheduledChunk(f"r{j}", [1] * n, start, pages, True))
        plans.append(StepPlan(i, PAGE, chunks))
    for plan in plans[:3]:
        ex.execute(plan)  # warm-up (Triton compiles)
    times: list[list[float]] = [[] for _ in plans]
    for _ in range(reps):  # round-robin: a slow spell spreads over every shape
        for i, plan in enumerate(plans):
            times[i].append(ex.execute(plan).duration_s)
    rows, measurements = [], []
    for (keys, _), plan, t in zip(shapes, plans, times, strict=True):
        arr = np.asarray(t)
        rows.append({**keys, "median_s": float(np.median(arr)),
                     "p10_s": float(np.percentile(arr, 10)),
                     "p90_s": float(np.percentile(arr, 90)), "n": len(t)})
        shape = StepShape.of(plan)
        measurements.append({"kind": keys["op"], "num_tokens": shape.num_tokens,
                             "attn_pairs": shape.attn_pairs,
                             "kv_read_tokens": shape.kv_read_tokens,
                             "num_seqs": shape.num_seqs, "seconds": float(np.median(arr))})
    with (out_dir / "profile.csv").open("w") as f:
        f.write(",".join(PROFILE_COLUMNS) + "\n")
        for r in rows:
            f.write(",".join(f"{r[c]:.6g}" if isinstance(r[c], float) else str(r[c])
                             for c in PROFILE_COLUMNS) + "\n")
    cfg = model.config
    profile = {"format": PROFILE_FORMAT, "command": "python scripts/gpu_check.py",
               "model": {"hidden_size": cfg.hidden_size, "num_hidden_layers":
                         cfg.num_hidden_layers, "num_attention_heads": cfg.num_attention_heads,
                         "num_key_value_heads": cfg.num_key_value_heads,
                         "intermediate_size": cfg.intermediate_size,
                         "vocab_size": cfg.vocab_size, "weights": "random"},
               "hardware": {"device": str(device), "name": _device_name(device)},
               "dtype": str(model.dtype).removeprefix("torch."), "kernel": ex.kernel,
               "timer": ex.timer.name, "timer_repeats": ex.timer.repeats,
               "page_size": PAGE, "features": list(FEATURES), "measurements": measurements}
    fitted = FittedCostModel.fit([[1.0, m["num_tokens"], m["attn_pairs"], m["kv_read_tokens"],
                                   m["num_seqs"]] for m in measurements],
                                 [m["seconds"] for m in measurements])
    profile["fit"] = {"coefficients": fitted.describe()}
    (out_dir / "profile.json").write_text(json.dumps(profile, indent=1) + "\n")
    del ex, model
    return {"shapes": len(rows), "pool_pages": pool, "timer": profile["timer"],
            "kernel": profile["kernel"], "rows": rows}


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def _run_stats(result: Any) -> dict[str, float]:
    """Throughput, TTFT / E2E median and p99 (ms), preemptions of an engine run."""
    import numpy as np

    req = result.requests.to_pandas()
    ttft = (req["first_token_time"] - req["arrival_time"]).to_numpy() * 1e3
    e2e = (req["finish_time"] - req["arrival_time"]).to_numpy() * 1e3
    span = float(req["finish_time"].max() - req["arrival_time"].min())
    return {"request_throughput": len(req) / span,
            "median_ttft_ms": float(np.median(ttft)), "p99_ttft_ms": float(np.percentile(ttft, 99)),
            "median_e2el_ms": float(np.median(e2e)), "p99_e2el_ms": float(np.percentile(e2e, 99)),
            "num_preemptions": float(req["num_preemptions"].sum())}


def sim_vs_real(device: torch.device, cpu: bool, out_dir: Path) -> dict[str, Any]:
    """Section 7: one vLLM run on the real executor and on the simulator fitted to
    profile.json; sim_vs_real.csv."""
    import numpy as np

    from engines.cost_model import FittedCostModel
    from engines.engine import Engine
    from engines.executors.sim import SimExecutor
    from engines.executors.specs import HardwareSpec, ModelSpec
    from experiments.inputs.workloads import build_workload
    from schedulers.vllm import VllmScheduler, VllmSchedulerConfig

    w = TOY_SIM_VS_REAL if cpu else SIM_VS_REAL
    cfg = TOY if cpu else LLAMA3_8B

    def requests() -> list[Any]:
        return build_workload({
            "name": "synthetic", "num_requests": w["requests"], "request_rate": w["rate"],
            "prompt_len": {"dist": "lognormal", "mean": w["prompt"], "sigma": 0.5, "min": 8,
                           "max": 4 * w["prompt"]},
            "output_len": {"dist": "lognormal", "mean": w["output"], "sigma": 0.5, "min": 2,
                           "max": 4 * w["output"]},
            "mode": "fixed", "max_tokens": 4 * w["output"], "vocab_size": cfg.vocab_size}, 0)

    def scheduler() -> VllmScheduler:
        return VllmScheduler(VllmSchedulerConfig.from_capacity(
            w["kv"], block_size=PAGE, max_num_batched_tokens=2048 if not cpu else 32,
            max_num_seqs=256 if not cpu else 8, max_model_len=8 * w["prompt"]))

    cost = FittedCostModel.from_profile(out_dir / "profile.json")
    model = _shape_model(device, cpu)
    real_ex = RealExecutor(model, kernel="auto", num_slots=(w["kv"] // PAGE + 1) * PAGE)
    recording = TimedExecutor(real_ex)
    real = _run_stats(Engine(scheduler(), recording, requests()).run())
    steps = recording.steps
    del real_ex, recording, model
    spec = ModelSpec(name="gpu_check", hidden_size=cfg.hidden_size,
                     num_hidden_layers=cfg.num_hidden_layers,
                     num_attention_heads=cfg.num_attention_heads,
                     num_key_value_heads=cfg.num_key_value_heads,
                     intermediate_size=cfg.intermediate_size, vocab_size=cfg.vocab_size,
                     head_dim=cfg.head_dim)
    hw = HardwareSpec(_device_name(device), peak_flops=1e15, memory_bandwidth=4.8e12,
                      host_link_bandwidth=5e10)
    sim = _run_stats(Engine(scheduler(), SimExecutor(spec, hw, cost_model=cost),
                            requests()).run())
    pred = np.array([cost.step_time(sh) for sh, _ in steps])
    meas = np.array([t for _, t in steps])
    rows = [{"statistic": k, "real": real[k], "sim": sim[k],
             "sim_vs_real_pct": 100.0 * (sim[k] - real[k]) / real[k] if real[k] else
             (0.0 if sim[k] == 0 else float("inf"))} for k in real]
    rows.append({"statistic": "step_time_median_ape_pct", "real": float("nan"),
                 "sim": float(np.median(np.abs(pred - meas) / meas) * 100.0),
                 "sim_vs_real_pct": float("nan")})
    with (out_dir / "sim_vs_real.csv").open("w") as f:
        f.write("statistic,real,sim,sim_vs_real_pct\n")
        for r in rows:
            f.write(f"{r['statistic']},{r['real']:.6g},{r['sim']:.6g},"
                    f"{r['sim_vs_real_pct']:.3g}\n")
    return {"workload": w, "real_steps": len(steps), "rows": rows}


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
    ap.add_argument("--out", type=Path, required=True,
                    help="the folder everything is written to (results.json, ...)")
    ap.add_argument("--cpu", "--smoke", dest="cpu", action="store_true",
                    help="toy sizes on the CPU; GPU-only parts skipped and named")
    ap.add_argument("--budget-s", type=float, default=450.0,
                    help="skip the sections that start after this many seconds")
    ap.add_argument("--reps", type=int, default=5, help="measured decode steps per case")
    ap.add_argument("--profile-reps", type=int, default=7,
                    help="measurements of each profile shape")
    ap.add_argument("--sections", default=",".join(SECTIONS))
    args = ap.parse_args(argv)
    wanted = set(args.sections.split(","))
    unknown = wanted - set(SECTIONS)
    if unknown:
        ap.error(f"--sections: unknown {', '.join(sorted(unknown))}; valid: "
                 f"{', '.join(SECTIONS)}")
    cuda = torch.cuda.is_available() and not args.cpu
    if not cuda and not args.cpu:
        print("no GPU: run with --cpu to check the script on a CPU")
        return 2
    device = torch.device("cuda" if cuda else "cpu")
    out_dir: Path = args.out
    out_dir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.budget_s
    timer = Timer(device)
    results: dict[str, Any] = {
        "device": _device_name(device), "torch": torch.__version__,
        "flash_attn": fa.flavour(), "cpu": args.cpu, "skipped": {}}
    try:
        import triton
        results["triton"] = triton.__version__
    except ImportError:
        results["triton"] = None
    if not (cuda and fa.usable(16)):
        results["skipped"]["flash_attn"] = ("needs a GPU and the flash-attn package" if cuda
                                            else "GPU only: not run on a CPU")
    if "kernels" in wanted:
        _section(results, "kernels", lambda: check_kernels(device, args.cpu), deadline)
    if "parity_tests" in wanted:
        if not cuda:
            results["skipped"]["parity_tests"] = (
                "GPU only: collected, not run (the CPU test suite runs them)")
        _section(results, "parity_tests", lambda: run_parity_tests(out_dir, cuda), deadline)
    copy_bw = 1e9
    if wanted & {"copy", "decode_kernel", "model"}:
        bw = _section(results, "copy_bandwidth_gb_s",
                      lambda: copy_bandwidth(device, args.cpu, timer) / 1e9, deadline)
        copy_bw = (bw or 1.0) * 1e9
    if "decode_kernel" in wanted:
        _section(results, "decode_kernel",
                 lambda: decode_kernel_bandwidth(device, args.cpu, timer, copy_bw), deadline)
    if "model" in wanted:
        kernels = ["triton"] + (["flash_attn"] if cuda and fa.usable(16) else [])
        _section(results, "model",
                 lambda: model_decode(device, args.cpu, copy_bw, kernels, args.reps), deadline)
    if "profile" in wanted:
        _section(results, "profile",
                 lambda: measure_profile(device, args.cpu, args.profile_reps, out_dir),
                 deadline)
    if "sim_vs_real" in wanted:
        if not (out_dir / "profile.json").is_file():
            results["skipped"]["sim_vs_real"] = "no profile.json (the profile section failed)"
        else:
            _section(results, "sim_vs_real", lambda: sim_vs_real(device, args.cpu, out_dir),
                     deadline)
    for name, why in results["skipped"].items():
        print(f"skipped: {name}: {why}")
    for name in SECTIONS:
        got = results.get(name)
        if isinstance(got, dict) and "skipped" in got:
            print(f"skipped: {name}: {got['skipped']}")
    _print(results)
    (out_dir / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    print(f"wrote {out_dir}")
    failed = [n for n, v in results.items() if isinstance(v, dict) and "error" in v]
    parity = results.get("parity_tests")
    if isinstance(parity, dict) and parity.get("returncode"):
        failed.append("parity_tests")
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
