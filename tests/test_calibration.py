"""In-situ calibration (engines/calibration.py, `profile_executor.py --from-run`): a cost-model
profile fitted to the steps of a real run recovers the coefficients that produced them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from conftest import load_script, run_like_steps

from engines.calibration import STEP_SHAPES_FILE, load_steps, profile_from_steps
from engines.cost_model import FittedCostModel
from engines.decode_batch_cost import DecodeBatchCostModel

ROOT = Path(__file__).resolve().parents[1]


def profile_main(argv: list[str]) -> Any:
    """scripts/profile_executor.py's main."""
    return load_script("profile_executor").main(argv)


# Truth: 40 ms per step, 2.5 ms per token, 1 ns per attention pair, 6 us per context token
# read, 1 ms per sequence (the order of SmolLM2-135M on one CPU thread).
TRUTH = (0.04, 0.0025, 1e-9, 6e-6, 0.001)


def steps_table(slow: dict[int, float] | None = None, seed: int = 0) -> pd.DataFrame:
    """Steps as a run takes them: decode batches of 1-12 sequences at varied contexts,
    single and batched prompts, prompts beside decodes; times from TRUTH (x slow[b] for a
    decode step of b sequences)."""
    rng = np.random.default_rng(seed)
    rows = []

    def add(chunks: list[tuple[int, int]], prefill: bool) -> None:
        t = sum(n for n, _ in chunks)
        a = sum(n * s + n * (n + 1) // 2 for n, s in chunks)
        r = sum(s + n for n, s in chunks)
        k = len(chunks)
        sec = TRUTH[0] + TRUTH[1] * t + TRUTH[2] * a + TRUTH[3] * r + TRUTH[4] * k
        if not prefill:
            sec *= (slow or {}).get(k, 1.0)
        rows.append({"step": len(rows) + 1, "num_tokens": t, "attn_pairs": a,
                     "kv_read_tokens": r, "num_seqs": k, "prefill": prefill, "seconds": sec})

    for chunks, prefill in run_like_steps(rng):
        add(chunks, prefill)
    return pd.DataFrame(rows)


def test_linear_truth_is_recovered_through_the_cli(tmp_path: Path) -> None:
    run = tmp_path / "vllm_real"
    run.mkdir()
    steps_table().to_parquet(run / STEP_SHAPES_FILE)
    out = tmp_path / "calibrated.json"
    assert profile_main(["--from-run", str(run), "--out", str(out)]) == 0
    profile = json.loads(out.read_text())
    assert profile["calibration"]["steps"] == 150
    assert profile["calibration"]["kinds"]["decode"] == 120
    base = FittedCostModel.from_profile(out)
    np.testing.assert_allclose(base.coefficients, TRUTH, rtol=1e-6, atol=1e-12)
    model = DecodeBatchCostModel.from_profile(out)
    assert all(f == pytest.approx(1.0, rel=1e-6) for f in model.factors.values())
    assert profile["fit"]["mape_pct_on_steps"] == pytest.approx(0.0, abs=1e-4)


def test_slow_small_decode_batches_get_their_factor() -> None:
    slow = {2: 1.3, 3: 1.5}
    steps = steps_table(slow)
    model = DecodeBatchCostModel.from_profile(profile_from_steps(steps))
    # The base fit absorbs a little of the slow batches; the factors carry the rest, so the
    # decode steps of 2 and 3 sequences are predicted within a few percent, and the others.
    pred = np.array([model.seconds(r.num_tokens, r.attn_pairs, r.kv_read_tokens, r.num_seqs)
                     for r in steps.itertuples()])
    ape = np.abs(pred - steps["seconds"].to_numpy()) / steps["seconds"].to_numpy()
    assert np.median(ape) < 0.02
    small = steps["num_seqs"].isin([2, 3]).to_numpy() & ~steps["prefill"].to_numpy()
    assert ape[small].max() < 0.05
    assert model.factor(3) / model.factor(4) == pytest.approx(1.5, rel=0.05)


def test_bad_input_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"step_shapes\.parquet"):
        load_steps([tmp_path])
    steps = steps_table()
    steps.loc[7, "seconds"] = 0.0
    with pytest.raises(ValueError, match=r"step 8: seconds=0\.0"):
        profile_from_steps(steps)
    with pytest.raises(ValueError, match="'attn_pairs'"):
        profile_from_steps(steps.drop(columns=["attn_pairs"]))


def _repeats_main(argv: list[str]) -> Any:
    return load_script("real_repeats").main(argv)


def test_repeats_figure_draws_the_real_runs_band_and_the_simulator(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    folders = []
    for i in range(3):
        f = tmp_path / f"run{i}"
        for sched in ("vllm", "sglang"):
            for kind in ("real", "sim"):
                d = f / "runs" / f"{sched}_{kind}"
                d.mkdir(parents=True)
                arrival = rng.uniform(0, 1, 16)
                first = arrival + rng.uniform(0.1, 2, 16)
                pd.DataFrame({"arrival_time": arrival, "first_token_time": first,
                              "finish_time": first + rng.uniform(1, 9, 16)}).to_parquet(
                    d / "requests.parquet")
        folders.append(f)
    rep = load_script("real_repeats")
    ms = rep.latencies_ms(folders[0] / "runs" / "vllm_real")
    assert set(ms) == {"TTFT", "E2E"} and (ms["E2E"] > ms["TTFT"]).all()
    png = rep.band_figure(folders, tmp_path / "figures" / "repeats_cdf.png")
    assert png.is_file() and png.stat().st_size > 10_000
    with pytest.raises(FileNotFoundError, match="no <scheduler>_real"):
        rep.band_figure([tmp_path], tmp_path / "x.png")


def test_repeats_compare_the_simulator_with_the_real_median(tmp_path: Path) -> None:
    folders = []
    for i, real in enumerate((1.0, 1.3, 0.9)):  # median 1.0; a sim of 1.05 is +5 %
        f = tmp_path / f"run{i}"
        f.mkdir()
        pd.DataFrame([{"scheduler": "vllm", "statistic": "throughput", "real": real,
                       "sim": 1.05, "rel_error_pct": 0.0, "sim_baseline": 1.2,
                       "baseline_rel_error_pct": 0.0}]).to_csv(f / "comparison.csv",
                                                               index=False)
        pd.DataFrame([{"scheduler": "vllm", "profile": "p.json", "all_median_ape_pct": 3.0,
                       "all_p90_ape_pct": 9.0, "sum_pred_over_real": 1.0}]).to_csv(
            f / "step_error.csv", index=False)
        folders.append(str(f))
    out = tmp_path / "repeats.md"
    assert _repeats_main([*folders, "--out", str(out)]) == 0
    row = out.read_text().splitlines()[2].split(" | ")
    # real 1, 1.3, 0.9; spread (1.3 - 0.9) / 1.0 = 40 %; sim +5 % (bold); baseline +20 %
    assert row[2:] == ["1", "1.3", "0.9", "40 %", "1.05", "**5 %**", "1.2", "20 % |"]


def test_replay_file_of_an_older_real_run_goes_to_the_study_not_the_run(tmp_path: Path) -> None:
    """`real_vs_sim --real-from` on a run folder without output_tokens.json writes it under
    the study's --out and leaves the read folder as it was."""
    real = tmp_path / "old" / "runs" / "vllm_real"
    real.mkdir(parents=True)
    pd.DataFrame({"request_id": ["r0", "r1"], "output_len": [2, 1],
                  "output_token_ids": [[5, 6], [7]]}).to_parquet(real / "requests.parquet")
    before = sorted(p.name for p in real.iterdir())
    rvs = load_script("real_vs_sim")
    dest = tmp_path / "new" / "runs" / "vllm_real"
    path = rvs.outputs_file(real, dest)
    assert path == dest / "output_tokens.json"
    assert json.loads(path.read_text()) == {"r0": [5, 6], "r1": [7]}
    assert sorted(p.name for p in real.iterdir()) == before
    (real / "output_tokens.json").write_text('{"r0": [5, 6], "r1": [7]}\n')
    assert rvs.outputs_file(real, dest) == real / "output_tokens.json"
