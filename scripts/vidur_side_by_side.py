#!/usr/bin/env python3
"""Vidur 0.0.26 and our schedulers side by side on the bench_vs_vidur workload (issue 27, item 7).

    SCHEDBENCH_TRACE_DIR=../shared/data/traces python scripts/vidur_side_by_side.py \
        [--schedulers vllm,sglang] [--out /tmp/vidur_side_by_side] \
        [--vidur-script scripts/vidur_offline/run_vidur.sh | --vidur-run DIR | --no-vidur] \
        [--reuse] [--report results/bench_vs_vidur]

The work is scripts/bench_vs_vidur.py's (19,366 Azure conv pairs clipped and shuffled as Vidur
does, Poisson 5.5 req/s, Llama-2-7B on an A100-80GB, 1,024 blocks of 16 tokens, batch cap 128).
Ours runs with `executor.cost_model=measured` (step times from Vidur's own A100 Llama-2-7B
per-operator profiles, engines/measured_cost.py); Vidur runs through
scripts/vidur_offline/run_vidur.sh (set up once by setup.sh) with its per-batch metrics kept
(`--metrics_config_keep_individual_batch_metrics`), or `--vidur-run` reads a finished Vidur
output folder. Written to --report: side_by_side.md (the command at its top), side_by_side.csv
(the quantiles per system and metric) and side_by_side.png (TTFT and E2E CDFs, step-time
distribution, evictions).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_vs_vidur as bench

ROOT = Path(__file__).resolve().parents[1]
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9, 0.99)
# Vidur's column names (vidur/metrics/constants.py)
VIDUR_REQUEST_ID, VIDUR_BATCH_ID = "Request Id", "Batch Id"
VIDUR_TTFT, VIDUR_E2E = "prefill_e2e_time", "request_e2e_time"
VIDUR_RESTARTS, VIDUR_BATCH_TIME = "request_num_restarts", "batch_execution_time"
VIDUR_BATCH_SIZE, VIDUR_BATCH_TOKENS = "batch_size", "batch_num_tokens"


@dataclass
class RunRecords:
    """One system's run: per-request latencies (s), per-step times (s) and evictions."""

    name: str
    ttft_s: np.ndarray
    e2e_s: np.ndarray
    step_s: np.ndarray
    step_tokens: np.ndarray
    evictions: int          # eviction events (our preemptions, Vidur's restarts)
    evicted_requests: int   # requests evicted at least once
    max_evictions_per_request: int
    incomplete: int         # requests without a finish in the records


def _column(rows: list[dict[str, str]], name: str, path: Path) -> np.ndarray:
    try:
        return np.array([float(r[name]) if r[name] != "" else np.nan for r in rows])
    except KeyError:
        raise ValueError(f"{path}: no column {name!r} (columns: {sorted(rows[0])})") from None


def _read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows


def vidur_run_dir(path: Path) -> Path:
    """The folder of one Vidur run: `path` itself or its one timestamped subfolder
    (vidur.main writes to <metrics_config_output_dir>/<timestamp>/) holding
    request_metrics.csv."""
    if (path / "request_metrics.csv").is_file():
        return path
    found = sorted(p.parent for p in path.glob("*/request_metrics.csv"))
    if len(found) != 1:
        raise ValueError(f"--vidur-run {path}: expected one request_metrics.csv in it or in one "
                         f"subfolder, found {len(found)}")
    return found[0]


def read_vidur(path: Path) -> RunRecords:
    """Vidur's request_metrics.csv and batch_metrics.csv (the latter needs
    --metrics_config_keep_individual_batch_metrics) as RunRecords."""
    run = vidur_run_dir(path)
    req_path, batch_path = run / "request_metrics.csv", run / "batch_metrics.csv"
    if not batch_path.is_file():
        raise ValueError(f"{batch_path}: missing (run Vidur with "
                         "--metrics_config_keep_individual_batch_metrics)")
    req, batch = _read_csv(req_path), _read_csv(batch_path)
    ttft = _column(req, VIDUR_TTFT, req_path)
    e2e = _column(req, VIDUR_E2E, req_path)
    restarts = _column(req, VIDUR_RESTARTS, req_path).astype(int)
    return RunRecords(
        name="vidur (vllm-like)", ttft_s=ttft, e2e_s=e2e,
        step_s=_column(batch, VIDUR_BATCH_TIME, batch_path),
        step_tokens=_column(batch, VIDUR_BATCH_TOKENS, batch_path),
        evictions=int(restarts.sum()), evicted_requests=int((restarts > 0).sum()),
        max_evictions_per_request=int(restarts.max()),
        incomplete=int(np.isnan(e2e).sum()))


def read_ours(job_dir: Path, name: str) -> RunRecords:
    """Our job folder (requests.parquet, steps.parquet, summary.json) as RunRecords."""
    import pyarrow.parquet as pq

    req = pq.read_table(job_dir / "requests.parquet",
                        columns=["arrival_time", "first_token_time", "finish_time",
                                 "num_preemptions"]).to_pydict()
    steps = pq.read_table(job_dir / "steps.parquet",
                          columns=["duration_s", "num_tokens"]).to_pydict()
    s = json.loads((job_dir / "summary.json").read_text())

    def arr(xs: list[float | None]) -> np.ndarray:
        return np.array([np.nan if x is None else x for x in xs], dtype=float)

    arrival = arr(req["arrival_time"])
    pre = np.array(req["num_preemptions"], dtype=int)
    return RunRecords(
        name=name, ttft_s=arr(req["first_token_time"]) - arrival,
        e2e_s=arr(req["finish_time"]) - arrival, step_s=arr(steps["duration_s"]),
        step_tokens=arr(steps["num_tokens"]), evictions=int(s["num_preemptions"]),
        evicted_requests=int((pre > 0).sum()), max_evictions_per_request=int(pre.max()),
        incomplete=int(np.isnan(arr(req["finish_time"])).sum()))


def run_ours(scheduler: str, pairs: Path, job_dir: Path, reuse: bool,
             overrides: tuple[str, ...] = ()) -> None:
    """`python -m experiments.run` as bench_vs_vidur runs it, with the measured profile (and
    any further Hydra overrides)."""
    if reuse and (job_dir / "summary.json").is_file():
        return
    cmd = bench.our_command(scheduler, pairs, job_dir, None)
    cmd.insert(cmd.index("executor=sim") + 1, "executor.cost_model=measured")
    cmd += list(overrides)
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


def quantile_rows(runs: list[RunRecords]) -> list[dict[str, object]]:
    """One CSV row per (system, metric): count, mean and the QUANTILES (seconds)."""
    rows: list[dict[str, object]] = []
    for r in runs:
        for metric, values in (("ttft_s", r.ttft_s), ("e2e_s", r.e2e_s),
                               ("decode_s", r.e2e_s - r.ttft_s), ("step_s", r.step_s)):
            v = values[~np.isnan(values)]
            row: dict[str, object] = {"system": r.name, "metric": metric, "count": len(v),
                                      "mean": float(v.mean())}
            row.update({f"p{round(q * 100)}": float(np.quantile(v, q)) for q in QUANTILES})
            rows.append(row)
    return rows


MAIN = ("vidur (vllm-like)", "ours vllm", "ours sglang")
COLORS = {"vidur (vllm-like)": "#222222", "ours vllm": "#1f77b4", "ours sglang": "#d62728"}
STYLES = {"vidur (vllm-like)": "--", "ours vllm": "-", "ours sglang": "-."}


def _binned_median(tokens: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Median of `values` per power-of-two bin of `tokens` (bins with at least 20 steps)."""
    edges = 2.0 ** np.arange(0, 13.5, 0.5)
    idx = np.digitize(tokens, edges)
    xs, ys = [], []
    for b in np.unique(idx):
        sel = idx == b
        if sel.sum() >= 20:
            xs.append(float(np.median(tokens[sel])))
            ys.append(float(np.median(values[sel])))
    return np.array(xs), np.array(ys)


def write_figure(runs: list[RunRecords], path: Path) -> None:
    """Six panels: TTFT, E2E and decode-phase (E2E - TTFT) CDFs, step-time CDF, step time
    against tokens per step, and evictions (every run, variants included)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 11, "axes.titlesize": 11})
    main_runs = [r for r in runs if r.name in MAIN]
    fig, axes = plt.subplots(2, 3, figsize=(14, 8.2))
    cdfs = (("TTFT (s)", lambda r: r.ttft_s, False, "TTFT"),
            ("E2E latency (s)", lambda r: r.e2e_s, False, "E2E latency"),
            ("E2E - TTFT (s)", lambda r: r.e2e_s - r.ttft_s, True, "decode phase (E2E - TTFT)"),
            ("step time (ms)", lambda r: r.step_s * 1e3, True, "step time"))
    for ax, (label, get, log, title) in zip(axes.flat, cdfs, strict=False):
        for r in main_runs:
            v = get(r)
            v = np.sort(v[~np.isnan(v)])
            ax.plot(v, np.arange(1, len(v) + 1) / len(v), STYLES[r.name], color=COLORS[r.name],
                    label=r.name, lw=1.8)
        ax.set_xlabel(label)
        ax.set_ylabel("CDF")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        if log:
            ax.set_xscale("log")
    axes[0, 0].legend(loc="lower right", frameon=False)
    ax = axes[1, 1]
    for r in main_runs:
        x, y = _binned_median(r.step_tokens, r.step_s * 1e3)
        ax.plot(x, y, STYLES[r.name], marker="o", ms=3, color=COLORS[r.name], label=r.name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("tokens in the step")
    ax.set_ylabel("median step time (ms)")
    ax.set_title("step time by step size")
    ax.grid(alpha=0.3, which="both")
    ax = axes[1, 2]
    x = np.arange(len(runs))
    ev = [r.evictions for r in runs]
    b1 = ax.bar(x - 0.2, ev, 0.4, color="#555555", label="evictions")
    ax.bar(x + 0.2, [r.evicted_requests for r in runs], 0.4, color="#bbbbbb",
                label="requests evicted")
    ax.bar_label(b1, labels=[f"{e:,}" for e in ev], fontsize=8, rotation=90, padding=2)
    ax.set_xticks(x, [r.name.replace("vidur (vllm-like)", "vidur").replace("ours ", "")
                      .replace(" ", "\n") for r in runs], fontsize=9)
    ax.set_ylim(0, max([*ev, 1]) * 1.35)
    ax.legend(frameon=False, loc="upper right", fontsize=9)
    ax.set_title("evictions (Vidur restarts, our preemptions)")
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)


def _fmt(x: float) -> str:
    return f"{x:,.3f}" if x < 10 else f"{x:,.1f}"


def write_report(runs: list[RunRecords], rows: list[dict[str, object]], report: Path,
                 command: str, explanation: str) -> None:
    """side_by_side.md: the command, the quantile table, the eviction table, the figure and
    the explanation (a Markdown file passed in: the reading of both schedulers' code)."""
    lines = ["# Vidur and ours side by side on the bench_vs_vidur workload", "", "```",
             command, "```", "",
             "From scratch: set Vidur up once (`VIDUR_MIRROR=<bare git mirror of microsoft/vidur> "
             "scripts/vidur_offline/setup.sh`), then the same command without `--reuse` and "
             "`--vidur-run` runs Vidur through scripts/vidur_offline/run_vidur.sh with "
             "`--metrics_config_keep_individual_batch_metrics` (about 5 minutes here, its "
             "random forests trained on the first run) and our runs (about 3 minutes each).", "",
             "Ours: `executor.cost_model=measured` (Vidur's A100 Llama-2-7B per-operator "
             "profiles, interpolated per operator by engines/measured_cost.py, plus 2 ms of CPU "
             "time per step); Vidur 0.0.26: its random forests trained on the same profiles "
             "(scripts/vidur_offline); its step time is the layers' only (vidur/entities/"
             "execution_time.py: `total_time` is `model_time`, no embedding, LM head or CPU "
             "time). Times in seconds unless marked.", "",
             "Setting: Llama-2-7B on A100-80GB; the synchronous loops (vLLM "
             "`async_scheduling=false`, SGLang `disable_overlap_schedule=true`); the bench's "
             f"KV pool, {bench.KV_TOKENS:,} token slots ({bench.KV_TOKENS // bench.PAGE:,} "
             f"blocks of {bench.PAGE}), for "
             "every system; one run per system: both simulators are deterministic on a given "
             "workload and no realisations were drawn, so there are no intervals; n is the "
             "count behind each row.", "",
             "| system | metric | n | mean | p10 | p25 | p50 | p75 | p90 | p99 |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        scale = 1e3 if row["metric"] == "step_s" else 1.0
        unit = {"ttft_s": "TTFT (s)", "e2e_s": "E2E (s)", "decode_s": "E2E - TTFT (s)",
                "step_s": "step (ms)"}[str(row["metric"])]
        vals = " | ".join(_fmt(float(row[k]) * scale) for k in  # type: ignore[arg-type]
                          ("mean", "p10", "p25", "p50", "p75", "p90", "p99"))
        lines.append(f"| {row['system']} | {unit} | {row['count']:,} | {vals} |")
    lines += ["", "| system | steps | tokens per step (mean) | evictions | requests evicted | "
              "max per request | unfinished |", "|---|---|---|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r.name} | {len(r.step_s):,} | {np.nanmean(r.step_tokens):,.1f} | "
                     f"{r.evictions:,} | {r.evicted_requests:,} | "
                     f"{r.max_evictions_per_request} | {r.incomplete} |")
    lines += ["", "![side by side](side_by_side.png)", "", explanation.rstrip(), ""]
    (report / "side_by_side.md").write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--schedulers", default="vllm,sglang")
    ap.add_argument("--out", default="/tmp/vidur_side_by_side", help="workload and job folders")
    ap.add_argument("--vidur-script", default=str(ROOT / "scripts/vidur_offline/run_vidur.sh"))
    ap.add_argument("--vidur-run", default=None, help="a finished Vidur output folder to read")
    ap.add_argument("--no-vidur", action="store_true", help="ours only")
    ap.add_argument("--variant", action="append", default=[],
                    help="LABEL:OVERRIDE[,OVERRIDE...]: also our vLLM with these Hydra overrides, "
                         "named `ours vllm LABEL` (e.g. wm1:scheduler.watermark=0.01)")
    ap.add_argument("--reuse", action="store_true", help="keep job folders already written")
    ap.add_argument("--report", default=str(ROOT / "results/bench_vs_vidur"))
    ap.add_argument("--explanation", default=str(ROOT / "results/bench_vs_vidur/"
                                                 "side_by_side_evictions.md"),
                    help="Markdown appended to the report (the eviction explanation)")
    args = ap.parse_args(argv)
    out = Path(args.out).resolve()
    report = Path(args.report).resolve()
    report.mkdir(parents=True, exist_ok=True)
    pairs, vidur_csv, n = bench.write_workload(out, None)
    runs: list[RunRecords] = []
    if not args.no_vidur:
        vdir = Path(args.vidur_run) if args.vidur_run else out / "vidur"
        if not args.vidur_run and not (args.reuse and any(vdir.glob("*/batch_metrics.csv"))):
            subprocess.run([args.vidur_script, str(vdir), str(vidur_csv), str(n),
                            "--metrics_config_keep_individual_batch_metrics"], cwd=out,
                           check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                           stdout=subprocess.DEVNULL)
        runs.append(read_vidur(vdir))
    for s in (x for x in args.schedulers.split(",") if x):
        run_ours(s, pairs, out / f"ours_{s}", args.reuse)
        runs.append(read_ours(out / f"ours_{s}", f"ours {s}"))
    for v in args.variant:
        label, sep, overrides = v.partition(":")
        if not sep or not label or not overrides:
            ap.error(f"--variant {v!r}: expected LABEL:OVERRIDE[,OVERRIDE...]")
        run_ours("vllm", pairs, out / f"ours_vllm_{label}", args.reuse,
                 tuple(overrides.split(",")))
        runs.append(read_ours(out / f"ours_vllm_{label}", f"ours vllm {label}"))
    rows = quantile_rows(runs)
    with open(report / "side_by_side.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    write_figure(runs, report / "side_by_side.png")
    expl = Path(args.explanation)
    command = "SCHEDBENCH_TRACE_DIR=../shared/data/traces python scripts/vidur_side_by_side.py " \
        + " ".join(a for a in (argv if argv is not None else sys.argv[1:]))
    write_report(runs, rows, report, command.rstrip(),
                 expl.read_text() if expl.is_file() else "")
    for r in runs:
        print(f"{r.name}: steps {len(r.step_s):,}, evictions {r.evictions:,} "
              f"({r.evicted_requests:,} requests), median TTFT {np.nanmedian(r.ttft_s):.2f} s, "
              f"median E2E {np.nanmedian(r.e2e_s):.2f} s, median step "
              f"{np.nanmedian(r.step_s) * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
