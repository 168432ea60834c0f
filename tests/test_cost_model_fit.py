"""The fitted cost model (engines/cost_model.py: FittedCostModel) and its config wiring."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from engines.cost_model import PROFILE_FORMAT, FittedCostModel, StepShape, features, mape
from experiments.run.build import build_cost_model, build_executor, cost_model_summary

TRUE = (2e-3, 1.5e-5, 3e-9, 2e-7, 4e-5)
ROOT = Path(__file__).resolve().parents[1]


def _synthetic_rows(n: int = 200, seed: int = 0) -> tuple[list[tuple[float, ...]], list[float]]:
    rng = random.Random(seed)
    rows, ys = [], []
    for _ in range(n):
        s = rng.randint(1, 64)
        t = rng.randint(s, 4096)
        a = rng.randint(t, t * 2048)
        r = rng.randint(t, s * 4096)
        row = features(t, a, r, s)
        rows.append(row)
        ys.append(sum(c * x for c, x in zip(TRUE, row, strict=True)))
    return rows, ys


def test_fit_recovers_known_coefficients() -> None:
    rows, ys = _synthetic_rows()
    model = FittedCostModel.fit(rows, ys)
    for got, want in zip(model.coefficients, TRUE, strict=True):
        assert got == pytest.approx(want, rel=1e-6)
    assert mape([model.seconds(*map(int, r[1:])) for r in rows], ys) < 1e-6


def test_fit_with_noise_and_useless_term_stays_nonnegative() -> None:
    rng = random.Random(1)
    rows, ys = _synthetic_rows(400, seed=2)
    noisy = [y * (1 + rng.uniform(-0.05, 0.05)) for y in ys]
    model = FittedCostModel.fit(rows, noisy)
    assert all(c >= 0 for c in model.coefficients)
    assert mape([model.seconds(*map(int, r[1:])) for r in rows], noisy) < 5.0


def test_prediction_from_profile_file(tmp_path: Path) -> None:
    rows, ys = _synthetic_rows(50)
    meas = [{"kind": "x", "num_tokens": int(r[1]), "attn_pairs": int(r[2]),
             "kv_read_tokens": int(r[3]), "num_seqs": int(r[4]), "seconds": y}
            for r, y in zip(rows, ys, strict=True)]
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"format": PROFILE_FORMAT, "measurements": meas}))
    model = build_cost_model("profile", str(path))
    assert isinstance(model, FittedCostModel)
    shape = StepShape(num_tokens=10, attn_pairs=500, kv_read_tokens=300, num_seqs=2)
    want = sum(c * x for c, x in zip(TRUE, features(10, 500, 300, 2), strict=True))
    assert model.step_time(shape) == pytest.approx(want, rel=1e-6)


def test_committed_profile_loads_and_sim_uses_it() -> None:
    profiles = sorted((ROOT / "conf" / "profiles").glob("*.json"))
    assert profiles, "a CPU profile is committed under conf/profiles/"
    rel = str(profiles[0].relative_to(ROOT))
    from omegaconf import OmegaConf

    from experiments.run.build import build_hardware, build_model

    def load(name: str) -> dict[str, object]:
        d = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / name))
        assert isinstance(d, dict)
        d.pop("defaults", None)
        return {str(k): v for k, v in d.items()}

    model = build_model(load("model/llama3_8b.yaml"))
    hw = build_hardware(load("hardware/h200.yaml"))
    ex = build_executor({"name": "sim", "cost_model": "profile", "profile": rel}, model, hw)
    assert isinstance(ex.cost_model, FittedCostModel)  # type: ignore[attr-defined]
    assert ex.cost_model.seconds(1, 100, 100, 1) > 0  # type: ignore[attr-defined]
    assert cost_model_summary({"name": "sim", "cost_model": "profile", "profile": rel}) == {
        "cost_model": "profile", "cost_model_profile": rel}
    assert cost_model_summary({"name": "sim"})["cost_model"] == "roofline"


def test_bad_cost_model_choices() -> None:
    with pytest.raises(ValueError, match="valid: roofline, profile"):
        build_cost_model("magic", None)
    with pytest.raises(ValueError, match=r"needs executor\.profile"):
        build_cost_model("profile", None)
