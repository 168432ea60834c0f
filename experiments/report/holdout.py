"""A study's headline statistics on held-out trace windows against the committed ones
(issue 30: a claim must hold "when rerun with other realisations and trace windows";
scripts/holdout_check.py runs the held-out sweep and writes `holdout.md`).

Both sides are tables the report already writes: per scheduler and load, a statistic's mean
over realisations with its 95 % percentile-bootstrap CI (`realizations.aggregate`, the
`<stat>_ci_lo` / `_ci_hi` columns, and `<stat>_n` for the victims or readmissions behind it).
Nothing is resampled here: the held-out side's CIs come from the same code as the
committed ones. For each statistic, `compare` says whether the held-out mean lies inside
the committed CI and whether the two CIs overlap."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

# (column, words, scale for the table, unit) of the sweep report's aggregated.csv
SWEEP_STATS: tuple[tuple[str, str, float, str], ...] = (
    # the windows' own traffic at the pinned capacity: what "load L" offered them
    ("offered_request_rate", "offered request rate (req/s)", 1.0, ""),
    ("slo_attainment", "SLO attainment", 100.0, " %"),
    ("num_preemptions", "evictions per window", 1.0, ""),
    ("tokens_per_eviction", "tokens recomputed per eviction", 1.0, ""),
    ("preempted_request_share", "requests evicted", 100.0, " %"),
    ("recomputed_token_share", "prefill recomputed", 100.0, " %"),
    ("prefix_recovery_on_resume", "prefix recovered on resume (token-weighted)", 100.0, " %"),
    ("victim_e2el_median_ratio", "victims' / others' median E2E (raw)", 1.0, ""),
    ("matched_victim_ratio", "victims' E2E / length-matched others'", 1.0, ""),
    ("paired_victim_e2el_ratio", "victims' E2E / same request's, other scheduler", 1.0, ""),
)
# the job metrics among them, for the sweep report's headline.csv (`--columns`); the others
# are the report's victim statistics (aggregated.csv) and victim_report.py's per_eviction.csv
REPORT_COLUMNS = ("num_preemptions", "preempted_request_share", "recomputed_token_share",
                  "prefix_recovery_on_resume", "victim_e2el_median_ratio")
# Swept settings beside the scheduler and the load that make a row of their own (the victim-
# policy study's preemption mode and policy): a comparison's `case`
CASE_COLUMNS: tuple[str, ...] = ("scheduler.preemption_mode", "scheduler.victim_policy")
# the same of prefix_recovery_report.py's recovery.csv (`mean_share`: per readmission)
RECOVERY_STATS: tuple[tuple[str, str, float, str], ...] = (
    ("mean_share", "recovered per readmission (mean)", 100.0, " %"),
)


@dataclass(frozen=True)
class Point:
    """One statistic at one scheduler and load: its mean, 95 % CI and n (victims or
    readmissions behind it; None when the table has no count for it)."""

    mean: float
    lo: float
    hi: float
    n: int | None

    @property
    def defined(self) -> bool:
        """Whether there is a mean."""
        return math.isfinite(self.mean)

    @property
    def has_ci(self) -> bool:
        """Whether there is a CI (at least two realisations with a value)."""
        return math.isfinite(self.lo) and math.isfinite(self.hi)


def _unpivot(headline: pd.DataFrame) -> pd.DataFrame:
    """headline.csv's `<stat>[<scheduler>]` columns as one row per scheduler and load (a
    one-scheduler sweep's headline.csv is already so: a `scheduler` column)."""
    load = headline.columns[0]
    if "scheduler" in headline.columns:
        out = headline.rename(columns={load: "load"})
        out["load"] = pd.to_numeric(out["load"]).astype(float)
        return out
    per: dict[tuple[str, float], dict[str, float]] = {}
    for col in headline.columns[1:]:
        stat, _, sched = col.rstrip("]").partition("[")
        if not sched:
            continue
        for lv, v in zip(headline[load], headline[col], strict=True):
            per.setdefault((sched, float(lv)), {})[stat] = v
    return pd.DataFrame([{"scheduler": s, "load": lv, **vals}
                         for (s, lv), vals in per.items()])


def read_report(folder: Path, load: float | None = None) -> pd.DataFrame:
    """A sweep report's statistics, one row per scheduler and load (and `CASE_COLUMNS`
    where the sweep varied them): aggregated.csv, plus what only headline.csv holds (e.g.
    `prefix_recovery_on_resume`) and, when victim_report.py wrote it, per_eviction.csv's
    recompute per eviction (`tokens_per_eviction`, its CI, n = the evictions). `load`: the
    load of a sweep that ran one (its tables have no load column); ValueError without."""
    df = pd.read_csv(folder / "aggregated.csv").rename(columns={"workload.load": "load"})
    if "load" not in df:
        if load is None:
            raise ValueError(f"{folder}/aggregated.csv has no workload.load column (the "
                             "sweep ran one load): give that load")
        df["load"] = float(load)
    df["load"] = pd.to_numeric(df["load"]).astype(float)
    if any(c in df for c in CASE_COLUMNS):
        return df  # headline.csv and per_eviction.csv are per scheduler and load only
    extra = []
    if (folder / "headline.csv").is_file():
        extra.append(_unpivot(pd.read_csv(folder / "headline.csv")))
    if (folder / "per_eviction.csv").is_file():
        pe = pd.read_csv(folder / "per_eviction.csv")
        extra.append(pd.DataFrame({
            "scheduler": pe["scheduler"], "load": pd.to_numeric(pe["load"]).astype(float),
            "tokens_per_eviction": pe["tokens_per_eviction"],
            "tokens_per_eviction_ci_lo": pe["ci_lo"], "tokens_per_eviction_ci_hi": pe["ci_hi"],
            "tokens_per_eviction_n": pe["evictions"]}))
    for more in extra:
        new = ["scheduler", "load", *[c for c in more.columns if c not in df.columns]]
        df = df.merge(more[new], on=["scheduler", "load"], how="left")
    return df


def with_recovery(report: pd.DataFrame, path: Path, setting: str) -> pd.DataFrame:
    """`report` (`read_report`) with the per-readmission recovery of `setting` from
    prefix_recovery_report.py's recovery.csv (`mean_share`, its CI, n = the
    readmissions)."""
    rec = pd.read_csv(path)
    rec = rec[rec["setting"] == setting]
    part = pd.DataFrame({"scheduler": rec["scheduler"],
                         "load": pd.to_numeric(rec["load"]).astype(float),
                         **{c: rec[c] for c in ("mean_share", "mean_share_ci_lo",
                                                "mean_share_ci_hi")},
                         "mean_share_n": rec["readmissions"]})
    return report.merge(part, on=["scheduler", "load"], how="left")


def point(row: dict[str, Any], column: str) -> Point:
    """The statistic `column` of a table row (`Point`)."""
    def num(key: str) -> float:
        v = pd.to_numeric(pd.Series([row.get(key)]), errors="coerce").iloc[0]
        return float(v) if pd.notna(v) else math.nan

    n = num(f"{column}_n")
    return Point(num(column), num(f"{column}_ci_lo"), num(f"{column}_ci_hi"),
                 int(n) if math.isfinite(n) else None)


def inside(value: float, ref: Point) -> bool | None:
    """Whether `value` lies in `ref`'s CI (None when either is undefined)."""
    if not (math.isfinite(value) and ref.has_ci):
        return None
    return bool(ref.lo <= value <= ref.hi)


def overlap(a: Point, b: Point) -> bool | None:
    """Whether two CIs share a value (None when either has none)."""
    if not (a.has_ci and b.has_ci):
        return None
    return bool(max(a.lo, b.lo) <= min(a.hi, b.hi))


@dataclass(frozen=True)
class Comparison:
    """One statistic at one scheduler and load, committed against held out: `inside` (the
    held-out mean in the committed CI) and `overlap` (the CIs meet), None where a side has
    no CI; `words`, `scale` and `unit` say how holdout.md shows it."""

    scheduler: str
    load: float
    stat: str
    words: str
    scale: float
    unit: str
    committed: Point
    held_out: Point
    inside: bool | None
    overlap: bool | None
    case: str = ""  # the `CASE_COLUMNS` values of the row, e.g. "recompute, most_kv"


def _cases(frame: pd.DataFrame) -> list[str]:
    """Each row's `case`: its `CASE_COLUMNS` values, comma-separated ("" without them)."""
    cols = [c for c in CASE_COLUMNS if c in frame]
    if not cols:
        return [""] * len(frame)
    return [", ".join(str(v) for v in vals) for vals in zip(*(frame[c] for c in cols),
                                                            strict=True)]


def compare(committed: pd.DataFrame, held_out: pd.DataFrame,
            stats: Sequence[tuple[str, str, float, str]]) -> list[Comparison]:
    """Per scheduler (in the held-out table's order), load and statistic (in `stats` order)
    on both sides, a `Comparison`. Loads or schedulers on one side only are left out, and
    so are a statistic the committed table lacks (the study did not report it) and one
    neither side defines."""
    out = []
    # copies first: a table joined column by column (read_report, with_recovery) is made
    # one block again, which pandas asks for before one more column
    committed = committed.copy().assign(_case=_cases(committed))
    held_out = held_out.copy().assign(_case=_cases(held_out))
    scheds = list(dict.fromkeys(str(s) for s in held_out["scheduler"]))
    for sched in scheds:
        for load in sorted(set(held_out.loc[held_out["scheduler"] == sched, "load"])):
            here = held_out[(held_out["scheduler"] == sched) & (held_out["load"] == load)]
            for case in dict.fromkeys(here["_case"]):
                mine = committed[(committed["scheduler"] == sched)
                                 & (committed["load"] == load) & (committed["_case"] == case)]
                held = here[here["_case"] == case]
                if mine.empty:
                    continue
                c_row = {str(k): v for k, v in mine.iloc[0].items()}
                h_row = {str(k): v for k, v in held.iloc[0].items()}
                for column, words, scale, unit in stats:
                    if column not in c_row:
                        continue
                    c, h = point(c_row, column), point(h_row, column)
                    if not (c.defined or h.defined):
                        continue
                    out.append(Comparison(sched, float(load), column, words, scale, unit, c,
                                          h, inside(h.mean, c), overlap(c, h), case))
    return out


def _digits(values: Sequence[float]) -> int:
    """Decimals for three significant digits of the largest of `values` (none at 100 or
    more, at most three)."""
    big = max((abs(v) for v in values if math.isfinite(v)), default=0.0)
    if big == 0:
        return 0
    return min(3, max(0, 2 - math.floor(math.log10(big))))


def _fmt(p: Point, scale: float, unit: str) -> str:
    if not p.defined:
        return "n/a"
    digits = _digits([p.mean * scale, p.hi * scale])

    def f(v: float) -> str:
        return f"{v * scale:,.{digits}f}"

    text = f(p.mean) + unit
    if p.has_ci:
        text += f" [{f(p.lo)}, {f(p.hi)}]"
    if p.n is not None:
        text += f" (n = {p.n:,})"
    return text


def _yes(v: bool | None) -> str:
    return "n/a" if v is None else "yes" if v else "**no**"


def holdout_markdown(rows: Sequence[Comparison], title: str, setting: str, capacity: str,
                     realizations: Sequence[int], command: str = "") -> str:
    """holdout.md: what was rerun (`command`), then a table per scheduler of each statistic,
    committed and held-out side by side, and a count of what held. No dates or times."""
    from experiments.report.figures import SCHEDULER_NAMES

    reals = ", ".join(map(str, realizations)) or "?"
    lines = [f"# Held-out windows: {title}", ""]
    if setting:
        lines += [setting, ""]
    lines += [f"Held-out realisations (trace windows) {reals}; capacity {capacity}. "
              "Each cell: mean over the realisations [95 % percentile-bootstrap CI over "
              "them] (n: the victims or readmissions behind a victim statistic, summed "
              "over the realisations). *inside*: the held-out mean lies in the committed "
              "CI; *overlap*: the two CIs share a value; n/a where a side has no CI.", ""]
    if command:
        lines += [f"Command: `{command}`.", ""]
    if not rows:
        return "\n".join([*lines, "No statistic is defined on both sides.", ""])
    cased = any(r.case for r in rows)
    for sched in dict.fromkeys(r.scheduler for r in rows):
        lines += [f"## {SCHEDULER_NAMES.get(sched, sched)}", "",
                  "| load |" + (" mode, policy |" if cased else "")
                  + " statistic | committed | held-out | inside | overlap |",
                  "|---|" + ("---|" if cased else "") + "---|---|---|---|---|"]
        lines += [f"| {r.load:g} |" + (f" {r.case} |" if cased else "")
                  + f" {r.words} | {_fmt(r.committed, r.scale, r.unit)} "
                  f"| {_fmt(r.held_out, r.scale, r.unit)} | {_yes(r.inside)} "
                  f"| {_yes(r.overlap)} |" for r in rows if r.scheduler == sched]
        lines.append("")
    overlaps = [r.overlap for r in rows if r.overlap is not None]
    insides = [r.inside for r in rows if r.inside is not None]
    lines += [f"CIs overlap for {sum(overlaps)} of {len(overlaps)} statistics with a CI on "
              f"both sides; the held-out mean is inside the committed CI for {sum(insides)} "
              f"of {len(insides)}.", ""]
    return "\n".join(lines)
