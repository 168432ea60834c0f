"""`python -m experiments.capacity [options] [overrides]` (or `schedbench-capacity`): per
scheduler, the highest arrival rate at which SLO attainment stays at the target.

    python -m experiments.capacity workload.num_requests=200          # vLLM and SGLang
    python -m experiments.capacity scheduler=vllm --realizations 3 --tolerance 0.02
    python -m experiments.capacity experiment=victim_choice --per-window   # its listed windows
    python -m experiments.capacity experiment=victim_choice --realizations 5-9 --per-window
    python -m experiments.run -m workload.load=0.5,0.7,0.9,1.1 \\
        workload.capacity_file=capacity/default/<date_time>/capacity.json

The overrides are those of `python -m experiments.run` (the same conf/, presets included);
`scheduler=a,b` picks the schedulers (default: those a multirun of the config sweeps). For
each scheduler the workload's rate parameter (experiments/run/load.py `RATE_PARAMS`) is
searched from the config's own value (`search.find_capacity`: x2 until a probe fails, then
bisection to `--tolerance`), each probe run over the realisations in this process
(`probes.run_probe`): `--realizations`, else those a multirun of the config sweeps (a study
preset's `realizations` list, or `range(repeats)` for repeats > 1: experiments/run/
realizations.py), so a study's capacity is searched on the windows its sweep runs, else 0-2.
With `--per-window`, the same search also runs once per realisation (trace window), over
that realisation alone, and capacity.json holds each window's capacity beside the pooled one
(`per_realization`), which a job of realisation k then runs against (experiments/run/
load.py); the searches share their runs (`RunCache`).
`--scheduler-free KEY,...` records scheduler settings the capacity holds for whatever their
value (`scheduler_free`: a job that differs only in them runs against it; the victim-policy
study runs every policy and mode at the default policy's capacity). Writes `capacity.json`
(the file `workload.capacity_file` reads) into `--out` and prints a table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from experiments.capacity.probes import RULE, TARGET, Probe, RunCache, run_probe
from experiments.capacity.search import BracketError, find_capacity
from experiments.results.sinks import write_text
from experiments.run.load import (
    CAPACITY_FORMAT,
    CAPACITY_KIND,
    capacity_config,
    config_digest,
    rate_param,
    scheduler_config,
)
from experiments.run.realizations import realization_ids as swept_realizations
from experiments.user_error import ConfigError, UserError, debug_enabled, one_line
from schedulers.config_range import MAX_RATE, MIN_RATE


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m experiments.capacity",
        description="Per scheduler, the highest arrival rate at which SLO attainment stays "
                    ">= the target (mean over realisations), by bracketing and bisection.")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, as for experiments.run")
    p.add_argument("--realizations", default=None,
                   help="realisations per probe: a count R (workload.realization=0..R-1), a "
                        "range (5-9) or a list (5,7,8); default: those a multirun of the "
                        "config sweeps (its `realizations`, else range(repeats) for "
                        "repeats > 1), else 3 (0-2)")
    p.add_argument("--per-window", action="store_true",
                   help="also search each realisation's (trace window's) own capacity, "
                        "written beside the pooled one; a job of realisation k then runs at "
                        "load x window k's capacity")
    p.add_argument("--scheduler-free", default="",
                   help="comma-separated scheduler keys the capacity holds for any value "
                        "(recorded as scheduler_free; e.g. victim_policy,preemption_mode)")
    p.add_argument("--tolerance", type=float, default=0.02,
                   help="relative width of the final bracket (default 0.02)")
    p.add_argument("--target", type=float, default=TARGET,
                   help="SLO attainment a probe must reach (default 0.9)")
    p.add_argument("--out", default=None,
                   help="output folder (default capacity/<name>/<date_time>)")
    p.add_argument("--keep-probes", action="store_true",
                   help="keep every probe's job folder under <out>/probes/")
    return p


def realization_ids(text: str) -> list[int]:
    """`--realizations`: a count R (0..R-1), a range `5-9` or a list `5,7`, as the
    realisations, or a ConfigError naming the flag and the value."""
    try:
        if "-" in text:
            lo, hi = (int(v) for v in text.split("-", 1))
            ids = list(range(lo, hi + 1))
        elif "," in text:
            ids = [int(v) for v in text.split(",")]
        else:
            count = int(text)
            if count < 1:
                raise ConfigError(f"--realizations={text}: must be >= 1")
            ids = list(range(count))
    except ValueError:
        raise ConfigError(f"--realizations={text!r}: give a count (5), a range (5-9) or a "
                          "list (5,7,8)") from None
    if not ids or min(ids) < 0 or len(set(ids)) != len(ids):
        raise ConfigError(f"--realizations={text!r}: needs distinct realisations >= 0")
    return ids


def default_realizations(cfg: DictConfig) -> list[int]:
    """The realisations a search runs without `--realizations`: those a multirun of `cfg`
    sweeps when it lists them or repeats more than once, else 0-2."""
    if OmegaConf.select(cfg, "realizations") is None and int(cfg.get("repeats", 1)) == 1:
        return [0, 1, 2]
    return swept_realizations(cfg)


def _split(overrides: Sequence[str]) -> tuple[list[str] | None, list[str]]:
    """(the schedulers a `scheduler=` override names, or None; the other overrides).
    A sweep (comma list) of anything but the scheduler is refused: one config per search."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    schedulers: list[str] | None = None
    rest: list[str] = []
    for arg in overrides:
        ov = parser.parse_override(arg)
        if ov.key_or_group == "scheduler":
            schedulers = [str(v) for v in (ov.sweep_string_iterator()
                                           if ov.is_sweep_override() else [ov.value()])]
        elif ov.is_sweep_override():
            raise ConfigError(f"override {arg!r}: the capacity search runs one config per "
                              "scheduler; run one search per value (only scheduler=a,b may "
                              "list several)")
        else:
            rest.append(arg)
    return schedulers, rest


def compose(overrides: Sequence[str]) -> DictConfig:
    """The run config `python -m experiments.run OVERRIDES` would run, checked as it checks
    a command line (one line on an error)."""
    from experiments.run.config import CONF_DIR, compose_run_config
    from experiments.run.preflight import check_command_line

    problem = check_command_line(list(overrides), CONF_DIR)
    if problem:
        raise ConfigError(problem)
    return compose_run_config(overrides)


def default_schedulers(overrides: Sequence[str]) -> list[str]:
    """The schedulers a multirun of these overrides sweeps (the preset's or the default
    comparison)."""
    from experiments.run.config import CONF_DIR
    from experiments.run.preflight import configured_schedulers

    groups = [o for o in overrides if o.split("=", 1)[0] == "experiment"]
    return configured_schedulers(CONF_DIR, groups, True)


def _start_rate(cfg: DictConfig, param: str) -> float:
    value = OmegaConf.select(cfg, f"workload.{param}")
    rate = float(value) if value is not None else math.nan
    if not (math.isfinite(rate) and rate > 0):
        raise ConfigError(f"workload.{param}={value!r}: the search starts from the "
                          f"workload's own rate; give a finite one (workload.{param}=N)")
    return rate


def _check_searchable(cfg: DictConfig) -> None:
    if OmegaConf.select(cfg, "workload.load") is not None:
        raise ConfigError(f"workload.load={cfg.workload.load}: the capacity search sets the "
                          "rate itself; drop workload.load (and workload.capacity_file)")
    slo = {k: v for k, v in (OmegaConf.to_container(cfg.slo) or {}).items()  # type: ignore[union-attr]
           if k != "name" and v is not None}
    if not slo:
        raise ConfigError("slo: no targets (slo=none?): the capacity is the highest rate "
                          "at which requests meet their SLO targets; give some, e.g. "
                          "slo=default or slo.e2el=5000")


def _search(cfg: DictConfig, param: str, ids: Sequence[int], tolerance: float,
            target: float, out: Path, keep: bool, cache: RunCache, log: Any,
            label: str) -> dict[str, Any]:
    """One search over realisations `ids` (mean attainment over them, `RULE`): the capacity,
    its requests/s, the final bracket (or a note when none was found) and every probe."""
    probes: list[Probe] = []

    def passes(rate: float) -> bool:
        p = run_probe(cfg, param, rate, ids, target, out, keep, cache)
        probes.append(p)
        if log is not None:
            log(f"  {label}: workload.{param}={rate:.6g}: attainment {p.attainment:.3f} "
                f"({'pass' if p.passed else 'fail'})")
        return p.passed

    entry: dict[str, Any] = {}
    try:
        found = find_capacity(passes, _start_rate(cfg, param), tolerance,
                              low=MIN_RATE, high=MAX_RATE)
    except BracketError as e:
        entry.update(capacity=None, capacity_request_rate=None, bracket=None, note=str(e))
    else:
        at = next(p for p in probes if p.rate == found.capacity)
        entry.update(capacity=found.capacity,
                     capacity_request_rate=at.offered_request_rate,
                     bracket=[found.lo, found.hi], attainment=at.attainment)
    entry["probes"] = [p.as_dict() for p in probes]
    return entry


def search_scheduler(cfg: DictConfig, param: str, realizations: int | Sequence[int],
                     tolerance: float, target: float, out: Path, keep: bool,
                     log: Any = None, per_window: bool = False,
                     scheduler_free: Sequence[str] = ()) -> dict[str, Any]:
    """One scheduler's capacity entry of capacity.json (the search and every probe); with
    `per_window`, each realisation's own search under `per_realization` (keyed by the
    realisation as text), the same bisection and tolerance over that realisation alone. The
    searches share their runs: a (rate, realisation) the pooled search ran is not run again,
    and `simulated_runs` counts the runs made."""
    name = str(cfg.scheduler.name)
    ids = list(range(realizations)) if isinstance(realizations, int) else list(realizations)
    cache: RunCache = {}
    folder = out / "probes" / name
    pooled = _search(cfg, param, ids, tolerance, target, folder, keep, cache, log, name)
    pooled.pop("attainment", None)  # the pooled entry keeps the fields it always had
    entry: dict[str, Any] = {"scheduler_config": scheduler_config(cfg), **pooled}
    if scheduler_free:
        entry["scheduler_free"] = sorted(scheduler_free)
    if per_window:
        entry["per_realization"] = {
            str(k): _search(cfg, param, [k], tolerance, target, folder, keep, cache, log,
                            f"{name} window {k}")
            for k in ids}
        entry["simulated_runs"] = len(cache)
    return entry


def run(argv: Sequence[str], log: Any = print) -> tuple[Path, dict[str, Any]]:
    """Run the capacity search of a command line; returns capacity.json's path and data."""
    args = _parser().parse_args(list(argv))
    if not (0 < args.tolerance < 1):
        raise ConfigError(f"--tolerance={args.tolerance}: must be in (0, 1)")
    if not (0 < args.target <= 1):
        raise ConfigError(f"--target={args.target}: must be in (0, 1]")
    chosen, rest = _split(args.overrides)
    schedulers = chosen or default_schedulers(rest)
    configs = {s: compose([*rest, f"scheduler={s}"]) for s in schedulers}
    # keyed by the scheduler's name, which a job's load looks up (`resolve_load`): a config
    # option such as sglang_optimistic runs, and is recorded as, the scheduler it names
    by_name: dict[str, DictConfig] = {}
    for option, cfg in configs.items():
        name = str(cfg.scheduler.name)
        if name in by_name:
            first_option = next(o for o, c in configs.items() if c is by_name[name])
            raise ConfigError(f"scheduler={first_option},{option}: both run scheduler "
                              f"{name}, and a capacity file holds one capacity per "
                              "scheduler; run one search for each")
        by_name[name] = cfg
    first = configs[schedulers[0]]
    for cfg in configs.values():
        _check_searchable(cfg)
    ids = (realization_ids(str(args.realizations)) if args.realizations is not None
           else default_realizations(first))
    free = [k for k in str(args.scheduler_free).split(",") if k]
    for name, cfg in by_name.items():
        unknown = sorted(set(free) - set(scheduler_config(cfg)))
        if unknown:
            raise ConfigError(f"--scheduler-free={args.scheduler_free}: scheduler={name} has "
                              f"no key(s) {', '.join(unknown)}")
    param = rate_param(OmegaConf.to_container(first.workload))  # type: ignore[arg-type]
    start = _start_rate(first, param)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    out = Path(args.out) if args.out else Path("capacity") / str(first.name) / stamp
    out.mkdir(parents=True, exist_ok=True)
    config = capacity_config(first)
    data: dict[str, Any] = {
        "kind": CAPACITY_KIND, "format": CAPACITY_FORMAT,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": ["python", "-m", "experiments.capacity", *argv],
        "overrides": list(args.overrides),
        "rate_param": f"workload.{param}", "rate_value": start,
        "target": args.target, "rule": RULE, "tolerance": args.tolerance, "growth": 2.0,
        "realizations": len(ids), "realization_ids": ids,
        "per_window": bool(args.per_window), "seed": int(first.seed),
        "config_digest": config_digest(config), "config": config, "schedulers": {},
    }
    log(f"capacity search: workload.{param} from {start:g}, SLO attainment >= "
        f"{args.target:g} (mean over realisation(s) {_ids_text(ids)}), tolerance "
        f"{args.tolerance:g}{'; and per window' if args.per_window else ''}")
    # keyed by the scheduler's name, which a job's load looks up (`resolve_load`): a config
    # option such as sglang_optimistic runs, and is recorded as, the scheduler it names
    for name, cfg in by_name.items():
        data["schedulers"][name] = search_scheduler(cfg, param, ids, args.tolerance,
                                                    args.target, out, args.keep_probes,
                                                    log, per_window=args.per_window,
                                                    scheduler_free=free)
    path = write_text(json.dumps(data, indent=1) + "\n", out / "capacity.json")
    return path, data


def _ids_text(ids: Sequence[int]) -> str:
    """Realisations as text: `0-4` for a run of consecutive ones, else `5,7,8`."""
    ids = list(ids)
    if len(ids) > 1 and ids == list(range(ids[0], ids[-1] + 1)):
        return f"{ids[0]}-{ids[-1]}"
    return ",".join(map(str, ids))


def format_table(data: dict[str, Any]) -> str:
    """capacity.json as a text table, one row per scheduler; a per-window file adds a row
    per scheduler and window, and each scheduler's spread over its windows."""
    from experiments.report.figures import SCHEDULER_NAMES

    param = str(data["rate_param"])
    count = int(data["realizations"])
    ids = list(data.get("realization_ids") or range(count))
    which = "" if ids == list(range(count)) else f" ({_ids_text(ids)})"
    head = (f"{'scheduler':<12} {param:>24} {'req/s':>9} {'bracket':>21} {'probes':>7}")
    lines = [f"Capacity: the highest {param} with mean SLO attainment >= "
             f"{data['target']:g} over {count} realisation(s){which}, to "
             f"{data['tolerance']:.0%}", head]
    for name, e in data["schedulers"].items():
        label = SCHEDULER_NAMES.get(name, name)
        if e["capacity"] is None:
            lines.append(f"{label:<12} none: {e.get('note')}")
            continue
        lines.append(_row(label, e))
    windows = {n: e["per_realization"] for n, e in data["schedulers"].items()
               if e.get("per_realization")}
    if windows:
        lines += ["", f"Per window: each realisation's own search (SLO attainment >= "
                      f"{data['target']:g} on that window alone, same bisection)",
                  f"{'scheduler':<12} {'window':>6} {param:>24} {'req/s':>9} "
                  f"{'attained':>8} {'bracket':>21} {'probes':>7}"]
        for name, per in windows.items():
            label = SCHEDULER_NAMES.get(name, name)
            for k, w in per.items():
                if w["capacity"] is None:
                    lines.append(f"{label:<12} {k:>6} none: {w.get('note')}")
                    continue
                lo, hi = w["bracket"]
                req = w.get("capacity_request_rate")
                lines.append(f"{label:<12} {k:>6} {w['capacity']:>24.4g} "
                             f"{(f'{req:.3g}' if req is not None else 'n/a'):>9} "
                             f"{w['attainment']:>8.3f} {f'[{lo:.4g}, {hi:.4g})':>21} "
                             f"{len(w['probes']):>7}")
        lines += ["", "Spread over the windows (min - max; max / min):"]
        for name, per in windows.items():
            label = SCHEDULER_NAMES.get(name, name)
            found = [float(w["capacity"]) for w in per.values() if w["capacity"] is not None]
            if not found:
                lines.append(f"{label:<12} no window has a capacity")
                continue
            spread = (f"{param} {min(found):.4g} - {max(found):.4g} "
                      f"({max(found) / min(found):.2f}x)")
            reqs = [float(w["capacity_request_rate"]) for w in per.values()
                    if w.get("capacity_request_rate") is not None]
            if reqs:
                spread += (f"; req/s {min(reqs):.3g} - {max(reqs):.3g} "
                           f"({max(reqs) / min(reqs):.2f}x)")
            missing = len(per) - len(found)
            lines.append(f"{label:<12} {spread}"
                         + (f"; {missing} window(s) without one" if missing else "")
                         + (f"; {data['schedulers'][name]['simulated_runs']} simulated "
                            "runs in all" if "simulated_runs" in data["schedulers"][name]
                            else ""))
    return "\n".join(lines)


def _row(label: str, e: dict[str, Any]) -> str:
    req = e.get("capacity_request_rate")
    lo, hi = e["bracket"]
    return (f"{label:<12} {e['capacity']:>24.4g} "
            f"{(f'{req:.3g}' if req is not None else 'n/a'):>9} "
            f"{f'[{lo:.4g}, {hi:.4g})':>21} {len(e['probes']):>7}")


def main(argv: Sequence[str] | None = None) -> None:
    """The command line: run, write capacity.json, print the table; a user error is one
    line and exit status 1."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        path, data = run(argv)
    except UserError as e:
        if debug_enabled():
            raise
        sys.exit(one_line(e))
    print(format_table(data))
    print(f"wrote {path}")
