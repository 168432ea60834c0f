"""Prefill and decode throughput of the real executor against `transformers` `generate()`.

Both run the same checkpoint (by default a tiny random Llama made on the spot: 2 layers,
hidden 64, 4 heads, 2 KV heads) on the same batch of equal-length random prompts, greedily.

- ours, prefill: one StepPlan computing every prompt (all chunks sample), its measured
  duration; decode: `--decode-steps` plans of one token per request, the sum of their
  durations. Each run uses a fresh executor (fresh KV cache).
- transformers, prefill: `generate(max_new_tokens=1)`; decode: `generate(max_new_tokens=1 +
  decode_steps)` minus the prefill time of the same run.

Throughput = tokens / seconds; the ratio is ours / transformers (above 1: we are faster).
Figures are medians over `--runs` runs (ours and theirs interleaved) after one warm-up run;
the tokens of both are compared.

    .venv/bin/python scripts/bench_executor.py --batch 32 --runs 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engines.executors.real import RealExecutor
from engines.model import PagedDecoder
from engines.model.tiny import save_tiny_checkpoint
from schedulers.contract import ScheduledChunk, StepPlan

PAGE_SIZE = 16


@dataclass
class RunTimes:
    """Seconds of one run, and the tokens it generated (request-major)."""

    prefill_s: float
    decode_s: float
    tokens: list[list[int]]


@dataclass
class Report:
    """The bench's figures (medians), as printed and written with --json."""

    batch: int
    prompt_len: int
    decode_steps: int
    runs: int
    kernel: str
    threads: int
    clock: str
    ours_prefill_tok_s: float
    hf_prefill_tok_s: float
    prefill_ratio: float
    ours_decode_tok_s: float
    hf_decode_tok_s: float
    decode_ratio: float
    tokens_match: bool


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def run_ours(model: PagedDecoder, prompts: list[list[int]], steps: int, kernel: str,
             clock: str = "wall") -> RunTimes:
    """Prefill every prompt in one step, then `steps` decode steps. With the wall clock the
    durations are the executor's own; with the CPU clock, this process's CPU time around
    each `execute`."""
    now = CLOCKS[clock]
    ex = RealExecutor(model, kernel=kernel)
    pages_per = -(-(len(prompts[0]) + steps + 1) // PAGE_SIZE)
    pages = [list(range(i * pages_per, (i + 1) * pages_per)) for i in range(len(prompts))]
    ex.kv_cache.ensure_slots(len(prompts) * pages_per * PAGE_SIZE)
    ids = [f"r{i}" for i in range(len(prompts))]
    plan = StepPlan(0, PAGE_SIZE, [ScheduledChunk(r, p, 0, pg, True)
                                   for r, p, pg in zip(ids, prompts, pages, strict=True)])
    t0 = now()
    res = ex.execute(plan)
    prefill = res.duration_s if clock == "wall" else now() - t0
    out = [[res.sampled_token_ids[r]] for r in ids]
    decode = 0.0
    pos = len(prompts[0])
    for step in range(steps):
        plan = StepPlan(step + 1, PAGE_SIZE, [ScheduledChunk(r, [o[-1]], pos, pg, True)
                                              for r, o, pg in zip(ids, out, pages, strict=True)])
        t0 = now()
        res = ex.execute(plan)
        decode += res.duration_s if clock == "wall" else now() - t0
        for r, o in zip(ids, out, strict=True):
            o.append(res.sampled_token_ids[r])
        pos += 1
    return RunTimes(prefill, decode, out)


def run_hf(hf: torch.nn.Module, prompts: list[list[int]], steps: int,
           clock: str = "wall") -> RunTimes:
    """generate() for 1 token (prefill) and for 1 + steps tokens; decode = the difference."""
    now = CLOCKS[clock]
    x = torch.tensor(prompts)
    kw = {"do_sample": False, "eos_token_id": None, "pad_token_id": 0}
    t0 = now()
    hf.generate(x, max_new_tokens=1, **kw)  # type: ignore[operator]
    prefill = now() - t0
    t0 = now()
    full = hf.generate(x, max_new_tokens=1 + steps, min_new_tokens=1 + steps, **kw)  # type: ignore[operator]
    total = now() - t0
    return RunTimes(prefill, max(total - prefill, 1e-9),
                    full[:, len(prompts[0]):].tolist())


def bench(model_dir: Path, batch: int, prompt_len: int, steps: int, runs: int,
          kernel: str, seed: int, clock: str = "wall") -> Report:
    """Warm up, then time `runs` runs of each side; medians and ratios."""
    from transformers import AutoModelForCausalLM

    ours = PagedDecoder.from_pretrained(model_dir, dtype="float32", device="cpu")
    hf = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(seed)
    prompts = torch.randint(3, ours.config.vocab_size, (batch, prompt_len),
                            generator=gen).tolist()
    run_ours(ours, prompts, steps, kernel)  # warm-up
    run_hf(hf, prompts, steps)
    o_runs, h_runs = [], []
    for _ in range(runs):  # interleaved, so that both sides see the same machine load
        o_runs.append(run_ours(ours, prompts, steps, kernel, clock))
        h_runs.append(run_hf(hf, prompts, steps, clock))
    med = statistics.median
    o_pre = med(batch * prompt_len / r.prefill_s for r in o_runs)
    h_pre = med(batch * prompt_len / r.prefill_s for r in h_runs)
    o_dec = med(batch * steps / r.decode_s for r in o_runs)
    h_dec = med(batch * steps / r.decode_s for r in h_runs)
    return Report(batch, prompt_len, steps, runs, kernel, torch.get_num_threads(), clock,
                  o_pre, h_pre, o_pre / h_pre, o_dec, h_dec, o_dec / h_dec,
                  o_runs[0].tokens == h_runs[0].tokens)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, help="checkpoint folder (default: a tiny random one)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--decode-steps", type=int, default=32)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--kernel", default="torch", help="torch | triton (interpreted on a CPU)")
    ap.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                    help="wall: elapsed time (the executor's measured durations); cpu: this "
                         "process's CPU time, steadier on a shared machine")
    ap.add_argument("--json", type=Path, help="also write the report here")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model or save_tiny_checkpoint(Path(tmp) / "tiny", "llama", seed=0)
        rep = bench(model_dir, args.batch, args.prompt_len, args.decode_steps, args.runs,
                    args.kernel, args.seed, args.clock)
    print(f"batch {rep.batch}, prompt {rep.prompt_len}, {rep.decode_steps} decode steps, "
          f"median of {rep.runs} runs, kernel={rep.kernel}, {rep.threads} thread(s), "
          f"{rep.clock} clock")
    print(f"{'':10}{'ours tok/s':>14}{'generate() tok/s':>18}{'ratio':>8}")
    print(f"{'prefill':10}{rep.ours_prefill_tok_s:>14.0f}{rep.hf_prefill_tok_s:>18.0f}"
          f"{rep.prefill_ratio:>8.2f}")
    print(f"{'decode':10}{rep.ours_decode_tok_s:>14.0f}{rep.hf_decode_tok_s:>18.0f}"
          f"{rep.decode_ratio:>8.2f}")
    print(f"tokens equal to generate(): {rep.tokens_match}")
    if args.json:
        args.json.write_text(json.dumps(asdict(rep), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
