"""Turn config groups (conf/) into objects: scheduler, model, hardware, executor.

Each builder takes the group's mapping (a DictConfig or a plain dict) and names the group,
field and value in its errors.

Schedulers: `name` picks the entry of the scheduler registry (schedulers/registry.py) and every
other field is passed on by its upstream name: `entry.config_cls.from_capacity(
kv_capacity_tokens, **fields)` (vllm: `VllmSchedulerConfig`, sglang: `SglangSchedulerConfig`).
A config may instead set `target: "package.module:factory"`, called as
`factory(kv_capacity_tokens, **fields)` (for schedulers that live outside the project); the
top-level `max_model_len`, when set, is then passed as `max_model_len=`.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf

from engines.admission import AdmissionLimits
from engines.cost_model import CostModel, FittedCostModel, RooflineCostModel
from engines.decode_batch_cost import DecodeBatchCostModel
from engines.executors.base import Executor
from engines.executors.sim import SimExecutor
from engines.executors.specs import HardwareSpec, ModelSpec
from engines.kv_pool import KvPoolEstimate, auto_kv_pool
from engines.measured_cost import (
    MEASURED_DIR,
    FittedRooflineCostModel,
    MeasuredCostModel,
    MeasuredProfile,
    RooflineFit,
    available_pairs,
    borrowed_fit,
    measured_profile_folder,
)
from experiments.paths import project_path
from experiments.run.preflight import AUTO, check_real_executor, parse_kv_capacity
from schedulers import registry
from schedulers.contract import SYNCHRONOUS, LoopDeclaringScheduler, Scheduler
from schedulers.device_defaults import FROM_CONFIG, DeviceSpec, Setting

T = TypeVar("T")
EXECUTORS = ("sim", "real")


def as_dict(cfg: Mapping[str, Any] | DictConfig | None) -> dict[str, Any]:
    """A plain, resolved dict of a config node."""
    if cfg is None:
        return {}
    if isinstance(cfg, DictConfig):
        out = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
        assert isinstance(out, dict)
        return {str(k): v for k, v in out.items()}
    return dict(cfg)


def construct(cls: Callable[..., T], where: str, fields: Mapping[str, Any],
              valid: set[str] | None = None) -> T:
    """`cls(**fields)` after checking the field names against `valid` (default: the
    dataclass fields of `cls`); unknown names are reported with the valid ones."""
    if valid is None:
        assert dataclasses.is_dataclass(cls)
        valid = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(fields) - valid)
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}; valid: "
                         f"{', '.join(sorted(valid))}")
    return cls(**fields)


def _import_target(target: str) -> Callable[..., Any]:
    mod, sep, attr = target.partition(":")
    if not sep or not mod or not attr:
        raise ValueError(f"scheduler.target={target!r}: expected 'package.module:factory'")
    try:
        obj = getattr(importlib.import_module(mod), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"scheduler.target={target!r}: cannot import ({e})") from e
    if not callable(obj):
        raise ValueError(f"scheduler.target={target!r}: not callable")
    return obj


@dataclass(frozen=True, slots=True)
class ContextLength:
    """The context length a scheduler gets (None: its built-in default) and where it came
    from (summary.json `max_model_len`, `max_model_len_source`)."""

    value: int | None
    source: str


def context_length(max_model_len: int | None, cfg_scheduler: Mapping[str, Any] | DictConfig,
                   model_context: int | None, model_source: str) -> ContextLength:
    """The context length of a job, first set wins: the top-level `max_model_len` (both
    schedulers), the scheduler's own field (vllm `max_model_len`, sglang `context_length`),
    the model's (`model_context`, read from `model_source`). Without any, the scheduler's
    built-in default (vllm 4096, sglang: the pool), which differ: source "scheduler default".
    A `target` scheduler gets the top-level `max_model_len` when it is set, else keeps its
    own setting (source "scheduler.target")."""
    fields = as_dict(cfg_scheduler)
    if max_model_len is not None:
        return ContextLength(int(max_model_len), "max_model_len")
    if fields.get("target"):
        return ContextLength(None, "scheduler.target")
    entry = registry.find(str(fields.get("name")))
    key = entry.context_field if entry is not None else None
    if key is not None and fields.get(key) is not None:
        return ContextLength(int(fields[key]), f"scheduler.{key}")
    if model_context is not None:
        return ContextLength(int(model_context), model_source)
    return ContextLength(None, "scheduler default")

def job_context_length(cfg: DictConfig, model_context: int | None,
                       checkpoint: Mapping[str, Any] | None) -> ContextLength:
    """The job's context length (`context_length`): the model's default is
    the checkpoint's config.json with `executor=real`, the model group's with the sim."""
    top = cfg.get("max_model_len")
    if str(cfg.executor.name) == "real":
        ctx = (checkpoint or {}).get("max_position_embeddings")
        return context_length(top, cfg.scheduler, int(ctx) if ctx else None,
                              "checkpoint config.json max_position_embeddings")
    return context_length(top, cfg.scheduler, model_context, "model.max_position_embeddings")


def model_context_length(cfg: DictConfig, model_context: int | None,
                         checkpoint: Mapping[str, Any] | None) -> int | None:
    """The model's own context length: the checkpoint's config.json `max_position_embeddings`
    with `executor=real`, the model group's with the sim (None: unknown)."""
    if str(cfg.executor.name) == "real":
        ctx = (checkpoint or {}).get("max_position_embeddings")
        return int(ctx) if ctx else None
    return model_context


def check_context_length(ctx: ContextLength, model_context: int | None,
                         allow_long_max_model_len: bool) -> None:
    """Refuse a context length set above the model's own unless `allow_long_max_model_len`
    says it is on purpose (the run then warns: experiments/run/caveats.py).

    mirrors vllm/config/model.py: _get_and_verify_max_len (a user-specified max_model_len
    above the model's derived one raises unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1) and
    sglang/srt/configs/model_config.py (SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN)."""
    if (ctx.value is None or model_context is None or ctx.value <= model_context
            or allow_long_max_model_len):
        return
    key = "max_model_len" if ctx.source == "max_model_len" else ctx.source
    raise ValueError(f"{key}={ctx.value} is above the model's context length "
                     f"({model_context}, max_position_embeddings): requests would run past "
                     "the positions the model was trained for. Lower it, or set "
                     "allow_long_max_model_len=true to run so on purpose (as upstream's "
                     "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1; the summary then warns)")


def effective_context_length(scheduler: Scheduler, ctx: ContextLength) -> int | None:
    """The context length `scheduler` runs with: `ctx.value`, else the one its registry
    entry reads from it (vllm's built-in 4096; None for sglang, whose pool is then the
    limit, or for a scheduler the registry does not know)."""
    if ctx.value is not None:
        return ctx.value
    entry = registry.find(scheduler.name)
    if entry is None or entry.context_length is None:
        return None
    return entry.context_length(scheduler)


@dataclass(frozen=True, slots=True)
class SchedulerFields:
    """A registered scheduler's config fields as it is built (`fields`: what its config class
    receives), the value and source of each of its device-sized limits (`settings`, the
    entry's `device_fields`: summary.json `scheduler_limits`), and the engine loop it runs
    with its source (`loop`: summary.json `engine_loop_source`; `loop_fallback`: a field
    ruled out the loop the config selected, `SchedulerEntry.loop_fallback`)."""

    fields: dict[str, Any]
    settings: dict[str, Setting]
    loop: Setting
    loop_fallback: bool = False


def scheduler_fields(entry: registry.SchedulerEntry, fields: Mapping[str, Any],
                     max_model_len: int | None, device: DeviceSpec | None) -> SchedulerFields:
    """The fields a registered scheduler is built with: `max_model_len`, when given, sets the
    entry's context field (vllm `max_model_len`, sglang `context_length`), so that a
    comparison can give both the same (unset: the config class's default); every device
    field the config leaves unset (null) gets the value upstream's launcher resolves for
    `device` (`entry.device_defaults`; None: a device whose memory is unknown); an explicit
    value always wins. The engine loop is the one the fields select, unless the entry's
    `loop_fallback` rules it out (`SchedulerEntry.loop_for`)."""
    out = dict(fields)
    key = entry.context_field
    if key is not None:
        if max_model_len is not None:
            out[key] = int(max_model_len)
        elif out.get(key) is None:
            out.pop(key, None)  # the config class's own default
    settings: dict[str, Setting] = {}
    if entry.device_defaults is not None:
        given = {k: out.get(k) for k in entry.device_fields}
        resolved = entry.device_defaults({**out, **given}, device or DeviceSpec("", 0.0))
        for k in entry.device_fields:
            settings[k] = resolved[k]
            out[k] = resolved[k].value
    out, loop, fell_back = entry.loop_for(out)
    return SchedulerFields(out, settings, loop, fell_back)


@dataclass(frozen=True, slots=True)
class JobScheduler:
    """A job's scheduler, the value and source of each device-sized limit it resolved
    (`limits`: summary.json `scheduler_limits`) and of its engine loop (`loop`:
    `engine_loop`, `engine_loop_source`), and the warning a loop fallback leaves (None: the
    loop the config selected runs)."""

    scheduler: Scheduler
    limits: dict[str, Setting]
    loop: Setting
    loop_warning: str | None = None


def build_job_scheduler(cfg_scheduler: Mapping[str, Any] | DictConfig,
                        kv_capacity_tokens: int, max_model_len: int | None = None,
                        device: DeviceSpec | None = None, random_seed: int = 0
                        ) -> JobScheduler:
    """`build_scheduler`, with the value and source of each device-sized limit and of the
    engine loop (`JobScheduler`). A null `scheduler.random_seed` (the schema's default)
    becomes `random_seed` (the run's seed of its realisation:
    `experiments.run.main.run_experiment`)."""
    fields = as_dict(cfg_scheduler)
    if "random_seed" in fields and fields["random_seed"] is None:
        fields["random_seed"] = int(random_seed)
    name = fields.pop("name", None)
    target = fields.pop("target", None)
    if target:
        factory = _import_target(str(target))
        if max_model_len is not None:
            fields["max_model_len"] = int(max_model_len)
        try:
            sched: Scheduler = factory(kv_capacity_tokens, **fields)
        except TypeError as e:
            raise ValueError(f"scheduler.target={target!r}: cannot be called with "
                             f"{', '.join(sorted(fields)) or 'no fields'} ({e})") from e
        loop = sched.engine_loop if isinstance(sched, LoopDeclaringScheduler) else SYNCHRONOUS
        return JobScheduler(sched, {}, Setting(loop.name, f"scheduler.target {target}"))
    entry = registry.get(name)
    resolved = scheduler_fields(entry, fields, max_model_len, device)
    config = entry.config(kv_capacity_tokens, **resolved.fields)
    sched = entry.build(config)
    limits = dict(resolved.settings)
    if entry.derived_limits is not None:
        limits.update(entry.derived_limits(config))
    warning = (f"engine loop: {entry.name} runs {resolved.loop.value}: {resolved.loop.source}"
               if resolved.loop_fallback else None)
    return JobScheduler(sched, limits, resolved.loop, warning)


def build_scheduler(cfg_scheduler: Mapping[str, Any] | DictConfig,
                    kv_capacity_tokens: int, max_model_len: int | None = None,
                    device: DeviceSpec | None = None, random_seed: int = 0) -> Scheduler:
    """The scheduler named by `cfg_scheduler.name` (its registry entry), holding
    `kv_capacity_tokens` KV slots.

    Every field but `name` (and `target`) is a field of the scheduler's config dataclass;
    the capacity field (vllm `num_blocks`, sglang `max_total_tokens`) comes from
    `kv_capacity_tokens` through the config's `from_capacity`. `max_model_len` and the
    device-sized limits left unset (null) are resolved by `scheduler_fields` (`device`: the
    configured hardware's, `HardwareSpec.device`); a `target` factory gets `max_model_len=`
    and its other fields as given. A null `random_seed` field becomes `random_seed`.
    """
    return build_job_scheduler(cfg_scheduler, kv_capacity_tokens, max_model_len, device,
                               random_seed).scheduler


@dataclass(frozen=True, slots=True)
class KvCapacity:
    """A job's KV pool in token slots, where it came from ("config", or the rule of
    `engines.kv_pool` for `kv_capacity_tokens=auto`) and that rule's arithmetic."""

    tokens: int
    source: str
    estimate: KvPoolEstimate | None = None


def config_page_size(cfg_scheduler: Mapping[str, Any] | DictConfig) -> int:
    """The KV page size a scheduler config sets (its entry's `page_field`, else the config
    class's default; 1 when the scheduler has none or is a `target`)."""
    fields = as_dict(cfg_scheduler)
    entry = None if fields.get("target") else registry.find(str(fields.get("name")))
    if entry is None or entry.page_field is None:
        return 1
    if fields.get(entry.page_field) is not None:
        return int(fields[entry.page_field])
    default = next(f.default for f in dataclasses.fields(entry.config_cls)
                   if f.name == entry.page_field)
    return int(default) if isinstance(default, int) else 1


def resolve_kv_capacity(value: Any, model: ModelSpec, hardware: HardwareSpec,
                        gpu_memory_utilization: float, max_model_len: int | None,
                        page_size: int = 1) -> KvCapacity:
    """The job's KV pool: an explicit `kv_capacity_tokens` as given, "auto" the pool vLLM's
    GPU worker would leave for `model` on `hardware` (`engines.kv_pool.auto_kv_pool`: the
    same for every scheduler of a comparison, a multiple of `page_size` too)."""
    parsed = parse_kv_capacity(value)
    if parsed != AUTO:
        return KvCapacity(int(parsed), FROM_CONFIG)
    estimate = auto_kv_pool(model, hardware, float(gpu_memory_utilization), max_model_len,
                            page_size)
    return KvCapacity(estimate.kv_capacity_tokens, estimate.source, estimate)


def job_kv_capacity(cfg: DictConfig, model: ModelSpec, hardware: HardwareSpec,
                    max_model_len: int | None) -> KvCapacity:
    """A job's KV pool (`resolve_kv_capacity`), except that with the real executor `auto`
    is the executor's stated `auto_kv_capacity_tokens`: auto sizes a simulated GPU's memory,
    not the machine the real model runs on."""
    if parse_kv_capacity(cfg.kv_capacity_tokens) == AUTO and str(cfg.executor.name) == "real":
        return KvCapacity(int(cfg.executor.auto_kv_capacity_tokens),
                          "executor.auto_kv_capacity_tokens (kv_capacity_tokens=auto, "
                          "executor=real)")
    return resolve_kv_capacity(cfg.kv_capacity_tokens, model, hardware,
                               float(cfg.get("gpu_memory_utilization", 0.92)), max_model_len,
                               config_page_size(cfg.scheduler))


def build_admission(cfg_admission: Mapping[str, Any] | DictConfig | None) -> AdmissionLimits:
    """The front-door limits from the `admission` block (absent or null fields: unlimited)."""
    return construct(AdmissionLimits, "admission", as_dict(cfg_admission))


def build_model(cfg_model: Mapping[str, Any] | DictConfig) -> ModelSpec:
    """A `ModelSpec` from the `model` group."""
    return construct(ModelSpec, "model", as_dict(cfg_model))


def build_hardware(cfg_hardware: Mapping[str, Any] | DictConfig) -> HardwareSpec:
    """A `HardwareSpec` from the `hardware` group (numbers may be written as 989.4e12)."""
    d = as_dict(cfg_hardware)
    for k in ("peak_flops", "memory_bandwidth", "host_link_bandwidth", "memory_bytes"):
        if k in d:
            try:
                d[k] = float(d[k])
            except (TypeError, ValueError):
                raise ValueError(f"hardware: {k}={d[k]!r}: not a number") from None
    return construct(HardwareSpec, "hardware", d)


COST_MODELS = ("roofline", "profile", "profile_batch", "measured", "fitted_roofline")


def build_cost_model(kind: str, profile: str | None, model: ModelSpec | None = None,
                     hardware: HardwareSpec | None = None, step_overhead_s: float = 0.0,
                     extrapolate: bool = True) -> CostModel | None:
    """The sim executor's cost model: None for "roofline" (the executor builds it from the
    model and hardware), a `FittedCostModel` fitted to `profile` for "profile", and that fit
    with per-decode-batch-size factors (engines/decode_batch_cost.py) for "profile_batch";
    "measured" interpolates the measured profile of (model, hardware) under
    conf/profiles/measured/ (or the folder `profile`), "fitted_roofline" the roofline fitted
    to the measurements of the hardware (engines/measured_cost.py)."""
    if kind == "roofline":
        return None
    if kind not in COST_MODELS:
        raise ValueError(f"executor.cost_model={kind!r}: unknown; valid: "
                         f"{', '.join(COST_MODELS)}")
    if kind in ("measured", "fitted_roofline"):
        if model is None or hardware is None:
            raise ValueError(f"executor.cost_model={kind} needs the model and the hardware")
        return _measured_cost_model(kind, profile, model, hardware, step_overhead_s,
                                    extrapolate)
    if not profile:
        raise ValueError(f"executor (sim): cost_model={kind} needs executor.profile: a JSON "
                         "file from scripts/profile_executor.py (e.g. conf/profiles/*.json)")
    path = project_path(profile)
    if kind == "profile_batch":
        return DecodeBatchCostModel.from_profile(path)
    return FittedCostModel.from_profile(path)


def _measured_cost_model(kind: str, profile: str | None, model: ModelSpec,
                         hardware: HardwareSpec, step_overhead_s: float,
                         extrapolate: bool) -> CostModel:
    root = project_path(MEASURED_DIR)
    if kind == "fitted_roofline":
        return FittedRooflineCostModel(_roofline_fit(root, profile, hardware), model, hardware,
                                       step_overhead_s=step_overhead_s)
    folder = project_path(profile) if profile else measured_profile_folder(
        root, model.name, hardware.name)
    if folder is None:
        raise ValueError(
            f"executor.cost_model=measured: no measured profile of model={model.name!r} on "
            f"hardware={hardware.name!r}; measured: {'; '.join(available_pairs(root))} "
            "(the default cost model; for another pair set executor.cost_model=fitted_roofline "
            "or executor.cost_model=roofline)")
    prof = MeasuredProfile.load(folder)
    if (prof.model, prof.hardware) != (model.name, hardware.name):
        raise ValueError(f"executor.profile={profile!r}: measured for model={prof.model} "
                         f"hardware={prof.hardware}, not model={model.name} "
                         f"hardware={hardware.name}")
    return MeasuredCostModel(prof, model, hardware, step_overhead_s=step_overhead_s,
                             refuse_outside=not extrapolate)


def _roofline_fit(root: Path, profile: str | None, hardware: HardwareSpec) -> RooflineFit:
    """The fitted roofline of `hardware`: `profile` when given, else its own fit under
    `root`/fitted_roofline/, else, for a GPU without measurements whose config names
    `fit_from`, that GPU's fit applied to its peaks (`borrowed_fit`); anything else is
    refused, naming the GPUs that have a fit."""
    fit_dir = root / "fitted_roofline"
    if profile:
        return RooflineFit.load(project_path(profile))
    own = fit_dir / f"{hardware.name}.json"
    if own.is_file():
        return RooflineFit.load(own)
    fits = ", ".join(sorted(p.stem for p in fit_dir.glob("*.json")))
    if not hardware.fit_from:
        raise ValueError(f"executor.cost_model=fitted_roofline: no fit for "
                         f"hardware={hardware.name!r} ({own}) and no hardware.fit_from; "
                         f"fitted: {fits}")
    source = fit_dir / f"{hardware.fit_from}.json"
    if not source.is_file():
        raise ValueError(f"hardware.fit_from={hardware.fit_from!r} (hardware="
                         f"{hardware.name!r}): no fit for that GPU ({source}); fitted: {fits}")
    return borrowed_fit(RooflineFit.load(source), hardware.name)


def cost_model_summary(cfg_executor: Mapping[str, Any] | DictConfig) -> dict[str, Any]:
    """What goes into summary.json about the step-time model of a run (its provenance,
    `step_time_source`, comes from the built executor: `step_time_source`)."""
    d = as_dict(cfg_executor)
    if d.get("name") != "sim":
        return {"cost_model": "measured"}
    kind = d.get("cost_model", "roofline")
    return {"cost_model": kind, "cost_model_profile": d.get("profile") if kind != "roofline"
            else None}


def step_time_source(executor: Any) -> dict[str, Any]:
    """Where a run's step times came from (summary.json `step_time_source`): the real
    executor's clock, a measured profile, a roofline fitted to measurements, the ideal
    roofline or a derated one, or a profile fitted on the real executor; and, for a measured
    profile, the operator look-ups that left the measured range
    (`cost_model_extrapolated`)."""
    cost = getattr(executor, "cost_model", None)
    if cost is None:
        return {"step_time_source": "measured on the real executor"}
    out: dict[str, Any] = {}
    if isinstance(cost, RooflineCostModel):
        eff = (cost.flops_efficiency, cost.bandwidth_efficiency)
        out["step_time_source"] = "ideal roofline" if eff == (1.0, 1.0) else (
            f"roofline derated: flops_efficiency={eff[0]:g}, bandwidth_efficiency={eff[1]:g}")
    elif isinstance(cost, MeasuredCostModel | FittedRooflineCostModel):
        out["step_time_source"] = cost.source
    else:
        out["step_time_source"] = f"fitted to {getattr(cost, 'source', '') or 'a profile'}"
    if isinstance(cost, MeasuredCostModel):
        out["cost_model_extrapolated"] = dict(sorted(cost.extrapolated.items()))
    return out


def build_executor(cfg_executor: Mapping[str, Any] | DictConfig, model: ModelSpec,
                   hardware: HardwareSpec, num_slots: int | None = None) -> Executor:
    """The executor named by `cfg_executor.name`: "sim" (cost model) or "real" (a checkpoint
    run by our paged decoder, with `num_slots` KV slots: the scheduler's pool)."""
    checkpoint = None
    if cfg_executor.get("name") == "real":
        checkpoint = check_real_executor(cfg_executor)  # before as_dict (fails on missing)
    d = as_dict(cfg_executor)
    name = d.pop("name", None)
    if name == "sim":
        kind = d.pop("cost_model", "roofline")
        profile = d.pop("profile", None)
        extrapolate = d.pop("extrapolate", True)
        valid = {"step_overhead_s", "flops_efficiency", "bandwidth_efficiency"}
        if kind in ("measured", "fitted_roofline"):
            for k in ("flops_efficiency", "bandwidth_efficiency"):
                if d.get(k, 1.0) != 1.0:
                    raise ValueError(f"executor.{k}={d[k]!r}: the roofline's alone; "
                                     f"cost_model={kind} takes its efficiencies from the "
                                     "measurements")
        cost_model = build_cost_model(kind, profile, model, hardware,
                                      float(d.get("step_overhead_s", 0.0)), bool(extrapolate))
        return construct(lambda **kw: SimExecutor(model, hardware, cost_model=cost_model, **kw),
                         "executor (sim)", d, valid)
    if name == "real":
        from engines.executors.real import RealExecutor, RealExecutorConfig

        valid = {"model_path", "kernel", "dtype", "device", "timer", "timer_repeats",
                 "timer_reference_s", "timer_prefill_repeats"}
        d.pop("auto_kv_capacity_tokens", None)  # read where the pool is resolved (run.main)
        d["model_path"] = str(checkpoint)  # resolved (a model group's is project-relative)
        cfg = construct(lambda **kw: RealExecutorConfig(num_slots=num_slots, **kw),
                        "executor (real)", d, valid)
        return RealExecutor.from_config(cfg)
    raise ValueError(f"executor.name={name!r}: unknown; valid: {', '.join(EXECUTORS)}")
