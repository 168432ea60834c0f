"""Step-time cost models for the simulated executor.

`FittedCostModel` is fitted by least squares to a profile measured on the real executor
(`scripts/profile_executor.py`, stored under conf/profiles/); `RooflineCostModel` is the
fallback when no profile exists (DESIGN.md, "Executors"). A step's shape is summarized by
`StepShape`; a cost model maps it to seconds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from engines.executors.specs import HardwareSpec, ModelSpec
from schedulers.contract import ScheduledChunk, StepPlan


@dataclass(frozen=True, slots=True)
class StepShape:
    """What a step's cost depends on.

    num_tokens:  T = sum over chunks of n (query tokens computed this step).
    attn_pairs:  A = sum over chunks of n*s + n*(n+1)/2, the (query, key) pairs of causal
                 attention for a chunk of n tokens starting at position s.
    kv_read_tokens: R = sum over chunks of (s + n), the context each chunk's attention reads.
    num_seqs:    number of chunks (requests) in the step.
    padded_kv_tokens: P, the keys the torch kernel reads in the groups it pads and masks
                 (`padded_kv_tokens`); None: not known, taken as 0 (nothing padded).
    """

    num_tokens: int
    attn_pairs: int
    kv_read_tokens: int
    num_seqs: int
    padded_kv_tokens: int | None = None

    @classmethod
    def of(cls, plan: StepPlan) -> StepShape:
        t = a = r = 0
        for c in plan.chunks:
            n = len(c.token_ids)
            s = c.start_pos
            t += n
            a += n * s + n * (n + 1) // 2
            r += s + n
        return cls(t, a, r, len(plan.chunks), padded_kv_tokens(plan.chunks))


def padded_kv_tokens(chunks: Iterable[ScheduledChunk]) -> int:
    """The keys the torch reference kernel reads in the groups it pads: 0 when none is.

    Mirrors kernels/torch_ref.py (`_groups`, `_make_group`): one-token queries (decode) form
    one group and longer ones (prefill, extend) another. A group whose contexts differ is
    padded to its longest: its G chunks, the longest ending at position L, read G x L keys
    (not the sum of their contexts, `kv_read_tokens`), and take the masked path (the padding
    masked in the scores, zeroed in the values), which costs per key on top of the read. A
    group of equal contexts is neither padded nor masked and counts 0 here.
    """
    n_dec = l_dec = n_ext = l_ext = 0
    s_dec = s_ext = -1  # the shortest context (-1: none yet)
    for c in chunks:
        end = c.start_pos + len(c.token_ids)
        if len(c.token_ids) == 1:
            n_dec += 1
            if end > l_dec:
                l_dec = end
            if s_dec < 0 or end < s_dec:
                s_dec = end
        else:
            n_ext += 1
            if end > l_ext:
                l_ext = end
            if s_ext < 0 or end < s_ext:
                s_ext = end
    return (n_dec * l_dec if s_dec < l_dec else 0) + (n_ext * l_ext if s_ext < l_ext else 0)


class CostModel(Protocol):
    """Maps a step's shape terms (see `StepShape`) to seconds. `uses_padded_kv`: whether it
    charges `padded_kv_tokens` (the executor counts them only then)."""

    uses_padded_kv: bool

    def seconds(self, num_tokens: int, attn_pairs: int, kv_read_tokens: int,
                num_seqs: int = 1, padded_kv_tokens: int | None = None) -> float:
        ...


@dataclass(frozen=True, slots=True)
class StepCost:
    """A step's roofline terms and the resulting time (seconds)."""

    flops: float
    bytes: float
    compute_s: float
    memory_s: float
    overhead_s: float

    @property
    def seconds(self) -> float:
        return max(self.compute_s, self.memory_s) + self.overhead_s


class RooflineCostModel:
    """A roofline estimate of one forward step from the model's shape and the hardware.

    With P parameters, L layers, H query heads, H_kv KV heads, head size d, weight element
    size b_w, KV element size b_kv, and a step shape (T, A, R) (see `StepShape`):

        FLOPs = 2 * P * T                  (every weight multiplies every token; this counts
                                            the embedding and LM head for every token too,
                                            a small overestimate)
              + 4 * L * H * d * A          (QK^T and PV: 2 FLOPs per multiply-add, 2 matmuls,
                                            over the causal (query, key) pairs)
        bytes = P * b_w                    (weights read once per step)
              + kv * R                     (KV read: every chunk reads its whole context)
              + kv * T                     (KV written for the new tokens)
        where kv = 2 * L * H_kv * d * b_kv (K and V bytes per token over all layers)

        time  = max(FLOPs / (peak_flops * flops_efficiency),
                    bytes / (memory_bandwidth * bandwidth_efficiency)) + step_overhead_s

    Activations, communication and kernel launch costs are ignored except through the fixed
    `step_overhead_s`. The efficiencies (0, 1] derate the peaks (1.0 = ideal roofline).
    """

    def __init__(self, model: ModelSpec, hardware: HardwareSpec, step_overhead_s: float = 0.0,
                 flops_efficiency: float = 1.0, bandwidth_efficiency: float = 1.0) -> None:
        self.uses_padded_kv = False  # the roofline has no padded-keys term
        if step_overhead_s < 0:
            raise ValueError(f"cost model: step_overhead_s={step_overhead_s!r}: must be >= 0")
        for name, value in (("flops_efficiency", flops_efficiency),
                            ("bandwidth_efficiency", bandwidth_efficiency)):
            if not 0 < value <= 1:
                raise ValueError(f"cost model: {name}={value!r}: must be in (0, 1]")
        self.model = model
        self.hardware = hardware
        self.step_overhead_s = step_overhead_s
        self.flops_efficiency = flops_efficiency
        self.bandwidth_efficiency = bandwidth_efficiency
        self._params = model.params
        self._weight_bytes = float(model.weight_bytes)
        self._kv_token_bytes = float(model.kv_bytes_per_token)
        self._attn_flops_per_pair = 4.0 * model.num_hidden_layers * model.num_attention_heads \
            * model.head_size
        self._flops_rate = hardware.peak_flops * flops_efficiency
        self._bytes_rate = hardware.memory_bandwidth * bandwidth_efficiency

    def cost(self, shape: StepShape) -> StepCost:
        """The roofline terms of one step."""
        flops = 2.0 * self._params * shape.num_tokens + self._attn_flops_per_pair \
            * shape.attn_pairs
        nbytes = self._weight_bytes + self._kv_token_bytes * (shape.kv_read_tokens
                                                              + shape.num_tokens)
        return StepCost(flops=flops, bytes=nbytes, compute_s=flops / self._flops_rate,
                        memory_s=nbytes / self._bytes_rate, overhead_s=self.step_overhead_s)

    def step_time(self, shape: StepShape) -> float:
        """Seconds for one step of this shape."""
        return self.seconds(shape.num_tokens, shape.attn_pairs, shape.kv_read_tokens)

    def seconds(self, num_tokens: int, attn_pairs: int, kv_read_tokens: int,
                num_seqs: int = 1, padded_kv_tokens: int | None = None) -> float:
        """`step_time` on the raw shape terms (the executor's hot path; `num_seqs` and
        `padded_kv_tokens` unused)."""
        flops = 2.0 * self._params * num_tokens + self._attn_flops_per_pair * attn_pairs
        nbytes = self._weight_bytes + self._kv_token_bytes * (kv_read_tokens + num_tokens)
        compute = flops / self._flops_rate
        memory = nbytes / self._bytes_rate
        return (compute if compute > memory else memory) + self.step_overhead_s


# The fitted model's features, in coefficient order (see `FittedCostModel`).
FEATURES = ("step", "num_tokens", "attn_pairs", "kv_read_tokens", "num_seqs")
# The optional sixth feature: a profile lists it in its "features" (and every measurement
# then carries it) when it was fitted with a padded-keys term; absent, its coefficient is 0.
# Fittable only where some measured step pads (a ragged batch), see `any_padded`.
PADDED_FEATURE = "padded_kv_tokens"
PROFILE_FORMAT = 1


def features(num_tokens: int, attn_pairs: int, kv_read_tokens: int, num_seqs: int,
             padded_kv_tokens: int | None = None) -> tuple[float, ...]:
    """The feature row of a step: (1, T, A, R, S) as in `FEATURES`, and P (`PADDED_FEATURE`)
    after them when `padded_kv_tokens` is given."""
    row = (1.0, float(num_tokens), float(attn_pairs), float(kv_read_tokens), float(num_seqs))
    return row if padded_kv_tokens is None else (*row, float(padded_kv_tokens))


def any_padded(measurements: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a padded-keys term can be fitted to these measurements: every one carries
    `padded_kv_tokens` and at least one is padded (else the column is all zeros)."""
    padded = False
    for m in measurements:
        if m.get(PADDED_FEATURE) is None:
            return False
        padded = padded or m[PADDED_FEATURE] > 0
    return padded


class FittedCostModel:
    """A step's duration as a linear function of its shape, fitted to measured steps.

        seconds = c_step                   fixed per-step overhead (launch, sampling, host)
                + c_tok  * T               per query token: weights times tokens (the GEMMs)
                + c_attn * A               per causal (query, key) pair: QK^T and PV
                + c_kv   * R               per context token read by a chunk's attention
                + c_seq  * S               per sequence in the batch (metadata, per-chunk work)

    with T, A, R, S the `StepShape` terms, and optionally (a sixth coefficient, when the
    profile's `features` list `PADDED_FEATURE`)

                + c_pad  * P               per key read by a group the kernel pads and masks
                                            (`padded_kv_tokens`: the torch kernel pads a
                                            ragged decode batch to its longest context)

    absent, c_pad = 0 and predictions are those of the five-term model to the bit. `fit`
    finds the coefficients by least squares on the relative error (every row divided by its
    measured time, so that short decode steps weigh as much as long prefills: the fit targets
    percentage error), with every coefficient constrained to be >= 0 (a term that does not
    help is dropped and the rest refitted), so that a prediction never decreases when a step grows.
    """

    def __init__(self, coefficients: Sequence[float], source: str = "") -> None:
        if len(coefficients) not in (len(FEATURES), len(FEATURES) + 1):
            raise ValueError(f"cost model: {len(coefficients)} coefficients; expected "
                             f"{len(FEATURES)} ({', '.join(FEATURES)}), or "
                             f"{len(FEATURES) + 1} with {PADDED_FEATURE}")
        self.coefficients = tuple(float(c) for c in coefficients)
        self.source = source
        (self._c0, self._ct, self._ca, self._cr, self._cs) = self.coefficients[:len(FEATURES)]
        self._cp = self.coefficients[len(FEATURES)] if len(self.coefficients) > len(
            FEATURES) else 0.0
        # The sim executor counts padded keys only for a model that charges them.
        self.uses_padded_kv = self._cp != 0.0

    @classmethod
    def fit(cls, rows: Sequence[Sequence[float]], seconds: Sequence[float],
            source: str = "") -> FittedCostModel:
        """Least squares on relative error over feature rows (`features`) and times."""
        x = np.asarray(rows, dtype=np.float64)
        y = np.asarray(seconds, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] not in (len(FEATURES), len(FEATURES) + 1) \
                or len(y) != len(x):
            raise ValueError(f"cost model: fit needs rows of {len(FEATURES)} features (+ "
                             f"{PADDED_FEATURE}) and one time per row (got {x.shape} and "
                             f"{y.shape})")
        if len(y) == 0 or np.any(y <= 0):
            raise ValueError("cost model: fit needs at least one row and positive times")
        xw = x / y[:, None]
        yw = np.ones_like(y)
        # Scale columns so that lstsq sees comparable magnitudes.
        scale = np.abs(xw).max(axis=0)
        scale[scale == 0] = 1.0
        active = [j for j in range(x.shape[1]) if np.any(x[:, j] != 0)]
        coef = np.zeros(x.shape[1])
        while active:
            sol, *_ = np.linalg.lstsq(xw[:, active] / scale[active], yw, rcond=None)
            sol = sol / scale[active]
            if np.all(sol >= 0):
                coef[active] = sol
                break
            active.pop(int(np.argmin(sol)))  # drop the most negative term, refit the rest
        return cls(coef.tolist(), source)

    @classmethod
    def from_profile(cls, profile: Mapping[str, Any] | str | Path) -> FittedCostModel:
        """Fit to the `measurements` of a profile (a dict, or a JSON file written by
        scripts/profile_executor.py)."""
        source = ""
        if not isinstance(profile, Mapping):
            source = str(profile)
            try:
                profile = json.loads(Path(profile).read_text())
            except FileNotFoundError:
                raise FileNotFoundError(f"cost model: profile {source} does not exist "
                                        "(make one with scripts/profile_executor.py)") from None
        assert isinstance(profile, Mapping)
        if profile.get("format") != PROFILE_FORMAT:
            raise ValueError(f"cost model: profile {source}: format {profile.get('format')!r}; "
                             f"expected {PROFILE_FORMAT}")
        meas = profile.get("measurements") or []
        padded = PADDED_FEATURE in (profile.get("features") or ())
        for i, m in enumerate(meas if padded else ()):
            if not isinstance(m.get(PADDED_FEATURE), int | float):
                raise ValueError(f"cost model: profile {source}: features list "
                                 f"{PADDED_FEATURE} but measurement {i} has "
                                 f"{PADDED_FEATURE}={m.get(PADDED_FEATURE)!r}")
        rows = [features(m["num_tokens"], m["attn_pairs"], m["kv_read_tokens"], m["num_seqs"],
                         m[PADDED_FEATURE] if padded else None)
                for m in meas]
        return cls.fit(rows, [m["seconds"] for m in meas], source)

    def seconds(self, num_tokens: int, attn_pairs: int, kv_read_tokens: int,
                num_seqs: int = 1, padded_kv_tokens: int | None = None) -> float:
        """Predicted seconds of a step with these shape terms (`padded_kv_tokens` None: no
        padding)."""
        t = (self._c0 + self._ct * num_tokens + self._ca * attn_pairs
             + self._cr * kv_read_tokens + self._cs * num_seqs)
        if self._cp and padded_kv_tokens:
            t += self._cp * padded_kv_tokens
        return t

    def step_time(self, shape: StepShape) -> float:
        return self.seconds(shape.num_tokens, shape.attn_pairs, shape.kv_read_tokens,
                            shape.num_seqs, shape.padded_kv_tokens)

    def describe(self) -> dict[str, float]:
        """The coefficients by feature name."""
        return dict(zip((*FEATURES, PADDED_FEATURE), self.coefficients, strict=False))


def mape(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """Median absolute percentage error, in percent."""
    p = np.asarray(predicted, dtype=np.float64)
    m = np.asarray(measured, dtype=np.float64)
    return float(np.median(np.abs(p - m) / m) * 100.0)
