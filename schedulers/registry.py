"""The schedulers the project knows, one entry each (DESIGN.md, "Adding a scheduler").

This module is the mechanism only: each scheduler's package registers its own entry
(`schedulers/<name>/entry.py`), and `schedulers/__init__.py` imports the built-in packages.
Everything that names schedulers reads this registry: building one from a config
(experiments/run/build.py), the config schemas (experiments/run/config.py), the per-step
invariant check (experiments/run/main.py), the conformance replay
(experiments/conformance/replay.py), the bench scripts, the presets' "all schedulers" sweeps
(the `${schedulers:}` resolver) and the test parametrizations. An entry's capabilities are
checked once, when it is registered, against the protocols of `schedulers.contract`.

    entry = get("vllm")                   # ValueError naming the valid names when unknown
    config = entry.config(kv_capacity_tokens, **fields)
    scheduler = entry.build(config)
    register(SchedulerEntry(...))         # a further scheduler (tests register a double)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from schedulers.contract import ENGINE_LOOPS, CapacityConfig, Scheduler, SelfCheckingScheduler
from schedulers.device_defaults import DeviceSpec, Setting
from schedulers.eviction import EvictionOptions

# The methods of the `Scheduler` protocol (its data members, name and page_size, are
# instance attributes a class need not declare).
_SCHEDULER_METHODS = ("add_request", "schedule", "update_from_output", "abort",
                      "has_unfinished", "stats")


@dataclass(frozen=True, slots=True)
class ConformanceRules:
    """Where the upstream oracle's loop differs per scheduler (docs/CONFORMANCE.md), so that
    the conformance replay (experiments/conformance/replay.py) reproduces it.

    `sort_arrivals`: requests arrive sorted by (arrival_step, request number);
    `flush_finished`: one more (empty) step follows a step that finished requests;
    `preempted_as_set`: the log lists preempted ids sorted by request number.
    """

    sort_arrivals: bool = False
    flush_finished: bool = False
    preempted_as_set: bool = False


@dataclass(frozen=True, slots=True)
class LoopChoice:
    """One engine loop a scheduler can run (`schedulers.contract.ENGINE_LOOPS`, by name) and
    the config fields that select it, e.g. vLLM's batch queue by `async_scheduling=True`."""

    loop: str
    fields: tuple[tuple[str, Any], ...] = ()

    def config_fields(self) -> dict[str, Any]:
        """The fields as keyword arguments of the scheduler's config."""
        return dict(self.fields)


@dataclass(frozen=True, slots=True)
class LoopFallback:
    """The loop a scheduler runs instead of the one its config's fields select, when another
    field rules that one out: `fields` select the loop it runs (the fields of one of its
    `LoopChoice`s), `reason` says why (summary.json `engine_loop_source`, and a warning).

    Mirrors how upstream's launchers resolve a loop flag a feature cannot run with rather
    than refuse it (sglang/srt/arg_groups/speculative_hook.py: _disable_overlap_schedule_for_cpu,
    a `declare_resolution` of disable_overlap_schedule=True with a warning; vllm/config/
    vllm.py: VllmConfig.__post_init__, async_scheduling None becoming False where the
    executor or the model cannot)."""

    fields: tuple[tuple[str, Any], ...]
    reason: str


@dataclass(frozen=True, slots=True)
class SchedulerEntry:
    """One scheduler: what builds it from a config and what the harness may ask of it.

    Building: `config_cls` is a dataclass with `from_capacity` (`schedulers.contract.
    CapacityConfig`) whose `capacity_field` that method derives from `kv_capacity_tokens` (not
    a config key); `build` makes the scheduler from a config. `context_field` is the config
    field that the top-level `max_model_len` sets (None: the scheduler has none),
    `context_length(scheduler)` the context length a built scheduler runs with (None:
    unbounded), `request_limit(scheduler)` the most tokens (prompt + output) one request may
    reach (None: unknown).

    Capabilities, declared here and read by the tests, the presets and the reports (never
    inferred from a name):
    - `evicts`: it evicts running requests under KV pressure (preempts or retracts); its
      config then derives from `schedulers.eviction.EvictionOptions` (victim_policy, ...),
      and one that never evicts has none of those options;
    - `swaps`: it honours `preemption_mode=swap`, and a built one exposes its host pool
      (`schedulers.contract.SwappingScheduler`);
    - `page_field`: the config field that sets the KV page size (None: not configurable);
    - `self_check`: it can check its own bookkeeping after a step (`check_invariants=true`):
      by `check_invariants(scheduler)` when given, else by the scheduler's own
      `check_invariants()` (`schedulers.contract.SelfCheckingScheduler`);
    - `loops`: the engine loops it can run (`LoopChoice`: the loop and the config fields
      that select it; a built one declares the loop it runs as `engine_loop`,
      `schedulers.contract.LoopDeclaringScheduler`); the first is the one its config
      class's defaults select (a run config's YAML may select another: upstream's default
      deployment loop); `loop_fallback(fields)`, when given, names the loop the scheduler
      runs instead when the other fields rule the selected one out (`LoopFallback`; None:
      the selected loop runs); `loop_for(fields)` says which loop a config runs and why;
    - `upstream`: the pinned upstream release it mirrors (e.g. "vllm 0.32.0"), whose recorded
      decisions its conformance cases (tests/conformance/<name>/) replay; then
      `conformance(config_line)` builds it from a conformance workload (docs/CONFORMANCE.md)
      under `conformance_rules`. None: a design of our own, with no cases.

    Upstream's defaults for the hardware: `device_fields` are the config fields that a config
    may leave unset (null) to get the value upstream's launcher resolves for the device
    (`schedulers.device_defaults`), and `device_defaults(fields, device)` resolves them:
    the fields as the config gives them (None: unset; the context field already set) and
    the device, to a `Setting` (value and source) per device field; an explicit value keeps
    its own, with source "config". `derived_limits(config)`, when given, adds the limits the
    built config derives from the others (e.g. SGLang's running-request cap from the pool
    and the context), with their sources, to the same record (summary.json
    `scheduler_limits`).

    Where it appears: `label` and `color` in tables and figures; `in_default_comparison`
    entries make up `names()` (what `${schedulers:}` sweeps, the demo and the bench scripts
    run); others run when named (`scheduler=<name>`). `test_only` entries (test doubles,
    registered by tests/conftest.py) are never in a comparison.
    """

    name: str
    config_cls: type[Any]
    build: Callable[[Any], Scheduler]
    capacity_field: str
    evicts: bool
    swaps: bool = False
    page_field: str | None = None
    self_check: bool = False
    upstream: str | None = None
    label: str = ""
    color: str | None = None
    context_field: str | None = None
    context_length: Callable[[Any], int | None] | None = None
    request_limit: Callable[[Any], int | None] | None = None
    check_invariants: Callable[[Any], None] | None = None
    conformance: Callable[[Mapping[str, Any]], Scheduler] | None = None
    conformance_rules: ConformanceRules = field(default_factory=ConformanceRules)
    loops: tuple[LoopChoice, ...] = (LoopChoice("synchronous"),)
    loop_fallback: Callable[[Mapping[str, Any]], LoopFallback | None] | None = None
    device_fields: tuple[str, ...] = ()
    device_defaults: Callable[[Mapping[str, Any], DeviceSpec], Mapping[str, Setting]] | None = None
    derived_limits: Callable[[Any], Mapping[str, Setting]] | None = None
    in_default_comparison: bool = True
    test_only: bool = False

    @property
    def pipelined(self) -> bool:
        """Whether one of its loops plans a step before the previous one is committed."""
        return any(ENGINE_LOOPS[c.loop].pipelined for c in self.loops)

    @property
    def display_name(self) -> str:
        """The name tables and figures show (`label`, else `name`)."""
        return self.label or self.name

    def config_fields(self) -> set[str]:
        """The keys a config may set (the config class's fields less the capacity field)."""
        return {f.name for f in dataclasses.fields(self.config_cls)} - {self.capacity_field}

    def config(self, kv_capacity_tokens: int, **fields: Any) -> Any:
        """The config holding `kv_capacity_tokens` slots with `fields` (checked by name)."""
        unknown = sorted(set(fields) - self.config_fields())
        if unknown:
            raise ValueError(f"scheduler ({self.name}): unknown field(s) {', '.join(unknown)}; "
                             f"valid: {', '.join(sorted(self.config_fields()))}")
        mode = fields.get("preemption_mode", "recompute")
        if not self.swaps and mode != "recompute":
            raise ValueError(f"scheduler ({self.name}): preemption_mode={mode!r}: this "
                             "scheduler does not swap; valid: recompute")
        return self.config_cls.from_capacity(kv_capacity_tokens, **fields)

    def selected_loop(self, fields: Mapping[str, Any]) -> LoopChoice:
        """The loop whose selecting fields `fields` hold (a field `fields` lacks: the config
        class's default); the first of `loops` when none matches."""
        defaults = {f.name: f.default for f in dataclasses.fields(self.config_cls)}
        for choice in self.loops:
            if all(fields.get(k, defaults.get(k)) == v for k, v in choice.fields):
                return choice
        return self.loops[0]

    def loop_for(self, fields: Mapping[str, Any]) -> tuple[dict[str, Any], Setting, bool]:
        """Which engine loop a config of `fields` runs: the fields to build it with (the
        `loop_fallback`'s selecting fields applied), the loop's name with its source (the
        selecting fields as the config gives them, or the fallback's reason), and whether a
        fallback replaced the loop the fields selected."""
        selected = self.selected_loop(fields)
        fallback = self.loop_fallback(fields) if self.loop_fallback is not None else None
        if fallback is not None:
            out = {**fields, **dict(fallback.fields)}
            chosen = self.selected_loop(out)
            if chosen.loop != selected.loop:
                return out, Setting(chosen.loop, f"{selected.loop} ruled out: "
                                    f"{fallback.reason}"), True
        if len(self.loops) == 1:
            return dict(fields), Setting(selected.loop, "the scheduler's only loop"), False
        given = ", ".join(f"{k}={_yaml_value(v)}" for k, v in selected.fields)
        return dict(fields), Setting(selected.loop, f"config ({given})"), False

    def invariant_check(self, scheduler: Scheduler) -> Callable[[], None] | None:
        """The check of `scheduler`'s bookkeeping (None when it declares no self-check)."""
        if not self.self_check:
            return None
        check = self.check_invariants
        if check is not None:
            return lambda: check(scheduler)
        if not isinstance(scheduler, SelfCheckingScheduler):
            raise TypeError(f"scheduler registry: {self.name!r} declares self_check but "
                            f"{type(scheduler).__name__} has no check_invariants()")
        return scheduler.check_invariants


def _yaml_value(value: Any) -> str:
    """`value` as an override writes it (true/false for a bool)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


_ENTRIES: dict[str, SchedulerEntry] = {}


def check_entry(entry: SchedulerEntry) -> None:
    """Refuse an entry whose declared capabilities its classes lack, naming what is missing."""
    where = f"scheduler registry: {entry.name!r}"
    if not entry.name or not entry.name.isidentifier():
        raise ValueError(f"scheduler registry: name {entry.name!r}: must be an identifier")
    if not dataclasses.is_dataclass(entry.config_cls):
        raise TypeError(f"{where}: config_cls {entry.config_cls.__name__} is not a dataclass")
    if not issubclass(entry.config_cls, CapacityConfig):
        raise TypeError(f"{where}: config_cls {entry.config_cls.__name__} has no "
                        "from_capacity(kv_capacity_tokens, **fields)")
    fields = {f.name for f in dataclasses.fields(entry.config_cls)}
    has_options = issubclass(entry.config_cls, EvictionOptions)
    if entry.evicts != has_options:
        raise TypeError(f"{where}: evicts={entry.evicts} but config_cls "
                        f"{entry.config_cls.__name__} " + (
                            "does not derive from EvictionOptions" if entry.evicts else
                            "carries EvictionOptions (a scheduler that never evicts has none)"))
    if entry.swaps and not entry.evicts:
        raise ValueError(f"{where}: swaps=True needs evicts=True (swapping is a way to evict)")
    if (entry.upstream is None) != (entry.conformance is None):
        raise ValueError(f"{where}: upstream and conformance go together (an upstream's "
                         "decisions are replayed by the conformance builder)")
    for what, name in (("capacity_field", entry.capacity_field),
                       ("context_field", entry.context_field),
                       ("page_field", entry.page_field)):
        if name is not None and name not in fields:
            raise ValueError(f"{where}: {what}={name!r} is not a field of "
                             f"{entry.config_cls.__name__}")
    if bool(entry.device_fields) != (entry.device_defaults is not None):
        raise ValueError(f"{where}: device_fields and device_defaults go together (the "
                         "fields a config may leave unset and the function resolving them)")
    for name in entry.device_fields:
        if name not in fields:
            raise ValueError(f"{where}: device field {name!r} is not a field of "
                             f"{entry.config_cls.__name__}")
    if not entry.loops:
        raise ValueError(f"{where}: loops is empty (a scheduler runs in at least one loop)")
    for choice in entry.loops:
        if choice.loop not in ENGINE_LOOPS:
            raise ValueError(f"{where}: loop {choice.loop!r} is unknown; valid: "
                             f"{', '.join(ENGINE_LOOPS)}")
        unknown = sorted(set(choice.config_fields()) - fields)
        if unknown:
            raise ValueError(f"{where}: loop {choice.loop!r} selected by "
                             f"{', '.join(unknown)}: not a field of {entry.config_cls.__name__}")
    if isinstance(entry.build, type):
        missing = [m for m in _SCHEDULER_METHODS if not callable(getattr(entry.build, m, None))]
        if missing:
            raise TypeError(f"{where}: {entry.build.__name__} lacks the Scheduler method(s) "
                            f"{', '.join(missing)}")


def register(entry: SchedulerEntry) -> SchedulerEntry:
    """Add `entry` (its capabilities checked once, here); a name is registered only once."""
    check_entry(entry)
    if entry.name in _ENTRIES:
        raise ValueError(f"scheduler registry: {entry.name!r} is already registered")
    _ENTRIES[entry.name] = entry
    return entry


def unregister(name: str) -> None:
    """Remove an entry (tests that register one for a while)."""
    _ENTRIES.pop(name, None)


def get(name: object) -> SchedulerEntry:
    """The entry named `name`; a ValueError naming the valid names when there is none."""
    entry = _ENTRIES.get(str(name)) if name is not None else None
    if entry is None:
        raise ValueError(f"scheduler.name={name!r}: unknown; valid: "
                         f"{', '.join(sorted(all_names()))} (or set scheduler.target="
                         "'package.module:factory')")
    return entry


def find(name: str) -> SchedulerEntry | None:
    """The entry named `name`, or None."""
    return _ENTRIES.get(name)


CAPABILITIES = ("evicts", "swaps", "self_check", "upstream", "pipelined")


def names(capability: str | None = None) -> tuple[str, ...]:
    """The schedulers a comparison covers ("all schedulers": `in_default_comparison` and not
    `test_only`), in registration order; with `capability` (one of `CAPABILITIES`), only
    those that declare it (the presets' `${schedulers:evicts}`)."""
    if capability is not None and capability not in CAPABILITIES:
        raise ValueError(f"schedulers: capability {capability!r}: valid: "
                         f"{', '.join(CAPABILITIES)}")
    return tuple(n for n, e in _ENTRIES.items()
                 if e.in_default_comparison and not e.test_only
                 and (capability is None or getattr(e, capability)))


def all_names() -> tuple[str, ...]:
    """Every registered scheduler, test-only ones included."""
    return tuple(_ENTRIES)


def entries() -> tuple[SchedulerEntry, ...]:
    """Every registered entry, in registration order."""
    return tuple(_ENTRIES.values())
