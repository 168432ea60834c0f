"""The realisations a multirun sweeps (`workload.realization`), from the config.

A study preset lists its realisations (trace windows) explicitly, spread over the trace
(`realizations: [0, 4, 8, 12, 16]`), and the windows it holds out for the held-out check
(`holdout_realizations: [2, 6, 10, 14, 18]`, never swept by the study itself:
scripts/holdout_check.py). The sweeper reads the list through the `${realization_sweep:...}`
resolver, which renders it as the sweeper's comma-separated choice:

    hydra.sweeper.params:
      workload.realization: ${realization_sweep:${realizations},${repeats}}

`realizations: null` (conf/config.yaml's default) sweeps `range(repeats)`, the first
`repeats` realisations; a listed `realizations` is swept as listed, and `repeats` may then
be left at 1 or given as the list's length (anything else is refused: two counts that
disagree). On the command line `realizations=[1,3,5]` replaces the list, and
`workload.realization=5,6` replaces the sweep itself.

`realization_ids` gives the same list to code that runs realisations itself (the capacity
search, experiments/capacity/).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from experiments.inputs.workloads.transforms import MAX_REALIZATION
from experiments.user_error import ConfigError

RESOLVER = "realization_sweep"


def _ids(values: Iterable[Any], key: str) -> list[int]:
    """`values` as distinct realisations 0..MAX_REALIZATION, or a ConfigError naming `key`."""
    out: list[int] = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_REALIZATION:
            raise ConfigError(f"{key}: {v!r} is not a realisation (an integer 0-"
                              f"{MAX_REALIZATION})")
        out.append(int(v))
    if len(set(out)) != len(out):
        raise ConfigError(f"{key}={out}: a realisation is listed twice")
    return out


def checked_realizations(realizations: Sequence[Any] | None, repeats: Any = None) -> list[int]:
    """The realisations a multirun sweeps: `realizations` as listed, else `range(repeats)`
    (1 when not given). ConfigError: an empty list, a value that is not a realisation, a
    repeat, or `repeats` neither 1 nor the list's length."""
    count = 1 if repeats is None else repeats
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ConfigError(f"repeats={count!r}: must be an integer >= 1")
    if realizations is None:
        return list(range(count))
    if isinstance(realizations, str | bytes) or not isinstance(realizations, Sequence):
        raise ConfigError(f"realizations={realizations!r}: give a list, e.g. "
                          "realizations=[0,4,8]")
    ids = _ids(realizations, "realizations")
    if not ids:
        raise ConfigError("realizations=[]: list at least one realisation (or null for "
                          "range(repeats))")
    if count not in (1, len(ids)):
        raise ConfigError(f"repeats={count} with realizations={ids}: the list sets the "
                          "realisations; give realizations=[...] (or realizations=null "
                          "repeats=N for the first N)")
    return ids


def realization_sweep(realizations: Any, repeats: Any = None) -> str:
    """The `${realization_sweep:...}` resolver: the sweeper's choice of realisations,
    `0,4,8` for a list (one realisation: `4`), `range(N)` for null realisations and
    `repeats` N."""
    if isinstance(realizations, ListConfig):
        realizations = OmegaConf.to_container(realizations)
    ids = checked_realizations(realizations, repeats)
    if realizations is None:
        return f"range({len(ids)})"
    return ",".join(map(str, ids))


def register() -> None:
    """Register `${realization_sweep:...}` (idempotent; experiments/run/config.py calls it
    with the other resolvers)."""
    OmegaConf.register_new_resolver(RESOLVER, realization_sweep, replace=True)


def realization_ids(cfg: DictConfig) -> list[int]:
    """The realisations a multirun of `cfg` sweeps (its `realizations`, else
    `range(repeats)`)."""
    listed = OmegaConf.select(cfg, "realizations")
    if isinstance(listed, ListConfig):
        listed = OmegaConf.to_container(listed)
    return checked_realizations(listed, OmegaConf.select(cfg, "repeats"))


def holdout_ids(cfg: DictConfig) -> list[int]:
    """The config's held-out realisations (`holdout_realizations`), checked disjoint from
    those it sweeps; empty when it holds none out."""
    listed = OmegaConf.select(cfg, "holdout_realizations")
    if isinstance(listed, ListConfig):
        listed = OmegaConf.to_container(listed)
    held = _ids(listed or [], "holdout_realizations")
    both = sorted(set(held) & set(realization_ids(cfg)))
    if both:
        raise ConfigError(f"holdout_realizations={held} and realizations="
                          f"{realization_ids(cfg)} share {both}: a held-out window must be "
                          "one the study does not use")
    return held
