"""Workloads: lists of contract `Request`s with arrival times, built from a config mapping.

`build_workload(cfg, seed)` dispatches on `cfg["name"]`:
- `synthetic`: Poisson / gamma arrivals, drawn lengths (`synthetic.py`);
- `shared_prefix`: SGLang's generated shared-prefix benchmark (`shared_prefix.py`);
- `multi_turn`: conversations that grow a shared history (`multi_turn.py`);
- `azure`, `mooncake`: real trace replays (`replay.py`);
- `lengths`: a length-only dataset through Hugging Face `datasets`, with synthetic arrivals
  (`datasets_source.py`).
Trace workloads share the transforms of `transforms.py` (time window, first N, prompt-length
limit, rate scaling, `max_tokens` policy). Every generator is deterministic in its seed (the
run's `seed` when the workload's own is null).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from experiments.workloads.arrivals import arrival_times
from experiments.workloads.datasets_source import LengthsWorkload, lengths_from_config
from experiments.workloads.lengths import DISTRIBUTIONS, LengthDist
from experiments.workloads.multi_turn import MultiTurnWorkload, multi_turn_from_config
from experiments.workloads.replay import (
    AzureWorkload,
    MooncakeWorkload,
    azure_from_config,
    mooncake_from_config,
)
from experiments.workloads.shared_prefix import SharedPrefixWorkload, shared_prefix_from_config
from experiments.workloads.synthetic import (
    SyntheticWorkload,
    generate_synthetic,
    synthetic_from_config,
)
from experiments.workloads.transforms import ReplayOptions
from schedulers.contract import Request

GENERATORS: dict[str, Callable[[Mapping[str, Any], int | None], list[Request]]] = {
    "synthetic": lambda cfg, seed: generate_synthetic(synthetic_from_config(cfg, seed)),
    "shared_prefix": shared_prefix_from_config,
    "multi_turn": multi_turn_from_config,
    "azure": azure_from_config,
    "mooncake": mooncake_from_config,
    "lengths": lengths_from_config,
}

# name -> the dataclass of its parameters (the structured config schemas mirror these)
PARAMS: dict[str, type] = {
    "synthetic": SyntheticWorkload,
    "shared_prefix": SharedPrefixWorkload,
    "multi_turn": MultiTurnWorkload,
    "azure": AzureWorkload,
    "mooncake": MooncakeWorkload,
    "lengths": LengthsWorkload,
}


def build_workload(cfg: Mapping[str, Any], seed: int | None = None) -> list[Request]:
    """The requests of the workload config `cfg` (its `name` picks the generator)."""
    name = cfg.get("name")
    if name not in GENERATORS:
        raise ValueError(f"workload.name={name!r}: unknown; valid: {', '.join(GENERATORS)}")
    return GENERATORS[name](cfg, seed)


__all__ = [
    "DISTRIBUTIONS", "GENERATORS", "PARAMS", "AzureWorkload", "LengthDist", "LengthsWorkload",
    "MooncakeWorkload", "MultiTurnWorkload", "ReplayOptions", "SharedPrefixWorkload",
    "SyntheticWorkload", "arrival_times", "build_workload", "generate_synthetic",
    "synthetic_from_config",
]
