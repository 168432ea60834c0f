"""Workload generators: lists of contract `Request`s with arrival times.

`synthetic`: Poisson (or gamma, with `burstiness` != 1, as `vllm bench serve` does) arrivals
at `request_rate` requests/s, the first at t=0; prompt and output lengths drawn from named
distributions; prompt token ids drawn from the seed. Two modes:
- "fixed": the benchmark mode: `max_tokens` = the drawn output length and `ignore_eos` set,
  so every request produces exactly that many tokens (`eos_output_len` = it as well);
- "eos": `max_tokens` = the `max_tokens` cap, the model emits EOS at the drawn output length
  (which the scheduler cannot see), `ignore_eos` unset.
Arrivals, lengths and tokens use independent random streams spawned from `seed`, so changing
the length distribution does not move the arrivals.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from schedulers.contract import DEFAULT_EOS_TOKEN_ID, Request

DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    # name: required parameters (min / max are optional clips for every distribution)
    "fixed": ("value",),
    "uniform": ("low", "high"),
    "lognormal": ("mean", "sigma"),
}
MODES = ("fixed", "eos")


@dataclass(frozen=True, slots=True)
class LengthDist:
    """A token-length distribution.

    fixed: always `value`. uniform: integers in [low, high]. lognormal: mean `mean` and
    log-space standard deviation `sigma` (the underlying normal has mu = ln(mean) - sigma^2/2).
    Draws are rounded, then clipped to [min, max] (min defaults to 1).
    """

    dist: str
    value: int | None = None
    low: int | None = None
    high: int | None = None
    mean: float | None = None
    sigma: float | None = None
    min: int = 1
    max: int | None = None

    def __post_init__(self) -> None:
        if self.dist not in DISTRIBUTIONS:
            raise ValueError(f"length distribution: dist={self.dist!r}: unknown; valid: "
                             f"{', '.join(DISTRIBUTIONS)}")
        for p in DISTRIBUTIONS[self.dist]:
            if getattr(self, p) is None:
                raise ValueError(f"length distribution {self.dist!r}: parameter {p!r} is "
                                 f"required (needs {', '.join(DISTRIBUTIONS[self.dist])})")
        if self.min < 1:
            raise ValueError(f"length distribution: min={self.min!r}: must be at least 1")
        if self.max is not None and self.max < self.min:
            raise ValueError(f"length distribution: max={self.max!r} is below min={self.min!r}")
        if self.dist == "uniform" and (self.low is None or self.high is None
                                       or self.high < self.low):
            raise ValueError(f"length distribution 'uniform': high={self.high!r} is below "
                             f"low={self.low!r}")
        if self.dist == "lognormal" and not (self.mean is not None and self.mean > 0
                                             and self.sigma is not None and self.sigma >= 0):
            raise ValueError(f"length distribution 'lognormal': mean={self.mean!r} must be "
                             f"positive and sigma={self.sigma!r} non-negative")

    @classmethod
    def from_mapping(cls, where: str, cfg: Mapping[str, Any]) -> LengthDist:
        """Build from a config mapping; `where` names it in error messages."""
        valid = {f.name for f in fields(cls)}
        unknown = sorted(set(cfg) - valid)
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}; valid: "
                             f"{', '.join(sorted(valid))}")
        if "dist" not in cfg:
            raise ValueError(f"{where}: field 'dist' is required; valid: "
                             f"{', '.join(DISTRIBUTIONS)}")
        try:
            return cls(**dict(cfg))
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """`n` integer lengths."""
        if self.dist == "fixed":
            x = np.full(n, float(self.value or 0))
        elif self.dist == "uniform":
            x = rng.integers(int(self.low or 0), int(self.high or 0) + 1, size=n).astype(float)
        else:
            sigma = float(self.sigma or 0.0)
            mu = math.log(float(self.mean or 1.0)) - sigma * sigma / 2
            x = rng.lognormal(mu, sigma, size=n)
        out = np.rint(x).astype(np.int64)
        return np.clip(out, self.min, self.max if self.max is not None else None)


@dataclass(frozen=True, slots=True)
class SyntheticWorkload:
    """Parameters of the synthetic generator (see the module docstring).

    `request_rate` is requests/s (inf: all at t=0). `shared_prefix_len` > 0 starts every
    prompt with one of `num_prefix_groups` shared prefixes (counted in the prompt length; a
    drawn prompt shorter than the prefix is lengthened to prefix + 1).
    """

    num_requests: int
    request_rate: float
    prompt_len: LengthDist
    output_len: LengthDist
    seed: int = 0
    burstiness: float = 1.0
    mode: str = "fixed"
    max_tokens: int | None = None
    vocab_size: int = 32000
    eos_token_id: int = DEFAULT_EOS_TOKEN_ID
    shared_prefix_len: int = 0
    num_prefix_groups: int = 1

    def __post_init__(self) -> None:
        def bad(name: str, why: str) -> ValueError:
            return ValueError(f"workload: {name}={getattr(self, name)!r}: {why}")

        if self.num_requests < 0:
            raise bad("num_requests", "must be >= 0")
        if not self.request_rate > 0:
            raise bad("request_rate", "must be positive (.inf for all at once)")
        if not self.burstiness > 0:
            raise bad("burstiness", "must be positive")
        if self.mode not in MODES:
            raise bad("mode", f"valid: {', '.join(MODES)}")
        if self.mode == "eos" and (self.max_tokens is None or self.max_tokens < 1):
            raise bad("max_tokens", "mode 'eos' needs a positive max_tokens cap")
        if self.vocab_size < 16:
            raise bad("vocab_size", "must be at least 16")
        if self.shared_prefix_len < 0:
            raise bad("shared_prefix_len", "must be >= 0")
        if self.num_prefix_groups < 1:
            raise bad("num_prefix_groups", "must be at least 1")


def synthetic_from_config(cfg: Mapping[str, Any], seed: int | None = None) -> SyntheticWorkload:
    """Build a `SyntheticWorkload` from a config mapping (`name` is ignored)."""
    d = {k: v for k, v in cfg.items() if k != "name"}
    valid = {f.name for f in fields(SyntheticWorkload)}
    unknown = sorted(set(d) - valid)
    if unknown:
        raise ValueError(f"workload: unknown field(s) {', '.join(unknown)}; valid: "
                         f"{', '.join(sorted(valid))}")
    for key in ("prompt_len", "output_len"):
        if key not in d:
            raise ValueError(f"workload: field {key!r} is required")
        d[key] = LengthDist.from_mapping(f"workload.{key}", d[key])
    if seed is not None and d.get("seed") is None:
        d["seed"] = seed
    if d.get("seed") is None:
        d["seed"] = 0
    d["request_rate"] = float(d["request_rate"])
    return SyntheticWorkload(**d)


def arrival_times(rng: np.random.Generator, n: int, rate: float, burstiness: float
                  ) -> np.ndarray:
    """Arrival times: the first at 0, then gamma gaps of mean 1/rate (Poisson at burstiness 1)."""
    if n == 0:
        return np.zeros(0)
    if math.isinf(rate):
        return np.zeros(n)
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n - 1)
    return np.concatenate([[0.0], np.cumsum(gaps)])


def generate_synthetic(w: SyntheticWorkload) -> list[Request]:
    """The requests `r0 .. r{n-1}` of a synthetic workload, in arrival order."""
    s_arr, s_len, s_tok, s_pre = np.random.SeedSequence(w.seed).spawn(4)
    n = w.num_requests
    arrivals = arrival_times(np.random.default_rng(s_arr), n, w.request_rate, w.burstiness)
    rng_len = np.random.default_rng(s_len)
    prompt_lens = w.prompt_len.sample(rng_len, n)
    output_lens = w.output_len.sample(rng_len, n)
    rng_tok = np.random.default_rng(s_tok)
    low = 3  # keep clear of special ids 0..2 (EOS is 2)
    prefixes: list[list[int]] = []
    groups = np.zeros(n, dtype=np.int64)
    if w.shared_prefix_len > 0:
        rng_pre = np.random.default_rng(s_pre)
        prefixes = [rng_pre.integers(low, w.vocab_size, size=w.shared_prefix_len).tolist()
                    for _ in range(w.num_prefix_groups)]
        groups = rng_pre.integers(0, w.num_prefix_groups, size=n)
    reqs: list[Request] = []
    for i in range(n):
        plen = int(prompt_lens[i])
        olen = int(output_lens[i])
        if prefixes:
            plen = max(plen, w.shared_prefix_len + 1)
            body = rng_tok.integers(low, w.vocab_size, size=plen - w.shared_prefix_len)
            prompt = prefixes[int(groups[i])] + body.tolist()
        else:
            prompt = rng_tok.integers(low, w.vocab_size, size=plen).tolist()
        if w.mode == "fixed":
            max_tokens, ignore_eos = olen, True
        else:
            max_tokens, ignore_eos = int(w.max_tokens or olen), False
        reqs.append(Request(
            request_id=f"r{i}",
            prompt_token_ids=prompt,
            max_tokens=max_tokens,
            arrival_time=float(arrivals[i]),
            ignore_eos=ignore_eos,
            eos_output_len=olen,
            eos_token_id=w.eos_token_id,
        ))
    return reqs


GENERATORS = {"synthetic": lambda cfg, seed: generate_synthetic(synthetic_from_config(cfg, seed))}


def build_workload(cfg: Mapping[str, Any], seed: int | None = None) -> list[Request]:
    """The requests of the workload config `cfg` (its `name` picks the generator)."""
    name = cfg.get("name")
    if name not in GENERATORS:
        raise ValueError(f"workload.name={name!r}: unknown; valid: {', '.join(GENERATORS)}")
    return GENERATORS[name](cfg, seed)
