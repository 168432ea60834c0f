"""Two sweeps side by side: `python -m experiments.report A B [--out DIR]`.

Jobs are matched by their parameters: the scheduler and every parameter that either sweep
varies (a job of A and one of B match when all of these are equal). Written into `--out`
(default: `compare_<A>_vs_<B>` in the current folder):
- `compare.csv` / `compare.md`: one row per matched pair, the parameters, then for each
  metric of `COMPARE_METRICS` its value in A, in B and the ratio B / A (in compare.md as a
  ratio, `1.53x`, whatever the metric's own format); above the table, what differs between
  A and B (`differences`: config values of the matched jobs, git commit, core); jobs
  without a match are listed under the table;
- figures: the eviction metrics of both sweeps against the load parameter, colour per
  scheduler, a line style per sweep (`evictions_vs_<x>_<A>_vs_<B>`), and the same for the
  median and p99 E2E latency (`e2el_vs_<x>_<A>_vs_<B>`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from experiments.report.tables import (
    Job,
    comparison_frame,
    load_sweep,
    markdown,
    pick_load_param,
    varied_params,
)
from experiments.results.sinks import write_text

COMPARE_METRICS: tuple[str, ...] = (
    "completed", "request_throughput", "output_throughput", "median_ttft_ms", "p99_ttft_ms",
    "median_tpot_ms", "median_e2el_ms", "p99_e2el_ms", "num_preemptions",
    "preempted_request_share", "recomputed_token_share", "median_e2el_victim_ms",
)


@dataclass(frozen=True, slots=True)
class Pairing:
    """The matched jobs of two sweeps: the key parameters, the pairs and the leftovers."""

    params: list[str]
    pairs: list[tuple[Job, Job]]
    only_a: list[Job]
    only_b: list[Job]


def _key(job: Job, params: Sequence[str]) -> tuple[str, ...]:
    return (job.scheduler, *[str(job.overrides.get(p, "-")) for p in params])


def match_jobs(a: Sequence[Job], b: Sequence[Job]) -> Pairing:
    """Pair the jobs of `a` and `b` with the same scheduler and the same values of every
    parameter varied in either sweep."""
    params = [p for p in dict.fromkeys([*varied_params(a), *varied_params(b)])
              if p != "scheduler"]
    index_b: dict[tuple[str, ...], Job] = {}
    for j in b:
        index_b.setdefault(_key(j, params), j)
    pairs, only_a, used = [], [], set()
    for j in a:
        k = _key(j, params)
        if k in index_b and k not in used:
            pairs.append((j, index_b[k]))
            used.add(k)
        else:
            only_a.append(j)
    only_b = [j for j in b if _key(j, params) not in used]
    return Pairing(params, pairs, only_a, only_b)


def ratio_column(metric: str, labels: tuple[str, str]) -> str:
    """The column of `metric`'s ratio B / A in the comparison table."""
    return f"{metric} [{labels[1]}/{labels[0]}]"


# Config keys that change neither the results nor what they mean: never called a difference.
NOT_COMPARED = ("hydra", "logger", "progress", "resume", "on_error", "check_invariants")
# What ran, from summary.json: the code and the core that compiled it.
RUN_FIELDS = ("git_commit", "git_dirty", "core")


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, Mapping):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def job_settings(job: Job) -> dict[str, Any]:
    """What a job ran with: its config (`.hydra/config.yaml`, flattened; none of
    `NOT_COMPARED`) and the `RUN_FIELDS` of its summary."""
    path = job.path / ".hydra" / "config.yaml"
    cfg = yaml.safe_load(path.read_text()) if path.is_file() else None
    flat = _flatten(cfg) if isinstance(cfg, Mapping) else {}
    out = {k: v for k, v in flat.items() if k.split(".")[0] not in NOT_COMPARED}
    out.update({k: job.summary.get(k) for k in RUN_FIELDS})
    return out


def _shown(values: set[str]) -> str:
    return " / ".join(sorted(values))


def differences(pairing: Pairing) -> list[str]:
    """What differs between the matched jobs of A and B, one line per setting
    (`job_settings`; the matching parameters excepted): `key`: its values in A, in B."""
    seen: dict[str, tuple[set[str], set[str]]] = {}
    for ja, jb in pairing.pairs:
        sa, sb = job_settings(ja), job_settings(jb)
        for key in sorted(set(sa) | set(sb)):
            va, vb = sa.get(key, "(unset)"), sb.get(key, "(unset)")
            if key not in pairing.params and va != vb:
                a, b = seen.setdefault(key, (set(), set()))
                a.add(str(va))
                b.add(str(vb))
    return [f"`{k}`: {_shown(a)} in A, {_shown(b)} in B" for k, (a, b) in seen.items()]


def compare_frame(pairing: Pairing, labels: tuple[str, str],
                  metrics: Sequence[str] = COMPARE_METRICS) -> pd.DataFrame:
    """One row per pair: scheduler, the key parameters, each metric in A and B and B / A."""
    la, lb = labels
    rows = []
    for ja, jb in pairing.pairs:
        row: dict[str, object] = {"scheduler": ja.scheduler}
        row.update({p: ja.overrides.get(p) for p in pairing.params})
        row.update({f"job [{la}]": ja.num, f"job [{lb}]": jb.num})
        for m in metrics:
            va, vb = ja.summary.get(m), jb.summary.get(m)
            row[f"{m} [{la}]"], row[f"{m} [{lb}]"] = va, vb
            ok = isinstance(va, int | float) and isinstance(vb, int | float) and va != 0
            row[ratio_column(m, labels)] = float(vb) / float(va) if ok else np.nan  # type: ignore[arg-type]
        rows.append(row)
    df = pd.DataFrame(rows)
    for p in pairing.params:
        if p in df:
            num = pd.to_numeric(df[p], errors="coerce")
            if num.notna().all():
                df[p] = num
    return df


def write_comparison(sweep_a: str | Path, sweep_b: str | Path, out_dir: str | Path | None = None,
                     labels: tuple[str, str] | None = None, load_param: str | None = None,
                     figures: bool = True) -> dict[str, Path]:
    """Write the comparison of two sweeps (see the module docstring); returns the paths."""
    from experiments.report.figures import Metric, figure_stem, metric_vs_load, param_label

    a, b = load_sweep(sweep_a), load_sweep(sweep_b)
    la, lb = labels or (Path(sweep_a).name, Path(sweep_b).name)
    if la == lb:
        la, lb = f"A: {la}", f"B: {lb}"
    out = Path(out_dir) if out_dir else Path(f"compare_{Path(sweep_a).name}_vs_"
                                             f"{Path(sweep_b).name}")
    pairing = match_jobs(a, b)
    if not pairing.pairs:
        raise ValueError(f"report: no job of {sweep_a} matches one of {sweep_b} on scheduler "
                         f"and {', '.join(pairing.params) or 'no other parameter'}")
    table = compare_frame(pairing, (la, lb))
    head = (f"# {la} vs {lb}: {len(pairing.pairs)} matched jobs\n\n"
            f"A = `{sweep_a}`, B = `{sweep_b}`; matched on scheduler"
            + "".join(f", `{p}`" for p in pairing.params) + ".\n\n")
    diff = differences(pairing)
    head += ("What differs between A and B: " + "; ".join(diff) + ".\n\n" if diff else
             "Nothing differs between A and B: the same config values and code.\n\n")
    ratios = [ratio_column(m, (la, lb)) for m in COMPARE_METRICS]
    tail = ""
    for name, left in ((la, pairing.only_a), (lb, pairing.only_b)):
        if left:
            tail += f"\nUnmatched in {name}: jobs " + ", ".join(str(j.num) for j in left) + "\n"
    paths = {"compare.csv": write_text(table.to_csv(index=False), out / "compare.csv"),
             "compare.md": write_text(head + markdown(table, ratio_columns=ratios) + tail,
                                           out / "compare.md")}
    if figures:
        frames = []
        for label, jobs in ((la, [p[0] for p in pairing.pairs]), (lb, [p[1] for p in
                                                                       pairing.pairs])):
            f = comparison_frame(jobs, pairing.params)
            f["sweep"] = label
            frames.append(f)
        both = pd.concat(frames, ignore_index=True)
        x = load_param or pick_load_param(pairing.params, frames[0])
        series = ["scheduler", *[p for p in pairing.params if p != x], "sweep"]
        suffix = f"{_slug(la)}_vs_{_slug(lb)}"
        against = f" vs {param_label(x)}" if x else ""
        for stem, title, metrics in (
            ("evictions", "Evictions and recompute", [
                Metric("preemptions_per_1k_requests", "evictions per 1,000 requests"),
                Metric("recomputed_token_share", "prefill recomputed (%)", 100.0)]),
            ("e2el", "End-to-end latency", [
                Metric("median_e2el_ms", "median E2E latency (s)", 1e-3),
                Metric("p99_e2el_ms", "p99 E2E latency (s)", 1e-3)]),
        ):
            name = f"{figure_stem(stem, x)}_{suffix}"
            p = metric_vs_load(both, x, metrics, out / f"{name}.png", series,
                               title=f"{title}{against}: {la} vs {lb}")
            paths[f"{name}.png"] = p
            paths[f"{name}.pdf"] = p.with_suffix(".pdf")
    return paths


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text).strip("_") or "sweep"
