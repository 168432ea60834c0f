"""`cost_model=profile_batch` (engines/decode_batch_cost.py): the linear fit times a factor per
decode batch size, for CPUs whose small-batch GEMMs are slower than a linear model allows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engines.cost_model import PROFILE_FORMAT, FittedCostModel
from engines.decode_batch_cost import DecodeBatchCostModel
from experiments.run.build import build_cost_model, cost_model_summary

# Linear truth: 50 ms per step + 4 ms per token + 1 us per context token read.
BASE = (0.05, 0.004, 0.0, 1e-6, 0.0)
# Decode steps of 2 and 3 sequences run 1.5x and 2x slower than the linear truth.
SLOW = {2: 1.5, 3: 2.0}


def linear(t: int, r: int) -> float:
    return BASE[0] + BASE[1] * t + BASE[3] * r


def profile() -> dict[str, object]:
    meas = []
    for n, s in ((16, 0), (64, 0), (128, 64), (256, 128), (32, 32)):
        meas.append({"kind": "prefill", "num_tokens": n, "attn_pairs": n * s + n * (n + 1) // 2,
                     "kv_read_tokens": n + s, "num_seqs": 1, "seconds": linear(n, n + s)})
    for b in (1, 2, 3, 4, 8):
        for c in (64, 128):
            meas.append({"kind": "decode", "num_tokens": b, "attn_pairs": b * c,
                         "kv_read_tokens": b * c, "num_seqs": b,
                         "seconds": linear(b, b * c) * SLOW.get(b, 1.0)})
    return {"format": PROFILE_FORMAT, "measurements": meas}


def test_factors_follow_the_measured_decode_batches(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(profile()))
    model = build_cost_model("profile_batch", str(path))
    assert isinstance(model, DecodeBatchCostModel)
    base = FittedCostModel.from_profile(path)
    # Slow batch sizes get their factor relative to the base fit; others stay near 1.
    f = {b: model.factor(b) for b in (1, 2, 3, 4, 8)}
    assert f[3] > f[2] > 1.2 and f[3] / f[4] == pytest.approx(2.0, rel=0.25)
    assert model.seconds(3, 300, 300, 3) == pytest.approx(base.seconds(3, 300, 300, 3) * f[3])
    # Between measured sizes the factor is interpolated; past the last one it is held.
    assert model.factor(6) == pytest.approx((f[4] + f[8]) / 2)
    assert model.factor(64) == pytest.approx(f[8])
    # Prefill and mixed steps keep the base prediction.
    assert model.seconds(40, 900, 80, 2) == base.seconds(40, 900, 80, 2)
    # The decode-run path of the sim executor (num_tokens == num_seqs) is corrected too.
    assert model.seconds(2, 256, 256, 2) > base.seconds(2, 256, 256, 2)
    assert "decode_factors" in model.describe()
    summary = cost_model_summary({"name": "sim", "cost_model": "profile_batch",
                                  "profile": str(path)})
    assert summary == {"cost_model": "profile_batch", "cost_model_profile": str(path)}


def test_profile_batch_beats_the_linear_fit_on_slow_batches(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(profile()))
    batch = DecodeBatchCostModel.from_profile(path)
    base = FittedCostModel.from_profile(path)
    for b, c in ((2, 96), (3, 96)):
        truth = linear(b, b * c) * SLOW[b]
        assert abs(batch.seconds(b, b * c, b * c, b) - truth) / truth < 0.1
        assert abs(base.seconds(b, b * c, b * c, b) - truth) / truth > 0.15


def test_bad_factors_and_missing_profile() -> None:
    with pytest.raises(ValueError, match="decode batch factors must be positive"):
        DecodeBatchCostModel(FittedCostModel(BASE), {2: 0.0})
    with pytest.raises(ValueError, match=r"cost_model=profile_batch needs executor\.profile"):
        build_cost_model("profile_batch", None)
