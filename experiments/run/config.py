"""Structured configs: the schema of every config group, registered in Hydra's ConfigStore.

Each YAML file of `conf/` names its schema first in its defaults list (`- base_vllm`), so
Hydra checks every key and type while composing: a typo in an override fails before anything
runs (and `explain_override_error` then lists the valid keys). Schemas of the scheduler,
model, hardware and workload groups are mirrored from the dataclasses that those objects are
built from (`mirror`), so a field added there is a valid key here at once.

    register_configs()      # idempotent; experiments.run calls it at import
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import typing
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from engines.admission import AdmissionLimits
from engines.executors.specs import HardwareSpec, ModelSpec
from experiments.inputs.workloads import PARAMS as WORKLOAD_PARAMS
from experiments.inputs.workloads import LengthDist
from experiments.inputs.workloads.transforms import MAX_REALIZATION
from experiments.paths import PROJECT_ROOT
from experiments.run.realizations import register as register_realizations
from schedulers import registry
from schedulers.config_range import INT64_MAX, MAX_KV_SLOTS, MAX_TOKENS, MEMORY_WHY, ranged
from schedulers.eviction import EvictionOptions

_MIRRORS: dict[type, type] = {}
# The mirrored schemas by class name: pickle finds them through the module's `__getattr__`.
_BY_NAME: dict[str, type] = {}


def __getattr__(name: str) -> type:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def mirror(cls: type, name: str, *, drop: Sequence[str] = (),
           extra: Sequence[tuple[str, Any, Any]] = (), optional: Sequence[str] = (),
           last: Collection[str] = (), null_default: Collection[str] = ()) -> type:
    """A plain (mutable) dataclass with the fields, types and defaults of dataclass `cls`,
    minus `drop`, plus `extra` (name, type, default) first and the fields in `last` last;
    fields in `optional` also accept null, those in `null_default` are null by default
    (the run fills them in); required fields default to MISSING. Nested
    dataclass types are mirrored too. The class is found as this module's attribute `name`
    (`__getattr__` below reads `_BY_NAME`), so configs that hold it pickle (the joblib
    launcher ships them to workers)."""
    assert dataclasses.is_dataclass(cls)
    hints = typing.get_type_hints(cls)
    specs: list[tuple[str, Any, Any]] = []
    for fname, typ, default in extra:  # a default made by `ranged` keeps its range
        specs.append((fname, typ, default if isinstance(default, dataclasses.Field)
                      else field(default=default)))
    for f in sorted(dataclasses.fields(cls), key=lambda f: f.name in last):
        if f.name in drop:
            continue
        typ = hints[f.name]
        if f.name in optional or f.name in null_default:
            typ = typ | None
        if dataclasses.is_dataclass(typ) and isinstance(typ, type):
            sub = _MIRRORS.get(typ) or mirror(typ, f"{typ.__name__}Schema")
            specs.append((f.name, sub, field(default_factory=sub)))
            continue
        if f.name in null_default:
            default = None
        elif f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = MISSING
        specs.append((f.name, typ, field(default=default, metadata=f.metadata)))  # its range
    out = dataclasses.make_dataclass(name, specs, kw_only=True)
    out.__module__ = __name__
    out.__doc__ = f"Config schema mirrored from {cls.__module__}.{cls.__qualname__}."
    if _BY_NAME.setdefault(name, out) is not out:
        raise ValueError(f"config schema {name!r} is mirrored twice")
    _MIRRORS[cls] = out
    return out


class Progress(enum.Enum):
    """When the replay shows a progress bar: `auto` on a terminal unless CI is set."""

    auto = "auto"
    on = "on"
    off = "off"


class OnError(enum.Enum):
    """What a job does when it stops with an error (a deadlock, a broken invariant, a bad
    value): `fail` fails the job (and the sweep); `record` writes a summary.json with status
    "failed" and the error, so that the rest of a sweep runs and the report shows it."""

    fail = "fail"
    record = "record"


@dataclass
class SloConfig:
    """Goodput targets in ms (null: no target); a request is good when it meets all."""

    ttft: float | None = ranged(None, low=0.0, low_open=True, high=1e9)
    tpot: float | None = ranged(None, low=0.0, low_open=True, high=1e9)
    e2el: float | None = ranged(None, low=0.0, low_open=True, high=1e9)


@dataclass
class NoLogger:
    """No logger: the job writes only its folder."""

    name: str = "none"


@dataclass
class WandbConfig:
    """Weights & Biases: one run per job, grouped by sweep invocation, plus one sweep run
    with the comparison table and figures (see experiments/run/wandb_log.py).

    `mode` offline writes the run under `dir` (null: the job folder) for `wandb sync` later;
    online needs `wandb login`.
    """

    name: str = "wandb"
    project: str = "schedbench"  # the W&B project
    entity: str | None = None  # the W&B team or user (null: your default)
    mode: str = "offline"  # offline | online | disabled
    dir: str | None = None  # where runs are written (null: the job folder)
    group: str | None = None  # the run group (null: one per sweep invocation)
    tags: list[str] = field(default_factory=list)  # tags on every run
    log_requests_table: bool = True  # log the per-request table
    max_table_rows: int = ranged(  # rows of that table (the first by arrival)
        20000, low=0, high=10**7)
    log_figures: bool = True  # log the job's figures
    history_bins: int = ranged(  # points of the history on simulated time (0: none)
        300, low=0, high=10**6)
    quiet: bool = True  # no console capture, system metrics, machine or code snapshots


@dataclass
class SimExecutorConfig:
    """The simulated executor (engines/executors/sim.py) and its cost model.

    `cost_model`: roofline (the model's shape and the hardware's peaks, derated by the
    efficiencies, plus `step_overhead_s`) or profile (`FittedCostModel` fitted to the
    measurements of `profile`, a JSON file from scripts/profile_executor.py; a relative path
    is taken from the project root) or profile_batch (that fit, with a factor per decode
    batch size measured in the profile: engines/decode_batch_cost.py) or measured
    (per-operator GPU measurements of the model on the hardware, interpolated at each step's
    shapes: engines/measured_cost.py; `profile` null: the pair's folder under
    conf/profiles/measured/) or fitted_roofline (the roofline fitted to those measurements
    for the hardware; a GPU without measurements, e.g. h200 or a10, borrows the fit of the
    GPU its `hardware.fit_from` names). `extrapolate` false: a measured
    profile refuses a shape outside its measured range instead of extrapolating it.
    """

    name: str = "sim"
    cost_model: str = "roofline"
    profile: str | None = None
    extrapolate: bool = True
    # a minute per step is beyond any engine; larger values overflow the virtual clock
    step_overhead_s: float = ranged(0.002, low=0.0, high=60.0)
    flops_efficiency: float = ranged(1.0, low=0.0, low_open=True, high=1.0)
    bandwidth_efficiency: float = ranged(1.0, low=0.0, low_open=True, high=1.0)


@dataclass
class RealExecutorSchema:
    """The real executor (engines/executors/real.py): a Hugging Face checkpoint folder run by
    our paged decoder. `kernel`: auto | torch | triton | flash_attn; `dtype` null: float32 on a
    CPU, bfloat16 on a GPU; `device` null: the GPU when there is one. `model_path` null: the
    model group's `checkpoint` (e.g. model=smollm2_135m). `timer`: auto (reference on a CPU,
    wall on a GPU) | wall | cpu (the process's CPU time, one torch thread) | min_of_k (each
    step's forward pass run `timer_repeats` times, the fastest kept: steady on a machine
    shared with other work) | reference (min_of_k scaled by a fixed reference step's time
    over its fastest pass beside the step's: a slowdown both share cancels;
    `timer_reference_s` pins the reference's time, null: measured at start;
    `timer_prefill_repeats`: the passes of a step with a prefill chunk, null: `timer_repeats`;
    DESIGN.md "The real executor's step clock").
    `auto_kv_capacity_tokens`: the pool `kv_capacity_tokens=auto` (the default) gives this
    executor: auto sizes a simulated GPU's memory, which says nothing of the host or device
    the real model runs on, so the real executor takes this stated number instead (recorded
    as the pool's source in summary.json)."""

    name: str = "real"
    model_path: str | None = None
    kernel: str = "auto"
    dtype: str | None = None
    device: str | None = None
    timer: str = "auto"
    timer_repeats: int = ranged(2, low=1, high=100)
    timer_reference_s: float | None = ranged(None, low=0.0, low_open=True, high=3600.0)
    timer_prefill_repeats: int | None = ranged(None, low=1, high=100)
    auto_kv_capacity_tokens: int = ranged(16384, low=1, high=1 << 40)


AdmissionSchema = mirror(AdmissionLimits, "AdmissionSchema", optional=(
    "max_num_queued_reqs", "max_num_queued_tokens"))


@dataclass
class RunConfig:
    """The top-level config: one job = one scheduler x one workload x one executor.

    `kv_capacity_tokens` is the KV pool in token slots, the same for every scheduler of a
    comparison (vLLM: that many / block_size blocks), or `auto`: the pool vLLM would leave
    for the model on the hardware with `gpu_memory_utilization` of its memory
    (engines/kv_pool.py); `max_model_len`, when set, is the
    context length of either scheduler (vLLM `max_model_len`, SGLang `context_length`); null:
    each scheduler's own setting, else the model's (`experiments.run.build.context_length`);
    above the model's own only with `allow_long_max_model_len` (the summary then warns).
    `name` labels the experiment (sweep folder, W&B group, report titles).
    `check_invariants` checks the scheduler's KV bookkeeping after every step (slower);
    `resume` skips a job whose folder already holds a complete result for this config.
    `admission` holds the front-door limits (engines/admission.py: queued requests and their
    prompt tokens; null: unlimited), refusing an arrival over them with 503.
    `realizations` lists the realisations a multirun sweeps (`workload.realization:
    ${realization_sweep:${realizations},${repeats}}` in conf/config.yaml's sweeper params:
    experiments/run/realizations.py); null: `range(repeats)`, the first `repeats`, and with a
    list `repeats` is 1 or the list's length. `holdout_realizations` lists realisations held
    out of the sweep, disjoint from it (trace windows for scripts/holdout_check.py); a single
    run ignores all three.
    """

    scheduler: Any = MISSING
    executor: Any = MISSING
    model: Any = MISSING
    hardware: Any = MISSING
    workload: Any = MISSING
    slo: Any = MISSING
    logger: Any = MISSING
    seed: int = ranged(0, low=0, high=INT64_MAX)
    repeats: int = ranged(1, low=1, high=10_000)
    realizations: list[int] | None = None
    holdout_realizations: list[int] = field(default_factory=list)
    kv_capacity_tokens: Any = ranged(16384, low=1, high=MAX_KV_SLOTS, why=MEMORY_WHY,
                                     special={"auto": "the pool vLLM leaves on the hardware"})
    gpu_memory_utilization: float = ranged(0.92, low=0.0, low_open=True, high=1.0)
    max_model_len: int | None = ranged(None, low=1, high=MAX_TOKENS)
    allow_long_max_model_len: bool = False
    progress: Progress = Progress.auto
    on_error: OnError = OnError.fail
    check_invariants: bool = False
    resume: bool = False
    name: str = "default"
    admission: AdmissionSchema = field(default_factory=AdmissionSchema)  # type: ignore[valid-type]


def scheduler_schema(entry: registry.SchedulerEntry) -> type:
    """The config schema of a registered scheduler (its config class mirrored, less the
    capacity field, plus `name`; the context field may be null: the model's then, see
    `experiments.run.build.context_length`; so may the entry's `device_fields`: resolved from
    the hardware then, see `experiments.run.build.scheduler_fields`), made once per scheduler."""
    schema = SCHEDULER_SCHEMAS.get(entry.name)
    if schema is None:
        cls_name = entry.config_cls.__name__
        optional: tuple[str, ...] = (
            (entry.context_field,) if entry.context_field is not None else ())
        optional += entry.device_fields  # null: resolved from the hardware
        # the eviction options every scheduler shares (a base class) after its own fields
        shared = [f.name for f in dataclasses.fields(EvictionOptions)] if entry.evicts else []
        # random_seed null: the run's seed of its realisation (experiments/run/main.py)
        schema = mirror(entry.config_cls, f"{cls_name.removesuffix('Config')}Schema",
                        drop=(entry.capacity_field,), extra=[("name", str, entry.name)],
                        optional=optional, last=shared,
                        null_default=("random_seed",) if entry.evicts else ())
        SCHEDULER_SCHEMAS[entry.name] = schema
    return schema


# Built at import, so that every schema class exists under its name in this module (configs
# that hold one unpickle in joblib workers); a scheduler registered later gets its schema when
# `register_configs` next runs.
SCHEDULER_SCHEMAS: dict[str, type] = {}
for _entry in registry.entries():
    scheduler_schema(_entry)
LengthDistSchema = mirror(LengthDist, "LengthDistSchema")
# `load` and `capacity_file` in every workload (each has an arrival rate): the rate parameter
# set to load x the scheduler's capacity in that file (experiments/run/load.py)
_LOAD_FIELDS: list[tuple[str, Any, Any]] = [
    ("load", float | None, ranged(None, low=0.0, low_open=True, high=1e6)),
    ("capacity_file", str | None, None),
]
# `realization` in every workload (trace replays read it as a field of ReplayOptions; the
# generators' realisations are seeds: experiments/inputs/workloads/realization.py)
WORKLOAD_SCHEMAS = {name: mirror(params, f"{params.__name__}Schema",
                                 extra=[("name", str, name)] + (
                                     [] if any(f.name == "realization"
                                               for f in dataclasses.fields(params))
                                     else [("realization", int, ranged(
                                         0, low=0, high=MAX_REALIZATION))])
                                 + _LOAD_FIELDS,
                                 optional=("seed",))
                    for name, params in WORKLOAD_PARAMS.items()}
ModelSchema = mirror(ModelSpec, "ModelSchema")
HardwareSchema = mirror(HardwareSpec, "HardwareSchema")
_REGISTERED = False
_STORED_SCHEDULERS: set[str] = set()


def register_configs() -> None:
    """Store every schema in Hydra's ConfigStore (once per process; the schema of a scheduler
    registered since, on the next call), the `${schedulers:}` resolver and the realisations'
    `${realization_sweep:...}` (experiments/run/realizations.py)."""
    global _REGISTERED
    cs = ConfigStore.instance()
    for entry in registry.entries():
        if entry.name not in _STORED_SCHEDULERS:
            cs.store(group="scheduler", name=f"base_{entry.name}", node=scheduler_schema(entry))
            _STORED_SCHEDULERS.add(entry.name)
    if _REGISTERED:
        return
    # `${schedulers:}`: the registry's schedulers as a sweep list ("vllm,sglang"), for presets
    # that sweep every scheduler; `${schedulers:evicts}` (or swaps, ...): only those that
    # declare the capability, for presets that sweep eviction choices
    OmegaConf.register_new_resolver(
        "schedulers", lambda capability=None: ",".join(registry.names(capability or None)),
        replace=True)
    # `${realization_sweep:${realizations},${repeats}}`: the listed realisations (else
    # range(repeats)) as the sweeper's choice of workload.realization
    register_realizations()
    # `${schedbench_groups:}`: the options a user picks, for `--help` (Hydra's own list,
    # $APP_CONFIG_GROUPS, shows the schemas `base_*` too)
    OmegaConf.register_new_resolver(
        "schedbench_groups", lambda: "\n".join(
            f"{g}: {', '.join(group_options(g))}" for g in GROUPS),
        replace=True)
    cs.store(name="base_config", node=RunConfig)
    for name, schema in WORKLOAD_SCHEMAS.items():
        cs.store(group="workload", name=f"base_{name}", node=schema)
    cs.store(group="model", name="base_model", node=ModelSchema)
    cs.store(group="hardware", name="base_hardware", node=HardwareSchema)
    cs.store(group="executor", name="base_sim", node=SimExecutorConfig)
    cs.store(group="executor", name="base_real", node=RealExecutorSchema)
    cs.store(group="slo", name="base_slo", node=SloConfig)
    cs.store(group="logger", name="base_none", node=NoLogger)
    cs.store(group="logger", name="base_wandb", node=WandbConfig)
    _REGISTERED = True


# --- typo hints ------------------------------------------------------------------------------

GROUPS = ("scheduler", "executor", "model", "hardware", "workload", "slo", "logger",
          "experiment")


def group_options(group: str) -> list[str]:
    """The options of config group `group` a user picks (`conf/<group>/*.yaml`; the schemas
    `base_*` are not options)."""
    return sorted(p.stem for p in (PROJECT_ROOT / "conf" / group).glob("*.yaml")
                  if not p.stem.startswith("base_"))


def _key_overrides(args: Sequence[str]) -> tuple[list[list[str]], list[tuple[str, str]]]:
    """Split command-line overrides into group choices (every combination of swept values,
    as override strings) and plain `key.path=value` overrides (key, text)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    groups: list[list[str]] = []
    keys: list[tuple[str, str]] = []
    for arg in args:
        if arg.startswith("-"):
            continue
        try:
            ov = parser.parse_override(arg)
        except Exception:
            continue
        key = ov.key_or_group
        if ov.is_delete() or ov.is_add() or key.startswith("hydra"):
            if key.startswith("hydra.searchpath"):
                groups.append([arg])
            continue
        if key in GROUPS:
            groups.append([f"{key}={v}" for v in ov.sweep_string_iterator()]
                          if ov.is_sweep_override() else [arg])
        elif "/" not in key and "@" not in key:
            keys.append((key, arg))
    combos = [list(c) for c in itertools.product(*groups)][:16]
    return combos or [[]], keys


CONF_DIR = str(PROJECT_ROOT / "conf")


def compose_run_config(overrides: Sequence[str], config_dir: str | None = None,
                       return_hydra_config: bool = False,
                       config_name: str = "config") -> DictConfig:
    """The run config `config_name` composes with `overrides`, as a job gets it: the schemas
    registered, Hydra's global state cleared before and after (so a composition never leaks
    into the next, nor into a Hydra app of the same process); with `return_hydra_config`,
    Hydra's own node too. Hydra's errors propagate."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_configs()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=config_dir or CONF_DIR, version_base=None):
            return compose(config_name=config_name, overrides=list(overrides),
                           return_hydra_config=return_hydra_config)
    finally:
        GlobalHydra.instance().clear()


def explain_override_error(args: Sequence[str], config_dir: str,
                           config_name: str = "config") -> str | None:
    """When an override names a key that does not exist, a message naming it and listing the
    valid keys at that level; None when every key exists (the failure is something else)."""
    combos, keys = _key_overrides(args)
    if not keys:
        return None
    for groups in combos:
        try:
            cfg = compose_run_config(groups, config_dir, config_name=config_name)
        except Exception:
            continue
        for key, arg in keys:
            node: Any = cfg
            parts = key.split(".")
            for i, part in enumerate(parts):
                # `in` is False for a key whose value is missing (???): it exists all the same
                if isinstance(node, DictConfig) and part in set(node.keys()):
                    if OmegaConf.is_missing(node, part):
                        break  # a leaf without a value: the key is valid
                    node = node[part]
                    continue
                where = ".".join(parts[:i]) or "the top level"
                if not isinstance(node, DictConfig):
                    return (f"override {arg!r}: {where} is a value ({node!r}), not a group "
                            "of keys")
                valid = ", ".join(sorted(str(k) for k in node))
                choice = f" ({', '.join(groups)})" if groups else ""
                return (f"override {arg!r}: {where}{choice} has no key {part!r}; valid keys: "
                        f"{valid}")
    return None


def to_container(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config as plain Python (enums as their names)."""
    out = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    assert isinstance(out, dict)
    return {str(k): v for k, v in out.items()}
