"""Victims compared fairly (README, "Statistics"): per request, from each job's
requests.parquet, at report time.

- **paired**: the same request (id) under two schedulers in the same config and realisation
  (the same arrivals and lengths): its E2E under each, their ratio, and which side evicted it
  (`paired_rows`). Per job, `paired_victim_e2el_ratio`: over this scheduler's victims
  completed by both, the median of (E2E here / E2E under the other scheduler).
- **length-matched**: each victim against the non-victims of the same job in its cell of
  `length_cell` (floor(log2) of prompt length, floor(log2) of output length): the victim's
  E2E per output token over the cell's median non-victim E2E per output token
  (`matched_rows`); a victim whose cell holds no non-victim is left unmatched. Per job,
  `matched_victim_ratio`: the median of those ratios, over `matched_victims` victims.
- **breakdown**: the means of the E2E parts (requests.parquet's `queued_s`, `evicted_s`,
  `recompute_s`, `prefill_s`, `decode_s`) over the job's completed victims, in ms, and the
  same over its completed other requests (`nonvictim_<part>_ms`), to set them against.
Only completed requests (finish reason stop or length) enter; a job whose records lack the
columns of `COLUMNS` is left out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

DONE = ("stop", "length")
PARTS = ("queued", "evicted", "recompute", "prefill", "decode")
COLUMNS = ("request_id", "prompt_len", "output_len", "victim", "arrival_time", "finish_time",
           "finish_reason")


def completed(requests: Any) -> pd.DataFrame:
    """A job's completed requests with `e2el_s` and `e2el_per_token_s` (and the E2E parts
    when recorded)."""
    names = [c for c in (*COLUMNS, *(f"{p}_s" for p in PARTS)) if c in requests.column_names]
    df = requests.select(names).to_pandas()
    df = df[df["finish_reason"].isin(DONE)].copy()
    df["e2el_s"] = df["finish_time"] - df["arrival_time"]
    df["e2el_per_token_s"] = df["e2el_s"] / df["output_len"].clip(lower=1)
    return df


def length_cell(prompt_len: pd.Series, output_len: pd.Series) -> pd.Series:
    """The matching rule's cell: (floor(log2 prompt_len), floor(log2 output_len)), lengths
    below 1 counted as 1."""
    p = np.floor(np.log2(prompt_len.clip(lower=1).to_numpy(dtype=np.float64))).astype(int)
    o = np.floor(np.log2(output_len.clip(lower=1).to_numpy(dtype=np.float64))).astype(int)
    return pd.Series([f"{a},{b}" for a, b in zip(p, o, strict=True)], index=prompt_len.index)


def matched_rows(df: pd.DataFrame) -> pd.DataFrame:
    """One row per victim of `df` (a job's `completed` requests): its cell, its E2E per
    output token, the median of the cell's non-victims' (`cell_nonvictim_per_token_s`,
    from `cell_nonvictims` requests) and their ratio (NaN when the cell has none)."""
    df = df.assign(cell=length_cell(df["prompt_len"], df["output_len"]))
    others = df[~df["victim"]].groupby("cell")["e2el_per_token_s"].agg(["median", "size"])
    v = df[df["victim"]]
    out = pd.DataFrame({
        "request_id": v["request_id"], "prompt_len": v["prompt_len"],
        "output_len": v["output_len"], "cell": v["cell"],
        "e2el_per_token_s": v["e2el_per_token_s"],
        "cell_nonvictim_per_token_s": v["cell"].map(others["median"]).astype(np.float64),
        "cell_nonvictims": v["cell"].map(others["size"]).astype(np.float64).fillna(0)
        .astype(np.int64)})
    out["matched_ratio"] = out["e2el_per_token_s"] / out["cell_nonvictim_per_token_s"]
    return out.reset_index(drop=True)


def paired_rows(a: pd.DataFrame, b: pd.DataFrame, names: tuple[str, str]) -> pd.DataFrame:
    """The requests completed by both jobs `a` and `b` (`completed` frames of two
    schedulers on the same workload): E2E under each, `e2el_ratio` (b / a), and
    `evicted_by` (a's name, b's, `both` or `neither`)."""
    m = a[["request_id", "prompt_len", "output_len", "e2el_s", "victim"]].merge(
        b[["request_id", "e2el_s", "victim"]], on="request_id", suffixes=("_a", "_b"))
    by = np.select([m["victim_a"] & m["victim_b"], m["victim_a"], m["victim_b"]],
                   ["both", names[0], names[1]], "neither")
    return pd.DataFrame({
        "request_id": m["request_id"], "prompt_len": m["prompt_len"],
        "output_len": m["output_len"], f"e2el_s[{names[0]}]": m["e2el_s_a"],
        f"e2el_s[{names[1]}]": m["e2el_s_b"], "e2el_ratio": m["e2el_s_b"] / m["e2el_s_a"],
        "evicted_by": by, "scheduler_a": names[0], "scheduler_b": names[1]})


def _median(x: pd.Series) -> float:
    return float(x.median()) if len(x) else math.nan


def job_stats(df: pd.DataFrame) -> dict[str, Any]:
    """A job's length-matched ratio and the means of its victims' and its other requests'
    E2E parts (ms)."""
    matched = matched_rows(df)
    ok = matched["matched_ratio"].dropna()
    out: dict[str, Any] = {"matched_victim_ratio": _median(ok), "matched_victims": len(ok)}
    for who, rows in (("victim", df[df["victim"]]), ("nonvictim", df[~df["victim"]])):
        for p in PARTS:
            col = f"{p}_s"
            out[f"{who}_{p}_ms"] = (1000.0 * float(rows[col].mean())
                                    if col in rows and len(rows) else math.nan)
    return out


def fair_comparisons(jobs: Sequence[Any], params: Sequence[str]
                     ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """For the ok jobs of a sweep (objects with `num`, `overrides`, `scheduler`, `summary`,
    `requests()`): per-job statistics (`job`, `paired_victim_e2el_ratio`,
    `paired_victims`, `matched_victim_ratio`, `matched_victims`, `victim_<part>_ms`), the
    paired rows and the matched rows, each led by the job's varied parameters. Jobs pair
    with the other schedulers' jobs of the same parameters (the realisation included)."""
    others = [p for p in params if p != "scheduler"]
    frames: dict[int, pd.DataFrame] = {}
    groups: dict[tuple[str | None, ...], list[Any]] = {}
    stats: dict[int, dict[str, Any]] = {}
    matched: list[pd.DataFrame] = []
    for j in jobs:
        if j.summary.get("status", "ok") != "ok":
            continue
        requests = j.requests()
        if not set(COLUMNS) <= set(requests.column_names):
            continue  # records without the columns the comparisons need
        df = frames[j.num] = completed(requests)
        stats[j.num] = {"job": j.num, **job_stats(df), "paired_victim_e2el_ratio": math.nan,
                        "paired_victims": 0}
        lead = {p: j.overrides.get(p) for p in others}
        matched.append(matched_rows(df).assign(**lead, scheduler=j.scheduler))
        groups.setdefault(tuple(j.overrides.get(p) for p in others), []).append(j)
    paired: list[pd.DataFrame] = []
    for key, group in groups.items():
        for i, ja in enumerate(group):
            for jb in group[i + 1:]:
                rows = paired_rows(frames[ja.num], frames[jb.num], (ja.scheduler, jb.scheduler))
                paired.append(rows.assign(**dict(zip(others, key, strict=True))))
                if len(group) == 2:  # one other scheduler: the paired ratio is defined
                    for job, side, ratio in ((ja, ja.scheduler, 1 / rows["e2el_ratio"]),
                                             (jb, jb.scheduler, rows["e2el_ratio"])):
                        mine = ratio[rows["evicted_by"].isin([side, "both"])]
                        stats[job.num]["paired_victim_e2el_ratio"] = _median(mine)
                        stats[job.num]["paired_victims"] = len(mine)
    lead_cols = [*others, "scheduler"]

    def _led(parts: list[pd.DataFrame]) -> pd.DataFrame:
        if not parts:
            return pd.DataFrame()
        df = pd.concat(parts, ignore_index=True)
        first = [c for c in lead_cols if c in df]
        return df[first + [c for c in df.columns if c not in first]]

    return pd.DataFrame(list(stats.values())), _led(paired), _led(matched)
