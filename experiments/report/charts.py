"""A sweep's answers as chart data, for charts a reader can hover and filter (the sweep's W&B
run draws them: `experiments.run.wandb_log.log_sweep_dir`).

`sweep_charts` turns the comparison table (`tables.comparison_frame`, a row per job) into one
long table per chart of `SWEEP_CHARTS`: the load parameter on x, a series per scheduler and
setting of the other varied parameters, a metric on y (evictions, requests evicted,
recomputed prefill, victims' and the others' median E2E latency, prefix-cache recovery on
resume, SLO attainment, goodput), and, when the sweep compares schedulers, the charts of
`GAP_CHARTS`: per load, how far the schedulers are apart (where their victim choices differ
most). Only jobs with status `ok` are drawn; a value a job could not measure (no victims, no
SLO) is left out rather than drawn as zero, and a chart with no value at all is not made.
Without a load parameter (only the scheduler varies) each chart is one bar per job.

With realisations (the sweep varies `workload.realization`), a chart's rows are configs, not
jobs (`realizations.aggregate`): y is the mean over the config's realisations, beside it
`<y> CI low` / `<y> CI high` (the 95 % percentile-bootstrap interval over realisations) and
`realisations`; a victim statistic carries `n victims` (over all realisations) and
`few victims` (fewer than 30: the statistic is flagged). A per-job chart of a victim
statistic carries `n victims` and `few victims` too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from experiments.report.realizations import (
    FEW_VICTIMS,
    REALIZATION,
    VICTIM_COUNTS,
    aggregate,
)

SERIES = "series"
CHART_PREFIX = "charts/"


@dataclass(frozen=True, slots=True)
class ChartSpec:
    """One chart: its key stem, title, y-axis name and the summary metrics it draws, each
    with the word appended to the series name (when a chart draws more than one)."""

    stem: str
    title: str
    y: str
    metrics: tuple[tuple[str, str], ...]
    scale: float = 1.0


SWEEP_CHARTS: tuple[ChartSpec, ...] = (
    ChartSpec("evictions", "Evictions: preemptions (vLLM) or retractions (SGLang)",
              "evictions", (("num_preemptions", ""),)),
    ChartSpec("requests_evicted", "Requests evicted at least once", "requests evicted (%)",
              (("preempted_request_share", ""),), 100.0),
    ChartSpec("recomputed_prefill", "Prefill recomputed after evictions",
              "prefill recomputed (%)", (("recomputed_token_share", ""),), 100.0),
    ChartSpec("victim_e2el", "Median E2E latency: victims (evicted at least once) and others",
              "median E2E latency (ms)",
              (("median_e2el_victim_ms", "victims"), ("median_e2el_nonvictim_ms", "others"))),
    ChartSpec("prefix_recovery", "Prefix cache recovered on resume (of what victims had "
              "computed)", "recovered on resume (%)", (("prefix_recovery_on_resume", ""),),
              100.0),
    ChartSpec("slo_attainment", "SLO attainment (good requests of all arrivals)",
              "SLO attainment (%)", (("slo_attainment", ""),), 100.0),
    ChartSpec("goodput", "Request goodput (requests meeting the SLO per second)",
              "goodput (req/s)", (("request_goodput", ""),)),
)
GAP_CHARTS: tuple[ChartSpec, ...] = (
    ChartSpec("scheduler_gap_evictions", "Where the schedulers' victim choices differ: "
              "evictions per 1,000 requests, most minus fewest",
              "gap in evictions per 1,000 requests", (("preemptions_per_1k_requests", ""),)),
    ChartSpec("scheduler_gap_victim_e2el", "Where the schedulers' victim choices differ: "
              "victims' median E2E latency, highest minus lowest",
              "gap in victims' median E2E (ms)", (("median_e2el_victim_ms", ""),)),
)


@dataclass(frozen=True)
class ChartData:
    """A chart's key (`charts/<stem>_vs_<x>`, or `_by_job` for bars), title, the table it
    draws and which columns: `x` (None: one bar per row, labelled by `SERIES`), `y`, and the
    series column."""

    key: str
    title: str
    table: pd.DataFrame
    x: str | None
    y: str
    series: str = SERIES


def short_name(param: str) -> str:
    """A parameter's last dotted part (`workload.rate_scale` -> `rate_scale`)."""
    return param.split(".")[-1]


def _value(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _number(v: Any) -> float:
    """A metric value as a float; NaN for none (null, NA, text)."""
    if v is None or v is pd.NA or isinstance(v, bool) or not isinstance(v, int | float):
        return math.nan
    return float(v)


def _series_label(row: pd.Series, others: Sequence[str], suffix: str = "") -> str:
    parts = [str(row["scheduler"])]
    parts += [f"{short_name(p)}={_value(row[p])}" for p in others]
    return " ".join(parts + [suffix] * bool(suffix))


def _metric_rows(ok: pd.DataFrame, spec: ChartSpec, x: str | None,
                 others: Sequence[str]) -> list[dict[str, Any]]:
    rows = []
    for _, job in ok.iterrows():
        for metric, suffix in spec.metrics:
            y = _number(job.get(metric)) * spec.scale
            if math.isnan(y):
                continue  # not measured (no victims, no SLO): no point, never a zero
            row: dict[str, Any] = {SERIES: _series_label(job, others, suffix), spec.y: y,
                                   "scheduler": job["scheduler"]}
            if "job" in job:
                row["job"] = int(job["job"])
            if f"{metric}_ci_lo" in job:  # a config across realisations
                row[f"{spec.y} CI low"] = _number(job[f"{metric}_ci_lo"]) * spec.scale
                row[f"{spec.y} CI high"] = _number(job[f"{metric}_ci_hi"]) * spec.scale
                row["realisations"] = int(job["n_realizations"])
            n = _number(job.get(f"{metric}_n", job.get(VICTIM_COUNTS.get(metric, ""))))
            if metric in VICTIM_COUNTS and not math.isnan(n):
                row["n victims"] = int(n)
                row["few victims"] = n < FEW_VICTIMS
            if x is not None:
                row[short_name(x)] = job[x]
            row.update({short_name(p): job[p] for p in others})
            rows.append(row)
    return rows


def _gap_rows(ok: pd.DataFrame, spec: ChartSpec, x: str, others: Sequence[str]
              ) -> list[dict[str, Any]]:
    metric = spec.metrics[0][0]
    rows = []
    for key, group in ok.groupby([*others, x], sort=True, dropna=False):
        values = {str(s): _number(v) for s, v in zip(group["scheduler"], group[metric],
                                                      strict=True)}
        values = {s: v for s, v in values.items() if not math.isnan(v)}
        if len(values) < 2:
            continue  # a gap needs two schedulers that measured the metric
        ranked = sorted(values, key=values.__getitem__)  # ties keep the frame's order
        low, high = ranked[0], ranked[-1]
        setting = dict(zip([*others, x], key if isinstance(key, tuple) else (key,),
                           strict=True))
        label = " ".join(f"{short_name(p)}={_value(setting[p])}" for p in others)
        rows.append({SERIES: label or " vs ".join(sorted(values)), short_name(x): setting[x],
                     spec.y: (values[high] - values[low]) * spec.scale, "highest": high,
                     "lowest": low, **{short_name(p): setting[p] for p in others}})
    return rows


def _chart(spec: ChartSpec, rows: list[dict[str, Any]], x: str | None) -> ChartData | None:
    if not rows:
        return None
    table = pd.DataFrame(rows)
    name = short_name(x) if x else None
    table = table.sort_values([SERIES, name] if name else [SERIES], kind="stable")
    lead = [c for c in (SERIES, name, spec.y) if c is not None]
    table = table[lead + [c for c in table.columns if c not in lead]]
    key = f"{CHART_PREFIX}{spec.stem}_" + (f"vs_{name}" if name else "by_job")
    title = spec.title + (f" vs {name}" if name else "")
    return ChartData(key, title, table.reset_index(drop=True), name, spec.y)


def chart_metrics() -> list[str]:
    """Every summary metric a chart draws."""
    return list(dict.fromkeys(m for spec in (*SWEEP_CHARTS, *GAP_CHARTS)
                              for m, _ in spec.metrics))


def sweep_charts(frame: pd.DataFrame, params: Sequence[str], x: str | None
                 ) -> list[ChartData]:
    """The charts of a sweep's comparison table `frame` (see the module docstring); `params`
    are the varied parameters, `x` the load parameter (None or not varied: bars per job).
    With `workload.realization` among `params`, the charts draw configs across
    realisations (means, CI columns, victims)."""
    ok = frame[frame["status"] == "ok"] if "status" in frame else frame
    if REALIZATION in params:
        ok = aggregate(ok, params, chart_metrics())
        params = [p for p in params if p != REALIZATION]
    if x is not None and (x not in ok or x not in params):
        x = None
    others = [p for p in params if p not in ("scheduler", x)]
    charts = [_chart(spec, _metric_rows(ok, spec, x, others), x) for spec in SWEEP_CHARTS]
    if x is not None and ok["scheduler"].nunique() > 1:
        charts += [_chart(spec, _gap_rows(ok, spec, x, others), x) for spec in GAP_CHARTS]
    return [c for c in charts if c is not None]
