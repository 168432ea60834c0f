"""Realisations: independent draws of one workload config (`workload.realization`).

Realisation 0 is the workload as configured, to the byte; realisation k > 0 is another draw
of the same config:
- generators (`synthetic`, `shared_prefix`, `multi_turn`, `lengths`, `prompts`): the seed
  becomes `realization_seed(seed, k)`, so arrivals, lengths and tokens are drawn afresh
  (`lengths` and `prompts` keep their file's rows: their arrivals and tokens are redrawn);
- trace replays (`azure`, `mooncake`, at any `rate_scale`): the k-th disjoint window of the
  trace (`transforms.select_records`): `time_window` shifted by k times its length, else the
  k-th block of `max_requests` requests, so each realisation replays requests no other one
  replays, with the trace's own arrival pattern; their random prompt tokens (and Mooncake's
  `tick_s` spreading) use the realisation's seed too.
The random victim policy's seed (`scheduler.random_seed: null`) is the same derived seed.
"""

from __future__ import annotations

import numpy as np


def realization_seed(seed: int, realization: int) -> int:
    """The seed of realisation `realization` of a config seeded with `seed`: `seed` itself
    for realisation 0 (results made before realisations existed stay valid), else a 32-bit
    seed drawn from `SeedSequence([seed, realization])`."""
    check_realization(realization)
    if realization == 0:
        return int(seed)
    return int(np.random.SeedSequence([int(seed), int(realization)]).generate_state(1)[0])


def check_realization(realization: object) -> int:
    """`realization` as an int, or a ValueError naming `workload.realization`."""
    if isinstance(realization, bool) or not isinstance(realization, int | np.integer) \
            or realization < 0:
        raise ValueError(f"workload.realization={realization!r}: must be an integer >= 0 "
                         "(sweep it with workload.realization=range(N), or repeats=N)")
    return int(realization)
