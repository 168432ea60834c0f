"""`python -m experiments.capacity [options] [overrides]` (or `schedbench-capacity`): per
scheduler, the highest arrival rate at which SLO attainment stays at the target.

    python -m experiments.capacity workload.num_requests=200          # vLLM and SGLang
    python -m experiments.capacity scheduler=vllm --realizations 3 --tolerance 0.02
    python -m experiments.run -m workload.load=0.5,0.7,0.9,1.1 \\
        workload.capacity_file=capacity/default/<date_time>/capacity.json

The overrides are those of `python -m experiments.run` (the same conf/, presets included);
`scheduler=a,b` picks the schedulers (default: those a multirun of the config sweeps). For
each scheduler the workload's rate parameter (experiments/run/load.py `RATE_PARAMS`) is
searched from the config's own value (`search.find_capacity`: x2 until a probe fails, then
bisection to `--tolerance`), each probe run over `--realizations` realisations in this
process (`probes.run_probe`). Writes `capacity.json` (the file `workload.capacity_file`
reads) into `--out` and prints a table.
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

from experiments.capacity.probes import RULE, TARGET, Probe, run_probe
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
from experiments.user_error import ConfigError, UserError, debug_enabled, one_line
from schedulers.config_range import MAX_RATE, MIN_RATE


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m experiments.capacity",
        description="Per scheduler, the highest arrival rate at which SLO attainment stays "
                    ">= the target (mean over realisations), by bracketing and bisection.")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, as for experiments.run")
    p.add_argument("--realizations", type=int, default=3,
                   help="realisations per probe: workload.realization=0..R-1 (default 3)")
    p.add_argument("--tolerance", type=float, default=0.02,
                   help="relative width of the final bracket (default 0.02)")
    p.add_argument("--target", type=float, default=TARGET,
                   help="SLO attainment a probe must reach (default 0.9)")
    p.add_argument("--out", default=None,
                   help="output folder (default capacity/<name>/<date_time>)")
    p.add_argument("--keep-probes", action="store_true",
                   help="keep every probe's job folder under <out>/probes/")
    return p


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


def search_scheduler(cfg: DictConfig, param: str, realizations: int, tolerance: float,
                     target: float, out: Path, keep: bool, log: Any = None
                     ) -> dict[str, Any]:
    """One scheduler's capacity entry of capacity.json (the search and every probe)."""
    probes: list[Probe] = []
    name = str(cfg.scheduler.name)

    def passes(rate: float) -> bool:
        p = run_probe(cfg, param, rate, realizations, target, out / "probes" / name, keep)
        probes.append(p)
        if log is not None:
            log(f"  {name}: workload.{param}={rate:.6g}: attainment {p.attainment:.3f} "
                f"({'pass' if p.passed else 'fail'})")
        return p.passed

    entry: dict[str, Any] = {"scheduler_config": scheduler_config(cfg)}
    try:
        found = find_capacity(passes, _start_rate(cfg, param), tolerance,
                              low=MIN_RATE, high=MAX_RATE)
    except BracketError as e:
        entry.update(capacity=None, capacity_request_rate=None, bracket=None, note=str(e))
    else:
        at = next(p for p in probes if p.rate == found.capacity)
        entry.update(capacity=found.capacity,
                     capacity_request_rate=at.offered_request_rate,
                     bracket=[found.lo, found.hi])
    entry["probes"] = [p.as_dict() for p in probes]
    return entry


def run(argv: Sequence[str], log: Any = print) -> tuple[Path, dict[str, Any]]:
    """Run the capacity search of a command line; returns capacity.json's path and data."""
    args = _parser().parse_args(list(argv))
    if args.realizations < 1:
        raise ConfigError(f"--realizations={args.realizations}: must be >= 1")
    if not (0 < args.tolerance < 1):
        raise ConfigError(f"--tolerance={args.tolerance}: must be in (0, 1)")
    if not (0 < args.target <= 1):
        raise ConfigError(f"--target={args.target}: must be in (0, 1]")
    chosen, rest = _split(args.overrides)
    schedulers = chosen or default_schedulers(rest)
    configs = {s: compose([*rest, f"scheduler={s}"]) for s in schedulers}
    first = configs[schedulers[0]]
    for cfg in configs.values():
        _check_searchable(cfg)
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
        "realizations": args.realizations, "seed": int(first.seed),
        "config_digest": config_digest(config), "config": config, "schedulers": {},
    }
    log(f"capacity search: workload.{param} from {start:g}, SLO attainment >= "
        f"{args.target:g} (mean over {args.realizations} realisation(s)), tolerance "
        f"{args.tolerance:g}")
    for name, cfg in configs.items():
        data["schedulers"][name] = search_scheduler(cfg, param, args.realizations,
                                                    args.tolerance, args.target, out,
                                                    args.keep_probes, log)
    path = write_text(json.dumps(data, indent=1) + "\n", out / "capacity.json")
    return path, data


def format_table(data: dict[str, Any]) -> str:
    """capacity.json as a text table, one row per scheduler."""
    from experiments.report.figures import SCHEDULER_NAMES

    param = str(data["rate_param"])
    head = (f"{'scheduler':<12} {param:>24} {'req/s':>9} {'bracket':>21} {'probes':>7}")
    lines = [f"Capacity: the highest {param} with mean SLO attainment >= "
             f"{data['target']:g} over {data['realizations']} realisation(s), to "
             f"{data['tolerance']:.0%}", head]
    for name, e in data["schedulers"].items():
        label = SCHEDULER_NAMES.get(name, name)
        if e["capacity"] is None:
            lines.append(f"{label:<12} none: {e.get('note')}")
            continue
        req = e.get("capacity_request_rate")
        lo, hi = e["bracket"]
        lines.append(f"{label:<12} {e['capacity']:>24.4g} "
                     f"{(f'{req:.3g}' if req is not None else 'n/a'):>9} "
                     f"{f'[{lo:.4g}, {hi:.4g})':>21} {len(e['probes']):>7}")
    return "\n".join(lines)


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
