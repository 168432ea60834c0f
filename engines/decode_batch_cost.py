"""A fitted cost model with a per-batch-size factor for decode steps (`cost_model=profile_batch`).

Why: on a CPU the linear model of `FittedCostModel` misses how a small decode batch runs. A
decode step of b sequences multiplies b rows by every weight matrix, and the BLAS path for
b = 2 or 3 rows is slower than for 4 (measured for SmolLM2-135M with one thread: the LM head,
[b, 576] x [576, 49152], takes 36 and 56 ms at b = 2 and 3 against 28 ms at b = 4; a whole
decode step 141-159 ms and 174-224 ms against 126-171 ms), so decode time is not even monotone
in b there, which no non-negative linear combination of the step terms can express.

The correction: the base model is fitted as before; then, for each decode batch size b the
profile measured, the factor is the median of measured / predicted over its decode shapes.
A pure decode step (one token per sequence) of b sequences is predicted as base x factor(b),
the factor linearly interpolated between measured sizes and held at the ends. Prefill and
mixed steps (many rows per GEMM) keep the base prediction.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np

from engines.cost_model import PADDED_FEATURE, FittedCostModel, StepShape


class DecodeBatchCostModel:
    """`FittedCostModel` times a per-decode-batch-size factor (see the module docstring)."""

    def __init__(self, base: FittedCostModel, factors: Mapping[int, float]) -> None:
        if any(b < 1 or not f > 0 for b, f in factors.items()):
            raise ValueError(f"cost model: decode batch factors must be positive: {factors}")
        self.base = base
        self.factors = dict(sorted(factors.items()))
        self._sizes = np.array(list(self.factors), dtype=np.float64)
        self._values = np.array(list(self.factors.values()), dtype=np.float64)
        self.source = base.source
        self.uses_padded_kv = base.uses_padded_kv

    @classmethod
    def from_profile(cls, profile: Mapping[str, Any] | str | Path) -> DecodeBatchCostModel:
        """The base fit and the decode factors from a profile (dict or JSON file)."""
        base = FittedCostModel.from_profile(profile)
        data = profile if isinstance(profile, Mapping) else json.loads(Path(profile)
                                                                        .read_text())
        ratios: dict[int, list[float]] = {}
        for m in data.get("measurements") or []:
            if m["num_tokens"] != m["num_seqs"]:
                continue  # not a pure decode step
            pred = base.seconds(m["num_tokens"], m["attn_pairs"], m["kv_read_tokens"],
                                m["num_seqs"], m.get(PADDED_FEATURE))
            if pred > 0:
                ratios.setdefault(int(m["num_seqs"]), []).append(m["seconds"] / pred)
        return cls(base, {b: median(r) for b, r in ratios.items()})

    def factor(self, num_seqs: int) -> float:
        """The decode factor of a batch of `num_seqs` (1.0 when the profile has none)."""
        if not self.factors:
            return 1.0
        return float(np.interp(num_seqs, self._sizes, self._values))

    def seconds(self, num_tokens: int, attn_pairs: int, kv_read_tokens: int,
                num_seqs: int = 1, padded_kv_tokens: int | None = None) -> float:
        """Predicted seconds; pure decode steps (num_tokens == num_seqs) get the factor."""
        t = self.base.seconds(num_tokens, attn_pairs, kv_read_tokens, num_seqs,
                              padded_kv_tokens)
        return t * self.factor(num_seqs) if num_tokens == num_seqs else t

    def step_time(self, shape: StepShape) -> float:
        return self.seconds(shape.num_tokens, shape.attn_pairs, shape.kv_read_tokens,
                            shape.num_seqs, shape.padded_kv_tokens)

    def describe(self) -> dict[str, Any]:
        """The base coefficients and the decode factors."""
        return {**self.base.describe(),
                "decode_factors": {b: round(f, 4) for b, f in self.factors.items()}}
