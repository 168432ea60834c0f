"""The schedulers the project knows, one entry each (DESIGN.md, "Adding a scheduler").

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

from schedulers.contract import CapacityConfig, Scheduler
from schedulers.sglang import (
    SglangScheduler,
    SglangSchedulerConfig,
    sglang_scheduler_from_conformance,
)
from schedulers.sglang.invariants import check_sglang_invariants
from schedulers.vllm import VllmScheduler, VllmSchedulerConfig, vllm_scheduler_from_conformance
from schedulers.vllm.invariants import check_vllm_invariants

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
class SchedulerEntry:
    """One scheduler: what builds it from a config and what the harness may ask of it.

    `config_cls` is a dataclass with `from_capacity` (`schedulers.contract.CapacityConfig`)
    whose `capacity_field` that method derives from `kv_capacity_tokens` (not a config key);
    `build` makes the scheduler from a config. `context_field` is the config field that the
    top-level `max_model_len` sets (None: the scheduler has none), `context_length(scheduler)`
    the context length a built scheduler runs with (None: unbounded), `request_limit(
    scheduler)` the most tokens (prompt + output) one request may reach (None: unknown).
    `check_invariants(scheduler)` checks its bookkeeping (`check_invariants=true`; None: the
    scheduler's own `check_invariants()` when it has one). `conformance(config_line)` builds
    it from a conformance workload (docs/CONFORMANCE.md) under `conformance_rules`.
    `test_only` entries are left out of `names()` (the comparisons, sweeps and bench
    scripts) but are built, configured and contract-tested like any other.
    """

    name: str
    config_cls: type[Any]
    build: Callable[[Any], Scheduler]
    capacity_field: str
    context_field: str | None = None
    context_length: Callable[[Any], int | None] | None = None
    request_limit: Callable[[Any], int | None] | None = None
    check_invariants: Callable[[Any], None] | None = None
    conformance: Callable[[Mapping[str, Any]], Scheduler] | None = None
    conformance_rules: ConformanceRules = field(default_factory=ConformanceRules)
    test_only: bool = False

    def config_fields(self) -> set[str]:
        """The keys a config may set (the config class's fields less the capacity field)."""
        return {f.name for f in dataclasses.fields(self.config_cls)} - {self.capacity_field}

    def config(self, kv_capacity_tokens: int, **fields: Any) -> Any:
        """The config holding `kv_capacity_tokens` slots with `fields` (checked by name)."""
        unknown = sorted(set(fields) - self.config_fields())
        if unknown:
            raise ValueError(f"scheduler ({self.name}): unknown field(s) {', '.join(unknown)}; "
                             f"valid: {', '.join(sorted(self.config_fields()))}")
        return self.config_cls.from_capacity(kv_capacity_tokens, **fields)


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
    for what, name in (("capacity_field", entry.capacity_field),
                       ("context_field", entry.context_field)):
        if name is not None and name not in fields:
            raise ValueError(f"{where}: {what}={name!r} is not a field of "
                             f"{entry.config_cls.__name__}")
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


def names() -> tuple[str, ...]:
    """The schedulers a comparison covers ("all schedulers"), in registration order."""
    return tuple(n for n, e in _ENTRIES.items() if not e.test_only)


def all_names() -> tuple[str, ...]:
    """Every registered scheduler, test-only ones included."""
    return tuple(_ENTRIES)


def entries() -> tuple[SchedulerEntry, ...]:
    """Every registered entry, in registration order."""
    return tuple(_ENTRIES.values())


def _vllm_context_length(scheduler: VllmScheduler) -> int:
    return scheduler.max_model_len


def _sglang_context_length(scheduler: SglangScheduler) -> int | None:
    return scheduler.config.context_length


def _sglang_request_limit(scheduler: SglangScheduler) -> int:
    return scheduler.config.max_req_len


register(SchedulerEntry(
    name="vllm", config_cls=VllmSchedulerConfig, build=VllmScheduler,
    capacity_field="num_blocks", context_field="max_model_len",
    context_length=_vllm_context_length, request_limit=_vllm_context_length,
    check_invariants=check_vllm_invariants,
    conformance=vllm_scheduler_from_conformance,
    # the vLLM oracle sorts arrivals, loops while `has_requests()` (true for one more step
    # after a finish) and keeps preempted ids in a set (docs/CONFORMANCE.md)
    conformance_rules=ConformanceRules(sort_arrivals=True, flush_finished=True,
                                       preempted_as_set=True),
))
register(SchedulerEntry(
    name="sglang", config_cls=SglangSchedulerConfig, build=SglangScheduler,
    capacity_field="max_total_tokens", context_field="context_length",
    context_length=_sglang_context_length, request_limit=_sglang_request_limit,
    check_invariants=check_sglang_invariants,
    conformance=sglang_scheduler_from_conformance,
))
