"""Arrival processes: Poisson, or gamma with a burstiness factor, as `vllm bench serve` draws.

Gaps between arrivals are gamma-distributed with shape `burstiness` and mean 1 / rate:
burstiness 1 is a Poisson process, below 1 is burstier (coefficient of variation
1 / sqrt(burstiness)), above 1 is more regular.
"""

from __future__ import annotations

import math

import numpy as np


def check_rate(where: str, rate: float, burstiness: float) -> None:
    """Raise a ValueError naming `where` when the rate or burstiness is not positive."""
    if not rate > 0:
        raise ValueError(f"{where}: request_rate={rate!r}: must be positive (all at once: "
                         "request_rate=inf on the command line, .inf in YAML)")
    if not burstiness > 0:
        raise ValueError(f"{where}: burstiness={burstiness!r}: must be positive")


def arrival_times(rng: np.random.Generator, n: int, rate: float, burstiness: float
                  ) -> np.ndarray:
    """Arrival times: the first at 0, then gamma gaps of mean 1/rate (Poisson at burstiness 1)."""
    if n == 0:
        return np.zeros(0)
    if math.isinf(rate):
        return np.zeros(n)
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n - 1)
    return np.concatenate([[0.0], np.cumsum(gaps)])
