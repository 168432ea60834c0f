"""Held-out windows of a load-relative study (issue 30: every claim "holds when rerun with
other realisations and trace windows"): rerun some of a committed study's loads on trace
windows it did not use, each at its own capacity, and compare.

    python scripts/holdout_check.py run STUDY SETTING --loads 1.25,1.5 [--realizations 1,3] \
        [--report victim|recovery] [--capacity per-window|committed] \
        [--capacity-md PATH] [--scheduler-free KEY,...] [Hydra overrides of the setting...]
    python scripts/holdout_check.py compare STUDY SETTING [--report ...] [--note TEXT]

The held-out windows are the preset's `holdout_realizations` (with the overrides: a setting
on another trace lists its own), disjoint from the `realizations` the study ran;
`--realizations` names others.

`run`:
1. checks that the setting's config (experiment=STUDY plus the overrides) has the config
   digest results/STUDY/SETTING/capacity.md commits (`--capacity-md`: another study's
   table, for a study that ran at that study's capacity: victim_policies at Q3's), so
   `workload.load` means what it meant in the study; then the capacity: by default
   (`--capacity per-window`) each held-out window's own, searched on that window
   (`python -m experiments.capacity --per-window`, the default tolerance and target, as
   scripts/_study.sh searches), so a held-out point is at the same distance from its
   window's saturation as the study's points from theirs; with `--capacity committed`, a
   capacity file (`experiments.run.load`'s format) holding each scheduler's pooled rate as
   capacity.md commits it. `--scheduler-free` marks scheduler keys the capacity holds for
   whatever their value (the victim-policy study's policy, mode and host pool);
2. sweeps the schedulers x loads x realisations (`python -m experiments.run -m`, one joblib
   worker, logger=none) into results/STUDY/runs/holdout_SETTING/sweep;
3. writes its report (`python -m experiments.report`: means and percentile-bootstrap CIs
   over the realisations, the same code as the study's) and, with `--report`, the study's
   own summary (`victim_report.py`: recompute per eviction; `prefix_recovery_report.py`:
   recovery per readmission) into results/STUDY/runs/holdout_SETTING/report.
`compare` writes results/STUDY/SETTING/holdout.md from the committed tables and the held-out
report (`experiments.report.holdout`): byte-stable, no dates or wall times.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from experiments.report.holdout import (  # noqa: E402
    RECOVERY_STATS,
    REPORT_COLUMNS,
    SWEEP_STATS,
    compare,
    holdout_markdown,
    read_report,
    with_recovery,
)
from experiments.user_error import ConfigError  # noqa: E402

# capacity.md's table rows: display name, rate, req/s, bracket, probes
_CAPACITY_ROW = re.compile(r"^(\S+)\s+([0-9.]+)\s+([0-9.]+)\s+\[")
_DIGEST = re.compile(r"Config digest `([0-9a-f]+)`")


def realizations(text: str) -> list[int]:
    """`5-9` or `5,6,7` as a list of realisations, or a ConfigError naming the flag."""
    try:
        if "-" in text:
            lo, hi = (int(v) for v in text.split("-", 1))
            out = list(range(lo, hi + 1))
        else:
            out = [int(v) for v in text.split(",")]
    except ValueError:
        raise ConfigError(f"--realizations={text!r}: give a range (5-9) or a list "
                          "(5,6,7)") from None
    if not out or min(out) < 0:
        raise ConfigError(f"--realizations={text!r}: needs realisations >= 0")
    return out


def committed_capacity(path: Path) -> tuple[dict[str, tuple[float, float]], str]:
    """Per scheduler display name, (rate, req/s) of a committed capacity.md, and the config
    digest prefix it names."""
    if not path.is_file():
        raise ConfigError(f"{path}: no committed capacity table (run the study first)")
    text = path.read_text()
    rows = {m.group(1): (float(m.group(2)), float(m.group(3)))
            for line in text.splitlines() if (m := _CAPACITY_ROW.match(line))}
    digest = _DIGEST.search(text)
    if not rows or digest is None:
        raise ConfigError(f"{path}: no capacity rows or no config digest in it")
    return rows, digest.group(1)


def _shown(path: Path) -> str:
    """`path` relative to the checkout when inside it (the same text on every machine)."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def held_out_windows(study: str, overrides: Sequence[str]) -> list[int]:
    """The preset's held-out realisations (`holdout_realizations`, with the overrides),
    checked disjoint from those it sweeps; a ConfigError when it holds none out."""
    from experiments.capacity.main import compose
    from experiments.run.realizations import holdout_ids

    # the windows do not depend on the scheduler: its choice and its keys (scheduler=sglang
    # scheduler.page_size=16) left out, as a key of one would not compose on the default
    base = [f"experiment={study}",
            *[o for o in overrides if o.split("=", 1)[0].split(".")[0] != "scheduler"]]
    held = holdout_ids(compose(base))
    if not held:
        raise ConfigError(f"experiment={study} {' '.join(overrides)}: the setting holds no "
                          "window out (holdout_realizations=[]); name some with "
                          "--realizations")
    return held


def pinned_capacity(study: str, overrides: Sequence[str], capacity_md: Path,
                    scheduler_free: Sequence[str] = ()) -> dict[str, Any]:
    """A capacity file whose capacities are the committed ones, for the config of
    `experiment=study` + `overrides`, or a ConfigError when that config is not the one the
    committed capacity was searched for (its digest differs)."""
    from omegaconf import OmegaConf

    from experiments.capacity.main import compose, default_schedulers
    from experiments.run.load import (
        CAPACITY_FORMAT,
        CAPACITY_KIND,
        capacity_config,
        config_digest,
        rate_param,
        scheduler_config,
    )
    from schedulers.registry import entries

    rows, digest = committed_capacity(capacity_md)
    base = [f"experiment={study}", *overrides]
    chosen = [o.split("=", 1)[1].split(",") for o in overrides
              if o.split("=", 1)[0] == "scheduler"]
    schedulers = chosen[-1] if chosen else default_schedulers(base)
    rest = [o for o in base if o.split("=", 1)[0] != "scheduler"]
    configs = {s: compose([*rest, f"scheduler={s}"]) for s in schedulers}
    first = next(iter(configs.values()))
    config = capacity_config(first)
    here = config_digest(config)
    if not here.startswith(digest):
        raise ConfigError(f"{capacity_md}: made for config digest {digest}, these overrides "
                          f"give {here[:16]}: the held-out run would not be at the committed "
                          "capacity (give the setting's overrides exactly as its study does; "
                          "the digest includes workload.trace_dir, so run with the "
                          "SCHEDBENCH_TRACE_DIR the study ran with)")
    names = {e.name: e.display_name for e in entries()}
    param = rate_param(OmegaConf.to_container(first.workload))  # type: ignore[arg-type]
    data: dict[str, Any] = {
        "kind": CAPACITY_KIND, "format": CAPACITY_FORMAT,
        "note": f"pinned from {_shown(capacity_md)} (no search)",
        "rate_param": f"workload.{param}",
        "rate_value": float(OmegaConf.select(first, f"workload.{param}")),
        "config_digest": here, "config": config, "schedulers": {},
    }
    for cfg in configs.values():
        name = str(cfg.scheduler.name)
        shown = names.get(name, name)
        if shown not in rows:
            raise ConfigError(f"{capacity_md}: no capacity row for {shown} (scheduler={name})")
        rate, req_s = rows[shown]
        data["schedulers"][name] = {"scheduler_config": scheduler_config(cfg),
                                    "capacity": rate, "capacity_request_rate": req_s,
                                    **({"scheduler_free": sorted(scheduler_free)}
                                       if scheduler_free else {})}
    return data


def per_window_capacity(study: str, overrides: Sequence[str], reals: Sequence[int],
                        out: Path, scheduler_free: Sequence[str] = ()) -> dict[str, Any]:
    """The capacity file of a per-window search on the held-out realisations `reals`
    (`python -m experiments.capacity --per-window` into `out`), its note saying so."""
    command = [sys.executable, "-m", "experiments.capacity", f"experiment={study}",
               *overrides, "--per-window", "--realizations", ",".join(map(str, reals)),
               *(["--scheduler-free", ",".join(scheduler_free)] if scheduler_free else []),
               "--out", str(out)]
    subprocess.run(command, cwd=ROOT, check=True)
    data: dict[str, Any] = json.loads((out / "capacity.json").read_text())
    data["note"] = (f"searched per window on the held-out windows themselves (python -m "
                    f"experiments.capacity --per-window, realisations {_ids(reals)}): each "
                    "window's own highest rate_scale with SLO attainment >= "
                    f"{data['target']:g}, to {data['tolerance']:.0%}")
    return data


def _ids(reals: Sequence[int]) -> str:
    return ",".join(map(str, reals))


def _report_command(kind: str | None, sweep: Path, out: Path, setting: str) -> list[str] | None:
    if kind == "victim":
        return [sys.executable, "scripts/victim_report.py", str(sweep), str(out)]
    if kind == "recovery":
        return [sys.executable, "scripts/prefix_recovery_report.py", str(out),
                f"{setting}={sweep}"]
    return None


def run(args: argparse.Namespace, overrides: list[str]) -> None:
    """Pin the capacity, sweep the held-out windows, write the held-out report."""
    try:
        loads = [float(v) for v in args.loads.split(",")]
    except ValueError:
        raise ConfigError(f"--loads={args.loads!r}: give loads as numbers, e.g. "
                          "1.25,1.5") from None
    if not loads or min(loads) <= 0:
        raise ConfigError(f"--loads={args.loads!r}: needs loads > 0")
    reals = (realizations(args.realizations) if args.realizations is not None
             else held_out_windows(args.study, overrides))
    free = [k for k in args.scheduler_free.split(",") if k]
    runs = ROOT / "results" / args.study / "runs" / f"holdout_{args.setting}"
    capacity = runs / "capacity.json"
    capacity.parent.mkdir(parents=True, exist_ok=True)
    # the digest check runs either way: the held-out windows are compared with the study
    data = pinned_capacity(args.study, overrides, capacity_md(args), free)
    if args.capacity == "per-window":
        data = per_window_capacity(args.study, overrides, reals, runs / "capacity_search",
                                   free)
    capacity.write_text(json.dumps(data, indent=1) + "\n")
    (runs / "holdout.json").write_text(json.dumps(
        {"loads": args.loads, "realizations": reals,
         "realizations_arg": args.realizations or ",".join(map(str, reals)),
         "report": args.report, "capacity": args.capacity, "overrides": overrides,
         "capacity_md": args.capacity_md, "scheduler_free": free},
        indent=1) + "\n")
    sweep, report = runs / "sweep", runs / "report"
    for old in (sweep, report):  # a rerun starts afresh, as scripts/_study.sh does
        shutil.rmtree(old, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "experiments.run", "-m", f"experiment={args.study}",
                    *overrides, "logger=none", f"hydra.sweep.dir={sweep}",
                    "hydra.launcher.n_jobs=1", f"workload.capacity_file={capacity}",
                    f"workload.load={','.join(f'{v:g}' for v in loads)}",
                    f"workload.realization={','.join(map(str, reals))}",
                    "hydra.callbacks.comparison.print_table=false"],
                   cwd=ROOT, check=True)
    subprocess.run([sys.executable, "-m", "experiments.report", str(sweep), "--out",
                    str(report), "--no-figures", "--columns",
                    ",".join(REPORT_COLUMNS)], cwd=ROOT, check=True)
    extra = _report_command(args.report, sweep, report, args.setting)
    if extra:
        subprocess.run(extra, cwd=ROOT, check=True)


def capacity_md(args: argparse.Namespace) -> Path:
    """The committed capacity table the held-out config is checked against (and, with
    `--capacity committed`, run at): `--capacity-md`, else the setting's capacity.md."""
    if args.capacity_md:
        return ROOT / args.capacity_md
    return ROOT / "results" / args.study / args.setting / "capacity.md"


def capacity_sentence(kind: str | None, committed_per_window: bool = False) -> str:
    """holdout.md's sentence on the capacities the held-out jobs ran at (`kind`: holdout.json
    `capacity`; absent in a run from before the option: committed) and, with per-window
    held-out capacities, those the committed points ran at (`committed_per_window`: the
    study searched each of its windows' own, its capacity.md lists them)."""
    if kind in (None, "committed"):
        return "Their capacities are capacity.md's as it prints them, rounded to 4 decimals."
    return ("Their capacities are each held-out window's own (a job of window k at load L ran "
            "at L x window k's capacity, searched on it), "
            + ("as the committed points ran at their windows' own." if committed_per_window
               else "while the committed points are at the capacity pooled over the study's "
                    "windows."))


def write_comparison(args: argparse.Namespace) -> Path:
    """results/STUDY/SETTING/holdout.md from the committed tables and the held-out report."""
    setting_dir = ROOT / "results" / args.study / args.setting
    report = ROOT / "results" / args.study / "runs" / f"holdout_{args.setting}" / "report"
    stats = SWEEP_STATS
    ran = json.loads((report.parent / "holdout.json").read_text())
    ran_loads = [float(v) for v in str(ran["loads"]).split(",")]
    one = ran_loads[0] if len(ran_loads) == 1 else None  # a one-load sweep has no load column
    committed, held = read_report(setting_dir, one), read_report(report, one)
    if args.report == "recovery":
        stats += RECOVERY_STATS
        committed = with_recovery(committed, setting_dir.parent / "recovery.csv",
                                  args.setting)
        held = with_recovery(held, report / "recovery.csv", args.setting)
    loads = sorted(set(held["load"]))
    rows = compare(committed[committed["load"].isin(loads)], held, stats)
    meta = json.loads((report.parent / "capacity.json").read_text())
    committed_md = (ROOT / ran["capacity_md"] if ran.get("capacity_md")
                    else setting_dir / "capacity.md")
    command = " ".join(["python scripts/holdout_check.py run", args.study, args.setting,
                        f"--loads {ran['loads']}", f"--realizations {ran['realizations_arg']}",
                        *([f"--report {ran['report']}"] if ran["report"] else []),
                        *([f"--capacity {ran['capacity']}"]
                          if ran.get("capacity", "committed") != "per-window" else []),
                        *([f"--capacity-md {ran['capacity_md']}"]
                          if ran.get("capacity_md") else []),
                        *([f"--scheduler-free {','.join(ran['scheduler_free'])}"]
                          if ran.get("scheduler_free") else []),
                        *ran["overrides"]])
    setting = " ".join(filter(None, [
        args.note, "The held-out jobs ran with logger=none (no W&B runs) and one joblib "
        "worker; neither changes a number.", capacity_sentence(
            ran.get("capacity"), "Per window:" in committed_md.read_text())]))
    text = holdout_markdown(rows, title=f"{args.study}/{args.setting}", setting=setting,
                            capacity=meta["note"],
                            realizations=ran["realizations"], command=command)
    out = setting_dir / "holdout.md"
    out.write_text(text)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=("run", "compare"))
    ap.add_argument("study")
    ap.add_argument("setting")
    ap.add_argument("--loads", default="1.25,1.5")
    ap.add_argument("--realizations", default=None,
                    help="held-out realisations, a range (5-9) or a list (1,3,5); default: "
                         "the setting's holdout_realizations")
    ap.add_argument("--report", choices=("victim", "recovery"), default=None)
    ap.add_argument("--note", default="", help="the setting in words, for holdout.md")
    ap.add_argument("--capacity", choices=("committed", "per-window"), default="per-window",
                    help="the capacity the held-out loads are fractions of: each held-out "
                         "window's own, searched on it (default), or the committed (pooled) "
                         "one")
    ap.add_argument("--capacity-md", default=None,
                    help="the committed capacity.md (relative to the checkout) to check the "
                         "config against; default results/STUDY/SETTING/capacity.md")
    ap.add_argument("--scheduler-free", default="",
                    help="scheduler keys the capacity holds for any value (e.g. "
                         "victim_policy,preemption_mode,host_kv_capacity_tokens)")
    args, overrides = ap.parse_known_args(argv)
    try:
        if args.action == "run":
            run(args, overrides)
        else:
            print(write_comparison(args))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
