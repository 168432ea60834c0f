"""Workloads: contract `Request`s with arrival times, built from a config mapping.

`stream_workload(cfg, seed)` (a lazy `RequestStream`: the count up front, each request built
when pulled) and `build_workload(cfg, seed)` (the whole list) dispatch on `cfg["name"]`:
- `synthetic`: Poisson / gamma arrivals, drawn lengths (`synthetic.py`);
- `shared_prefix`: SGLang's generated shared-prefix benchmark (`shared_prefix.py`);
- `multi_turn`: conversations that grow a shared history (`multi_turn.py`);
- `azure`, `mooncake`: real trace replays (`replay.py`);
- `lengths`: a length-only file (CSV, JSON lines, parquet), or a JSON file or a Hugging Face
  dataset through `datasets`, with synthetic arrivals (`datasets_source.py`);
- `prompts`: real text questions for a real model, tokenized with its chat template
  (`prompts.py`).
Trace workloads share the transforms of `transforms.py` (time window, first N, prompt-length
limit, rate scaling, `max_tokens` policy). Every generator is deterministic in its seed (the
run's `seed` when the workload's own is null). `shared_prefix` and `multi_turn` build their
whole list (prompts share a history); the others are lazy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from experiments.inputs.workloads.arrivals import arrival_times
from experiments.inputs.workloads.datasets_source import LengthsWorkload, lengths_stream
from experiments.inputs.workloads.lengths import DISTRIBUTIONS, LengthDist
from experiments.inputs.workloads.multi_turn import MultiTurnWorkload, multi_turn_from_config
from experiments.inputs.workloads.parse import parse_params
from experiments.inputs.workloads.prompts import (
    PromptsWorkload,
    prompts_from_config,
    prompts_stream,
)
from experiments.inputs.workloads.realization import check_realization, realization_seed
from experiments.inputs.workloads.replay import (
    AzureWorkload,
    MooncakeWorkload,
    azure_stream_from_config,
    mooncake_stream_from_config,
)
from experiments.inputs.workloads.shared_prefix import (
    SharedPrefixWorkload,
    shared_prefix_from_config,
)
from experiments.inputs.workloads.stream import RequestStream, list_stream
from experiments.inputs.workloads.synthetic import (
    SyntheticWorkload,
    generate_synthetic,
    synthetic_from_config,
    synthetic_stream,
)
from experiments.inputs.workloads.transforms import ReplayOptions
from schedulers.contract import Request

STREAMS: dict[str, Callable[[Mapping[str, Any], int | None], RequestStream]] = {
    "synthetic": lambda cfg, seed: synthetic_stream(synthetic_from_config(cfg, seed)),
    "shared_prefix": lambda cfg, seed: list_stream(lambda: shared_prefix_from_config(cfg, seed)),
    "multi_turn": lambda cfg, seed: list_stream(lambda: multi_turn_from_config(cfg, seed)),
    "azure": azure_stream_from_config,
    "mooncake": mooncake_stream_from_config,
    "lengths": lambda cfg, seed: lengths_stream(parse_params(LengthsWorkload, cfg, seed)),
    "prompts": lambda cfg, seed: prompts_stream(prompts_from_config(cfg, seed)),
}
GENERATORS = STREAMS  # the former name

# name -> the dataclass of its parameters (the structured config schemas mirror these)
PARAMS: dict[str, type] = {
    "synthetic": SyntheticWorkload,
    "shared_prefix": SharedPrefixWorkload,
    "multi_turn": MultiTurnWorkload,
    "azure": AzureWorkload,
    "mooncake": MooncakeWorkload,
    "lengths": LengthsWorkload,
    "prompts": PromptsWorkload,
}


def stream_workload(cfg: Mapping[str, Any], seed: int | None = None) -> RequestStream:
    """The requests of the workload config `cfg` as a lazy stream in arrival order (its
    `name` picks the generator); trace files are read and validated now. `realization`
    (default 0) picks another draw of the same config (`realization.py`)."""
    name = cfg.get("name")
    if name not in STREAMS:
        raise ValueError(f"workload.name={name!r}: unknown; valid: {', '.join(STREAMS)}")
    return STREAMS[name](realized(cfg, seed), seed)


def workload_seed(cfg: Mapping[str, Any], seed: int | None = None) -> int:
    """The seed the workload `cfg` is drawn with: its own `seed`, else the run's, made the
    seed of its realisation (`realization_seed`)."""
    own = cfg.get("seed")
    base = int(own) if own is not None else int(seed or 0)
    return realization_seed(base, check_realization(cfg.get("realization", 0)))


def realized(cfg: Mapping[str, Any], seed: int | None = None) -> dict[str, Any]:
    """`cfg` with the seed of its realisation; `realization` stays only where the workload
    reads it (trace replays: their windows); the run's keys `load` and `capacity_file` (a
    load left unresolved is an error) are dropped."""
    out = {str(k): v for k, v in cfg.items()}
    if out.get("load") is not None:
        raise ValueError(f"workload.load={out['load']!r}: a load is resolved against its "
                         "capacity file before the workload is built "
                         "(experiments.run.load.resolve_load)")
    out.pop("load", None)
    out.pop("capacity_file", None)
    out["seed"] = workload_seed(cfg, seed)
    if not issubclass(PARAMS[str(cfg["name"])], ReplayOptions):
        out.pop("realization", None)
    return out


def build_workload(cfg: Mapping[str, Any], seed: int | None = None) -> list[Request]:
    """The requests of the workload config `cfg`, all built, in arrival order."""
    return list(stream_workload(cfg, seed))


__all__ = [
    "DISTRIBUTIONS",
    "GENERATORS",
    "PARAMS",
    "STREAMS",
    "AzureWorkload",
    "LengthDist",
    "LengthsWorkload",
    "MooncakeWorkload",
    "MultiTurnWorkload",
    "ReplayOptions",
    "RequestStream",
    "SharedPrefixWorkload",
    "SyntheticWorkload",
    "arrival_times",
    "build_workload",
    "generate_synthetic",
    "realization_seed",
    "realized",
    "stream_workload",
    "synthetic_from_config",
    "synthetic_stream",
    "workload_seed",
]
