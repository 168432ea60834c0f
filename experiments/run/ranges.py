"""The one check of every declared range over a composed run config, before a job runs.

Each numeric field declares its range beside its default (`schedulers.config_range.ranged`);
the schemas of experiments/run/config.py carry it. `range_problems` walks a composed config
by its schema and yields each value out of its range; `check_ranges` refuses the first with
one line naming the key, the value and the valid range, e.g.

    kv_capacity_tokens=100000000000: too large; valid: [1, 2^26] (the schedulers' ...)
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterator
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from experiments.user_error import ConfigError
from schedulers.config_range import field_range


def _is_int(t: Any) -> bool:
    """Whether a field's type is int (or int | None)."""
    if t is int:
        return True
    args = typing.get_args(t) if isinstance(t, types.UnionType) or \
        typing.get_origin(t) is typing.Union else ()
    return int in args and float not in args


def _leaves(node: DictConfig) -> dict[str, Any]:
    """The node's values that are set (missing ones and broken interpolations left out)."""
    out: dict[str, Any] = {}
    for key in node:
        k = str(key)
        if OmegaConf.is_missing(node, k):
            continue
        try:
            out[k] = node[k]
        except Exception:  # an interpolation that does not resolve: Hydra reports it
            continue
    return out


def range_problems(node: DictConfig, prefix: str = "") -> Iterator[tuple[str, Any, str]]:
    """(key, value, why) of every value of `node` (a composed config or a group of it)
    outside the range its schema declares, in the config's order."""
    schema = OmegaConf.get_type(node)
    fields: dict[str, dataclasses.Field[Any]] = {}
    hints: dict[str, Any] = {}
    if isinstance(schema, type) and dataclasses.is_dataclass(schema):
        fields = {f.name: f for f in dataclasses.fields(schema)}
        hints = typing.get_type_hints(schema)
    values = _leaves(node)
    for key, value in values.items():
        if key == "hydra" and not prefix:
            continue
        path = f"{prefix}{key}"
        if isinstance(value, DictConfig):
            yield from range_problems(value, path + ".")
            continue
        f = fields.get(key)
        rng = field_range(f) if f is not None else None
        if rng is None:
            continue
        integer = _is_int(hints.get(key))
        items = list(value) if isinstance(value, ListConfig) else [value]
        for item in items:
            why = rng.problem(item, integer, values)
            if why is not None:
                shown = OmegaConf.to_container(value) if isinstance(value, ListConfig) else value
                yield path, shown, why
                break


def check_ranges(cfg: DictConfig) -> None:
    """Raise `ConfigError` naming the first value of `cfg` out of its declared range."""
    for key, value, why in range_problems(cfg):
        raise ConfigError(f"{key}={value!r}: {why}")
