#!/usr/bin/env python3
"""The simulator against the real executor on SmolLM2-135M-Instruct (issue 14).

For each scheduler: run the real-prompt workload with `executor=real model=smollm2_135m`
(every step's shape and measured time recorded), then the same workload, pool and seed with
`executor=sim executor.cost_model=profile_batch` (fitted to the profile of
scripts/profile_executor.py for this model on this machine), each request sampling the tokens
the real run produced (`workload.output_tokens`: its EOS at the real length, and the prefix
caches see the real outputs). Writes under `--out`:

    runs/<scheduler>_<real|sim>/    requests.parquet, steps.parquet, summary.json (+ step_shapes
                                    .parquet, output_lengths.json and output_tokens.json for
                                    the real runs)
    step_error.csv                  per scheduler: median / p90 absolute percentage error of the
                                    profile's prediction over the real run's steps (all steps,
                                    decode-only steps, steps with prefill)
    comparison.csv / .md            per scheduler: real, sim and relative error of throughput,
                                    TTFT and E2E (median, p99), evictions, victims' median E2E
    questions.md                    the three questions (evictions, prefix-cache recovery of
                                    victims, victims' E2E against the others), real beside sim
    figures/step_time.png           predicted against measured step time
    figures/e2e_cdf.png             E2E latency CDFs, real and sim
    study.json                      the settings, wall time and peak memory of this study

    python scripts/real_vs_sim.py [--out results/real_model] [--num-requests 32] [--rate 2]
        [--max-tokens 128] [--kv 512] [--token-budget N]
        [--profile conf/profiles/smollm2_135m_cpu.json]
        [--baseline-profile PATH] [--real-from FOLDER]

With `--baseline-profile` the simulator also runs with that profile (e.g. the grid profile,
beside an in-situ calibrated `--profile`) on the same real runs: comparison.md gains its
columns, step_error.csv its rows (`profile` column), raw runs in runs/<scheduler>_sim_baseline.
With `--real-from` the real runs are not run again: those of an earlier study's folder (its
runs/<scheduler>_real: summary.json, step_shapes.parquet, requests.parquet) are compared
with the simulator run now (e.g. with a profile calibrated later).
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import resource
import sys
import time
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

from engines.cost_model import FittedCostModel, StepShape  # noqa: E402
from engines.decode_batch_cost import DecodeBatchCostModel  # noqa: E402
from engines.executors.base import Executor  # noqa: E402
from schedulers.contract import Request, StepPlan, StepResult  # noqa: E402

# summary.json key, label: the statistics compared (relative error of sim against real).
STATS = (
    ("request_throughput", "request throughput (req/s)"),
    ("output_throughput", "output throughput (tok/s)"),
    ("median_ttft_ms", "median TTFT (ms)"),
    ("p99_ttft_ms", "p99 TTFT (ms)"),
    ("median_e2el_ms", "median E2E (ms)"),
    ("p99_e2el_ms", "p99 E2E (ms)"),
    ("num_preemptions", "preemptions / retractions"),
    ("median_e2el_victim_ms", "victims' median E2E (ms)"),
)
QUESTIONS = (
    ("num_preemptions", "evictions (vLLM preemptions / SGLang retractions)"),
    ("num_victims", "requests evicted at least once"),
    ("recomputed_tokens", "recomputed tokens"),
    ("prefix_recovery_on_resume", "prefix-cache recovery on resume"),
    ("median_e2el_victim_ms", "victims' median E2E (ms)"),
    ("median_e2el_nonvictim_ms", "others' median E2E (ms)"),
    ("victim_e2el_median_ratio", "victims / others, median E2E"),
)


class ShapeRecorder:
    """Wraps an executor; keeps every executed step's shape and measured duration."""

    def __init__(self, inner: Executor) -> None:
        self.inner = inner
        self.rows: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def register(self, request: Request) -> None:
        self.inner.register(request)

    def execute(self, plan: StepPlan) -> StepResult:
        result = self.inner.execute(plan)
        s = StepShape.of(plan)
        self.rows.append({"step": plan.step, "num_tokens": s.num_tokens,
                          "attn_pairs": s.attn_pairs, "kv_read_tokens": s.kv_read_tokens,
                          "num_seqs": s.num_seqs, "padded_kv_tokens": s.padded_kv_tokens,
                          "prefill": any(not c.sample or len(c.token_ids) > 1
                                         for c in plan.chunks),
                          "seconds": result.duration_s})
        return result


def predict(model: Any, df: pd.DataFrame) -> np.ndarray:
    """The model's prediction of each step (row) of a real run's step shapes; its padded
    keys where the run recorded them (engines.cost_model.padded_kv_tokens)."""
    pad = df["padded_kv_tokens"] if "padded_kv_tokens" in df.columns else [None] * len(df)
    return np.array([model.seconds(int(t), int(a), int(r), int(s), None if p is None
                                   else int(p))
                     for t, a, r, s, p in zip(df["num_tokens"], df["attn_pairs"],
                                              df["kv_read_tokens"], df["num_seqs"], pad,
                                              strict=True)])


def compose(overrides: list[str]) -> Any:
    from experiments.run.config import compose_run_config

    return compose_run_config(overrides, str(ROOT / "conf"))


def run(overrides: list[str], out: Path, record: bool = False
        ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One job through `experiments.run.main.run_experiment` into `out`."""
    from experiments.run.main import run_experiment

    recorders: list[ShapeRecorder] = []

    def wrap(executor: Executor) -> Executor:
        recorders.append(ShapeRecorder(executor))
        return recorders[-1]

    out.mkdir(parents=True, exist_ok=True)
    cfg = compose(overrides)
    t0 = time.perf_counter()
    gc_time = [0.0, 0.0]  # seconds in Python's garbage collector, its start

    def on_gc(phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            gc_time[1] = time.perf_counter()
        else:
            gc_time[0] += time.perf_counter() - gc_time[1]

    gc.callbacks.append(on_gc)
    try:
        summary = run_experiment(cfg, out, wrap_executor=wrap if record else None)
    finally:
        gc.callbacks.remove(on_gc)
    summary["python_gc_s"] = round(gc_time[0], 3)
    print(f"  {out.name}: {time.perf_counter() - t0:.1f} s wall, {summary['num_steps']} steps, "
          f"{summary['num_preemptions']} evictions, {gc_time[0]:.2f} s in Python's gc",
          flush=True)
    return summary, recorders[0].rows if recorders else []


def pct(sim: float | None, real: float | None) -> float:
    """Relative error of `sim` against `real`, in percent (nan when undefined)."""
    if sim is None or real is None or not np.isfinite(real) or not np.isfinite(sim):
        return float("nan")
    if real == 0:
        return 0.0 if sim == 0 else float("inf")
    return 100.0 * (sim - real) / real


def step_errors(rows: list[dict[str, Any]], model: Any) -> dict[str, float]:
    """Median and p90 absolute percentage error over the real steps (all, decode, prefill)."""
    df = pd.DataFrame(rows)
    pred = predict(model, df)
    ape = np.abs(pred - df["seconds"].to_numpy()) / df["seconds"].to_numpy() * 100.0
    out: dict[str, float] = {}
    for name, mask in (("all", np.ones(len(df), bool)), ("decode", ~df["prefill"].to_numpy()),
                       ("prefill", df["prefill"].to_numpy())):
        a = ape[mask]
        out[f"{name}_steps"] = int(mask.sum())
        out[f"{name}_median_ape_pct"] = float(np.median(a)) if a.size else float("nan")
        out[f"{name}_p90_ape_pct"] = float(np.percentile(a, 90)) if a.size else float("nan")
    out["sum_pred_over_real"] = float(pred.sum() / df["seconds"].sum())
    return out


def fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return "nan" if v != v else f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def figures(out: Path, shapes: dict[str, list[dict[str, Any]]], model: Any,
            real_root: Path | None = None) -> None:
    """figures/step_time.png (the profile's prediction of each real step against its
    measured time) and figures/e2e_cdf.png (E2E latency CDFs, real and sim), drawn as the
    report draws (experiments.report: fonts, colours, plain-number log ticks, no date)."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from experiments.report.figures import (
        PAGE_IN,
        SCHEDULER_NAMES,
        _save,
        fig_legend,
        log_ticks,
        scheduler_color,
        shade,
        style,
        suptitle,
    )
    from experiments.report.step_time import StepTimes, step_time_figure

    fig_dir = out / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    panels = {}
    for sched, rows in shapes.items():
        df = pd.DataFrame(rows)
        panels[sched] = StepTimes(df["seconds"].to_numpy(dtype=float), predict(model, df),
                                  df["prefill"].to_numpy(dtype=bool))
    step_time_figure(panels, fig_dir / "step_time.png", pdf=False)
    kinds = (("real", "-", 1.0), ("sim", "--", 0.45))
    with style():
        fig, axes = plt.subplots(1, len(shapes), figsize=(PAGE_IN, 2.6), squeeze=False,
                                 sharey=True, layout="constrained")
        for ax, sched in zip(axes[0], shapes, strict=True):
            for kind, ls, tone in kinds:
                root = (real_root or out) if kind == "real" else out
                df = pd.read_parquet(root / "runs" / f"{sched}_{kind}" / "requests.parquet")
                e2e = np.sort((df["finish_time"] - df["arrival_time"]).to_numpy() * 1e3)
                ax.step(e2e, np.arange(1, len(e2e) + 1) / len(e2e), where="post", ls=ls,
                        color=shade(scheduler_color(sched), tone))
            ax.set(title=SCHEDULER_NAMES.get(sched, sched), xlabel="E2E latency (ms)")
        axes[0][0].set_ylabel("share of requests")
        fig.canvas.draw()
        for ax in axes[0]:
            log_ticks(ax, "x")
        fig_legend(fig, [Line2D([], [], color="0.3", ls=ls, label=f"{kind} run")
                         for kind, ls, _t in kinds])
        suptitle(fig, "E2E latency per request (CDF): the real run and the simulator")
        _save(fig, fig_dir / "e2e_cdf.png", pdf=False)


# Upstream's SGLang admits for a long run (the new-token ratio decays over 600 steps): at this
# scale it would never retract. A lower conservativeness and a faster decay admit more
# optimistically, so decode runs out of KV and retracts, as it does in long runs.
SGLANG_OVERRIDES = ("scheduler.schedule_conservativeness=0.1",
                    "scheduler.new_token_ratio_decay_steps=50")


def budget_overrides(sched: str, budget: int | None) -> list[str]:
    """The scheduler's token budget of one step as Hydra overrides (None: its default): vLLM's
    `max_num_batched_tokens`, SGLang's chunk and prefill-batch budgets."""
    if budget is None:
        return []
    if sched == "vllm":
        return [f"scheduler.max_num_batched_tokens={budget}"]
    return [f"scheduler.chunked_prefill_size={budget}", f"scheduler.max_prefill_tokens={budget}"]


def study_overrides(num_requests: int = 32, rate: float = 2.0, max_tokens: int = 128,
                    kv: int = 512, seed: int = 0) -> list[str]:
    """The Hydra overrides of the study's workload, model and pool (both schedulers)."""
    return [f"workload.num_requests={num_requests}", f"workload.request_rate={rate}",
            f"workload.max_tokens={max_tokens}", f"kv_capacity_tokens={kv}", f"seed={seed}",
            "model=smollm2_135m", "workload=smollm2_prompts", "progress=off"]


def write_outputs(real_dir: Path, dest: Path | None = None) -> None:
    """A real run's output_lengths.json ({request_id: length}) and output_tokens.json
    ({request_id: [token ids]}, what the simulator replays) from its requests.parquet, into
    `dest` (default: the run's folder)."""
    dest = real_dir if dest is None else dest
    dest.mkdir(parents=True, exist_ok=True)
    req = pd.read_parquet(real_dir / "requests.parquet")
    ids = [str(r) for r in req["request_id"]]
    lengths = {r: int(n) for r, n in zip(ids, req["output_len"], strict=True)}
    tokens = {r: [int(t) for t in toks]
              for r, toks in zip(ids, req["output_token_ids"], strict=True)}
    (dest / "output_lengths.json").write_text(json.dumps(lengths, indent=0) + "\n")
    (dest / "output_tokens.json").write_text(json.dumps(tokens) + "\n")


def outputs_file(real_dir: Path, dest: Path) -> Path:
    """The real run's output_tokens.json; where an earlier version of this script left only
    output_lengths.json (a `--real-from` folder), it is written from the run's
    requests.parquet into `dest`, in this study's --out, leaving that folder as it was."""
    path = real_dir / "output_tokens.json"
    if path.is_file():
        return path
    write_outputs(real_dir, dest)
    return dest / "output_tokens.json"


def reference_unit(profile: Path) -> float:
    """The clock unit (`timer_reference_s`) of a profile measured with `--timer reference`:
    real runs compared with it must read their steps in the same unit."""
    data = json.loads(profile.read_text())
    unit = data.get("timer_reference_s")
    if data.get("timer") != "reference" or not unit:
        raise SystemExit(f"real_vs_sim: --timer reference needs a --profile measured with "
                         f"--timer reference (its timer_reference_s); {profile} has timer="
                         f"{data.get('timer')!r}")
    return float(unit)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "real_model")
    ap.add_argument("--profile", default="conf/profiles/smollm2_135m_cpu_ref.json")
    ap.add_argument("--real-from", type=Path, default=None,
                    help="reuse the real runs of this earlier --out folder")
    ap.add_argument("--baseline-profile", default=None,
                    help="a second profile the simulator also runs with, for comparison")
    ap.add_argument("--schedulers", nargs="+", default=["vllm", "sglang"])
    ap.add_argument("--num-requests", type=int, default=32)
    ap.add_argument("--rate", type=float, default=2.0)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--kv", type=int, default=512, help="KV pool, token slots")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--token-budget", type=int, default=None,
                    help="each scheduler's prefill token budget of one step (vLLM "
                         "max_num_batched_tokens, SGLang chunked_prefill_size and "
                         "max_prefill_tokens; default: theirs)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (CPU)")
    ap.add_argument("--cost-model", default="profile_batch", choices=("profile", "profile_batch"))
    ap.add_argument("--timer", default="reference",
                    choices=("wall", "cpu", "min_of_k", "reference"),
                    help="the real executor's step time (reference, the executor's CPU "
                         "default: the fastest of --timer-repeats CPU-time passes of each "
                         "step in the unit of a reference step timed beside each pass, the "
                         "unit the --profile records; min_of_k: no unit; cpu: one pass)")
    ap.add_argument("--timer-repeats", type=int, default=2,
                    help="forward passes per step of --timer min_of_k and reference")
    ap.add_argument("--timer-prefill-repeats", type=int, default=None,
                    help="forward passes of a step with a prefill chunk (default: "
                         "--timer-repeats)")
    ap.add_argument("--sglang", nargs="*", default=list(SGLANG_OVERRIDES),
                    help="Hydra overrides for the SGLang runs only")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    out: Path = args.out
    base = study_overrides(args.num_requests, args.rate, args.max_tokens, args.kv, args.seed)
    model_cls: Any = (DecodeBatchCostModel if args.cost_model == "profile_batch"
                      else FittedCostModel)
    cost: Any = model_cls.from_profile(ROOT / args.profile)
    baseline: Any = (model_cls.from_profile(ROOT / args.baseline_profile)
                     if args.baseline_profile else None)
    timer = [f"executor.timer={args.timer}", f"executor.timer_repeats={args.timer_repeats}"]
    if args.timer_prefill_repeats is not None:
        timer.append(f"executor.timer_prefill_repeats={args.timer_prefill_repeats}")
    if args.timer == "reference":
        timer.append(f"executor.timer_reference_s={reference_unit(ROOT / args.profile)!r}")
    summaries: dict[tuple[str, str], dict[str, Any]] = {}
    shapes: dict[str, list[dict[str, Any]]] = {}
    errors: list[dict[str, Any]] = []
    for sched in args.schedulers:
        real_dir = out / "runs" / f"{sched}_real"
        extra = [f"scheduler={sched}", *budget_overrides(sched, args.token_budget),
                 *(args.sglang if sched == "sglang" else [])]
        rows: list[dict[str, Any]]
        if args.real_from is not None:
            real_dir = args.real_from / "runs" / f"{sched}_real"
            summary = json.loads((real_dir / "summary.json").read_text())
            rows = cast(list[dict[str, Any]],
                        pd.read_parquet(real_dir / "step_shapes.parquet").to_dict("records"))
        else:
            summary, rows = run([*base, *extra, "executor=real", *timer], real_dir,
                                record=True)
            pd.DataFrame(rows).to_parquet(real_dir / "step_shapes.parquet")
            write_outputs(real_dir)
        summaries[(sched, "real")] = summary
        shapes[sched] = rows
        replay = outputs_file(real_dir, out / "runs" / f"{sched}_real")
        for kind, prof, model in (("sim", args.profile, cost),
                                  ("sim_baseline", args.baseline_profile, baseline)):
            if prof is None:
                continue
            summaries[(sched, kind)], _ = run(
                [*base, *extra, "executor=sim", f"executor.cost_model={args.cost_model}",
                 f"executor.profile={prof}",
                 f"workload.output_tokens={replay}"],
                out / "runs" / f"{sched}_{kind}")
            errors.append({"scheduler": sched, "profile": prof, **step_errors(rows, model)})
    err = pd.DataFrame(errors)
    err.to_csv(out / "step_error.csv", index=False, float_format="%.2f")
    comp = []
    for sched in args.schedulers:
        real, sim = summaries[(sched, "real")], summaries[(sched, "sim")]
        bsim = summaries.get((sched, "sim_baseline"))
        for key, label in STATS:
            row = {"scheduler": sched, "statistic": label, "real": real.get(key),
                   "sim": sim.get(key), "rel_error_pct": pct(sim.get(key), real.get(key))}
            if bsim is not None:
                row |= {"sim_baseline": bsim.get(key),
                        "baseline_rel_error_pct": pct(bsim.get(key), real.get(key))}
            comp.append(row)
    comp_df = pd.DataFrame(comp)
    comp_df.to_csv(out / "comparison.csv", index=False, float_format="%.4g")
    if baseline is None:
        lines = ["| scheduler | statistic | real | sim | sim vs real |", "|---|---|---|---|---|"]
    else:
        lines = [f"sim: `{args.profile}`; baseline: `{args.baseline_profile}`", "",
                 "| scheduler | statistic | real | sim | sim vs real | baseline sim | "
                 "baseline vs real |", "|---|---|---|---|---|---|---|"]
    for r in comp:
        lines.append(f"| {r['scheduler']} | {r['statistic']} | {fmt(r['real'])} | "
                     f"{fmt(r['sim'])} | {fmt(r['rel_error_pct'])} % |"
                     + (f" {fmt(r['sim_baseline'])} | {fmt(r['baseline_rel_error_pct'])} % |"
                        if baseline is not None else ""))
    lines += ["", "Step time, profile prediction against the real run's measured steps "
              "(absolute percentage error):", "",
              "| scheduler | profile | steps | median | p90 | decode steps: median / p90 | "
              "steps with prefill: median / p90 | sum predicted / sum measured |",
              "|---|---|---|---|---|---|---|---|"]
    for e in errors:
        lines.append(f"| {e['scheduler']} | {Path(e['profile']).name} | {e['all_steps']} | "
                     f"{e['all_median_ape_pct']:.1f} % "
                     f"| {e['all_p90_ape_pct']:.1f} % | {e['decode_median_ape_pct']:.1f} / "
                     f"{e['decode_p90_ape_pct']:.1f} % ({e['decode_steps']}) | "
                     f"{e['prefill_median_ape_pct']:.1f} / {e['prefill_p90_ape_pct']:.1f} % "
                     f"({e['prefill_steps']}) | {e['sum_pred_over_real']:.3f} |")
    (out / "comparison.md").write_text("\n".join(lines) + "\n")
    q = ["| question | " + " | ".join(f"{s} real | {s} sim" for s in args.schedulers) + " |",
         "|---|" + "---|---|" * len(args.schedulers)]
    for key, label in QUESTIONS:
        cells = []
        for s in args.schedulers:
            cells += [fmt(summaries[(s, "real")].get(key)), fmt(summaries[(s, "sim")].get(key))]
        q.append(f"| {label} | " + " | ".join(cells) + " |")
    (out / "questions.md").write_text("\n".join(q) + "\n")
    figures(out, shapes, cost, args.real_from)
    study = {
        "command": "python scripts/real_vs_sim.py " + " ".join(
            sys.argv[1:] if argv is None else argv),
        "overrides": base, "token_budget": args.token_budget, "sglang_overrides": args.sglang,
        "profile": args.profile,
        "baseline_profile": args.baseline_profile,
        "real_from": str(args.real_from) if args.real_from else None,
        "cost_model": args.cost_model, "timer": args.timer,
        "timer_repeats": args.timer_repeats,
        "timer_prefill_repeats": args.timer_prefill_repeats, "schedulers": args.schedulers,
        "load_average_at_end": list(__import__("os").getloadavg()),
        "threads": args.threads, "wall_s": round(time.perf_counter() - t_start, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "machine": {"cpu": _cpu(), "cpu_count": __import__("os").cpu_count(),
                    "platform": platform.platform(), "torch": torch.__version__},
    }
    (out / "study.json").write_text(json.dumps(study, indent=1) + "\n")
    print((out / "comparison.md").read_text())
    print((out / "questions.md").read_text())
    print(f"wall {study['wall_s']} s, peak RSS {study['peak_rss_mib']} MiB")
    return 0


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    sys.exit(main())
