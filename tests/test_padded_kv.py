"""The padded-keys term of the cost model (engines/cost_model.py): the sim counts the keys the
torch kernel really reads, a calibration recovers the term's coefficient, and a profile
without it predicts as before."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import load_script, run_like_steps

from engines.calibration import STEP_SHAPES_FILE, profile_from_steps
from engines.cost_model import (
    PADDED_FEATURE,
    FittedCostModel,
    StepShape,
    any_padded,
    padded_kv_tokens,
)
from engines.decode_batch_cost import DecodeBatchCostModel
from engines.engine import Engine
from engines.executors.real import flatten_plan
from engines.executors.sim import SimExecutor
from kernels import build_metadata
from kernels.torch_ref import _groups
from schedulers.contract import Request, ScheduledChunk, StepPlan
from schedulers.vllm import VllmScheduler, VllmSchedulerConfig
from tests.test_decode_runs import HW, TINY, same

profile_executor = load_script("profile_executor")

def random_plan(rng: random.Random, page: int) -> StepPlan:
    """Ragged decodes, prefills and extends in one plan, each on its own pages."""
    chunks = []
    next_page = 0
    for i in range(rng.randint(1, 9)):
        n = 1 if rng.random() < 0.6 else rng.randint(2, 40)
        start = rng.randint(0, 150)
        pages = -(-(start + n) // page)
        chunks.append(ScheduledChunk(f"r{i}", [5] * n, start,
                                     list(range(next_page, next_page + pages)), sample=True))
        next_page += pages
    return StepPlan(step=1, page_size=page, chunks=chunks)


@pytest.mark.parametrize("page", [1, 16])
def test_padded_count_is_what_the_torch_kernel_reads(page: int) -> None:
    rng = random.Random(page)
    padded_seen = 0
    for _ in range(60):
        plan = random_plan(rng, page)
        inp = flatten_plan(plan)  # as the real executor builds the kernel's metadata
        meta = build_metadata(inp.query_lens, inp.seq_lens, inp.page_tables, page)
        # the keys of the groups the kernel pads (and masks: key_valid)
        kernel_keys = sum(g.slots.numel() for g in _groups(meta) if g.key_valid is not None)
        assert padded_kv_tokens(plan.chunks) == kernel_keys
        shape = StepShape.of(plan)
        assert shape.padded_kv_tokens == kernel_keys
        padded_seen += kernel_keys > 0
    assert 30 < padded_seen < 60  # most plans were ragged, some not


# Truth: the five terms of tests/test_calibration.py's TRUTH, and 3e-5 s per padded key.
TRUTH = (0.04, 0.0025, 1e-9, 6e-6, 0.001, 3e-5)


def padded_steps(seed: int = 0) -> pd.DataFrame:
    """Ragged decode batches, prompts and prompts beside decodes, timed by TRUTH."""
    rng = np.random.default_rng(seed)
    rows = []

    def add(chunks: list[tuple[int, int]], prefill: bool) -> None:
        shape = StepShape.of(StepPlan(step=len(rows) + 1, page_size=16, chunks=[
            ScheduledChunk(f"r{i}", [5] * n, s, list(range(-(-(s + n) // 16))), sample=True)
            for i, (n, s) in enumerate(chunks)]))
        assert shape.padded_kv_tokens is not None
        terms = (1, shape.num_tokens, shape.attn_pairs, shape.kv_read_tokens, shape.num_seqs,
                 shape.padded_kv_tokens)
        rows.append({"step": len(rows) + 1, "num_tokens": shape.num_tokens,
                     "attn_pairs": shape.attn_pairs, "kv_read_tokens": shape.kv_read_tokens,
                     "num_seqs": shape.num_seqs, PADDED_FEATURE: shape.padded_kv_tokens,
                     "prefill": prefill,
                     "seconds": sum(c * x for c, x in zip(TRUTH, terms, strict=True))})

    for chunks, prefill in run_like_steps(rng):
        add(chunks, prefill)
    return pd.DataFrame(rows)


def test_padded_coefficient_is_recovered_through_the_cli(tmp_path: Path) -> None:
    run = tmp_path / "vllm_real"
    run.mkdir()
    padded_steps().to_parquet(run / STEP_SHAPES_FILE)
    out = tmp_path / "calibrated.json"
    assert profile_executor.main(["--from-run", str(run), "--out", str(out)]) == 0
    profile = json.loads(out.read_text())
    assert profile["features"][-1] == PADDED_FEATURE
    base = FittedCostModel.from_profile(out)
    np.testing.assert_allclose(base.coefficients, TRUTH, rtol=1e-6, atol=1e-12)
    assert profile["fit"]["mape_pct_on_steps"] == pytest.approx(0.0, abs=1e-4)
    # Without the term the same steps are not fitted exactly.
    off = tmp_path / "five_terms.json"
    assert profile_executor.main(["--from-run", str(run), "--out", str(off),
                                  "--padded-kv", "off"]) == 0
    assert PADDED_FEATURE not in json.loads(off.read_text())["features"]
    assert json.loads(off.read_text())["fit"]["mape_pct_on_steps"] > 1.0


def test_a_profile_without_the_term_ignores_padding(tmp_path: Path) -> None:
    steps = padded_steps().drop(columns=[PADDED_FEATURE])
    profile = profile_from_steps(steps)
    assert PADDED_FEATURE not in profile["features"]
    model = DecodeBatchCostModel.from_profile(profile)
    assert not model.uses_padded_kv
    assert model.seconds(4, 800, 800, 4, 1600) == model.seconds(4, 800, 800, 4)


def test_bad_padded_input_is_named() -> None:
    steps = padded_steps()
    with pytest.raises(ValueError, match="padded=True"):
        profile_from_steps(steps.drop(columns=[PADDED_FEATURE]), padded=True)
    neg = steps.copy()
    neg.loc[3, PADDED_FEATURE] = -5
    with pytest.raises(ValueError, match="step 4: padded_kv_tokens=-5: must be >= 0"):
        profile_from_steps(neg)
    profile = profile_from_steps(steps)
    del profile["measurements"][7][PADDED_FEATURE]
    with pytest.raises(ValueError, match="measurement 7 has padded_kv_tokens=None"):
        FittedCostModel.from_profile(profile)


def test_sim_charges_padded_keys_in_steps_and_decode_runs() -> None:
    model = DecodeBatchCostModel(FittedCostModel((2e-3, 1e-5, 1e-9, 1e-6, 1e-4, 5e-5)),
                                 {1: 1.2, 4: 1.0})
    sim = SimExecutor(TINY, HW, cost_model=model)
    for i in range(3):
        sim.register(Request(f"r{i}", [5] * 10, max_tokens=50))
    plan = StepPlan(step=1, page_size=16, chunks=[
        ScheduledChunk("r0", [5], 20, [0, 1], True),
        ScheduledChunk("r1", [5], 90, [2, 3, 4, 5, 6, 7], True),
        ScheduledChunk("r2", [5] * 10, 0, [8], True)])
    # decode group (contexts 21, 91): padded, 2 x 91 keys; prompt group: one chunk, unpadded
    assert sim.execute(plan).duration_s == model.seconds(12, 21 + 91 + 55, 21 + 91 + 10, 3,
                                                         2 * 91)
    assert sim.decode_step_seconds(3, 30, 10) == model.seconds(3, 30, 30, 3)  # equal: none
    assert sim.decode_step_seconds(3, 31, 12) == model.seconds(3, 31, 31, 3, 36)
    # A decode run charges each step what single steps would: same records to the byte.
    out = []
    for runs in (True, False):
        rng = random.Random(3)
        reqs = [Request(f"r{i}", [3 + (i * 7 + k) % 400 for k in range(rng.randint(5, 120))],
                        max_tokens=rng.randint(5, 80), arrival_time=i * 0.01,
                        eos_output_len=rng.randint(3, 80)) for i in range(24)]
        sched = VllmScheduler(VllmSchedulerConfig.from_capacity(
            1024, block_size=16, max_num_seqs=8, max_num_batched_tokens=256))
        engine = Engine(sched, SimExecutor(TINY, HW, cost_model=model), reqs,
                        decode_runs=runs)
        res = engine.run()
        out.append((res.requests, res.steps, engine.num_decode_run_steps))
    assert out[0][2] > 50  # decode runs happened
    assert same(out[0][0], out[1][0]) and same(out[0][1], out[1][1])


def test_small_grid_measures_padded_keys() -> None:
    """The profiler's small grid has ragged decode batches, so the term can be fitted from it;
    the default grid pads nothing (its profiles keep five terms)."""
    for name, want in (("small", True), ("default", False)):
        planner = profile_executor.Planner()
        shapes = [StepShape.of(planner.plan(s)) for _k, s in profile_executor.grid(name)]
        meas = [{"kv_read_tokens": s.kv_read_tokens, PADDED_FEATURE: s.padded_kv_tokens}
                for s in shapes]
        assert any_padded(meas) is want
