"""Held-out windows of a load-relative study (issue 30: every claim "holds when rerun with
other realisations and trace windows"): rerun some of a committed study's loads on trace
windows it did not use, at the committed capacity, and compare.

    python scripts/holdout_check.py run STUDY SETTING --loads 1.25,1.5 --realizations 5-9 \
        [--report victim|recovery] [--capacity committed|per-window] \
        [Hydra overrides of the setting...]
    python scripts/holdout_check.py compare STUDY SETTING [--report ...] [--note TEXT]

`run`:
1. pins the capacity: a capacity file (`experiments.run.load`'s format) holding each
   scheduler's rate as results/STUDY/SETTING/capacity.md commits it, after checking that
   the setting's config (experiment=STUDY plus the overrides) has the committed config
   digest, so `workload.load` means the same request rate as in the study; with
   `--capacity per-window`, after the same check, each held-out window's own capacity
   instead, searched on that window (`python -m experiments.capacity --per-window`, the
   default tolerance and target, as scripts/_study.sh searches), so a held-out point is at
   the same distance from its window's saturation as the study's point from theirs;
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


def pinned_capacity(study: str, overrides: Sequence[str], capacity_md: Path
                    ) -> dict[str, Any]:
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
                                    "capacity": rate, "capacity_request_rate": req_s}
    return data


def per_window_capacity(study: str, overrides: Sequence[str], reals: Sequence[int],
                        out: Path) -> dict[str, Any]:
    """The capacity file of a per-window search on the held-out realisations `reals`
    (`python -m experiments.capacity --per-window` into `out`), its note saying so."""
    command = [sys.executable, "-m", "experiments.capacity", f"experiment={study}",
               *overrides, "--per-window", "--realizations", ",".join(map(str, reals)),
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
    reals = realizations(args.realizations)
    runs = ROOT / "results" / args.study / "runs" / f"holdout_{args.setting}"
    capacity = runs / "capacity.json"
    capacity.parent.mkdir(parents=True, exist_ok=True)
    # the digest check runs either way: the held-out windows are compared with the study
    data = pinned_capacity(args.study, overrides,
                           ROOT / "results" / args.study / args.setting / "capacity.md")
    if args.capacity == "per-window":
        data = per_window_capacity(args.study, overrides, reals, runs / "capacity_search")
    capacity.write_text(json.dumps(data, indent=1) + "\n")
    (runs / "holdout.json").write_text(json.dumps(
        {"loads": args.loads, "realizations": reals, "realizations_arg": args.realizations,
         "report": args.report, "capacity": args.capacity, "overrides": overrides},
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


def capacity_sentence(kind: str | None) -> str:
    """holdout.md's sentence on the capacities the held-out jobs ran at (`kind`: holdout.json
    `capacity`; absent in a run from before the option: committed)."""
    if kind in (None, "committed"):
        return "Their capacities are capacity.md's as it prints them, rounded to 4 decimals."
    return ("Their capacities are each held-out window's own (a job of window k at load L ran "
            "at L x window k's capacity, searched on it), while the committed points are at "
            "the capacity pooled over the study's windows.")


def write_comparison(args: argparse.Namespace) -> Path:
    """results/STUDY/SETTING/holdout.md from the committed tables and the held-out report."""
    setting_dir = ROOT / "results" / args.study / args.setting
    report = ROOT / "results" / args.study / "runs" / f"holdout_{args.setting}" / "report"
    stats = SWEEP_STATS
    committed, held = read_report(setting_dir), read_report(report)
    if args.report == "recovery":
        stats += RECOVERY_STATS
        committed = with_recovery(committed, setting_dir.parent / "recovery.csv",
                                  args.setting)
        held = with_recovery(held, report / "recovery.csv", args.setting)
    loads = sorted(set(held["load"]))
    rows = compare(committed[committed["load"].isin(loads)], held, stats)
    meta = json.loads((report.parent / "capacity.json").read_text())
    ran = json.loads((report.parent / "holdout.json").read_text())
    command = " ".join(["python scripts/holdout_check.py run", args.study, args.setting,
                        f"--loads {ran['loads']}", f"--realizations {ran['realizations_arg']}",
                        *([f"--report {ran['report']}"] if ran["report"] else []),
                        *([f"--capacity {ran['capacity']}"]
                          if ran.get("capacity", "committed") != "committed" else []),
                        *ran["overrides"]])
    setting = " ".join(filter(None, [
        args.note, "The held-out jobs ran with logger=none (no W&B runs) and one joblib "
        "worker; neither changes a number.", capacity_sentence(ran.get("capacity"))]))
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
    ap.add_argument("--realizations", default="5-9")
    ap.add_argument("--report", choices=("victim", "recovery"), default=None)
    ap.add_argument("--note", default="", help="the setting in words, for holdout.md")
    ap.add_argument("--capacity", choices=("committed", "per-window"), default="committed",
                    help="the capacity the held-out loads are fractions of: the committed "
                         "(pooled) one, or each held-out window's own, searched on it")
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
