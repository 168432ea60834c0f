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
When either sweep varies `workload.realization` (README, "Statistics"), configs are matched
instead (the scheduler and every varied parameter but the realisation: all realisations of
a config together; `compare_realizations`): compare.csv / .md give per config and metric the
mean over each side's realisations with its 95 % bootstrap CI (and the victims it rests
on, flagged under 30), and the ratio of the means B / A with a 95 % CI by the bootstrap
over realisations of that ratio, paired by realisation when both sides ran the same
realisations; the figures draw the means with their CIs as error bars.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from experiments.report.realizations import (
    CI_NOTE,
    REALIZATION,
    VICTIM_COUNTS,
    aggregate,
    bootstrap_ci,
    ci_cell,
    ratio_ci,
)
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
    a, b = load_sweep(sweep_a), load_sweep(sweep_b)
    la, lb = labels or (Path(sweep_a).name, Path(sweep_b).name)
    if la == lb:
        la, lb = f"A: {la}", f"B: {lb}"
    out = Path(out_dir) if out_dir else Path(f"compare_{Path(sweep_a).name}_vs_"
                                             f"{Path(sweep_b).name}")
    if REALIZATION in varied_params(a) or REALIZATION in varied_params(b):
        return _write_realizations(a, b, (la, lb), (Path(sweep_a), Path(sweep_b)), out,
                                   load_param, figures)
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
        frames = [(label, comparison_frame(jobs, pairing.params)) for label, jobs in
                  ((la, [p[0] for p in pairing.pairs]), (lb, [p[1] for p in pairing.pairs]))]
        paths.update(_figures(frames, pairing.params, (la, lb), out, load_param))
    return paths


def _figures(frames: Sequence[tuple[str, pd.DataFrame]], params: Sequence[str],
             labels: tuple[str, str], out: Path, load_param: str | None) -> dict[str, Path]:
    """The comparison's two figures from `frames` (per sweep label: a row per job, or per
    config across realisations with CI columns): evictions and recompute, median and p99
    E2E latency, against the load parameter; a line style per sweep."""
    from experiments.report.figures import Metric, figure_stem, metric_vs_load, param_label

    la, lb = labels
    parts = []
    for label, f in frames:
        f = f.copy()
        f["sweep"] = label
        parts.append(f)
    both = pd.concat(parts, ignore_index=True)
    plain = [p for p in params if p != REALIZATION]
    x = load_param or pick_load_param(plain, parts[0])
    series = ["scheduler", *[p for p in plain if p != x], "sweep"]
    suffix = f"{_slug(la)}_vs_{_slug(lb)}"
    against = f" vs {param_label(x)}" if x else ""
    paths: dict[str, Path] = {}
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


FIGURE_METRICS = ("preemptions_per_1k_requests", "recomputed_token_share", "median_e2el_ms",
                  "p99_e2el_ms")


def _write_realizations(a: Sequence[Job], b: Sequence[Job], labels: tuple[str, str],
                        sweeps: tuple[Path, Path], out: Path, load_param: str | None,
                        figures: bool) -> dict[str, Path]:
    """`write_comparison` of two sweeps of which one varies the realisation: configs
    matched, means with CIs and ratios with CIs (`compare_realizations`)."""
    la, lb = labels
    params = [p for p in dict.fromkeys([*varied_params(a), *varied_params(b)])
              if p != "scheduler"]
    fa, fb = comparison_frame(a, params), comparison_frame(b, params)
    pairing = compare_realizations(fa, fb, params, labels)
    if pairing.table.empty:
        raise ValueError(f"report: no config of {sweeps[0]} matches one of {sweeps[1]} on "
                         f"scheduler and {', '.join(pairing.params) or 'no other parameter'}")
    jobs = pairing.table
    paired = bool(jobs["paired"].all())
    head = (f"# {la} vs {lb}: {len(jobs)} matched configs\n\n"
            f"A = `{sweeps[0]}`, B = `{sweeps[1]}`; configs matched on scheduler"
            + "".join(f", `{p}`" for p in pairing.params) + " (every realisation of a "
            "config together).\n\n")
    diff = differences(match_jobs(a, b))
    head += ("What differs between A and B: " + "; ".join(diff) + ".\n\n" if diff else
             "Nothing differs between A and B: the same config values and code.\n\n")
    head += (f"Each cell: {CI_NOTE}. {lb} / {la}: the ratio of the means, its 95 % CI by "
             "the percentile bootstrap over realisations of the ratio of means, "
             + ("paired by realisation (both sweeps ran the same realisations)" if paired
                else "A and B resampled separately where they ran different realisations")
             + ".\n\n")
    tail = ""
    for name, left in ((la, pairing.only_a), (lb, pairing.only_b)):
        if left:
            tail += f"\nUnmatched in {name}: configs " + "; ".join(left) + "\n"
    paths = {"compare.csv": write_text(jobs.to_csv(index=False), out / "compare.csv"),
             "compare.md": write_text(head + realizations_markdown(jobs, pairing.params, labels)
                                      + tail, out / "compare.md")}
    if figures:
        frames = [(label, aggregate(f, params, FIGURE_METRICS))
                  for label, f in ((la, fa), (lb, fb))]
        paths.update(_figures(frames, params, labels, out, load_param))
    return paths


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text).strip("_") or "sweep"


# --- across realisations --------------------------------------------------------------------

@dataclass(frozen=True)
class ConfigPairing:
    """Two sweeps with realisations matched per config (the scheduler and every varied
    parameter but the realisation): the comparison rows and the configs of one side only."""

    params: list[str]
    table: pd.DataFrame
    only_a: list[str]
    only_b: list[str]


def _configs(frame: pd.DataFrame, keys: Sequence[str]) -> dict[tuple[str, ...], pd.DataFrame]:
    ok = frame[frame["status"] == "ok"] if "status" in frame else frame
    return {tuple(str(v) for v in (k if isinstance(k, tuple) else (k,))): g
            for k, g in ok.groupby(list(keys), sort=False, dropna=False)}


def _runs(group: pd.DataFrame) -> list[str]:
    """A config's realisations, one per job (0 for a sweep that does not vary them)."""
    if REALIZATION not in group:
        return ["0"] * len(group)
    return ["0" if pd.isna(v) else str(v) for v in group[REALIZATION]]


def _by_realization(group: pd.DataFrame, metric: str) -> pd.Series:
    """A config's values of `metric`, one per realisation (index: the realisation)."""
    if metric not in group:
        return pd.Series(np.nan, index=_runs(group))
    values = pd.to_numeric(group[metric], errors="coerce").to_numpy(dtype=float)
    return pd.Series(values, index=_runs(group))


def _victims(group: pd.DataFrame, metric: str, values: pd.Series) -> int | None:
    """The victims a config's `metric` rests on: summed over its realisations with a value."""
    count = VICTIM_COUNTS.get(metric)
    if count is None or count not in group:
        return None
    n = pd.to_numeric(group[count], errors="coerce").to_numpy(dtype=float)
    return int(np.nansum(n[~np.isnan(values.to_numpy())]))


def compare_realizations(frame_a: pd.DataFrame, frame_b: pd.DataFrame,
                         params: Sequence[str], labels: tuple[str, str],
                         metrics: Sequence[str] = COMPARE_METRICS) -> ConfigPairing:
    """One row per config found in both comparison frames (a row per job each,
    `tables.comparison_frame`), configs being the scheduler and `params` but the
    realisation: the realisations of each side, whether they are the same ones (`paired`),
    then per metric its mean over A's realisations with the 95 % bootstrap CI
    (`<m> [A]`, `<m> [A] ci_lo`, `<m> [A] ci_hi`, and `<m> [A] n` victims for a victim
    statistic), the same for B, and the ratio of the means B / A with its CI
    (`realizations.ratio_ci`: paired by realisation when both sides ran the same ones)."""
    la, lb = labels
    keys = ["scheduler", *[p for p in params if p not in ("scheduler", REALIZATION)]]
    ga, gb = _configs(frame_a, keys), _configs(frame_b, keys)
    rows = []
    for key, a in ga.items():
        if key not in gb:
            continue
        b = gb[key]
        row: dict[str, Any] = {k: a.iloc[0][k] for k in keys}
        runs_a, runs_b = sorted(_runs(a)), sorted(_runs(b))
        paired = runs_a == runs_b and len(set(runs_a)) == len(runs_a)
        row.update({f"realizations [{la}]": len(a), f"realizations [{lb}]": len(b),
                    "paired": paired})
        for m in metrics:
            va, vb = _by_realization(a, m), _by_realization(b, m)
            for label, group, v in ((la, a, va), (lb, b, vb)):
                defined = v.dropna()
                row[f"{m} [{label}]"] = float(defined.mean()) if len(defined) else np.nan
                row[f"{m} [{label}] ci_lo"], row[f"{m} [{label}] ci_hi"] = bootstrap_ci(
                    v.to_numpy())
                n = _victims(group, m, v)
                if n is not None:
                    row[f"{m} [{label}] n"] = n
            if paired:
                order = list(runs_a)
                x, y = va.loc[order].to_numpy(), vb.loc[order].to_numpy()
            else:
                x, y = va.to_numpy(), vb.to_numpy()
            col = ratio_column(m, labels)
            row[col], row[f"{col} ci_lo"], row[f"{col} ci_hi"] = ratio_ci(x, y, paired)
        rows.append(row)
    table = pd.DataFrame(rows)
    for p in keys[1:]:
        if p in table:
            num = pd.to_numeric(table[p], errors="coerce")
            if num.notna().all():
                table[p] = num
    name = " ".join
    return ConfigPairing(keys[1:], table,
                         [name(k) for k in ga if k not in gb], [name(k) for k in gb if k not in ga])


def realizations_markdown(table: pd.DataFrame, params: Sequence[str], labels: tuple[str, str],
                          metrics: Sequence[str] = COMPARE_METRICS) -> str:
    """The per-config comparison as Markdown: a row per config and metric, A and B as
    `mean [lo, hi]` (and `n=` victims, `*` when fewer than 30), the ratio as `1.53x [1.20x,
    1.90x]`."""
    from experiments.report.tables import (
        METRIC_LABELS,
        SIDE_BY_SIDE,
        format_metric,
        format_ratio,
    )

    names = {**dict(SIDE_BY_SIDE), **METRIC_LABELS}

    la, lb = labels
    head = ["scheduler", *[p.split(".")[-1] for p in params], "metric", la, lb,
            f"{lb} / {la}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, row in table.iterrows():
        config = [str(row["scheduler"])] + [f"{row[p]:g}" if isinstance(row[p], float)
                                            else str(row[p]) for p in params]
        for m in metrics:
            cells = []
            for label in (la, lb):
                n = row.get(f"{m} [{label}] n")
                cells.append(ci_cell(format_metric(m, row[f"{m} [{label}]"]),
                                     format_metric(m, row[f"{m} [{label}] ci_lo"]),
                                     format_metric(m, row[f"{m} [{label}] ci_hi"]),
                                     None if n is None or pd.isna(n) else int(n)))
            col = ratio_column(m, labels)
            ratio = format_ratio(row[col])
            lo, hi = format_ratio(row[f"{col} ci_lo"]), format_ratio(row[f"{col} ci_hi"])
            cells.append(ratio if "n/a" in (lo, hi) else f"{ratio} [{lo}, {hi}]")
            label = names.get(m, m)
            lines.append("| " + " | ".join([*config, label, *cells]) + " |")
    return "\n".join(lines) + "\n"
