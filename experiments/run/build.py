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
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf

from engines.admission import AdmissionLimits
from engines.cost_model import CostModel, FittedCostModel
from engines.decode_batch_cost import DecodeBatchCostModel
from engines.executors.base import Executor
from engines.executors.sim import SimExecutor
from engines.executors.specs import HardwareSpec, ModelSpec
from experiments.paths import project_path
from experiments.run.preflight import check_real_executor
from schedulers import registry
from schedulers.contract import Scheduler

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


def build_scheduler(cfg_scheduler: Mapping[str, Any] | DictConfig,
                    kv_capacity_tokens: int, max_model_len: int | None = None,
                    random_seed: int = 0) -> Scheduler:
    """The scheduler named by `cfg_scheduler.name` (its registry entry), holding
    `kv_capacity_tokens` KV slots.

    Every field but `name` (and `target`) is a field of the scheduler's config dataclass;
    the capacity field (vllm `num_blocks`, sglang `max_total_tokens`) comes from
    `kv_capacity_tokens` through the config's `from_capacity`. `max_model_len`, when given,
    sets the entry's context field (vllm `max_model_len`, sglang `context_length`), so that a
    comparison can give both the same; a `target` factory gets it as `max_model_len=`.
    A null `random_seed` (the schema's default) becomes `random_seed` (the run's seed of
    its realisation: `experiments.run.main.run_experiment`).
    """
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
        return sched
    entry = registry.get(name)
    key = entry.context_field
    if key is not None:
        if max_model_len is not None:
            fields[key] = int(max_model_len)
        elif fields.get(key) is None:
            fields.pop(key, None)  # the config class's own default
    return entry.build(entry.config(kv_capacity_tokens, **fields))


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


COST_MODELS = ("roofline", "profile", "profile_batch")


def build_cost_model(kind: str, profile: str | None) -> CostModel | None:
    """The sim executor's cost model: None for "roofline" (the executor builds it from the
    model and hardware), a `FittedCostModel` fitted to `profile` for "profile", and that fit
    with per-decode-batch-size factors (engines/decode_batch_cost.py) for "profile_batch"."""
    if kind == "roofline":
        return None
    if kind not in COST_MODELS:
        raise ValueError(f"executor.cost_model={kind!r}: unknown; valid: "
                         f"{', '.join(COST_MODELS)}")
    if not profile:
        raise ValueError(f"executor (sim): cost_model={kind} needs executor.profile: a JSON "
                         "file from scripts/profile_executor.py (e.g. conf/profiles/*.json)")
    path = project_path(profile)
    if kind == "profile_batch":
        return DecodeBatchCostModel.from_profile(path)
    return FittedCostModel.from_profile(path)


def cost_model_summary(cfg_executor: Mapping[str, Any] | DictConfig) -> dict[str, Any]:
    """What goes into summary.json about the step-time model of a run."""
    d = as_dict(cfg_executor)
    if d.get("name") != "sim":
        return {"cost_model": "measured"}
    kind = d.get("cost_model", "roofline")
    return {"cost_model": kind, "cost_model_profile": d.get("profile") if kind != "roofline"
            else None}


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
        valid = {"step_overhead_s", "flops_efficiency", "bandwidth_efficiency"}
        cost_model = build_cost_model(kind, profile)
        return construct(lambda **kw: SimExecutor(model, hardware, cost_model=cost_model, **kw),
                         "executor (sim)", d, valid)
    if name == "real":
        from engines.executors.real import RealExecutor, RealExecutorConfig

        valid = {"model_path", "kernel", "dtype", "device", "timer"}
        d["model_path"] = str(checkpoint)  # resolved (a model group's is project-relative)
        cfg = construct(lambda **kw: RealExecutorConfig(num_slots=num_slots, **kw),
                        "executor (real)", d, valid)
        return RealExecutor.from_config(cfg)
    raise ValueError(f"executor.name={name!r}: unknown; valid: {', '.join(EXECUTORS)}")
