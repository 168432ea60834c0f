"""In-situ calibration: a cost-model profile from the steps a real engine run took.

Why: a step measured inside a real run (scheduler, KV bookkeeping, sampling and the Python
around them sharing the caches, on a machine whose other work varies) takes longer than the
same shape measured alone by `scripts/profile_executor.py`'s grid (5-13 % for SmolLM2-135M on
the shared 2-vCPU machine, results/real_model/README.md). Fitting the cost model to the
steps of a real run on a *calibration* workload (another seed, so other prompts and
arrivals) captures that, without fitting on the run the simulator is then validated against.

Input: the `step_shapes.parquet` a real run of `scripts/real_vs_sim.py` writes (one row per
executed step: num_tokens, attn_pairs, kv_read_tokens, num_seqs, prefill, seconds, and
padded_kv_tokens; see `engines.cost_model.StepShape`). Output: a profile dict in the format of
`scripts/profile_executor.py` (`measurements` are the run's steps), so that
`FittedCostModel.from_profile` and `DecodeBatchCostModel.from_profile` (its per-batch-size
decode factors: the median of measured / base-predicted over the decode steps of each size)
fit it unchanged. When the steps carry `padded_kv_tokens` (the keys the torch kernel reads in
the groups it pads to their longest context and masks) and some step is padded, the fit gains
the padded-keys term (`engines.cost_model.PADDED_FEATURE`): a run's ragged decode batches cost
more than their summed contexts say, which the five-term model could only absorb into its
per-context-token coefficient.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from engines.cost_model import (
    FEATURES,
    PADDED_FEATURE,
    PROFILE_FORMAT,
    FittedCostModel,
    any_padded,
    features,
    mape,
)
from engines.decode_batch_cost import DecodeBatchCostModel

STEP_SHAPES_FILE = "step_shapes.parquet"
SHAPE_COLUMNS = ("num_tokens", "attn_pairs", "kv_read_tokens", "num_seqs", "seconds")


def load_steps(run_dirs: Sequence[str | Path]) -> pd.DataFrame:
    """The step shapes of one or more real runs (their `step_shapes.parquet`), concatenated,
    with a `run` column naming the folder each row came from."""
    if not run_dirs:
        raise ValueError("calibration: no run folder given")
    frames = []
    for d in run_dirs:
        path = Path(d) / STEP_SHAPES_FILE
        if not path.is_file():
            raise FileNotFoundError(
                f"calibration: run folder {d}: no {STEP_SHAPES_FILE} (written for the real runs "
                "of scripts/real_vs_sim.py; steps.parquet lacks attn_pairs and kv_read_tokens)")
        df = pd.read_parquet(path)
        missing = [c for c in SHAPE_COLUMNS if c not in df.columns]
        if missing:
            raise ValueError(f"calibration: {path}: missing columns {missing}")
        frames.append(df.assign(run=str(d)))
    return pd.concat(frames, ignore_index=True)


def step_kind(num_tokens: int, num_seqs: int, prefill: bool) -> str:
    """'decode' (one token per sequence), 'prefill' (no decode chunk) or 'mixed'."""
    if num_tokens == num_seqs and not prefill:
        return "decode"
    return "mixed" if num_seqs > 1 and num_tokens > num_seqs else "prefill"


def profile_from_steps(steps: pd.DataFrame, source: Sequence[str] = (),
                       base_profile: dict[str, Any] | None = None,
                       padded: bool | None = None) -> dict[str, Any]:
    """A profile (format of scripts/profile_executor.py) whose measurements are `steps`.

    `steps`: one row per executed step, columns `SHAPE_COLUMNS` (+ optional `prefill` and
    `padded_kv_tokens`). `padded`: fit the padded-keys term (None: when the steps carry
    `padded_kv_tokens` and some step is padded; True requires that; False: never).
    Every step with a non-positive or non-finite time is an error (a timer fault, not a
    shape to fit). `base_profile` (the grid profile, optional) lends its model, hardware,
    dtype and kernel descriptions."""
    for col in SHAPE_COLUMNS:
        if col not in steps.columns:
            raise ValueError(f"calibration: steps table lacks column {col!r}")
    sec = steps["seconds"].astype(float).to_numpy()
    bad = steps[~((sec > 0) & np.isfinite(sec))]
    if len(bad):
        r = bad.iloc[0]
        raise ValueError(f"calibration: step {int(r.get('step', bad.index[0]))}: seconds="
                         f"{float(r['seconds'])}: must be a positive finite time")
    prefill = steps["prefill"] if "prefill" in steps.columns else pd.Series(
        steps["num_tokens"] != steps["num_seqs"], index=steps.index)
    meas: list[dict[str, Any]] = [
        {"kind": step_kind(int(t), int(s), bool(p)), "num_tokens": int(t),
         "attn_pairs": int(a), "kv_read_tokens": int(r), "num_seqs": int(s),
         "seconds": float(x)}
        for t, a, r, s, x, p in zip(steps["num_tokens"], steps["attn_pairs"],
                                    steps["kv_read_tokens"], steps["num_seqs"],
                                    steps["seconds"], prefill, strict=True)]
    if PADDED_FEATURE in steps.columns:
        if steps[PADDED_FEATURE].isna().any():
            raise ValueError(f"calibration: {PADDED_FEATURE} is missing in some steps (runs "
                             "recorded with and without it; fit them apart or pass "
                             "padded=False)")
        pad = steps[PADDED_FEATURE].to_numpy()
        neg = np.flatnonzero(pad < 0)
        if len(neg):
            r = steps.iloc[neg[0]]
            raise ValueError(f"calibration: step {int(r.get('step', neg[0]))}: "
                             f"{PADDED_FEATURE}={int(r[PADDED_FEATURE])}: must be >= 0")
        for m, v in zip(meas, pad, strict=True):
            m[PADDED_FEATURE] = int(v)
    use_pad = any_padded(meas) if padded is None else padded
    if use_pad and not any_padded(meas):
        raise ValueError(f"calibration: padded=True but the steps have no {PADDED_FEATURE} "
                         "column, or no step is padded (the term cannot be fitted)")
    feature_names = [*FEATURES, PADDED_FEATURE] if use_pad else list(FEATURES)
    base = FittedCostModel.fit([features(m["num_tokens"], m["attn_pairs"],
                                         m["kv_read_tokens"], m["num_seqs"],
                                         m[PADDED_FEATURE] if use_pad else None)
                                for m in meas],
                               [m["seconds"] for m in meas])
    profile: dict[str, Any] = {
        "format": PROFILE_FORMAT,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        **{k: base_profile[k] for k in ("model", "hardware", "dtype", "kernel", "timer",
                                        "page_size") if base_profile and k in base_profile},
        "grid": "in-situ (steps of real runs)",
        "calibration": {"runs": list(source), "steps": len(meas),
                        "kinds": {k: sum(m["kind"] == k for m in meas)
                                  for k in ("decode", "prefill", "mixed")}},
        "features": feature_names,
        "measurements": meas,
    }
    model = DecodeBatchCostModel.from_profile(profile)
    pred = [model.seconds(m["num_tokens"], m["attn_pairs"], m["kv_read_tokens"],
                          m["num_seqs"], m.get(PADDED_FEATURE)) for m in meas]
    profile["fit"] = {"coefficients": base.describe(),
                      "decode_factors": {str(b): round(f, 4) for b, f in model.factors.items()},
                      "mape_pct_on_steps": round(mape(pred, [m["seconds"] for m in meas]), 2)}
    return profile
