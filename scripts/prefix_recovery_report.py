#!/usr/bin/env python3
"""Question 2's summary across settings (scripts/reproduce_prefix_recovery.sh).

    python scripts/prefix_recovery_report.py OUT SETTING=SWEEP [SETTING=SWEEP ...]

reads each setting's load sweep (a Hydra multirun over `scheduler`, `workload.load` and
`workload.realization`) and writes into OUT:
- `recovery.csv` / `recovery.md`: per setting, scheduler and load, the prefix recovery of each
  readmission (experiments/report/recovery.py): readmissions and victims (pooled over the
  windows), the windows with a readmission, the mean share recovered per readmission with its
  95 % CI (percentile bootstrap over the windows' means), the pooled median and quartiles,
  the readmissions that recovered nothing and those that recovered at least 90 %, and the
  token-weighted share (pooled); n/a where the scheduler readmitted nothing;
- `recompute.csv` / `recompute.md`: per setting, scheduler and load, evictions per window and
  the recomputed tokens as a share of all prefill: mean [95 % CI] and min-max over windows;
- `settings.md`: per setting and scheduler, what its jobs' summary.json record (model, GPU,
  step-time source, loop, batch limits, KV pool, context, the prompts clipped or dropped and
  the outputs cut per window, the capacity, the loads);
- `recovery_cdf.png` (+ PDF): per setting, the CDF over readmissions of the share recovered,
  one line per scheduler and load (pooled over the windows, with a 95 % band by the bootstrap
  over windows), its legend below the panel with each curve's readmissions n (flagged under
  30) and windows;
- `recovery_vs_load.png` (+ PDF): per setting, against load, the mean share recovered per
  readmission and the token-weighted share, each with its 95 % CI over the windows, hollow
  where fewer than 30 readmissions are behind it and the readmissions n written under each
  load (top), and the recompute share of all prefill with its CI and min-max over windows
  (bottom).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from experiments.report.analysis import load
from experiments.report.figures import (
    CAPACITY_LINE,
    COLUMN_IN,
    FONT_FLOOR_PT,
    HOLLOW_FACE,
    PAGE_IN,
    ZERO_ZORDER,
    _save,
    capacity_handle,
    capacity_outside,
    fig_legend,
    scheduler_color,
    scheduler_marker,
    shade,
    style,
    suptitle,
    wrapped,
)
from experiments.report.realizations import REALIZATION, bootstrap_ci, ratio_ci
from experiments.report.recovery import readmissions, share_cdf
from experiments.report.tables import load_sweep
from experiments.results.sinks import write_text
from schedulers import registry

LOAD = "workload.load"
GRID = np.linspace(0.0, 1.0, 201)
# Panel titles of the settings scripts/reproduce_prefix_recovery.sh runs (others: their name).
SETTING_TITLES = {"mooncake": "Mooncake, shared prefixes",
                  "mooncake_noshare": "Mooncake, no shared prefixes",
                  "azure_conv": "Azure conv (decode-heavy)"}
# fewer readmissions than this behind a statistic: flagged (as victims are: realizations.py)
FEW = 30
NA = "n/a"


def _label(scheduler: str) -> str:
    entry = registry.find(scheduler)
    return entry.display_name if entry is not None else scheduler


def _pct(x: float, digits: int = 1) -> str:
    return NA if x is None or (isinstance(x, float) and math.isnan(x)) else \
        f"{100.0 * x:.{digits}f}"


def _ci(mean: float, lo: float, hi: float, digits: int = 1) -> str:
    if math.isnan(mean):
        return NA
    if math.isnan(lo) or math.isnan(hi):
        return _pct(mean, digits)
    return f"{_pct(mean, digits)} [{_pct(lo, digits)}, {_pct(hi, digits)}]"


def _table(df: pd.DataFrame) -> str:
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def load_setting(setting: str, sweep: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The setting's jobs (one row per ok job) and its readmissions, each with `setting`."""
    res = load(sweep, steps=False, list_columns=True)
    jobs = res.jobs[res.jobs["status"] == "ok"].copy()
    jobs.insert(0, "setting", setting)
    readm = readmissions(res.requests)
    readm.insert(0, "setting", setting)
    return jobs, readm


def _groups(jobs: pd.DataFrame) -> list[tuple[str, str, float]]:
    keys = jobs[["setting", "scheduler", LOAD]].drop_duplicates()
    order = {s: i for i, s in enumerate(dict.fromkeys(jobs["setting"]))}
    sched = {s: i for i, s in enumerate(registry.names())}
    rows = sorted(((str(a), str(b), float(c)) for a, b, c in keys.itertuples(index=False)),
                  key=lambda k: (order[k[0]], sched.get(k[1], 99), k[2]))
    return rows


def _window_means(readm: pd.DataFrame) -> np.ndarray:
    means = readm.groupby(REALIZATION)["recovered_share"].mean()
    return means.to_numpy(dtype=np.float64)


def recovery_table(jobs: pd.DataFrame, readm: pd.DataFrame) -> pd.DataFrame:
    """One row per setting, scheduler and load (see the module docstring)."""
    rows = []
    for setting, sched, load_ in _groups(jobs):
        j = jobs[(jobs["setting"] == setting) & (jobs["scheduler"] == sched)
                 & (jobs[LOAD] == load_)]
        r = readm[(readm["setting"] == setting) & (readm["scheduler"] == sched)
                  & (readm[LOAD] == load_)]
        shares = r["recovered_share"].to_numpy(dtype=np.float64)
        shares = shares[~np.isnan(shares)]
        wm = _window_means(r) if len(r) else np.array([])
        lo, hi = bootstrap_ci(wm)
        mean = float(wm.mean()) if wm.size else math.nan
        q = np.quantile(shares, [0.25, 0.5, 0.75]) if shares.size else [math.nan] * 3
        tw = r["recovered"].sum() / r["computed"].sum() if r["computed"].sum() else math.nan
        rows.append({
            "setting": setting, "scheduler": sched, "load": load_,
            "windows": len(j), "windows_readmitting": int(wm.size),
            "victims": int(j["num_victims"].sum()), "readmissions": len(r),
            "mean_share": mean, "mean_share_ci_lo": lo, "mean_share_ci_hi": hi,
            "p25_share": q[0], "median_share": q[1], "p75_share": q[2],
            "none_recovered": float((shares == 0).mean()) if shares.size else math.nan,
            "at_least_90pct": float((shares >= 0.9).mean()) if shares.size else math.nan,
            "token_weighted": tw,
            "median_computed_none": _median(r.loc[r["recovered"] == 0, "computed"]),
            "median_computed_some": _median(r.loc[r["recovered"] > 0, "computed"]),
        })
    return pd.DataFrame(rows)


def _median(values: pd.Series) -> float:
    return float(values.median()) if len(values) else math.nan


def recovery_markdown(df: pd.DataFrame) -> str:
    """`recovery_table` as Markdown: shares in %, n/a where nothing was readmitted."""
    out = pd.DataFrame({
        "setting": df["setting"], "scheduler": df["scheduler"].map(_label),
        "load (x capacity)": df["load"].map(lambda x: f"{x:g}"),
        "readmissions (n)": [f"{n}{'*' if 0 < n < FEW else ''}" for n in df["readmissions"]],
        "victims (n)": df["victims"],
        "windows with one": [f"{a} of {b}" for a, b in
                             zip(df["windows_readmitting"], df["windows"], strict=True)],
        "recovered per readmission, mean [95 % CI] (%)": [
            _ci(m, lo, hi) for m, lo, hi in
            zip(df["mean_share"], df["mean_share_ci_lo"], df["mean_share_ci_hi"], strict=True)],
        "p25 / median / p75 (%)": [
            NA if math.isnan(b) else f"{_pct(a)} / {_pct(b)} / {_pct(c)}"
            for a, b, c in zip(df["p25_share"], df["median_share"], df["p75_share"],
                               strict=True)],
        "recovered none (%)": df["none_recovered"].map(_pct),
        "recovered >= 90 % (%)": df["at_least_90pct"].map(_pct),
        "token-weighted (%)": df["token_weighted"].map(_pct),
        "median tokens computed at eviction: recovered none / some": [
            NA if math.isnan(a) and math.isnan(b) else
            f"{NA if math.isnan(a) else f'{a:.0f}'} / {NA if math.isnan(b) else f'{b:.0f}'}"
            for a, b in zip(df["median_computed_none"], df["median_computed_some"],
                            strict=True)],
    })
    return (_table(out) + "\nPer readmission (experiments/report/recovery.py): the tokens "
            "found cached when an evicted request is scheduled again, capped at what it had "
            "computed when evicted, over that. Pooled over the windows (realisations); the "
            "mean's 95 % CI is the percentile bootstrap (10,000 resamples, seed 0) over the "
            "windows' means (the windows with a readmission). *: fewer than 30 "
            "readmissions. n/a: no readmission (no eviction, or none readmitted before the "
            "run ended).\n")


def recompute_table(jobs: pd.DataFrame) -> pd.DataFrame:
    """One row per setting, scheduler and load: evictions and victims per window (mean [CI]),
    the recompute share of all prefill (mean [CI], min, max over windows)."""
    rows = []
    for setting, sched, load_ in _groups(jobs):
        j = jobs[(jobs["setting"] == setting) & (jobs["scheduler"] == sched)
                 & (jobs[LOAD] == load_)]
        row: dict[str, Any] = {"setting": setting, "scheduler": sched, "load": load_,
                               "windows": len(j)}
        for m in ("num_preemptions", "preempted_request_share", "recomputed_token_share"):
            v = pd.to_numeric(j[m], errors="coerce").to_numpy(dtype=np.float64)
            row[m], (row[f"{m}_ci_lo"], row[f"{m}_ci_hi"]) = float(np.nanmean(v)), bootstrap_ci(v)
            row[f"{m}_min"], row[f"{m}_max"] = float(np.nanmin(v)), float(np.nanmax(v))
        rows.append(row)
    return pd.DataFrame(rows)


def recompute_markdown(df: pd.DataFrame) -> str:
    """`recompute_table` as Markdown."""
    def count(m: str) -> list[str]:
        return [f"{a:.1f} [{b:.1f}, {c:.1f}] ({d:.0f}-{e:.0f})" if not math.isnan(b)
                else f"{a:.1f}" for a, b, c, d, e in
                zip(df[m], df[f"{m}_ci_lo"], df[f"{m}_ci_hi"], df[f"{m}_min"], df[f"{m}_max"],
                    strict=True)]

    def share(m: str) -> list[str]:
        return [f"{_ci(a, b, c, 2)} ({_pct(d, 2)}-{_pct(e, 2)})" for a, b, c, d, e in
                zip(df[m], df[f"{m}_ci_lo"], df[f"{m}_ci_hi"], df[f"{m}_min"], df[f"{m}_max"],
                    strict=True)]

    out = pd.DataFrame({
        "setting": df["setting"], "scheduler": df["scheduler"].map(_label),
        "load (x capacity)": df["load"].map(lambda x: f"{x:g}"), "windows": df["windows"],
        "evictions per window": count("num_preemptions"),
        "requests evicted (%)": share("preempted_request_share"),
        "recomputed of all prefill (%)": share("recomputed_token_share"),
    })
    return (_table(out) + "\nEach cell: mean over the windows (realisations) [95 % CI, "
            "percentile bootstrap over the windows, 10,000 resamples, seed 0] (min-max over "
            "the windows). Evictions: vLLM preemptions, SGLang retractions.\n")


def _capacity_text(windows: list[dict[str, Any]]) -> str:
    """The capacity the windows' jobs ran against: the pooled one, or with a per-window
    capacity file (summary.json `load_capacity_source`: `window k`) each window's, in
    realisation order."""
    if all(w.get("load_capacity_source", "pooled") == "pooled" for w in windows):
        return f"{windows[0]['load_capacity']:.4g}"
    return "per window: " + ", ".join(f"{w['load_capacity']:.4g}" for w in windows)


def settings_table(setting: str, sweep: Path) -> pd.DataFrame:
    """One row per scheduler of a setting, as its jobs' summary.json say it: the model, GPU,
    step-time source, loop, batch limits, KV pool, context, the requests per window, the
    prompts each window clipped or dropped by length and the outputs cut at the context (per
    window, in realisation order), the capacity and the loads."""
    rows = []
    jobs = load_sweep(sweep)
    for sched in [s for s in registry.names() if any(j.scheduler == s for j in jobs)]:
        mine = [j for j in jobs if j.scheduler == sched and j.summary.get("status") == "ok"]
        first = mine[0].summary
        by_window: dict[int, dict[str, Any]] = {}
        for j in mine:
            by_window.setdefault(int(j.summary["realization"]), j.summary)
        windows = [by_window[k] for k in sorted(by_window)]
        limits = "; ".join(f"{k} {v['value']} ({v['source']})"
                           for k, v in sorted(first.get("scheduler_limits", {}).items()))
        rows.append({
            "setting": setting, "scheduler": _label(sched), "model": first["model"],
            "hardware": first["hardware"], "step time": first["step_time_source"],
            "loop": f"{first['engine_loop']} ({first['engine_loop_source']})",
            "batch limits": limits,
            "KV pool (slots)": f"{first['kv_capacity_tokens']} ({first['kv_capacity_source']})",
            "context": f"{first['max_model_len']} ({first['max_model_len_source']})",
            "requests per window": ", ".join(str(w["num_requests"]) for w in windows),
            "prompts clipped per window": ", ".join(str(w.get("workload_clipped", 0))
                                                    for w in windows),
            "dropped by max_input_len per window": ", ".join(
                str(w.get("workload_dropped", {}).get("max_input_len", 0)) for w in windows),
            "outputs cut at the context per window": ", ".join(
                str(w.get("input_changes", {}).get("outputs_cut_at_context", 0))
                for w in windows),
            "rejected as longer than the context per window": ", ".join(
                str(w.get("rejected_too_long", 0)) for w in windows),
            "capacity (rate_scale)": _capacity_text(windows),
            "loads (x capacity)": ", ".join(f"{x:g}" for x in sorted(
                {float(j.summary["load"]) for j in mine})),
            "windows": len(windows),
        })
    return pd.DataFrame(rows)


def settings_markdown(df: pd.DataFrame) -> str:
    """`settings_table` transposed: one column per setting and scheduler."""
    names = [f"{a}, {b}" for a, b in zip(df["setting"], df["scheduler"], strict=True)]
    t = df.drop(columns=["setting", "scheduler"]).T
    t.columns = names
    t.insert(0, "", t.index)
    return _table(t) + "\nFrom each job's summary.json (the first job of each window for the " \
        "per-window counts).\n"


def pooled_cdf_band(readm: pd.DataFrame, resamples: int = 2_000, seed: int = 0
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The CDF on `GRID` of the share recovered over the readmissions of `readm` pooled across
    its windows (`workload.realization`), its pointwise 95 % band by the percentile bootstrap
    over the windows (windows resampled with replacement, their readmissions pooled: the
    readmissions of one window are not independent), and the number of windows. The band is
    NaN with one window."""
    shares = readm["recovered_share"].to_numpy(dtype=np.float64)
    windows = readm[REALIZATION].to_numpy()
    keys = sorted(set(windows.tolist()))
    cdf = share_cdf(shares, GRID)
    if len(keys) < 2:
        nan = np.full(len(GRID), math.nan)
        return cdf, nan, nan, len(keys)
    counts = np.stack([np.searchsorted(np.sort(shares[windows == k]), GRID, side="right")
                       for k in keys]).astype(np.float64)
    sizes = np.array([(windows == k).sum() for k in keys], dtype=np.float64)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(keys), size=(resamples, len(keys)))
    weights = np.stack([np.bincount(row, minlength=len(keys)) for row in picks])
    curves = (weights @ counts) / (weights @ sizes)[:, None]
    lo, hi = np.quantile(curves, [0.025, 0.975], axis=0)
    return cdf, lo, hi, len(keys)


_LOAD_STYLES = ("-", "--", "-.", ":", (0, (1, 1)))


def _cdf_panel(ax: Any, readm: pd.DataFrame, setting: str, loads: Sequence[float],
               scheds: Sequence[str]) -> tuple[list[Any], str]:
    """One setting's CDFs; its legend entries (one per curve, with the readmissions n and
    the windows behind it) and its note on what it lacks (n/a: no readmission)."""
    handles: list[Any] = []
    none = []
    for sched in scheds:
        base = scheduler_color(sched)
        mine = readm[(readm["setting"] == setting) & (readm["scheduler"] == sched)
                     & readm["recovered_share"].notna()]
        shown = [x for x in loads if (mine[LOAD] == x).any()]
        missing = [f"{x:g}x" for x in loads if x not in shown]
        if missing:
            none.append(f"{_label(sched)} at "
                        f"{'every load' if not shown else ', '.join(missing)}")
        for i, load_ in enumerate(shown):
            r = mine[mine[LOAD] == load_]
            mean, lo, hi, windows = pooled_cdf_band(r)
            color = shade(base, 0.35 + 0.65 * (i + 1) / len(shown))
            n = len(r)
            line, = ax.step(GRID * 100, mean, where="post", color=color,
                            ls=_LOAD_STYLES[i % len(_LOAD_STYLES)],
                            label=f"{_label(sched)} {load_:g}x: n={n}"
                                  f"{f' (< {FEW})' if n < FEW else ''}, {windows} windows")
            if not np.isnan(lo).all():
                ax.fill_between(GRID * 100, lo, hi, step="post", color=color, alpha=0.08,
                                lw=0)
            handles.append(line)
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("share of its computed tokens\nfound cached at readmission (%)")
    ax.set_title(SETTING_TITLES.get(setting, setting))
    return handles, ("no readmission (n/a): " + "; ".join(none)) if none else ""


def recovery_cdf(readm: pd.DataFrame, jobs: pd.DataFrame, path: Path) -> Path:
    """The CDF figure (see the module docstring): a panel per setting, its legend (each
    curve's readmissions n and windows) below it."""
    settings = list(dict.fromkeys(jobs["setting"]))
    scheds = [s for s in registry.names() if s in set(jobs["scheduler"])]
    loads = sorted(float(x) for x in jobs[LOAD].unique())
    width = PAGE_IN if len(settings) > 1 else COLUMN_IN
    with style():
        fig, axes = plt.subplots(1, len(settings), figsize=(width, 3.6), squeeze=False,
                                 sharey=True, layout="constrained")
        for ax, setting in zip(axes[0], settings, strict=True):
            ran = set(jobs.loc[jobs["setting"] == setting, "scheduler"])
            handles, note = _cdf_panel(ax, readm, setting, loads,
                                       [x for x in scheds if x in ran])
            # below the panel (its curves fill it): the curves with their n, then what is n/a
            ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.3),
                      title=wrapped(note, width / len(settings)) if note else None,
                      title_fontsize=FONT_FLOOR_PT, fontsize=FONT_FLOOR_PT)
        axes[0][0].set_ylabel("fraction of readmissions (CDF)")
        suptitle(fig, "Prefix recovery per readmission: CDF over the readmissions pooled "
                 "across windows (band: 95\u00a0% CI, bootstrap over windows; n: readmissions)")
        return _save(fig, path)


def token_weighted_ci(readm: pd.DataFrame) -> pd.DataFrame:
    """Per setting, scheduler and load with a readmission: the token-weighted share
    recovered (all readmissions' recovered tokens over their computed ones) and its 95 % CI
    by the paired percentile bootstrap over the windows with a readmission (a window's
    recovered and computed tokens resampled together: `realizations.ratio_ci`)."""
    rows = []
    keys = ["setting", "scheduler", LOAD]
    for (setting, sched, load_), g in readm.groupby(keys, sort=False):
        per = g.groupby(REALIZATION)[["recovered", "computed"]].sum()
        ratio, lo, hi = ratio_ci(per["computed"].to_numpy(dtype=np.float64),
                                 per["recovered"].to_numpy(dtype=np.float64), paired=True)
        rows.append({"setting": setting, "scheduler": sched, "load": float(cast(float, load_)),
                     "token_weighted": ratio, "token_weighted_ci_lo": lo,
                     "token_weighted_ci_hi": hi})
    return pd.DataFrame(rows, columns=["setting", "scheduler", "load", "token_weighted",
                                       "token_weighted_ci_lo", "token_weighted_ci_hi"])


# Sideways offsets (in load units) of a scheduler's series, and of the token-weighted share
# from the mean per readmission at the same load, so their error bars stand apart.
_SCHED_DX = 0.16
_SERIES_DX = 0.06
# The token-weighted share's marker and line (the mean per readmission has the scheduler's).
_TOKEN_MARKER, _TOKEN_LS = "^", ":"
# A note on a panel: on white, over the capacity line it may cross.
_NOTE_BOX = {"fc": "white", "ec": "none", "pad": 1.0}


def _ci_series(ax: Any, x: np.ndarray, y: np.ndarray, lo: np.ndarray, hi: np.ndarray,
               few: np.ndarray, color: Any, marker: str, ls: Any, clip: bool = True) -> None:
    """A series against load: its line, its CI as error bars in its colour, its markers
    (hollow where `few`)."""
    layer = {} if clip else {"clip_on": False, "zorder": ZERO_ZORDER}
    ax.plot(x, y, color=color, ls=ls, lw=1.0, marker="", **layer)
    has = np.isfinite(lo) & np.isfinite(hi) & np.isfinite(y)
    if has.any():
        err = np.vstack([np.clip(y - lo, 0, None), np.clip(hi - y, 0, None)])[:, has]
        ax.errorbar(x[has], y[has], yerr=err, fmt="none", ecolor=color, elinewidth=0.8,
                    capsize=2.0, capthick=0.8, **layer)
    for hollow in (False, True):
        pick = (few == hollow) & np.isfinite(y)
        if pick.any():
            ax.plot(x[pick], y[pick], ls="", marker=marker, color=color, mec=color,
                    mfc=HOLLOW_FACE if hollow else color, **layer)


def recovery_vs_load(rec: pd.DataFrame, rc: pd.DataFrame, readm: pd.DataFrame,
                     path: Path) -> Path:
    """The against-load figure (see the module docstring): top, per readmission the mean
    share recovered and the token-weighted share, each with its 95 % CI over the windows,
    hollow from fewer than `FEW` readmissions, the readmissions n under each load; bottom,
    the recompute share of all prefill, mean over the windows with its 95 % CI and min-max."""
    settings = list(dict.fromkeys(rec["setting"]))
    scheds = [s for s in registry.names() if s in set(rec["scheduler"])]
    loads = sorted(float(x) for x in rec["load"].unique())
    tw = token_weighted_ci(readm)
    width = PAGE_IN if len(settings) > 1 else COLUMN_IN
    with style():
        fig, axes = plt.subplots(2, len(settings), figsize=(width, 4.9), squeeze=False,
                                 sharex=True, layout="constrained")
        outsides: set[str] = set()
        for col, setting in enumerate(settings):
            top, bottom = axes[0][col], axes[1][col]
            ran = [x for x in scheds if x in set(rec.loc[rec["setting"] == setting,
                                                         "scheduler"])]
            zero_notes = []
            for k, sched in enumerate(ran):
                color, marker = scheduler_color(sched), scheduler_marker(sched)
                dx = (k - (len(ran) - 1) / 2) * _SCHED_DX
                r = rec[(rec["setting"] == setting) & (rec["scheduler"] == sched)
                        & (rec["readmissions"] > 0)]
                x = r["load"].to_numpy(dtype=np.float64) + dx
                n = r["readmissions"].to_numpy()
                few = n < FEW
                _ci_series(top, x - _SERIES_DX,
                           r["mean_share"].to_numpy(dtype=np.float64) * 100,
                           r["mean_share_ci_lo"].to_numpy(dtype=np.float64) * 100,
                           r["mean_share_ci_hi"].to_numpy(dtype=np.float64) * 100,
                           few, color, marker, "-")
                t = tw[(tw["setting"] == setting) & (tw["scheduler"] == sched)].set_index(
                    "load").reindex(r["load"].to_numpy(dtype=np.float64))
                _ci_series(top, x + _SERIES_DX, t["token_weighted"].to_numpy() * 100,
                           t["token_weighted_ci_lo"].to_numpy() * 100,
                           t["token_weighted_ci_hi"].to_numpy() * 100,
                           few, color, _TOKEN_MARKER, _TOKEN_LS)
                # the readmissions behind each load's two points, a row per scheduler at the
                # foot of the panel (the first "n=65", then "259": the loads are close)
                for i, (xi, ni) in enumerate(zip(x, n, strict=True)):
                    top.text(xi, 2 + 9 * k, f"n={ni}" if i == 0 else f"{ni}", ha="center",
                             va="bottom", fontsize=FONT_FLOOR_PT, color=color)
                c = rc[(rc["setting"] == setting) & (rc["scheduler"] == sched)]
                xc = c["load"].to_numpy(dtype=np.float64) + dx
                mc = c["recomputed_token_share"].to_numpy(dtype=np.float64) * 100
                bottom.vlines(xc, c["recomputed_token_share_min"] * 100,
                              c["recomputed_token_share_max"] * 100, color=shade(color, 0.3),
                              lw=3, zorder=1.5)
                zero = bool((mc == 0).all())  # drawn on top, unclipped, and said on the panel
                _ci_series(bottom, xc, mc,
                           c["recomputed_token_share_ci_lo"].to_numpy(dtype=np.float64) * 100,
                           c["recomputed_token_share_ci_hi"].to_numpy(dtype=np.float64) * 100,
                           np.zeros(len(c), dtype=bool), color, marker, "-", clip=not zero)
                if zero:
                    zero_notes.append(f"{_label(sched)}: 0 at every load")
            # load 1 marked only inside this setting's loads (figures.mark_capacity's rule)
            outside = capacity_outside(sorted(float(x) for x in
                                              rec.loc[rec["setting"] == setting, "load"]))
            outsides.add(outside)
            for ax in (top, bottom) if not outside else ():
                ax.axvline(1.0, zorder=1, **CAPACITY_LINE)
            top.set_title(SETTING_TITLES.get(setting, setting))
            missing = [_label(x) for x in ran
                       if not ((rec["setting"] == setting) & (rec["scheduler"] == x)
                               & (rec["readmissions"] > 0)).any()]
            if missing:
                top.text(0.03, 0.97, wrapped(f"{', '.join(missing)}: no readmission (n/a)",
                                             0.9),
                         transform=top.transAxes, ha="left", va="top",
                         fontsize=FONT_FLOOR_PT, color="0.35", bbox=_NOTE_BOX)
            if zero_notes:
                bottom.text(0.03, 0.97, wrapped("; ".join(zero_notes), 0.9),
                            transform=bottom.transAxes, ha="left", va="top",
                            fontsize=FONT_FLOOR_PT, color="0.35", bbox=_NOTE_BOX)
            top.set_ylim(0, 105)
            bottom.set_ylim(bottom=0)
            bottom.set_xticks(loads, [f"{x:g}" for x in loads])
            bottom.set_xlabel("load (× capacity)")
            if col == 0:
                top.set_ylabel("recovered at\nreadmission (%)")
                bottom.set_ylabel("recomputed of\nall prefill (%)")
            else:
                top.tick_params(labelleft=False)
        windows = sorted({int(w) for w in rc["windows"]})
        grey = "0.3"
        handles: list[Any] = [Line2D([], [], color=scheduler_color(s), ls="",
                                    marker=scheduler_marker(s), label=_label(s))
                              for s in scheds]
        handles += [
            Line2D([], [], color=grey, marker="o", ls="-", label="mean per readmission"),
            Line2D([], [], color=grey, marker=_TOKEN_MARKER, ls=_TOKEN_LS,
                   label="token-weighted (recovered / computed tokens)"),
            Line2D([], [], color=grey, ls="", marker="|", markersize=8,
                   label="bar: 95 % CI over windows"),
            Line2D([], [], color=grey, ls="", marker="o", mfc=HOLLOW_FACE,
                   label=f"hollow: n < {FEW} readmissions"),
            Line2D([], [], color=shade(grey, 0.3), lw=3,
                   label="recompute: min-max over windows"),
            *[capacity_handle(o) for o in sorted(outsides)]]
        fig_legend(fig, handles,
                   "top: n = readmissions behind each load's points (at the foot); "
                   f"bottom: mean over {'/'.join(str(w) for w in windows)} windows")
        suptitle(fig, "Prefix recovery at readmission (top; a point only where the "
                 "scheduler readmitted a victim) and recompute share of all prefill (bottom)")
        return _save(fig, path)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the arguments, write the tables and figures."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("settings", nargs="+", help="SETTING=SWEEP folder")
    args = ap.parse_args(argv)
    jobs_parts, readm_parts, settings = [], [], []
    for spec in args.settings:
        setting, sep, sweep = spec.partition("=")
        if not sep or not setting or not sweep:
            ap.error(f"setting {spec!r}: expected SETTING=SWEEP")
        j, r = load_setting(setting, Path(sweep))
        jobs_parts.append(j)
        readm_parts.append(r)
        settings.append(settings_table(setting, Path(sweep)))
    jobs = pd.concat(jobs_parts, ignore_index=True)
    readm = pd.concat(readm_parts, ignore_index=True)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    rec = recovery_table(jobs, readm)
    rc = recompute_table(jobs)
    write_text(rec.to_csv(index=False, float_format="%.6g"), out / "recovery.csv")
    write_text("# Q2: prefix recovery per readmission\n\n" + recovery_markdown(rec),
               out / "recovery.md")
    write_text(rc.to_csv(index=False, float_format="%.6g"), out / "recompute.csv")
    write_text("# Q2: recompute as a share of all prefill, across windows\n\n"
               + recompute_markdown(rc), out / "recompute.md")
    write_text("# Q2: the settings, as the jobs recorded them\n\n"
               + settings_markdown(pd.concat(settings, ignore_index=True)),
               out / "settings.md")
    recovery_cdf(readm, jobs, out / "recovery_cdf.png")
    recovery_vs_load(rec, rc, readm, out / "recovery_vs_load.png")
    print(f"prefix_recovery_report: {len(readm)} readmissions over {len(jobs)} jobs -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
