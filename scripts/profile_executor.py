#!/usr/bin/env python3
"""Measure the real executor over a grid of step shapes and write a cost-model profile.

    python scripts/profile_executor.py [--model-path DIR] [--out conf/profiles/NAME.json]
        [--kernel torch] [--dtype float32] [--device cpu] [--threads 1] [--repeats 5]
        [--validate-requests 40] [--grid default|small] [--timer wall|cpu|min_of_k|reference]
    python scripts/profile_executor.py --from-run RUN_DIR [RUN_DIR ...] --out PATH
        [--base-profile conf/profiles/NAME.json] [--padded-kv auto|on|off]

Without `--model-path` a tiny random Llama checkpoint (4 layers, hidden 256; see
engines/model/tiny.py) is written to a temporary folder and profiled. The grid:

    prefill   one chunk of n tokens after a prefix of s cached tokens
    decode    b sequences of one token each, at context length c
    mixed     one prefill chunk of n tokens beside b decodes at context c

(`--grid small`: shorter prompts and contexts, batched prompts, and ragged decode batches
whose contexts differ, so that the padded-keys term can be fitted; see `small_grid`.)

Each shape runs `--repeats` times after a warm-up (round-robin over the grid); the median is
kept. The profile (JSON:
model config, hardware, dtype, kernel, threads, the measurements with their `StepShape`
terms, and the fitted coefficients for reference) is written to `--out`; the sim executor
refits from the measurements (`executor.cost_model=profile executor.profile=PATH`).

Validation: a real run (vLLM scheduler, a synthetic workload of `--validate-requests`
requests, chunked prefill, the same executor) is replayed; its measured steps are held out
of the fit, and the median absolute percentage error (MAPE) of the fitted model's predictions
over them is printed (and stored in the profile as `validation`).

`--from-run` (in-situ calibration, engines/calibration.py): no grid is measured; the profile's
measurements are the steps of real engine runs (the `step_shapes.parquet` that
scripts/real_vs_sim.py writes for each real run), so the cost model is fitted to steps as
they run inside an engine. Calibrate on a workload other than the one you validate on (e.g.
another seed). `--base-profile` lends the grid profile's model and hardware descriptions.

Padded keys: every measurement records `padded_kv_tokens` (the keys the torch kernel reads in
the groups it pads to their longest context and masks, `engines.cost_model.padded_kv_tokens`).
The fit gains that term (`features` lists it) when some measured step is padded: the small
grid's ragged decode batches, or a real run's (`--padded-kv auto`, the default; `off` fits
the five-term model).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from engines.cost_model import (  # noqa: E402
    FEATURES,
    PADDED_FEATURE,
    PROFILE_FORMAT,
    FittedCostModel,
    StepShape,
    any_padded,
    features,
    mape,
)
from engines.executors.real import RealExecutor, RealExecutorConfig  # noqa: E402
from schedulers.contract import ScheduledChunk, StepPlan, StepResult  # noqa: E402

PAGE_SIZE = 16
TINY_PROFILE_SHAPE: dict[str, Any] = {
    "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 4,
    "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 1024,
    "max_position_embeddings": 8192,
}
PREFILL_TOKENS = (16, 64, 128, 256, 512)
PREFILL_PREFIX = (0, 256, 1024, 2048)
DECODE_BATCH = (1, 2, 4, 8, 16, 32)
DECODE_CONTEXT = (64, 256, 1024, 2048)
MIXED = ((64, 4, 512), (128, 8, 256), (256, 4, 1024), (512, 8, 512), (128, 16, 1024))


class Planner:
    """Builds plans with disjoint pages for every sequence (KV contents are irrelevant)."""

    def __init__(self) -> None:
        self.next_page = 0
        self.step = 0

    def chunk(self, rid: str, n: int, start: int) -> ScheduledChunk:
        pages = -(-(start + n) // PAGE_SIZE)
        ids = list(range(self.next_page, self.next_page + pages))
        self.next_page += pages
        return ScheduledChunk(rid, [7] * n, start, ids, sample=True)

    def plan(self, spec: list[tuple[int, int]]) -> StepPlan:
        """A plan of chunks (n tokens, start position)."""
        self.next_page = 0
        self.step += 1
        chunks = [self.chunk(f"p{i}", n, s) for i, (n, s) in enumerate(spec)]
        return StepPlan(step=self.step, page_size=PAGE_SIZE, chunks=chunks)


# --grid small: the shapes of short chat workloads (prompts of tens of tokens, answers of up to
# a few hundred, batches of up to 32), e.g. SmolLM2 on a CPU (scripts/reproduce_real_model.sh):
# a linear model fits best over the range it is used in.
SMALL_PREFILL_TOKENS = (8, 16, 32, 64, 128, 256)
SMALL_PREFILL_PREFIX = (0, 32, 128)
SMALL_PREFILL_BATCH = ((2, 40), (4, 40), (8, 40), (4, 12))  # (prompts, tokens each)
SMALL_DECODE_BATCH = (*range(1, 13), 16, 20, 24, 32)  # every small size: odd ones differ
SMALL_DECODE_CONTEXT = (32, 96, 192)
SMALL_MIXED = ((40, 2, 64), (40, 4, 64), (40, 8, 128), (80, 8, 96), (40, 16, 128),
               (120, 12, 160))
# Ragged decode batches (b sequences, contexts cycling through the tuple): the torch kernel
# pads them to the longest and masks the padding, which costs per key beyond the keys read.
SMALL_RAGGED_DECODE = ((2, (32, 192)), (4, (32, 192)), (4, (32, 32, 32, 192)),
                       (8, (32, 96, 192)), (8, (32, 192)), (12, (32, 96, 192)),
                       (16, (32, 192)), (24, (32, 32, 96, 192)))


def small_grid() -> list[tuple[str, list[tuple[int, int]]]]:
    """The `--grid small` shapes (see SMALL_*)."""
    shapes: list[tuple[str, list[tuple[int, int]]]] = []
    for n in SMALL_PREFILL_TOKENS:
        for s in SMALL_PREFILL_PREFIX:
            shapes.append(("prefill", [(n, s)]))
    for k, n in SMALL_PREFILL_BATCH:
        shapes.append(("prefill", [(n, 0)] * k))
    for b in SMALL_DECODE_BATCH:
        for c in SMALL_DECODE_CONTEXT:
            shapes.append(("decode", [(1, c - 1)] * b))
    for n, b, c in SMALL_MIXED:
        shapes.append(("mixed", [(n, 0)] + [(1, c - 1)] * b))
    for b, contexts in SMALL_RAGGED_DECODE:
        shapes.append(("decode", [(1, contexts[i % len(contexts)] - 1) for i in range(b)]))
    return shapes


def grid(name: str = "default") -> list[tuple[str, list[tuple[int, int]]]]:
    """The shapes profiled: `default` (prompts up to 512 tokens, contexts up to 2048) or
    `small` (`small_grid`)."""
    if name == "small":
        return small_grid()
    if name != "default":
        raise ValueError(f"--grid {name!r}: valid: default, small")
    shapes: list[tuple[str, list[tuple[int, int]]]] = []
    for n in PREFILL_TOKENS:
        for s in PREFILL_PREFIX:
            shapes.append(("prefill", [(n, s)]))
    for b in DECODE_BATCH:
        for c in DECODE_CONTEXT:
            shapes.append(("decode", [(1, c - 1)] * b))
    for n, b, c in MIXED:
        shapes.append(("mixed", [(n, 0)] + [(1, c - 1)] * b))
    return shapes


def measure(executor: RealExecutor, repeats: int, grid_name: str = "default"
            ) -> list[dict[str, Any]]:
    planner = Planner()
    out: list[dict[str, Any]] = []
    shapes = grid(grid_name)
    for _kind, spec in shapes[:3]:  # warm-up
        executor.execute(planner.plan(spec))
    plans = [planner.plan(spec) for _kind, spec in shapes]
    times: list[list[float]] = [[] for _ in plans]
    # Round-robin over the grid, not one shape `repeats` times in a row: on a machine whose
    # load changes over time, a busy spell then spreads over every shape instead of skewing
    # a few (and no shape runs with caches warmed by its own previous run only).
    for _ in range(repeats):
        for i, plan in enumerate(plans):
            times[i].append(executor.execute(plan).duration_s)
    for (kind, _spec), plan, t in zip(shapes, plans, times, strict=True):
        shape = StepShape.of(plan)
        out.append({"kind": kind, "num_tokens": shape.num_tokens,
                    "attn_pairs": shape.attn_pairs, "kv_read_tokens": shape.kv_read_tokens,
                    "num_seqs": shape.num_seqs, PADDED_FEATURE: shape.padded_kv_tokens,
                    "seconds": statistics.median(t)})
    return out


class TimedExecutor:
    """Wraps the real executor and keeps every step's shape and measured time."""

    def __init__(self, inner: RealExecutor) -> None:
        self.inner = inner
        self.steps: list[tuple[StepShape, float]] = []

    def register(self, request: Any) -> None:
        self.inner.register(request)

    def execute(self, plan: StepPlan) -> StepResult:
        result = self.inner.execute(plan)
        self.steps.append((StepShape.of(plan), result.duration_s))
        return result


def validation_run(executor: RealExecutor, num_requests: int, seed: int,
                   vocab: int) -> list[tuple[StepShape, float]]:
    """A real run's steps (vLLM, chunked prefill of 256 tokens, synthetic workload)."""
    from engines.engine import Engine
    from experiments.inputs.workloads import build_workload
    from schedulers.vllm import VllmScheduler, VllmSchedulerConfig

    requests = build_workload({
        "name": "synthetic", "num_requests": num_requests, "request_rate": 20.0,
        "prompt_len": {"dist": "lognormal", "mean": 256, "sigma": 0.8, "min": 16, "max": 1536},
        "output_len": {"dist": "lognormal", "mean": 24, "sigma": 0.6, "min": 4, "max": 96},
        "mode": "fixed", "max_tokens": 128, "vocab_size": vocab,
    }, seed)
    sched = VllmScheduler(VllmSchedulerConfig.from_capacity(
        16384, max_num_batched_tokens=256, max_num_seqs=32, max_model_len=4096))
    timed = TimedExecutor(executor)
    Engine(sched, timed, requests).run()
    return timed.steps


def hardware_info(device: str, threads: int) -> dict[str, Any]:
    info: dict[str, Any] = {"device": device, "torch": torch.__version__,
                            "threads": threads, "machine": platform.machine(),
                            "cpu_count": os.cpu_count()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-path", default=None)
    ap.add_argument("--out", default=None,
                    help="profile JSON (default conf/profiles/tiny_llama_cpu.json; "
                         "required with --from-run)")
    ap.add_argument("--kernel", default="torch")
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (CPU)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--validate-requests", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timer", default="wall",
                    choices=("wall", "cpu", "min_of_k", "reference"),
                    help="step time: wall clock, the process's CPU time (one thread), the "
                         "fastest of --timer-repeats passes, or that in the reference step's "
                         "unit (executor.timer)")
    ap.add_argument("--timer-repeats", type=int, default=3,
                    help="forward passes per step of --timer min_of_k and reference")
    ap.add_argument("--timer-reference-s", type=float, default=None,
                    help="--timer reference: the clock's unit (default: the reference step "
                         "measured at start); the profile records it, so that real runs "
                         "compared with the profile share it")
    ap.add_argument("--grid", default="default", choices=("default", "small"),
                    help="the step shapes measured (small: short chat workloads)")
    ap.add_argument("--from-run", nargs="+", default=None, metavar="RUN_DIR",
                    help="fit to the steps of these real runs instead of measuring a grid")
    ap.add_argument("--base-profile", default=None,
                    help="with --from-run: a grid profile whose model/hardware it copies")
    ap.add_argument("--padded-kv", default="auto", choices=("auto", "on", "off"),
                    help="with --from-run: fit the padded-keys term (auto: when the steps "
                         "record padded_kv_tokens and some step is padded)")
    args = ap.parse_args(argv)
    if args.from_run:
        if args.out is None:
            ap.error("--from-run needs --out (the calibrated profile's path)")
        return from_runs(args, argv)
    if args.out is None:
        args.out = str(ROOT / "conf" / "profiles" / "tiny_llama_cpu.json")
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp:
        model_path = args.model_path
        if model_path is None:
            from engines.model.tiny import save_tiny_checkpoint

            model_path = str(save_tiny_checkpoint(Path(tmp) / "tiny", **TINY_PROFILE_SHAPE))
        executor = RealExecutor.from_config(RealExecutorConfig(
            model_path=model_path, kernel=args.kernel, dtype=args.dtype, device=args.device,
            num_slots=80000, timer=args.timer,  # the largest grid step: 32 sequences of 2048
            timer_repeats=args.timer_repeats, timer_reference_s=args.timer_reference_s))
        config = json.loads((Path(model_path) / "config.json").read_text())
        measurements = measure(executor, args.repeats, args.grid)
        padded = any_padded(measurements)  # the default grid pads nothing
        model = FittedCostModel.fit(
            [features(m["num_tokens"], m["attn_pairs"], m["kv_read_tokens"], m["num_seqs"],
                      m[PADDED_FEATURE] if padded else None)
             for m in measurements], [m["seconds"] for m in measurements])
        fit_mape = mape([model.seconds(m["num_tokens"], m["attn_pairs"], m["kv_read_tokens"],
                                       m["num_seqs"], m[PADDED_FEATURE])
                         for m in measurements],
                        [m["seconds"] for m in measurements])
        held = validation_run(executor, args.validate_requests, args.seed,
                              int(config.get("vocab_size", 256)))
    pred = [model.step_time(s) for s, _ in held]
    val_mape = mape(pred, [t for _, t in held])
    profile = {
        "format": PROFILE_FORMAT,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": "python scripts/profile_executor.py " + " ".join(
            sys.argv[1:] if argv is None else argv),
        "model": {"path": args.model_path or "tiny (engines/model/tiny.py)",
                  **{k: config.get(k) for k in (
                      "architectures", "hidden_size", "intermediate_size", "num_hidden_layers",
                      "num_attention_heads", "num_key_value_heads", "vocab_size")}},
        "hardware": hardware_info(str(executor.model.device), args.threads),
        "dtype": str(executor.model.dtype).removeprefix("torch."),
        "kernel": args.kernel,
        "grid": args.grid,
        "timer": args.timer,
        "timer_repeats": executor.timer.repeats,
        **({"timer_reference_s": executor.timer.reference_s,
            "timer_reference_source": executor.timer.reference_source}
           if args.timer == "reference" else {}),
        "page_size": PAGE_SIZE,
        "features": [*FEATURES, PADDED_FEATURE] if padded else list(FEATURES),
        "fit": {"coefficients": model.describe(), "mape_pct_on_grid": round(fit_mape, 2)},
        "validation": {"held_out_steps": len(held), "mape_pct": round(val_mape, 2),
                       "workload": f"synthetic, {args.validate_requests} requests, vLLM, "
                                   "chunked prefill 256"},
        "measurements": measurements,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(profile, indent=1) + "\n")
    print(f"{len(measurements)} shapes measured; fit: " + ", ".join(
        f"{k}={v:.3e}" for k, v in model.describe().items()))
    print(f"MAPE on the grid: {fit_mape:.1f}%")
    print(f"MAPE on {len(held)} held-out steps of a real run: {val_mape:.1f}%")
    print(f"wrote {out}")
    return 0


def from_runs(args: argparse.Namespace, argv: list[str] | None) -> int:
    """`--from-run`: write a profile fitted to the steps of real runs."""
    from engines.calibration import load_steps, profile_from_steps

    base = json.loads(Path(args.base_profile).read_text()) if args.base_profile else None
    steps = load_steps(args.from_run)
    padded = {"auto": None, "on": True, "off": False}[args.padded_kv]
    profile = profile_from_steps(steps, source=args.from_run, base_profile=base, padded=padded)
    profile["command"] = "python scripts/profile_executor.py " + " ".join(
        sys.argv[1:] if argv is None else argv)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(profile, indent=1) + "\n")
    fit = profile["fit"]
    print(f"{len(steps)} steps of {len(args.from_run)} run(s); fit: " + ", ".join(
        f"{k}={v:.3e}" for k, v in fit["coefficients"].items()))
    print("decode factors: " + ", ".join(f"{b}: {f:.2f}"
                                         for b, f in fit["decode_factors"].items()))
    print(f"MAPE on its own steps: {fit['mape_pct_on_steps']:.1f}%")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
