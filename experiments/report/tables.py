"""Sweep reports: the comparison table of a multirun, side by side, and its figures.

    python -m experiments.report SWEEP_DIR [--out DIR] [--load-param KEY] [--no-figures]
                                 [--title TEXT] [--columns METRIC,METRIC,...]
    python -m experiments.report SWEEP_A SWEEP_B [--out DIR] [--labels A,B]   # compare two

reads every job folder of a sweep (its verified result, `job_folder.verify_folder`: a job is
labelled by the overrides recorded in its own summary, never by `.hydra/overrides.yaml`, which
Hydra rewrites when a job starts; a folder without a complete, consistent result is listed as
`incomplete` or `inconsistent`; the parquet files for the figures) and writes into `--out`
(default: the sweep folder):
- `comparison.csv` / `comparison.md`: one row per job; the sweep's varied parameters, then
  the metrics of `COMPARISON_METRICS` (`vllm bench serve` names where they exist);
- `side_by_side.md`: the metrics of `SIDE_BY_SIDE` as rows, one column per job (labelled by
  its varied parameters: per scheduler in the default sweep);
- `by_scheduler.csv` / `.md` when the sweep varies the scheduler and something else: one row
  per setting of the other parameters, each metric once per scheduler (with realisations:
  the realisation is not a setting; each metric's mean with its CI and victims,
  `aggregated_pivot`);
- `aggregated.csv` / `.md` when the sweep varies `workload.realization`: a column per
  config, each statistic's mean over the realisations with its 95 % bootstrap CI and the
  victims it rests on (`experiments.report.realizations`);
- `headline.csv` / `.md` with `--columns`: just those metrics, per scheduler or per job;
- figures (PNG and PDF, `experiments.report.figures`) of the completed jobs (none when no job
  completed), named after what they plot against what:
  `latency_cdf_ttft_e2el`, `evictions_vs_<x>` and `victim_e2el_vs_<x>` (x: the load
  parameter, e.g. `evictions_vs_load`; `_by_scheduler` when nothing but the scheduler
  varies), `kv_use_vs_time`; with realisations drawn per config (`write_figures`);
- `report.json` last: the marker of the set (`experiments.report.report_set`): the job
  results it was made from, by hash, and the hash of each file. The old set is withdrawn
  before a new one is written; `python -m experiments.report SWEEP --check` says whether the
  set matches the job folders now.
Each table shows each job's status; when a job did not complete, the tables say
"N of M jobs failed" above them.
The Hydra callback `experiments.run.callbacks.ComparisonCallback` calls `write_report` when a
multirun ends.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from experiments.report.realizations import (
    CI_NOTE,
    REALIZATION,
    VICTIM_COUNTS,
    aggregate,
    ci_cell,
    few_victims,
)
from experiments.report.report_set import (
    REPORT_MARKER,
    commit_report,
    job_fingerprints,
    retract_report,
)
from experiments.results.job_folder import MARKER_FILE, job_folders, verify_folder
from experiments.results.sinks import REQUESTS_FILE, STEPS_FILE, SUMMARY_FILE, write_text

COMPARISON_METRICS: tuple[str, ...] = (
    "workload", "max_model_len", "kv_capacity_tokens", "offered", "offered_request_rate",
    "completed", "rejected", "rejected_too_long",
    "rejected_kv_pool", "rejected_other", "rejected_503", "rejection_rate_503", "aborted",
    "duration",
    "request_throughput", "output_throughput", "request_goodput", "slo_attainment",
    "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "median_itl_ms",
    "p99_itl_ms", "median_e2el_ms", "p99_e2el_ms",
    "num_preemptions", "preemptions_per_1k_requests", "preempted_request_share",
    "max_restarts_per_request", "recomputed_tokens", "recomputed_token_share",
    "prefix_cache_hit_rate", "prefix_recovery_on_resume", "prefix_recovery_readmissions",
    "num_victims", "median_e2el_victim_ms", "median_e2el_nonvictim_ms",
    "victim_e2el_median_ratio",
    "p99_e2el_victim_ms", "p99_e2el_nonvictim_ms", "mean_kv_utilization", "mean_batch_size",
    "num_swap_out", "num_swap_in", "num_swap_fallbacks", "swap_time_share",
)
# Victims compared fairly (experiments/report/victims.py), computed from the records when the
# report is made and joined to comparison.csv by job.
FAIR_METRICS: tuple[str, ...] = (
    "paired_victim_e2el_ratio", "paired_victims", "matched_victim_ratio", "matched_victims",
    "victim_queued_ms", "victim_evicted_ms", "victim_recompute_ms", "victim_prefill_ms",
    "victim_decode_ms", "nonvictim_queued_ms", "nonvictim_evicted_ms",
    "nonvictim_recompute_ms", "nonvictim_prefill_ms", "nonvictim_decode_ms",
)
# The table across realisations (experiments/report/realizations.py): metric, label.
AGGREGATED: tuple[tuple[str, str], ...] = (
    ("offered_request_rate", "Offered request rate (req/s)"),
    ("completed", "Completed (count)"),
    ("request_throughput", "Request throughput (req/s)"),
    ("output_throughput", "Output token throughput (tok/s)"),
    ("slo_attainment", "SLO attainment (%)"),
    ("median_ttft_ms", "Median TTFT (ms)"),
    ("p99_ttft_ms", "P99 TTFT (ms)"),
    ("median_tpot_ms", "Median TPOT (ms)"),
    ("median_e2el_ms", "Median E2EL (ms)"),
    ("p99_e2el_ms", "P99 E2EL (ms)"),
    ("num_preemptions", "Evictions (count)"),
    ("num_victims", "Victims (count)"),
    ("preempted_request_share", "Requests evicted (%)"),
    ("recomputed_token_share", "Prefill recomputed (%)"),
    ("median_e2el_victim_ms", "Victims' median E2EL (ms)"),
    ("median_e2el_nonvictim_ms", "Others' median E2EL (ms)"),
    ("victim_e2el_median_ratio", "Victims' / others' median E2EL, raw (ratio)"),
    ("matched_victim_ratio", "Victims' / length-matched others' E2EL per token (ratio)"),
    ("paired_victim_e2el_ratio", "Victims' E2EL / same request's, other scheduler (ratio)"),
    ("victim_queued_ms", "Victims' mean E2EL part: queued (ms)"),
    ("victim_evicted_ms", "Victims' mean E2EL part: evicted (ms)"),
    ("victim_recompute_ms", "Victims' mean E2EL part: recompute (ms)"),
    ("victim_prefill_ms", "Victims' mean E2EL part: prefill (ms)"),
    ("victim_decode_ms", "Victims' mean E2EL part: decode (ms)"),
    ("nonvictim_queued_ms", "Others' mean E2EL part: queued (ms)"),
    ("nonvictim_evicted_ms", "Others' mean E2EL part: evicted (ms)"),
    ("nonvictim_recompute_ms", "Others' mean E2EL part: recompute (ms)"),
    ("nonvictim_prefill_ms", "Others' mean E2EL part: prefill (ms)"),
    ("nonvictim_decode_ms", "Others' mean E2EL part: decode (ms)"),
)

SIDE_BY_SIDE: tuple[tuple[str, str], ...] = (
    ("max_model_len", "Context length, max_model_len (tokens)"),
    ("kv_capacity_tokens", "KV pool, kv_capacity_tokens (tokens)"),
    ("offered", "Requests offered (count)"),
    ("offered_request_rate", "Offered request rate (req/s)"),
    ("completed", "Completed (count)"),
    ("rejected_too_long", "Rejected: too long (count)"),
    ("rejected_kv_pool", "Rejected: larger than the KV pool (count)"),
    ("rejected_other", "Rejected: other reasons (count)"),
    ("rejected_503", "Rejected: 503, admission (count)"),
    ("aborted", "Aborted (count)"),
    ("request_throughput", "Request throughput (req/s)"),
    ("output_throughput", "Output token throughput (tok/s)"),
    ("median_ttft_ms", "Median TTFT (ms)"),
    ("p99_ttft_ms", "P99 TTFT (ms)"),
    ("median_tpot_ms", "Median TPOT (ms)"),
    ("p99_tpot_ms", "P99 TPOT (ms)"),
    ("median_e2el_ms", "Median E2EL (ms)"),
    ("p99_e2el_ms", "P99 E2EL (ms)"),
    ("num_preemptions", "Evictions (count)"),
    ("preempted_request_share", "Requests evicted (%)"),
    ("median_e2el_victim_ms", "Victims' median E2EL (ms)"),
    ("median_e2el_nonvictim_ms", "Others' median E2EL (ms)"),
    ("recomputed_token_share", "Prefill recomputed (%)"),
    ("step_time_source", "Step times from (source)"),
)
# One word for one thing, defined once under every table that uses it.
EVICTION_NOTE = ("evicted: preempted (vLLM) or retracted (SGLang), KV freed and the request "
                 "sent back to wait; victims: requests evicted at least once; n/a: no data "
                 "(e.g. no victims)")
# Metrics shown as percentages (their labels say %); the rest by unit, see `format_metric`.
RATIO_METRICS = frozenset({"victim_e2el_median_ratio", "matched_victim_ratio",
                           "paired_victim_e2el_ratio"})
PERCENT_METRICS = frozenset({
    "preempted_request_share", "recomputed_token_share", "rejection_rate_503",
    "slo_attainment", "prefix_cache_hit_rate", "prefix_recovery_on_resume",
    "swap_time_share", "mean_kv_utilization",
})


def format_metric(key: str, value: Any) -> str:
    """One number format per kind of metric: n/a for no data; shares in % with two
    decimals; latencies (ms) with one decimal; throughputs in tok/s without decimals and in
    req/s with two; counts as integers with thousands separators."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        return str(value)
    x = float(value)
    if key in PERCENT_METRICS:
        return f"{100.0 * x:.2f}"
    if key in RATIO_METRICS:
        return f"{x:.3g}"
    if key.endswith("_ms"):
        return f"{x:,.1f}"
    if key == "output_throughput" or key.endswith("tokens_per_s"):
        return f"{x:,.0f}"
    if "throughput" in key or "goodput" in key or key.endswith("request_rate"):
        return f"{x:,.2f}"
    if isinstance(value, int | np.integer) or x.is_integer():
        return f"{int(x):,}"
    return _fmt(x)


PIVOT_METRICS: tuple[str, ...] = (
    "num_preemptions", "preempted_request_share", "recomputed_token_share",
    "median_e2el_victim_ms", "p99_e2el_victim_ms", "median_e2el_ms", "p99_e2el_ms",
    "prefix_recovery_on_resume",
)

_LOAD_WORDS = ("rate", "scale", "load", "capacity")


@dataclass
class Job:
    """One job folder of a sweep."""

    path: Path
    num: int
    overrides: dict[str, str]
    summary: dict[str, Any]
    _requests: pa.Table | None = field(default=None, repr=False)
    _steps: pa.Table | None = field(default=None, repr=False)

    @property
    def scheduler(self) -> str:
        return str(self.summary.get("scheduler", self.overrides.get("scheduler", "?")))

    def requests(self) -> pa.Table:
        """The job's per-request records (read once)."""
        if self._requests is None:
            self._requests = pq.read_table(self.path / REQUESTS_FILE)
        return self._requests

    def steps(self) -> pa.Table:
        """The job's per-step records (read once)."""
        if self._steps is None:
            self._steps = pq.read_table(self.path / STEPS_FILE)
        return self._steps


def parse_overrides(items: Sequence[object]) -> dict[str, str]:
    """`key=value` override strings as a mapping (`+` / `~` prefixes dropped)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = str(item).partition("=")
        if sep:
            out[key.lstrip("+~")] = value
    return out


def load_job(job_dir: Path, num: int) -> Job:
    """One job folder: its verified summary, labelled by the overrides that summary records
    (the parameters of the run that produced these numbers); an unverified folder becomes a
    job of status `incomplete` / `inconsistent` with the reason as its error."""
    state = verify_folder(job_dir)
    if not state.verified:
        return Job(job_dir, num, {}, {"status": state.state, "error": state.reason})
    return Job(job_dir, num, parse_overrides(state.summary.get("overrides") or []),
               state.summary)


def load_sweep(sweep_dir: str | Path) -> list[Job]:
    """Every job folder under `sweep_dir` (one holding a summary, a marker, `.hydra/` or a
    lock file), by job number; `sweep_dir` alone when it is itself a job folder (a job cut
    off before its summary is listed `incomplete`)."""
    root = Path(sweep_dir)
    jobs: list[Job] = []
    for d in job_folders(root):
        try:
            num = int(d.name.split("_")[0])
        except ValueError:
            num = len(jobs)
        jobs.append(load_job(d, num))
    if not jobs:
        raise FileNotFoundError(f"{root}: no job folder (one with a {SUMMARY_FILE}, a "
                                f"{MARKER_FILE} or .hydra/)")
    return sorted(jobs, key=lambda j: j.num)


def failed_jobs_line(jobs: Sequence[Job]) -> str:
    """"N of M jobs failed" with the first one's error ('' when every job completed); jobs
    without a complete result count as failed, said so."""
    bad = [j for j in jobs if j.summary.get("status", "ok") != "ok"]
    if not bad:
        return ""
    unverified = sum(1 for j in bad if j.summary.get("status") != "failed")
    first = bad[0]
    why = " ".join(str(first.summary.get("error") or first.summary.get("status")).split())
    return (f"{len(bad)} of {len(jobs)} jobs failed"
            + (f" ({unverified} without a complete result)" if unverified else "")
            + f"; first: job {first.path.name}: {why}")


def verified(jobs: Sequence[Job]) -> list[Job]:
    """The jobs whose folder holds a verified result (ok or failed)."""
    return [j for j in jobs if j.summary.get("status", "ok") in ("ok", "failed")]


def varied_params(jobs: Sequence[Job]) -> list[str]:
    """Override keys whose value is not the same in every verified job, in first-seen
    order."""
    jobs = verified(jobs)
    keys: dict[str, None] = {}
    for j in jobs:
        keys.update(dict.fromkeys(j.overrides))
    return [k for k in keys if len({j.overrides.get(k) for j in jobs}) > 1]


def fixed_params(jobs: Sequence[Job]) -> dict[str, str]:
    """Override keys with the same value in every job."""
    varied = set(varied_params(jobs))
    jobs = verified(jobs)
    return {k: v for k, v in jobs[0].overrides.items() if k not in varied} if jobs else {}


def _label(job: Job, params: Sequence[str]) -> str:
    status = job.summary.get("status", "ok")
    if status not in ("ok", "failed"):  # no parameters of its own: name the folder
        return f"{job.path.name} ({status})"
    parts = [job.overrides.get(p, "-") if p == "scheduler" else
             f"{p.split('.')[-1]}={job.overrides.get(p, '-')}" for p in params]
    return " ".join(parts) or job.scheduler


def comparison_frame(jobs: Sequence[Job], params: Sequence[str] | None = None
                     ) -> pd.DataFrame:
    """One row per job: job number, the varied parameters, scheduler, status (and, when a
    job failed, its error), the metrics."""
    params = list(varied_params(jobs) if params is None else params)
    any_failed = any(j.summary.get("status", "ok") != "ok" for j in jobs)
    rows = []
    for j in jobs:
        row: dict[str, Any] = {"job": j.num}
        row.update({p: j.overrides.get(p) for p in params})
        row["scheduler"] = j.scheduler
        row["status"] = j.summary.get("status", "ok")
        if any_failed:
            row["error"] = j.summary.get("error")
        row.update({m: j.summary.get(m) for m in COMPARISON_METRICS if m not in params})
        rows.append(row)
    df = pd.DataFrame(rows)
    for p in params:
        num = pd.to_numeric(df[p], errors="coerce")
        if num[df[p].notna()].notna().all():  # unverified jobs have no parameters
            ints = all(str(v).lstrip("-").isdigit() for v in df[p].dropna())
            df[p] = num.astype("Int64") if ints and df[p].isna().any() else num
    for col in df.columns:  # counts stay integers beside rows without them (failed, ...)
        values = [r.get(col) for r in rows if r.get(col) is not None]
        if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            df[col] = df[col].astype("Int64")
    return df


def side_by_side(jobs: Sequence[Job], params: Sequence[str] | None = None,
                 rows: Sequence[tuple[str, str]] = SIDE_BY_SIDE) -> pd.DataFrame:
    """`rows` (metric, label; default `SIDE_BY_SIDE`) as rows, one column per job named by
    its varied parameters, each value formatted for its metric (`format_metric`)."""
    params = list(varied_params(jobs) if params is None else params)
    rows = list(rows)
    if any(j.summary.get("status", "ok") != "ok" for j in jobs):
        rows[:0] = [("status", "Status"), ("error", "Error")]
    data = {_label(j, params): [_with_victims(k, j.summary, format_metric(
        k, j.summary.get(k, "ok" if k == "status" else None))) for k, _ in rows] for j in jobs}
    return pd.DataFrame(data, index=[label for _, label in rows], dtype=object)


def _with_victims(metric: str, summary: dict[str, Any], cell: str) -> str:
    """A victim statistic's cell with the number of victims it rests on (`n=`), flagged
    when they are few (`realizations.FEW_VICTIMS`)."""
    n = summary.get(VICTIM_COUNTS.get(metric, ""))
    if not isinstance(n, int) or isinstance(n, bool):
        return cell
    return f"{cell} n={n}" + ("*" if few_victims(n) else "")


def _completed_ids(job: Job) -> frozenset[str] | None:
    """The ids of the requests `job` completed (finish reason stop or length); None when its
    records are missing (a failed job)."""
    path = job.path / REQUESTS_FILE
    if not path.is_file():
        return None
    t = pq.read_table(path, columns=["request_id", "finish_reason"])
    done = [rid for rid, why in zip(t.column("request_id").to_pylist(),
                                    t.column("finish_reason").to_pylist(), strict=True)
            if why in ("stop", "length")]
    return frozenset(done)


def completion_warnings(jobs: Sequence[Job], params: Sequence[str] | None = None
                        ) -> list[str]:
    """One warning per comparison (jobs that share every varied parameter but the
    scheduler) whose jobs completed different request sets, or were offered different
    numbers of requests: their latency columns then describe different requests."""
    params = list(varied_params(jobs) if params is None else params)
    if "scheduler" not in params:
        return []
    others = [p for p in params if p != "scheduler"]
    groups: dict[tuple[str | None, ...], list[Job]] = {}
    for j in jobs:
        if j.summary.get("status", "ok") == "ok":
            groups.setdefault(tuple(j.overrides.get(p) for p in others), []).append(j)
    out: list[str] = []
    for key, group in groups.items():
        if len(group) < 2:
            continue
        ids = [_completed_ids(j) for j in group]
        offered = {j.summary.get("offered", j.summary.get("num_requests")) for j in group}
        known = [i for i in ids if i is not None]
        same_ids = len(known) == len(group) and all(i == known[0] for i in known)
        if same_ids and len(offered) == 1:
            continue
        counts = ", ".join(f"{j.scheduler} {j.summary.get('completed')} of "
                           f"{j.summary.get('offered', j.summary.get('num_requests'))}"
                           for j in group)
        where = " ".join(f"{p.split('.')[-1]}={v}" for p, v in zip(others, key, strict=True))
        only = ""
        if len(known) == len(group):
            common = frozenset.intersection(*known)
            only = f"; {len(frozenset.union(*known) - common)} completed by only some"
        out.append(f"{where + ': ' if where else ''}the schedulers completed different "
                   f"requests ({counts} completed{only}): their columns describe different "
                   "request sets")
    return out


def _verified_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of jobs with a verified result (the others have no parameters)."""
    return frame[frame["status"].isin(["ok", "failed"])] if "status" in frame else frame


def scheduler_pivot(frame: pd.DataFrame, params: Sequence[str],
                    metrics: Sequence[str] = PIVOT_METRICS) -> pd.DataFrame | None:
    """One row per setting of the non-scheduler parameters, each metric per scheduler
    (`<metric>[<scheduler>]`), led by each job's `status` when a job did not complete; None
    unless the sweep varies the scheduler and more."""
    others = [p for p in params if p != "scheduler"]
    if "scheduler" not in params or not others:
        return None
    frame = _verified_rows(frame)
    if (frame["status"] != "ok").any():  # each job's status beside its numbers
        metrics = ["status", *[m for m in metrics if m != "status"]]
    scheds = list(dict.fromkeys(frame["scheduler"]))
    wide = frame.pivot_table(index=others, columns="scheduler", values=list(metrics),
                             aggfunc="first", dropna=False)
    order = [(m, s) for m in metrics for s in scheds if (m, s) in wide.columns]
    wide = wide[order]
    wide.columns = [f"{m}[{s}]" for m, s in order]
    for (m, _s), col in zip(order, list(wide.columns), strict=True):
        if pd.api.types.is_integer_dtype(frame[m]):
            wide[col] = wide[col].astype("Int64")  # pivoting made the counts floats
    return wide.reset_index()


def _fmt(v: Any) -> str:
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return "n/a"  # no value, or a statistic over no data
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int | np.integer):
        return str(int(v))
    if isinstance(v, float | np.floating):
        x = float(v)
        if x != 0 and abs(x) < 0.01:
            return f"{x:.2e}"
        if abs(x) < 10:
            return f"{x:.3f}"
        if abs(x) < 1000:
            return f"{x:.1f}"
        return f"{x:,.0f}"
    return str(v)


def _metric_of(column: str) -> str | None:
    """The summary metric a table column holds (`p99_e2el_ms[vllm]` -> `p99_e2el_ms`)."""
    base = column.partition("[")[0].strip()
    return base if base in COMPARISON_METRICS or base in PERCENT_METRICS else None


def _cell(column: str, v: Any) -> str:
    metric = _metric_of(column)
    if metric is not None:
        return format_metric(metric, v)
    if isinstance(v, float | np.floating) and math.isfinite(float(v)):
        return f"{float(v):g}"  # a parameter value: as given
    return _fmt(v)


def format_ratio(value: Any) -> str:
    """A ratio of two values of one metric (B / A): three significant digits and an `x`
    (1.535 -> `1.53x`, 0.0665 -> `0.0665x`), whatever the metric's own format; n/a for
    none."""
    if value is None or value is pd.NA or not isinstance(value, int | float | np.number):
        return "n/a"
    x = float(value)
    if not math.isfinite(x):
        return "n/a"
    return f"{x:,.0f}x" if abs(x) >= 1000 else f"{x:.3g}x"


def markdown(df: pd.DataFrame, index: bool = False,
             ratio_columns: Collection[str] = ()) -> str:
    """A GitHub Markdown table of `df`: metric columns formatted by `format_metric` (shares
    in %, said in the header), `ratio_columns` by `format_ratio`, other numbers as given,
    n/a for no data."""
    names = [str(c) for c in df.columns]
    ratios = set(ratio_columns)
    heads = [f"{c} (%)" if c not in ratios and _metric_of(c) in PERCENT_METRICS else c
             for c in names]
    cols = ([str(df.index.name or "")] if index else []) + heads
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for idx, row in df.iterrows():
        cells = ([str(idx)] if index else []) + [
            format_ratio(v) if c in ratios else _cell(c, v)
            for c, v in zip(names, row.tolist(), strict=True)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


TERMINAL_WIDTH = 100


def _column_blocks(widths: Sequence[int], first: int, width: int) -> list[list[int]]:
    """The columns in order, cut into blocks that each fit `width` beside the first
    column (`first` characters; two spaces between columns); a column wider than that
    gets a block of its own."""
    blocks: list[list[int]] = [[]]
    used = first
    for k, w in enumerate(widths):
        if blocks[-1] and used + 2 + w > width:
            blocks.append([])
            used = first
        blocks[-1].append(k)
        used += 2 + w
    return blocks


def _wrap_header(header: str, width: int) -> list[str]:
    """`header` in lines of at most `width` characters, cut at spaces (a longer word keeps
    its own line)."""
    lines: list[str] = []
    for word in header.split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def text_table(df: pd.DataFrame, width: int | None = TERMINAL_WIDTH) -> str:
    """`df` (metrics as rows) as an aligned plain-text table for the terminal. Wider than
    `width` characters, its column headers wrap at spaces (to the width of their values),
    and what is still too wide goes in blocks of columns one under the other, each
    beginning with the row names."""
    cols = [str(c) for c in df.columns]
    names = [str(i) for i in df.index]
    cells = [[_fmt(v) for v in row] for row in df.itertuples(index=False)]
    corner = str(df.index.name or "")
    w0 = max([len(n) for n in names] + [6, len(corner)])
    values = [max([len(r[k]) for r in cells] + [1]) for k in range(len(cols))]
    heads = [[c] for c in cols]
    if width and w0 + sum(2 + max(v, len(c)) for v, c in zip(values, cols, strict=True)) > width:
        heads = [_wrap_header(c, max(v, 12)) for c, v in zip(cols, values, strict=True)]
    widths = [max([v] + [len(h) for h in hs]) for v, hs in zip(values, heads, strict=True)]
    blocks = _column_blocks(widths, w0, width) if width else [list(range(len(cols)))]
    out: list[str] = []
    for block in blocks:
        depth = max(len(heads[k]) for k in block) if block else 1
        lines = [[""] * (depth - len(heads[k])) + heads[k] for k in block]
        head = [((corner if i == depth - 1 else "").ljust(w0) + "".join(
            "  " + lines[n][i].rjust(widths[k]) for n, k in enumerate(block))).rstrip()
            for i in range(depth)]
        out += [""] * bool(out) + head + ["-" * len(head[-1])]
        out += [n.ljust(w0) + "".join("  " + r[k].rjust(widths[k]) for k in block)
                for n, r in zip(names, cells, strict=True)]
    return "\n".join(out)


# Row labels of the side-by-side table for a study's other metrics (beyond `SIDE_BY_SIDE`).
METRIC_LABELS: dict[str, str] = {
    "preemptions_per_1k_requests": "Evictions per 1,000 requests",
    "max_restarts_per_request": "Most evictions of one request (count)",
    "recomputed_tokens": "Prefill recomputed (tokens)",
    "prefix_cache_hit_rate": "Prefix-cache hits at first admission (%)",
    "prefix_recovery_on_resume": "Prefix cache recovered on resume (%)",
    "prefix_recovery_readmissions": "Readmissions after an eviction (count)",
    "p99_e2el_victim_ms": "Victims' P99 E2EL (ms)",
    "p99_e2el_nonvictim_ms": "Others' P99 E2EL (ms)",
    "victim_e2el_median_ratio": "Victims' / others' median E2EL (ratio)",
    "request_goodput": "Request goodput (req/s)",
    "slo_attainment": "SLO attainment (%)",
    "num_swap_out": "Swap-outs (count)",
    "num_swap_fallbacks": "Swap fallbacks to recompute (count)",
    "swap_time_share": "Swap time (%)",
}
# Short column names of the terminal tables (a pivot's columns: `<scheduler> <name>`).
TERMINAL_LABELS: dict[str, str] = {
    "kv_capacity_tokens": "KV pool (tok)",
    "offered_request_rate": "offered (req/s)",
    "completed": "completed",
    "request_throughput": "req/s",
    "output_throughput": "tok/s",
    "request_goodput": "goodput (req/s)",
    "slo_attainment": "SLO met (%)",
    "median_ttft_ms": "TTFT p50 (ms)",
    "p99_ttft_ms": "TTFT p99 (ms)",
    "median_e2el_ms": "E2EL p50 (ms)",
    "p99_e2el_ms": "E2EL p99 (ms)",
    "num_preemptions": "evictions",
    "preemptions_per_1k_requests": "evictions/1k",
    "preempted_request_share": "evicted (%)",
    "max_restarts_per_request": "max restarts",
    "recomputed_tokens": "recomputed (tok)",
    "recomputed_token_share": "recomputed (%)",
    "prefix_cache_hit_rate": "hit, 1st admit (%)",
    "prefix_recovery_on_resume": "recovered (%)",
    "prefix_recovery_readmissions": "readmissions",
    "median_e2el_victim_ms": "victims p50 (ms)",
    "p99_e2el_victim_ms": "victims p99 (ms)",
    "median_e2el_nonvictim_ms": "others p50 (ms)",
    "p99_e2el_nonvictim_ms": "others p99 (ms)",
    "victim_e2el_median_ratio": "victims/others p50",
    "num_swap_out": "swap-outs",
    "num_swap_fallbacks": "swap fallbacks",
    "swap_time_share": "swap time (%)",
}
# What the terminal table shows of a large sweep when no study names its columns: evictions,
# and what victims and the other requests pay.
TERMINAL_PIVOT: tuple[str, ...] = (
    "num_preemptions", "preempted_request_share", "median_e2el_ms", "p99_e2el_ms",
    "median_e2el_victim_ms", "median_e2el_nonvictim_ms",
)
MAX_SIDE_BY_SIDE_COLUMNS = 6
# Settings printed above the terminal table: (metric, what it is, unit).
SETUP: tuple[tuple[str, str, str], ...] = (
    ("kv_capacity_tokens", "KV pool", "tokens"),
    ("offered", "requests offered", ""),
    ("offered_request_rate", "offered request rate", "req/s"),
)


def setup_line(jobs: Sequence[Job]) -> str:
    """The KV pool, the requests offered and their rate, over the jobs with a result: one
    value when all share it, else the range."""
    parts = []
    for key, what, unit in SETUP:
        values = [v for j in jobs if j.summary.get("status", "ok") == "ok"
                  and isinstance(v := j.summary.get(key), int | float)
                  and not (isinstance(v, float) and math.isnan(v))]
        if not values:
            continue
        lo, hi = format_metric(key, min(values)), format_metric(key, max(values))
        shown = (lo if lo == hi else f"{lo} to {hi}") + (f" {unit}" if unit else "")
        parts.append(f"{what}: {shown}" + ("" if lo == hi else " (by job)"))
    text = "; ".join(parts)
    return textwrap.fill(text[:1].upper() + text[1:], width=TERMINAL_WIDTH)


def terminal_summary(jobs: Sequence[Job], columns: Sequence[str] | None = None,
                     width: int = TERMINAL_WIDTH) -> str:
    """What the callback and `python -m experiments.report` print: the KV pool and the
    offered load (`setup_line`); the side-by-side table, or, for a sweep with more jobs
    than fit a terminal, one row per setting of the other parameters with the metrics
    `columns` (a study's headline; default `TERMINAL_PIVOT`) per scheduler; every table cut
    into blocks `width` characters wide; then what "evicted" means."""
    params = varied_params(jobs)
    warn = "".join(f"WARNING: {w}\n" for w in completion_warnings(jobs, params))
    setup = setup_line(jobs)
    metrics = list(columns or TERMINAL_PIVOT)
    if REALIZATION in params:
        table = aggregated_table(aggregated_frame(jobs, params), params)
        return (warn + (setup + "\n" if setup else "") + text_table(table, width) + "\n"
                + textwrap.fill(CI_NOTE + ". " + EVICTION_NOTE + ".", width=96))
    return (warn + (setup + "\n" if setup else "")
            + _terminal_table(jobs, params, metrics, width))


def with_fair_columns(frame: pd.DataFrame, fair: pd.DataFrame) -> pd.DataFrame:
    """`frame` (one row per job) with the fair victim comparisons of each job
    (`victims.fair_comparisons`), by job number."""
    if fair.empty:
        return frame
    return frame.merge(fair, on="job", how="left")


def aggregated_frame(jobs: Sequence[Job], params: Sequence[str],
                     fair: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per config across its realisations (`realizations.aggregate`) with the
    metrics of `AGGREGATED`."""
    from experiments.report.victims import fair_comparisons

    if fair is None:
        fair = fair_comparisons(jobs, params)[0]
    frame = with_fair_columns(comparison_frame(jobs, params), fair)
    return aggregate(frame, params, [m for m, _ in AGGREGATED])


def aggregated_table(agg: pd.DataFrame, params: Sequence[str],
                     rows: Sequence[tuple[str, str]] = AGGREGATED) -> pd.DataFrame:
    """`rows` (metric, label; default `AGGREGATED`) as rows, one column per config:
    `mean [lo, hi]` (and `n=` victims)."""
    keys = [p for p in params if p not in (REALIZATION, "scheduler")]
    data: dict[str, list[str]] = {}
    for _, row in agg.iterrows():
        label = " ".join([str(row["scheduler"])] + [
            f"{k.split('.')[-1]}={row[k]}" for k in keys]) + f" (x{row['n_realizations']})"
        cells = []
        for m, _ in rows:
            if m not in row:
                cells.append("n/a")
                continue
            n = row.get(f"{m}_n")
            cells.append(ci_cell(format_metric(m, row[m]),
                                 format_metric(m, row.get(f"{m}_ci_lo")),
                                 format_metric(m, row.get(f"{m}_ci_hi")),
                                 None if n is None or pd.isna(n) else int(n)))
        data[label] = cells
    return pd.DataFrame(data, index=[label for _, label in rows], dtype=object)


def aggregated_pivot(agg: pd.DataFrame, params: Sequence[str],
                     metrics: Sequence[str] = PIVOT_METRICS
                     ) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """`scheduler_pivot` across realisations: one row per setting of the other parameters
    (the realisation not among them), each metric per scheduler; as numbers (`<m>[<s>]`,
    `<m>_ci_lo[<s>]`, `<m>_ci_hi[<s>]`, `<m>_n[<s>]` victims) and as text (`<m>[<s>]`:
    `mean [lo, hi] n=`, flagged under 30 victims). None unless the sweep varies the
    scheduler and more."""
    others = [p for p in params if p not in ("scheduler", REALIZATION)]
    if "scheduler" not in params or not others or agg.empty:
        return None
    scheds = list(dict.fromkeys(agg["scheduler"]))
    numbers: list[dict[str, Any]] = []
    texts: list[dict[str, Any]] = []
    for key, group in agg.groupby(others, sort=False, dropna=False):
        setting = dict(zip(others, key if isinstance(key, tuple) else (key,), strict=True))
        num, text = dict(setting), dict(setting)
        for m in metrics:
            for sched in scheds:
                row = group[group["scheduler"] == sched]
                if row.empty or m not in row:
                    text[f"{m}[{sched}]"] = "n/a"
                    continue
                r = row.iloc[0]
                n = r.get(f"{m}_n")
                n = None if n is None or pd.isna(n) else int(n)
                for part in ("", "_ci_lo", "_ci_hi"):
                    num[f"{m}{part}[{sched}]"] = r.get(f"{m}{part}")
                if n is not None:
                    num[f"{m}_n[{sched}]"] = n
                text[f"{m}[{sched}]"] = ci_cell(format_metric(m, r[m]),
                                                format_metric(m, r.get(f"{m}_ci_lo")),
                                                format_metric(m, r.get(f"{m}_ci_hi")), n)
        numbers.append(num)
        texts.append(text)
    return pd.DataFrame(numbers), pd.DataFrame(texts, dtype=object)


def _terminal_table(jobs: Sequence[Job], params: Sequence[str], metrics: Sequence[str],
                    width: int) -> str:
    if len(jobs) <= MAX_SIDE_BY_SIDE_COLUMNS:
        rows = list(SIDE_BY_SIDE)
        rows += [(m, METRIC_LABELS.get(m, m)) for m in metrics if m not in dict(rows)]
        return text_table(side_by_side(jobs, params, rows), width) + "\n" + _note()
    frame = comparison_frame(jobs, params)
    rate = "offered_request_rate"
    pivot = scheduler_pivot(frame, params, list(dict.fromkeys([rate, *metrics])))
    if pivot is None:
        cols = ["job", *params, "status", "error", *metrics]
        table = frame[[c for c in cols if c in frame]].copy()
    else:
        table = _one_rate_column(pivot, rate)
    for col in table.columns:
        metric = _metric_of(str(col))
        if metric is not None and col not in params:
            table[col] = [format_metric(metric, v) for v in table[col]]
        elif col in params:
            table[col] = [f"{v:g}" if isinstance(v, float) else str(v) for v in table[col]]
    table.columns = [str(c).split(".")[-1] if c in params else _short(str(c))
                     for c in table.columns]
    table = table.set_index(table.columns[0])
    table.index.name = str(table.index.name).split(".")[-1]
    return text_table(table, width) + "\n" + _note()


def _one_rate_column(pivot: pd.DataFrame, rate: str) -> pd.DataFrame:
    """The pivot with the offered request rate once per row (the schedulers of a row replay
    the same arrivals), unless they were offered different rates; none when no job recorded
    it (summaries written before the metric existed)."""
    cols = [c for c in pivot.columns if str(c).startswith(f"{rate}[")]
    if cols and pivot[cols].isna().all().all():
        return pivot.drop(columns=cols)
    same = pivot[cols].nunique(axis=1, dropna=True).le(1).all() if cols else False
    if not same:
        return pivot
    first = pivot[cols].bfill(axis=1).iloc[:, 0]
    out = pivot.drop(columns=cols)
    out.insert(len(out.columns) - len([c for c in out.columns if "[" in str(c)]), rate, first)
    return out


def _note() -> str:
    return textwrap.fill(EVICTION_NOTE + ".", width=96)


def _short(col: str) -> str:
    metric, _, sched = col.partition("[")
    if sched:
        return f"{sched.rstrip(']')} {TERMINAL_LABELS.get(metric, metric)}"
    return TERMINAL_LABELS.get(col, col.split(".")[-1])


def pick_load_param(params: Sequence[str], frame: pd.DataFrame) -> str | None:
    """The varied numeric parameter that best reads as "load" (rate, scale, capacity)."""
    numeric = [p for p in params if p not in ("scheduler", REALIZATION)
               and pd.api.types.is_numeric_dtype(frame[p])]
    for word in _LOAD_WORDS:
        for p in numeric:
            if word in p.split(".")[-1]:
                return p
    return numeric[0] if numeric else None


def _busiest(frame: pd.DataFrame, x: str | None) -> Any:
    """The value of `x` at which the sweep evicts most (all jobs together; the largest value
    when nothing is evicted): where KV use over time says most."""
    if not x or x not in frame or frame[x].nunique() < 2:
        return None
    evictions = pd.to_numeric(frame["num_preemptions"], errors="coerce").fillna(0)
    total = evictions.groupby(frame[x]).sum()
    return total.idxmax() if total.max() > 0 else max(total.index)


def kv_title_of(clock: str, at: str, evicting: bool, fixed: Sequence[str], run: str) -> str:
    """The title of `kv_use_vs_time`, lines short enough for a column where they can be:
    over `clock` (its words); at `at` (the load in words, e.g. `load 1.5 × capacity`; ""
    when the sweep has none) and why that load: the most evictions when the sweep evicts
    (`evicting`), else the highest; `fixed`: the further settings' value labels; `run`:
    which realisation each panel's one run is (e.g. `trace window 0 (first of 5 swept)`;
    "" for a sweep without realisations, whose configs ran once)."""
    parts = []
    if at:
        why = "most evictions" if evicting else "highest; no evictions at any load"
        parts.append(f"{at} ({why})")
    parts += list(fixed)
    if fixed and not at:
        parts[-1] += " (most evictions)" if evicting else " (no evictions)"
    where = [", ".join(parts)] if parts else []
    return "\n".join([f"KV pool use over {clock}", *where, *[f"one run: {run}"] * bool(run)])


def _run_words(jobs: Sequence[Job], realization: Any, count: int) -> str:
    """Which realisation a per-run figure draws: a trace replay's window (its realisation
    is the k-th disjoint window of the trace), else the realisation."""
    trace = all(j.summary.get("workload_file") for j in jobs) and bool(jobs)
    k = int(float(realization))
    what = f"trace window {k}" if trace else f"realisation {k}"
    return f"{what} (first of {count} swept)"


def _focus(jobs: Sequence[Job], frame: pd.DataFrame, keys: Sequence[str]
           ) -> dict[str, str]:
    """For per-job figures of a sweep with many parameters: the setting of `keys` at which
    the sweep evicts most (the first when nothing is evicted)."""
    if not keys:
        return {}
    evictions = pd.to_numeric(frame["num_preemptions"], errors="coerce").fillna(0).tolist()
    total: dict[tuple[str, ...], float] = {}
    for j, n in zip(jobs, evictions, strict=True):
        combo = tuple(str(j.overrides.get(k, "-")) for k in keys)
        total[combo] = total.get(combo, 0.0) + n
    best = max(total, key=lambda c: total[c])  # first of the ties: the first seen
    return dict(zip(keys, best, strict=True))


def _series(jobs: Sequence[Job], panel_key: str | None, x: str | None
            ) -> tuple[list[Any], str]:
    """Each job's plotted series: a panel per value of `panel_key`, a shade per value of
    `x`; and the note that explains the shades. Jobs alike but for their realisation
    become one series (`JobSeries.pooled`, realisations in order)."""
    from experiments.report.figures import (
        JobSeries,
        job_clock,
        param_label,
        shades,
        value_label,
    )

    tone = shades([j.overrides.get(x) for j in jobs]) if x else {}
    configs: dict[tuple[str, str, str], list[tuple[float, Any]]] = {}
    for j in jobs:
        if j.summary.get("status") != "ok":  # only verified results have records
            continue
        panel = value_label(panel_key, j.overrides.get(panel_key, "-")) if panel_key else ""
        label = value_label(x, j.overrides.get(x, "-")) if x else ""
        series = JobSeries.from_tables(j.requests(), j.steps(), j.scheduler, label,
                                       int(j.summary.get("kv_capacity_tokens") or 1),
                                       panel, tone.get(j.overrides.get(x or ""), 1.0),
                                       clock=job_clock(j.summary))
        realization = float(j.overrides.get(REALIZATION, 0) or 0)
        configs.setdefault((j.scheduler, panel, label), []).append((realization, series))
    out = []
    for runs in configs.values():
        ordered = [s for _, s in sorted(runs, key=lambda r: r[0])]
        out.append(ordered[0] if len(ordered) == 1 else JobSeries.pooled(ordered))
    note = ""
    if x and len(tone) > 1:
        lo, hi = min(tone, key=tone.__getitem__), max(tone, key=tone.__getitem__)
        note = f"light to dark: {param_label(x)} {lo} to {hi}"
    return out, note


EVICTION_METRICS = (
    ("preemptions_per_1k_requests", "evictions per 1,000 requests", 1.0, "no data"),
    ("preempted_request_share", "requests evicted (%)", 100.0, "no data"),
    ("recomputed_token_share", "prefill recomputed (%)", 100.0, "no data"),
    ("prefix_recovery_on_resume", "prefix recovered on resume (%)", 100.0,
     "no readmissions: n/a"),
)
VICTIM_FIGURE_METRICS = ("median_e2el_victim_ms", "median_e2el_nonvictim_ms",
                         "p99_e2el_victim_ms", "p99_e2el_nonvictim_ms")


def figure_frame(frame: pd.DataFrame, params: Sequence[str]) -> pd.DataFrame:
    """What the sweep figures draw: `frame` (a row per job) as it is; with realisations, one
    row per config (`realizations.aggregate`: each metric's mean over the realisations, its
    95 % CI and the victims it rests on)."""
    if REALIZATION not in params:
        return frame
    metrics = [m for m, *_ in EVICTION_METRICS] + list(VICTIM_FIGURE_METRICS)
    return aggregate(frame, params, metrics)


def write_figures(jobs: Sequence[Job], frame: pd.DataFrame, params: Sequence[str],
                  out: Path, load_param: str | None = None, title: str = "") -> dict[str, Path]:
    """The sweep's four figures, from its completed (ok) jobs, named after what they plot
    against what: the latency CDFs (`latency_cdf_ttft_e2el`), evictions and recompute
    against the load parameter (`evictions_vs_<x>`), victims' and others' E2E latency
    (`victim_e2el_vs_<x>`) and KV pool use over the jobs' time, simulated or measured by a
    real run (`kv_use_vs_time`: at the value of x where the sweep evicts most, the highest
    when it evicts nothing, one line per job, so the band of maxima and the idle time stay
    readable; its title says which run and why, `kv_title_of`, each panel the run's
    evictions); PNG and PDF each. With realisations, every figure but KV use is drawn per
    config: means with 95 % CIs (`figure_frame`) and mean CDFs with bands; KV use over time
    shows one run, the first realisation (their time axes differ), said in its title."""
    from experiments.report.figures import (
        LOAD_KEY,
        Metric,
        clock_words,
        figure_stem,
        kv_use_over_time,
        latency_cdfs,
        metric_vs_load,
        param_label,
        value_label,
        victims_vs_others,
    )

    done = frame[frame["status"] == "ok"]  # a failed job's missing numbers are no zeros
    jobs = [j for j, keep in zip(jobs, frame.index.isin(done.index), strict=True) if keep]
    frame = done.reset_index(drop=True)  # a row per job of `jobs`, in order
    plotted = figure_frame(frame, params)
    first_run = ""
    kv_pick: list[Job] = list(jobs)
    if REALIZATION in params and len(frame):
        first = frame[REALIZATION].min()
        kv_pick = [j for j, r in zip(jobs, frame[REALIZATION], strict=True) if r == first]
        first_run = _run_words(kv_pick, first, int(frame[REALIZATION].nunique()))
    params = [p for p in params if p != REALIZATION]
    x = load_param or pick_load_param(params, frame)
    others = [p for p in params if p not in ("scheduler", x)]
    series = ["scheduler", *others]
    # per-job figures: a panel per value of the first other parameter; any further ones
    # fixed where the sweep evicts most (said in the titles)
    fixed = _focus(jobs, frame, others[1:])
    chosen = [i for i, j in enumerate(jobs)
              if all(str(j.overrides.get(k, "-")) == v for k, v in fixed.items())]
    js, note = _series([jobs[i] for i in chosen], others[0] if others else None, x)
    busiest = _busiest(frame.iloc[chosen], x)
    at = value_label(x, busiest) if x and busiest is not None else ""
    kv_all, _ = _series([jobs[i] for i in chosen if jobs[i] in kv_pick],
                        others[0] if others else None, x)
    kv_jobs = [j for j in kv_all if j.label == at] if at else kv_all
    evictions = pd.to_numeric(frame["num_preemptions"], errors="coerce").fillna(0)
    evicting = bool(evictions.iloc[chosen].sum() > 0)
    load_words = (f"load {float(busiest):g} × capacity" if x == LOAD_KEY and busiest is not None
                  else at)
    kv_title = kv_title_of(clock_words([j.clock for j in kv_jobs or kv_all]), load_words,
                           evicting, [value_label(k, v) for k, v in fixed.items()], first_run)
    # each panel's own run: its evictions (one run per scheduler: no panel parameter)
    runs = [i for i in chosen if jobs[i] in kv_pick and (
        not (at and x) or value_label(x, jobs[i].overrides.get(x, "-")) == at)]
    kv_notes: dict[str, str] = {}
    if not others and len({jobs[i].scheduler for i in runs}) == len(runs):
        kv_notes = {jobs[i].scheduler: f"{evictions.iloc[i]:,.0f} eviction"
                    f"{'' if evictions.iloc[i] == 1 else 's'} in this run" for i in runs}
    cdf_title = "Latency per completed request (CDF)" + (
        "\nat " + ", ".join(value_label(k, v) for k, v in fixed.items())
        + (" (most evictions)" if evictions.sum() > 0 else " (no evictions in the sweep)")
        if fixed else "")
    against = f" vs {param_label(x)}" if x else ""
    ev, vic = figure_stem("evictions", x), figure_stem("victim_e2el", x)
    return {
        "latency_cdf_ttft_e2el": latency_cdfs(js, out / "latency_cdf_ttft_e2el.png",
                                              cdf_title, shade_note=note),
        ev: metric_vs_load(plotted, x, [Metric(*m) for m in EVICTION_METRICS],
                           out / f"{ev}.png", series,
                           title="Evictions (preempted or retracted) and recompute" + against),
        vic: victims_vs_others(plotted, x, out / f"{vic}.png", series,
                               title="E2E latency: victims and other requests" + against),
        "kv_use_vs_time": kv_use_over_time(kv_jobs or kv_all, out / "kv_use_vs_time.png",
                                           kv_title, shade_note=note, notes=kv_notes),
    }


def headline(frame: pd.DataFrame, params: Sequence[str], columns: Sequence[str]
             ) -> pd.DataFrame:
    """The metrics `columns` only: per scheduler (`scheduler_pivot`) when the sweep varies
    the scheduler and more, else one row per job with the varied parameters."""
    pivot = scheduler_pivot(frame, params, columns)
    if pivot is not None:
        return pivot
    keep = ["job", *[p for p in params if p != "scheduler"], "scheduler", "status", *columns]
    return frame[[c for c in keep if c in frame]]


def _configured_load_param(sweep_dir: Path) -> str | None:
    """`hydra.callbacks.comparison.load_param` of the sweep's multirun.yaml, if set."""
    p = sweep_dir / "multirun.yaml"
    if not p.is_file():
        return None
    cfg = yaml.safe_load(p.read_text()) or {}
    value = (((cfg.get("hydra") or {}).get("callbacks") or {}).get("comparison") or {}).get(
        "load_param")
    return str(value) if value else None


def write_report(sweep_dir: str | Path, out_dir: str | Path | None = None,
                 figures: bool = True, load_param: str | None = None,
                 title: str = "", columns: Sequence[str] | None = None) -> dict[str, Path]:
    """Write the comparison tables and figures of a sweep (see the module docstring);
    with `columns`, also `headline.csv` / `.md` (see `headline`). The files are one set
    behind their marker `report.json`, written last (`experiments.report.report_set`): the
    old set is withdrawn first. Figures are drawn from completed (ok) jobs only; none when
    no job completed."""
    fingerprints = job_fingerprints(sweep_dir)  # before reading: a later change shows
    jobs = load_sweep(sweep_dir)
    out = Path(out_dir) if out_dir is not None else Path(sweep_dir)
    retract_report(out)
    paths = _write_report_files(jobs, sweep_dir, out, figures, load_param, title, columns)
    paths[REPORT_MARKER] = commit_report(out, paths, fingerprints)
    return paths


def _write_report_files(jobs: Sequence[Job], sweep_dir: str | Path, out: Path, figures: bool,
                        load_param: str | None, title: str, columns: Sequence[str] | None
                        ) -> dict[str, Path]:
    params = varied_params(jobs)
    load_param = load_param or _configured_load_param(Path(sweep_dir))
    frame = comparison_frame(jobs, params)
    fixed = fixed_params(jobs)
    head = f"# {title or 'Sweep'}: {len(jobs)} jobs\n\n"
    failed = failed_jobs_line(jobs)
    if failed:
        head += f"> **{failed}**\n\n"
    if fixed:
        head += "Fixed overrides: " + ", ".join(f"`{k}={v}`" for k, v in fixed.items()) + "\n\n"
    if params:
        head += "Varied: " + ", ".join(f"`{p}`" for p in params) + "\n\n"
    for warning in completion_warnings(jobs, params):
        head += f"> **Warning**: {warning}\n\n"
    from experiments.report.victims import fair_comparisons

    fair, paired, matched = fair_comparisons(jobs, params)
    frame = with_fair_columns(frame, fair)
    paths: dict[str, Path] = {}
    paths["comparison.csv"] = write_text(frame.to_csv(index=False), out / "comparison.csv")
    if not paired.empty:
        paths["victims_paired.csv"] = write_text(paired.to_csv(index=False),
                                                 out / "victims_paired.csv")
    if not matched.empty:
        paths["victims_matched.csv"] = write_text(matched.to_csv(index=False),
                                                  out / "victims_matched.csv")
    if REALIZATION in params:
        agg = aggregated_frame(jobs, params, fair)
        paths["aggregated.csv"] = write_text(agg.to_csv(index=False), out / "aggregated.csv")
        table = aggregated_table(agg, params)
        table.index.name = "metric"
        paths["aggregated.md"] = write_text(
            head + markdown(table, index=True) + "\n" + CI_NOTE + ". " + EVICTION_NOTE + ".\n",
            out / "aggregated.md")
    paths["comparison.md"] = write_text(head + markdown(frame), out / "comparison.md")
    sbs = side_by_side(jobs, params)
    sbs.index.name = "metric"
    per_config = ("One column per job (realisation); per config across realisations, with "
                  "95 % CIs and victims: aggregated.md.\n\n" if REALIZATION in params else "")
    paths["side_by_side.md"] = write_text(head + per_config + markdown(sbs, index=True) + "\n"
                                          + EVICTION_NOTE + ".\n", out / "side_by_side.md")
    if REALIZATION in params:
        pivots = aggregated_pivot(aggregate(frame, params, PIVOT_METRICS), params)
        if pivots is not None:
            paths["by_scheduler.csv"] = write_text(pivots[0].to_csv(index=False),
                                                   out / "by_scheduler.csv")
            paths["by_scheduler.md"] = write_text(
                head + markdown(pivots[1]) + "\n" + CI_NOTE + ". " + EVICTION_NOTE + ".\n",
                out / "by_scheduler.md")
    else:
        pivot = scheduler_pivot(frame, params)
        if pivot is not None:
            paths["by_scheduler.csv"] = write_text(pivot.to_csv(index=False),
                                                   out / "by_scheduler.csv")
            paths["by_scheduler.md"] = write_text(head + markdown(pivot),
                                                  out / "by_scheduler.md")
    if columns:
        unknown = sorted(set(columns) - set(COMPARISON_METRICS))
        if unknown:
            raise ValueError(f"report: unknown column(s) {', '.join(unknown)}; valid: "
                             f"{', '.join(COMPARISON_METRICS)}")
        if REALIZATION in params:  # per config across realisations, with CIs and victims
            agg = aggregate(frame, params, columns)
            pivots = aggregated_pivot(agg, params, columns)
            if pivots is not None:
                numbers, text = pivots[0], markdown(pivots[1])
            else:
                rows = [(c, METRIC_LABELS.get(c, dict(SIDE_BY_SIDE).get(c, c)))
                        for c in columns]
                table = aggregated_table(agg, params, rows)
                table.index.name = "metric"
                numbers, text = agg, markdown(table, index=True)
            paths["headline.csv"] = write_text(numbers.to_csv(index=False),
                                               out / "headline.csv")
            paths["headline.md"] = write_text(
                head + text + "\n" + CI_NOTE + ".\n", out / "headline.md")
        else:
            top = headline(frame, params, columns)
            paths["headline.csv"] = write_text(top.to_csv(index=False), out / "headline.csv")
            paths["headline.md"] = write_text(head + markdown(top), out / "headline.md")
    if figures and any(j.summary.get("status") == "ok" for j in jobs):
        for k, p in write_figures(jobs, frame, params, out, load_param, title).items():
            paths[f"{k}.png"] = p
            paths[f"{k}.pdf"] = p.with_suffix(".pdf")
        from experiments.report.load_curves import LOAD, load_curves, load_target

        if LOAD in params:  # workload.load: every realisation, bands across them
            p = load_curves(frame, out / "load_curves.png",
                            load_target([j.summary for j in jobs]), title)
            paths["load_curves.png"], paths["load_curves.pdf"] = p, p.with_suffix(".pdf")
    return paths
