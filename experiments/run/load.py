"""Load as a fraction of a scheduler's measured capacity (`workload.load`).

`python -m experiments.capacity` (experiments/capacity/) writes a capacity file: per
scheduler, the highest value of the workload's rate parameter (`RATE_PARAMS`: a generator's
`request_rate` or `conversation_rate`, a trace replay's `rate_scale`) at which SLO attainment
stays at the target. A job with `workload.load=L workload.capacity_file=PATH` runs at that
parameter = L x the capacity of its own scheduler (`resolve_load`), so a sweep over
`workload.load=0.5,0.7,0.9,1.1` puts every scheduler at the same fraction of its own
saturation. The file must have been made for this job's config (`capacity_config`: the
workload but its rate, realisation and seed, the model, hardware, executor, KV pool, context
length, admission limits, SLO targets, and the scheduler's own settings); anything else is a
`ConfigError` naming the field and the value. A file searched with `--per-window` also
holds each realisation's (trace window's) own capacity (`per_realization`): a job of
realisation k then runs at L x window k's capacity, the same distance from that window's
saturation whatever the window (`capacity_for`), and a realisation the file has no window
for is refused. An entry may list `scheduler_free` keys: scheduler settings its capacity
holds for whatever their value (a study that runs every victim policy and preemption mode at
the capacity of the default policy in recompute mode, so that all see the same arrivals:
scripts/reproduce_victim_policies.sh); a job differing from the searched config only in
those keys runs against it.

This module holds the file's format (`CAPACITY_FORMAT`, `capacity_config`,
`config_digest`), read here and written by experiments/capacity/.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from experiments.inputs.workloads.realization import check_realization
from experiments.user_error import ConfigError

CAPACITY_FORMAT = 1
CAPACITY_KIND = "schedbench capacity"
# The workload parameter that sets the arrival rate, per generator (`workload.name`).
RATE_PARAMS: dict[str, str] = {
    "synthetic": "request_rate",
    "shared_prefix": "request_rate",
    "multi_turn": "conversation_rate",
    "lengths": "request_rate",
    "prompts": "request_rate",
    "azure": "rate_scale",
    "mooncake": "rate_scale",
}
# Workload keys that do not change what the capacity means: the rate (what is searched),
# the load keys themselves, the draw (realisation and seed), and where this machine keeps
# the traces (trace_dir: a capacity file, and the digest a study's capacity.md records, must
# not depend on $SCHEDBENCH_TRACE_DIR; the file's name inside it stays in).
_WORKLOAD_FREE = ("load", "capacity_file", "realization", "seed", "trace_dir")
# Top-level keys that make up the config a capacity belongs to (besides the scheduler's own).
_MATCHED_TOP = ("workload", "model", "hardware", "executor", "kv_capacity_tokens",
                "gpu_memory_utilization", "max_model_len", "allow_long_max_model_len",
                "admission", "slo")
# Scheduler keys that a capacity does not depend on: the random policy's seed (derived from
# the realisation when null).
_SCHEDULER_FREE = ("random_seed",)


def _plain(node: Any) -> Any:
    if isinstance(node, DictConfig):
        return OmegaConf.to_container(node, resolve=True, enum_to_str=True)
    return node


def rate_param(workload: Mapping[str, Any]) -> str:
    """The name of the workload's rate parameter (`RATE_PARAMS`), or a ConfigError."""
    name = str(workload.get("name"))
    if name not in RATE_PARAMS:
        raise ConfigError(f"workload.name={name!r} has no arrival-rate parameter known to "
                          f"workload.load; known: {', '.join(RATE_PARAMS)}")
    return RATE_PARAMS[name]


def capacity_config(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a run config that a capacity depends on, as plain data (the scheduler's
    settings are kept apart, per scheduler: `scheduler_config`)."""
    out: dict[str, Any] = {}
    for key in _MATCHED_TOP:
        value = _plain(cfg.get(key))
        if key == "workload" and isinstance(value, dict):
            free = {*_WORKLOAD_FREE, RATE_PARAMS.get(str(value.get("name")), "")}
            value = {k: v for k, v in value.items() if k not in free}
        out[key] = value
    return out


def scheduler_config(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """The scheduler's settings that a capacity depends on."""
    sched = _plain(cfg.get("scheduler")) or {}
    return {k: v for k, v in dict(sched).items() if k not in _SCHEDULER_FREE}


def config_digest(config: Mapping[str, Any]) -> str:
    """A SHA-256 of `capacity_config`'s result (sorted JSON)."""
    text = json.dumps(config, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _differences(there: Any, here: Any, prefix: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(key, value there, value here) of every leaf that differs, in key order."""
    if isinstance(there, Mapping) and isinstance(here, Mapping):
        for k in sorted(set(there) | set(here), key=str):
            yield from _differences(there.get(k), here.get(k), f"{prefix}{k}.")
        return
    if there != here:
        yield prefix.rstrip("."), there, here


@dataclass(frozen=True, slots=True)
class LoadResolution:
    """A job's `workload.load` resolved against its capacity file: the rate parameter
    (`param`, a workload key) set to `load` x `capacity`; `capacity_request_rate` is the
    capacity in requests/s (what the workload offered there during the search); `target`
    the SLO attainment the capacity was searched for."""

    load: float
    capacity: float
    capacity_request_rate: float | None
    param: str
    rate: float
    capacity_file: str
    target: float | None = None
    source: str = "pooled"

    def summary(self) -> dict[str, Any]:
        """summary.json's load fields (`load_capacity_source`: `pooled`, the capacity over
        the searched realisations together, or `window K`, realisation K's own)."""
        return {"load": self.load, "load_capacity": self.capacity,
                "load_capacity_source": self.source,
                "load_capacity_request_rate": self.capacity_request_rate,
                "load_rate_param": f"workload.{self.param}", "load_rate": self.rate,
                "load_capacity_file": self.capacity_file, "load_target": self.target}


def read_capacity_file(path_text: str) -> dict[str, Any]:
    """The capacity file named by `workload.capacity_file`, or a ConfigError naming it."""
    path = Path(path_text).expanduser()
    where = f"workload.capacity_file={path_text!r}"
    if not path.is_file():
        raise ConfigError(f"{where}: no such file (write one with python -m "
                          "experiments.capacity ...; it is the capacity.json of its output)")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{where}: not a capacity file ({e})") from None
    if not isinstance(data, dict) or data.get("kind") != CAPACITY_KIND \
            or data.get("format") != CAPACITY_FORMAT:
        raise ConfigError(f"{where}: not a capacity file of format {CAPACITY_FORMAT} "
                          "(python -m experiments.capacity writes them)")
    return data


def resolve_load(cfg: DictConfig) -> tuple[dict[str, Any], LoadResolution | None]:
    """The job's workload config with the load keys removed and, when `workload.load` is
    set, its rate parameter set to load x the capacity of the job's scheduler in
    `workload.capacity_file`; and that resolution (None without a load). ConfigError: load
    without a capacity file (or the reverse), a file that is missing or not a capacity file,
    no entry for the scheduler, a file made for another config, or the rate parameter
    changed beside the load (they are one setting)."""
    workload = dict(_plain(cfg.workload))
    load = workload.pop("load", None)
    capacity_file = workload.pop("capacity_file", None)
    if load is None:
        if capacity_file is not None:
            raise ConfigError(f"workload.capacity_file={capacity_file!r} without "
                              "workload.load: set the load as a fraction of the capacity "
                              "(e.g. workload.load=0.5), or drop the capacity file")
        return workload, None
    load = float(load)
    if not (load > 0 and math.isfinite(load)):
        raise ConfigError(f"workload.load={load!r}: must be a finite number > 0")
    if capacity_file is None:
        raise ConfigError(f"workload.load={load:g} needs workload.capacity_file: the "
                          "capacity.json written by python -m experiments.capacity for this "
                          "config")
    param = rate_param(workload)
    data = read_capacity_file(str(capacity_file))
    where = f"workload.capacity_file={str(capacity_file)!r}"
    scheduler = str(cfg.scheduler.name)
    entries = data.get("schedulers") or {}
    entry = entries.get(scheduler)
    if entry is None:
        raise ConfigError(f"{where} has no capacity for scheduler={scheduler} (it has: "
                          f"{', '.join(entries) or 'none'}); run python -m "
                          f"experiments.capacity scheduler={scheduler} ... for it")
    here = capacity_config(cfg)
    free = set(entry.get("scheduler_free") or ())
    for there_cfg, here_cfg, prefix in ((data.get("config") or {}, here, ""),
                                        (_without(entry.get("scheduler_config") or {}, free),
                                         _without(scheduler_config(cfg), free),
                                         "scheduler.")):
        diff = next(_differences(there_cfg, here_cfg), None)
        if diff is not None:
            key, there, now = diff
            raise ConfigError(f"{where} was made for another config: {prefix}{key}="
                              f"{there!r} there, {now!r} here; run the capacity search "
                              "for this config")
    base = data.get("rate_value")
    if base is not None and workload.get(param) is not None \
            and float(workload[param]) != float(base):
        raise ConfigError(f"workload.load={load:g} and workload.{param}="
                          f"{workload[param]!r} together: the load sets {param} (load x "
                          f"capacity); leave {param} at the searched config's {base!r}, or "
                          "drop workload.load")
    chosen, source = capacity_for(entry, check_realization(workload.get("realization", 0)),
                                  where, scheduler)
    capacity = chosen.get("capacity")
    if capacity is None:
        raise ConfigError(f"{where}: scheduler={scheduler} has no capacity"
                          f"{'' if source == 'pooled' else ' for ' + source} "
                          f"({chosen.get('note') or 'the search found none'})")
    rate = load * float(capacity)
    workload[param] = rate
    req_rate = chosen.get("capacity_request_rate")
    return workload, LoadResolution(load=load, capacity=float(capacity),
                                    capacity_request_rate=(float(req_rate) if req_rate
                                                           is not None else None),
                                    param=param, rate=rate, capacity_file=str(capacity_file),
                                    target=(float(data["target"]) if data.get("target")
                                            is not None else None), source=source)


def _without(config: Mapping[str, Any], keys: set[str]) -> dict[str, Any]:
    """`config` less `keys` (a capacity entry's `scheduler_free`)."""
    return {k: v for k, v in config.items() if k not in keys}


def capacity_for(entry: Mapping[str, Any], realization: int, where: str, scheduler: str
                 ) -> tuple[Mapping[str, Any], str]:
    """The capacity a job of `realization` runs against in a scheduler's `entry`: window
    `realization`'s own when the file was searched per window (`per_realization`), else the
    pooled one; with its source (`window K` or `pooled`). A per-window file without that
    realisation is a ConfigError naming it and the windows the file has."""
    windows = entry.get("per_realization")
    if not windows:
        return entry, "pooled"
    window = windows.get(str(realization))
    if window is None:
        have = ", ".join(sorted(windows, key=int))
        raise ConfigError(f"{where} holds per-window capacities for scheduler={scheduler} "
                          f"of realisations {have}, not workload.realization={realization}: "
                          "search that window too (python -m experiments.capacity "
                          "--per-window --realizations ...), or run the realisations it has")
    return window, f"window {realization}"
