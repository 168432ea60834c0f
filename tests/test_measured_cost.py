"""`cost_model=measured` and `cost_model=fitted_roofline` (engines/measured_cost.py): the
interpolation at and between measured grid points, shapes outside the measured range
(extrapolated and counted, or refused), the committed profiles, the provenance of step times
in summary.json, and a whole job."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import compose_config

from engines.cost_model import RooflineCostModel
from engines.executors.sim import SimExecutor
from engines.executors.specs import HardwareSpec, ModelSpec
from engines.measured_cost import (
    ADDS_PER_LAYER,
    PER_LAYER_OPS,
    FittedRooflineCostModel,
    MeasuredCostModel,
    MeasuredProfile,
    MeasuredRangeError,
    OperatorTimes,
    RooflineFit,
    borrowed_fit,
    interp,
)
from experiments.run.build import build_cost_model, build_executor, step_time_source
from experiments.run.main import run_experiment
from schedulers.contract import Request, ScheduledChunk, StepPlan

ROOT = Path(__file__).resolve().parents[1]
MEASURED = ROOT / "conf" / "profiles" / "measured"
LLAMA2 = ModelSpec(name="llama2_7b", hidden_size=4096, num_hidden_layers=32,
                   num_attention_heads=32, num_key_value_heads=32, intermediate_size=11008,
                   vocab_size=32000, head_dim=128)
A100 = HardwareSpec("a100_80g", 312.0e12, 2.039e12, 32.0e9, 80.0e9)


def _write(path: Path, header: list[str], rows: list[list[object]]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def toy_profile(tmp_path: Path) -> MeasuredProfile:
    """A small profile with round numbers: every linear op 1 ms at 1 token and 3 ms at 3;
    decode attention at contexts 100 and 300 over batches 1-3; prefill at chunks 10, 30."""
    ops = [*PER_LAYER_OPS, "add", "emb"]
    _write(tmp_path / "linear.csv", ["num_tokens", *ops],
           [[1, *([1.0] * len(ops))], [3, *([3.0] * len(ops))]])
    _write(tmp_path / "attn_decode.csv", ["kv_cache_size", "batch_size", "ms"],
           [[100, 1, 1.0], [100, 3, 3.0], [300, 1, 3.0], [300, 3, 9.0]])
    _write(tmp_path / "attn_prefill.csv", ["prefill_chunk_size", "kv_cache_size", "ms"],
           [[10, 0, 1.0], [10, 100, 2.0], [30, 0, 3.0], [30, 100, 6.0]])
    (tmp_path / "profile.json").write_text(json.dumps(
        {"label": "toy a100 llama-2-7b", "model": "llama2_7b", "hardware": "a100_80g",
         "complete": True}))
    return MeasuredProfile.load(tmp_path)


def test_interp_at_and_between_points() -> None:
    xs, ys = (1.0, 3.0, 7.0), (2.0, 6.0, 4.0)
    assert interp(xs, ys, 3.0) == (6.0, False)  # at a grid point: its value
    assert interp(xs, ys, 2.0) == (4.0, False)  # halfway: the mean of its neighbours
    assert interp(xs, ys, 5.0) == (5.0, False)
    assert interp(xs, ys, 9.0) == (3.0, True)  # beyond: the last segment's line, flagged
    assert interp(xs, ys, 100.0) == (0.0, True)  # never below 0


def test_operators_at_and_between_grid_points(tmp_path: Path) -> None:
    times = OperatorTimes(toy_profile(tmp_path))
    assert times.op("mlp_up_proj", 1) == 1.0
    assert times.op("mlp_up_proj", 2) == 2.0
    assert times.decode_attention(3, 300) == 9.0  # a grid point
    assert times.decode_attention(2, 300) == 6.0  # between batches
    assert times.decode_attention(3, 200) == 6.0  # between contexts
    assert times.decode_attention(2, 200) == 4.0  # between both
    assert times.prefill_attention(30, 100) == 6.0
    assert times.prefill_attention(20, 100) == 4.0  # between chunk lengths
    assert times.prefill_attention(10, 50) == 1.5  # between contexts
    assert times.extrapolated == {}


def test_outside_the_range_is_extrapolated_and_counted(tmp_path: Path) -> None:
    times = OperatorTimes(toy_profile(tmp_path))
    assert times.op("mlp_up_proj", 5) == 5.0  # the line through the last two points
    assert times.decode_attention(3, 500) == 15.0
    assert times.extrapolated == {"mlp_up_proj": 1, "attn_decode": 1}


def test_outside_the_range_is_refused_on_request(tmp_path: Path) -> None:
    times = OperatorTimes(toy_profile(tmp_path), refuse_outside=True)
    assert times.op("mlp_up_proj", 3) == 3.0
    with pytest.raises(MeasuredRangeError, match=r"toy a100 llama-2-7b.*mlp_up_proj at 5 "
                                                 r"tokens is outside the measured range"):
        times.op("mlp_up_proj", 5)
    with pytest.raises(MeasuredRangeError, match=r"attn_decode at context 500"):
        times.decode_attention(2, 500)
    with pytest.raises(MeasuredRangeError, match=r"attn_prefill at chunk 50"):
        times.prefill_attention(50, 0)


def _chunk(rid: str, start: int, n: int) -> ScheduledChunk:
    return ScheduledChunk(request_id=rid, token_ids=[7] * n, start_pos=start, page_ids=[],
                          sample=True)


def test_a_step_adds_each_operator_at_its_shape(tmp_path: Path) -> None:
    """Decode chunks priced together at their mean context, prefill chunks one by one; every
    per-layer operator times the layers, plus the step's own terms."""
    prof = toy_profile(tmp_path)
    cost = MeasuredCostModel(prof, LLAMA2, A100, step_overhead_s=0.5)
    chunks = [_chunk("a", 150, 1), _chunk("b", 250, 1), _chunk("c", 0, 10)]
    t = 12  # tokens in the step
    per_layer = (len(PER_LAYER_OPS) + ADDS_PER_LAYER) * 12.0 + t * (
        LLAMA2.kv_bytes_per_token / 32) / A100.memory_bandwidth * 1e3
    attention = 4.0 + 1.0  # decode: batch 2 at mean context 200; prefill: chunk 10 at 0
    lm_head = 3.0 * LLAMA2.vocab_size / (2 * LLAMA2.intermediate_size)  # up proj at 3 rows
    want = (32 * (per_layer + attention) + 12.0 + 12.0 + lm_head) * 1e-3 + 0.5
    assert cost.plan_seconds(chunks) == pytest.approx(want, rel=1e-12)


def test_decode_runs_price_a_step_as_execute_does() -> None:
    prof = MeasuredProfile.load(MEASURED / "vidur_a100_llama2_7b")
    for cost in (MeasuredCostModel(prof, LLAMA2, A100, 0.002),
                 FittedRooflineCostModel(RooflineFit.load(
                     MEASURED / "fitted_roofline" / "a100_80g.json"), LLAMA2, A100, 0.002)):
        sim = SimExecutor(LLAMA2, A100, cost_model=cost)
        starts = (700, 800, 900)
        plan = StepPlan(step=0, page_size=16,
                        chunks=[_chunk(f"r{i}", s, 1) for i, s in enumerate(starts)])
        for c in plan.chunks:
            sim.register(_request(c.request_id, c.start_pos))
        by_plan = sim.execute(plan).duration_s
        by_terms = sim.decode_step_seconds(3, sum(s + 1 for s in starts), 901)
        assert by_terms == pytest.approx(by_plan, rel=1e-12)


def _request(rid: str, prompt_len: int) -> Request:
    return Request(request_id=rid, prompt_token_ids=[1] * prompt_len, max_tokens=10,
                   arrival_time=0.0)


def test_committed_tables_hold_out_what_the_error_table_tests() -> None:
    prof = MeasuredProfile.load(MEASURED / "vidur_a100_llama2_7b")
    held = prof.meta["held_out"]
    assert prof.complete
    assert not set(held["attn_decode_kv_cache_size"]) & set(prof.decode)
    assert not set(held["attn_prefill_chunk_size"]) & set(prof.prefill)
    tokens = set(prof.linear["mlp_up_proj"].xs)
    assert held["linear_num_tokens"] and not set(held["linear_num_tokens"]) & tokens
    for src in prof.meta["sources"]:
        assert {"repo", "path", "blob", "license"} <= src.keys()
    assert (MEASURED / "LICENSE-vidur.txt").read_text().strip().startswith("MIT License")
    assert "MIT License" in (MEASURED / "LICENSE-LLMServingSim.txt").read_text()


def test_pairs_without_measurements_are_refused_with_the_choices() -> None:
    llama3 = ModelSpec(name="llama3_8b", hidden_size=4096, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336,
                       vocab_size=128256, head_dim=128)
    h200 = HardwareSpec("h200", 989.4e12, 4.8e12, 64e9, 141e9, fit_from="h100")
    with pytest.raises(ValueError, match=r"no measured profile of model='llama3_8b' on "
                                         r"hardware='h200'; measured: model=llama2_7b "
                                         r"hardware=a100_80g"):
        build_cost_model("measured", None, llama3, h200)
    with pytest.raises(ValueError, match=r"vidur a100 llama-3-8b.*no attention measurements"):
        build_cost_model("measured", "conf/profiles/measured/vidur_a100_llama3_8b", llama3,
                         A100)
    fitted = build_cost_model("fitted_roofline", None, llama3, h200)
    assert isinstance(fitted, FittedRooflineCostModel)
    assert fitted.source == ("roofline fitted to vidur h100 llama-2-7b, llmservingsim h100 "
                             "llama-3.1-8b (extrapolated from h100 to h200)")


def _decode_step(batch: int, context: int) -> list[ScheduledChunk]:
    return [ScheduledChunk(f"r{i}", [1], context, [], True) for i in range(batch)]


def test_a_gpu_without_measurements_borrows_the_fit_its_config_names() -> None:
    a40_fit = RooflineFit.load(MEASURED / "fitted_roofline" / "a40.json")
    a40 = HardwareSpec("a40", 149.7e12, 696.0e9, 32e9, 48e9)
    a10 = HardwareSpec("a10", 125.0e12, 600.0e9, 32e9, 24146608128, fit_from="a40")
    model = build_cost_model("fitted_roofline", None, LLAMA2, a10)
    assert isinstance(model, FittedRooflineCostModel)
    # the A40's efficiencies, floors and elementwise term, unchanged; only the peaks differ
    assert {k: v for k, v in model.fit.__dict__.items()
            if k not in ("hardware", "extrapolated_from", "notes")} == {
        k: v for k, v in a40_fit.__dict__.items()
        if k not in ("hardware", "extrapolated_from", "notes")}
    assert (model.fit.hardware, model.fit.extrapolated_from) == ("a10", "a40")
    assert model.source == "roofline fitted to vidur a40 llama-2-7b (extrapolated from a40 to a10)"
    assert model.fit.notes[-1].startswith("a10: no measurements; the a40 efficiencies")
    # a weight-bound decode step scales with the bandwidths (600 against 696 GB/s), less the
    # floors and the overhead that do not
    on_a40 = FittedRooflineCostModel(a40_fit, LLAMA2, a40)
    step = _decode_step(8, 512)
    ratio = model.plan_seconds(step) / on_a40.plan_seconds(step)
    assert 1.05 < ratio < 696.0 / 600.0


def test_a_gpu_with_no_fit_and_no_fit_from_is_refused_naming_the_fitted_ones() -> None:
    l4 = HardwareSpec("l4", 121.0e12, 300.0e9, 32e9, 24e9)
    with pytest.raises(ValueError, match=r"no fit for hardware='l4' .*no hardware\.fit_from; "
                                         r"fitted: a100_80g, a40, h100$"):
        build_cost_model("fitted_roofline", None, LLAMA2, l4)
    orphan = HardwareSpec("l4", 121.0e12, 300.0e9, 32e9, 24e9, fit_from="l40s")
    with pytest.raises(ValueError, match=r"hardware\.fit_from='l40s' \(hardware='l4'\): no fit "
                                         r"for that GPU .*fitted: a100_80g, a40, h100$"):
        build_cost_model("fitted_roofline", None, LLAMA2, orphan)
    h200_fit = borrowed_fit(RooflineFit.load(MEASURED / "fitted_roofline" / "h100.json"), "h200")
    with pytest.raises(ValueError, match=r"fit_from='h200': that fit is itself extrapolated "
                                         r"from 'h100'"):
        borrowed_fit(h200_fit, "l4")
    # cost_model=measured does not borrow: the A10 has no measured profile
    a10 = HardwareSpec("a10", 125.0e12, 600.0e9, 32e9, 24e9, fit_from="a40")
    with pytest.raises(ValueError, match=r"no measured profile of model='llama2_7b' on "
                                         r"hardware='a10'"):
        build_cost_model("measured", None, LLAMA2, a10)


def test_step_time_source_names_each_cost_model() -> None:
    ideal = SimExecutor(LLAMA2, A100)
    assert step_time_source(ideal) == {"step_time_source": "ideal roofline"}
    derated = SimExecutor(LLAMA2, A100, cost_model=RooflineCostModel(
        LLAMA2, A100, flops_efficiency=0.5, bandwidth_efficiency=0.7))
    assert step_time_source(derated)["step_time_source"] == (
        "roofline derated: flops_efficiency=0.5, bandwidth_efficiency=0.7")
    measured = build_executor({"name": "sim", "cost_model": "measured"}, LLAMA2, A100)
    assert step_time_source(measured) == {
        "step_time_source": "measured profile: vidur a100 llama-2-7b",
        "cost_model_extrapolated": {}}
    with pytest.raises(ValueError, match=r"executor\.flops_efficiency=0\.5: the roofline's"):
        build_executor({"name": "sim", "cost_model": "measured", "flops_efficiency": 0.5},
                       LLAMA2, A100)


def test_a_measured_job_runs_end_to_end(tmp_path: Path) -> None:
    cfg = compose_config([
        "executor.cost_model=measured", "model=llama2_7b", "hardware=a100_80g",
        "workload.num_requests=40", "kv_capacity_tokens=8192"])
    summary = run_experiment(cfg, tmp_path / "job")
    assert summary["status"] == "ok" and summary["completed"] == 40
    assert summary["step_time_source"] == "measured profile: vidur a100 llama-2-7b"
    written = json.loads((tmp_path / "job" / "summary.json").read_text())
    assert written["step_time_source"] == summary["step_time_source"]
    assert isinstance(written["cost_model_extrapolated"], dict)
