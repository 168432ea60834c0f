"""Results one line away in pandas: one job or a whole sweep, loaded in one call.

    from experiments.report.analysis import load
    res = load("multirun/default/2026-12-01_10-00-00")  # a sweep folder or one job folder
    res.jobs       # a row per job: job, the swept parameters, scheduler, status, metrics
    res.requests   # every request of every job: job, scheduler, the swept parameters, then
                   # the columns of requests.parquet, plus ttft_ms, tpot_ms and e2el_ms
    res.steps      # every step of every job: job, scheduler, the swept parameters, then the
                   # columns of steps.parquet

    aggregated(path)   # a row per config across its realisations: each metric's mean,
                       # 95 % bootstrap CI (<m>_ci_lo, <m>_ci_hi) and victims (<m>_n)

The files stay readable on their own: `pd.read_parquet("<sweep>/<job>/requests.parquet")`
(column meanings: engines/records.py), `summary.json` beside them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from experiments.report.tables import (
    Job,
    aggregated_frame,
    comparison_frame,
    load_sweep,
    varied_params,
)
from experiments.results.sinks import REQUESTS_FILE, STEPS_FILE


@dataclass
class Results:
    """A job's or a sweep's results as data frames (see the module docstring); `params` are
    the swept parameters (for one job: its overrides)."""

    jobs: pd.DataFrame
    requests: pd.DataFrame
    steps: pd.DataFrame
    params: list[str]


def _frame(table: pa.Table, list_columns: bool) -> pd.DataFrame:
    if not list_columns:
        table = table.select([f.name for f in table.schema if not pa.types.is_list(f.type)])
    return table.to_pandas()


def _with_latencies(df: pd.DataFrame) -> pd.DataFrame:
    arrival, first, finish = df["arrival_time"], df["first_token_time"], df["finish_time"]
    df["ttft_ms"] = (first - arrival) * 1000.0
    df["e2el_ms"] = (finish - arrival) * 1000.0
    nout = df["output_len"]
    df["tpot_ms"] = np.where(nout > 1, (finish - first) / (nout - 1).clip(lower=1) * 1000.0,
                             np.nan)
    return df


def _records(jobs: Sequence[Job], params: Sequence[str], frame: pd.DataFrame, name: str,
             list_columns: bool) -> pd.DataFrame:
    parts = []
    for j, (_, row) in zip(jobs, frame.iterrows(), strict=True):
        f = j.path / name
        if j.summary.get("status") != "ok" or not f.is_file():  # failed or unverified
            continue
        df = _frame(pq.read_table(f), list_columns)
        if name == REQUESTS_FILE:
            df = _with_latencies(df)
        head = pd.DataFrame({"job": j.num, "scheduler": j.scheduler,
                             **{p: row[p] for p in params}}, index=df.index)
        parts.append(pd.concat([head, df], axis=1))
    if not parts:
        return pd.DataFrame(columns=["job", "scheduler", *params])
    out = pd.concat(parts, ignore_index=True)
    out["scheduler"] = out["scheduler"].astype("category")
    return out


def load(path: str | Path, *, requests: bool = True, steps: bool = True,
         list_columns: bool = False) -> Results:
    """Load a sweep folder (every job folder in it) or one job folder. `requests` / `steps`
    false skip those tables (empty frames); `list_columns` keeps the per-request lists
    (token_times, prefix_hit_tokens, ...), left out by default to keep the frames small."""
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"analysis.load: {root} is not a folder")
    jobs = load_sweep(root)  # a sweep, or one job folder
    params = varied_params(jobs) if len(jobs) > 1 else list(jobs[0].overrides)
    params = [p for p in params if p != "scheduler"]
    frame = comparison_frame(jobs, params)
    empty = pd.DataFrame(columns=["job", "scheduler", *params])
    return Results(
        jobs=frame,
        requests=_records(jobs, params, frame, REQUESTS_FILE, list_columns) if requests
        else empty,
        steps=_records(jobs, params, frame, STEPS_FILE, list_columns) if steps else empty,
        params=params,
    )


def load_requests(path: str | Path, list_columns: bool = False) -> pd.DataFrame:
    """Every request of a sweep or a job (see `load`)."""
    return load(path, steps=False, list_columns=list_columns).requests


def load_steps(path: str | Path) -> pd.DataFrame:
    """Every step of a sweep or a job (see `load`)."""
    return load(path, requests=False).steps


def aggregated(path: str | Path) -> pd.DataFrame:
    """A sweep's configs across their realisations (`workload.realization`): one row per
    config, each metric's mean over realisations with its percentile-bootstrap 95 % CI and,
    for victim statistics, the victims it rests on (`experiments.report.realizations`)."""
    jobs = load_sweep(Path(path))
    return aggregated_frame(jobs, varied_params(jobs))
