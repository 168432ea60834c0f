"""Turn a workload config mapping into its parameter dataclass, naming bad fields.

`parse_params(cls, cfg, seed)` checks the field names against the dataclass (listing the valid
ones), builds nested `LengthDist`s from mappings, fills `seed` from the run's seed when the
workload leaves it unset, and prefixes validation errors with "workload".
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from experiments.inputs.workloads.lengths import LengthDist

T = TypeVar("T")


def parse_params(cls: type[T], cfg: Mapping[str, Any], seed: int | None = None,
                 where: str = "workload") -> T:
    """`cls(**cfg)` (without `name`) after checking names and building nested distributions."""
    assert dataclasses.is_dataclass(cls)
    d = {str(k): v for k, v in cfg.items() if k != "name"}
    flds = dataclasses.fields(cls)
    valid = {f.name for f in flds}
    unknown = sorted(set(d) - valid)
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}; valid: "
                         f"{', '.join(sorted(valid))}")
    hints = typing.get_type_hints(cls)
    for f in flds:
        required = (f.default is dataclasses.MISSING
                    and f.default_factory is dataclasses.MISSING)
        if required and f.name not in d:
            raise ValueError(f"{where}: field {f.name!r} is required")
        v = d.get(f.name)
        if hints[f.name] is LengthDist and isinstance(v, Mapping):
            d[f.name] = LengthDist.from_mapping(f"{where}.{f.name}", v)
        elif hints[f.name] is float and isinstance(v, int | str) and not isinstance(v, bool):
            try:
                d[f.name] = float(v)
            except ValueError:
                raise ValueError(f"{where}: {f.name}={v!r}: not a number") from None
    if "seed" in valid and d.get("seed") is None:
        d["seed"] = seed if seed is not None else 0
    return cls(**d)
