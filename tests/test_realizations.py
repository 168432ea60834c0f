"""Realisations (issue 28 item 1): `workload.realization` redraws generators from a derived
seed, picks disjoint windows of traces, seeds the random victim policy, and is recorded per
job; realisation 0 is the workload as configured."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import compose_config

from experiments.inputs.traces import TraceRecord
from experiments.inputs.workloads import build_workload, workload_seed
from experiments.inputs.workloads.realization import realization_seed
from experiments.inputs.workloads.transforms import ReplayOptions, select_records
from experiments.run.main import run_experiment

ROOT = Path(__file__).resolve().parents[1]
SYNTH = {"name": "synthetic", "num_requests": 20, "request_rate": 10.0,
         "prompt_len": {"dist": "uniform", "low": 8, "high": 64},
         "output_len": {"dist": "uniform", "low": 4, "high": 32}}


def test_realization_zero_is_the_seed_itself_and_others_differ() -> None:
    assert realization_seed(7, 0) == 7
    seeds = {realization_seed(7, k) for k in range(1, 6)}
    assert len(seeds) == 5 and 7 not in seeds
    assert realization_seed(7, 3) == realization_seed(7, 3)  # deterministic
    with pytest.raises(ValueError, match=r"workload\.realization=-1"):
        realization_seed(7, -1)


def test_generator_realizations_redraw_arrivals_and_lengths() -> None:
    base = build_workload(SYNTH, seed=3)
    same = build_workload({**SYNTH, "realization": 0}, seed=3)
    other = build_workload({**SYNTH, "realization": 1}, seed=3)
    assert [r.arrival_time for r in base] == [r.arrival_time for r in same]
    assert [r.prompt_token_ids for r in base] == [r.prompt_token_ids for r in same]
    assert [r.arrival_time for r in base] != [r.arrival_time for r in other]
    assert [r.max_tokens for r in base] != [r.max_tokens for r in other]
    assert workload_seed({**SYNTH, "realization": 1}, 3) == realization_seed(3, 1)
    assert workload_seed({**SYNTH, "seed": 9, "realization": 2}, 3) == realization_seed(9, 2)


RECORDS = [TraceRecord(float(t), 10 + t, 5 + t) for t in range(0, 40)]


def test_trace_realizations_are_disjoint_blocks_of_max_requests() -> None:
    blocks = [select_records(RECORDS, ReplayOptions(max_requests=8, realization=k)).records
              for k in range(3)]
    assert [r.input_length for r in blocks[0]] == list(range(10, 18))
    assert [r.input_length for r in blocks[2]] == list(range(26, 34))
    assert blocks[2][0].arrival_s == 0.0  # each window starts at t=0
    with pytest.raises(ValueError, match=r"realization=5.*records 40 to 47"):
        select_records(RECORDS, ReplayOptions(max_requests=8, realization=5))


def test_trace_realizations_shift_the_time_window_by_its_length() -> None:
    sel = select_records(RECORDS, ReplayOptions(time_window=[0.0, 10.0], realization=2))
    assert [r.input_length for r in sel.records] == list(range(30, 40))
    with pytest.raises(ValueError, match=r"realization=4: its window \[40, 50\)"):
        select_records(RECORDS, ReplayOptions(time_window=[0.0, 10.0], realization=4))
    with pytest.raises(ValueError, match="whole trace is one window"):
        select_records(RECORDS, ReplayOptions(realization=1))
    with pytest.raises(ValueError, match="realization"):
        ReplayOptions(realization=-1)


def job(tmp_path: Path, *overrides: str) -> dict[str, object]:
    cfg = compose_config([
        "workload.num_requests=30", "workload.request_rate=300",
        "kv_capacity_tokens=2048", "progress=off", "seed=4", *overrides])
    return run_experiment(cfg, tmp_path / "_".join(overrides or ("job",)))


def test_summary_records_the_realization_and_the_seeds_it_derived(tmp_path: Path) -> None:
    s = job(tmp_path, "workload.realization=2", "scheduler.victim_policy=random")
    assert s["realization"] == 2
    assert s["workload_seed"] == realization_seed(4, 2)
    assert s["random_seed"] == realization_seed(4, 2)  # `seed` seeds random policies
    own = job(tmp_path, "workload.realization=2", "scheduler.random_seed=11")
    assert own["random_seed"] == 11  # an explicit seed stays fixed across realisations
    zero = job(tmp_path)
    assert (zero["realization"], zero["workload_seed"], zero["random_seed"]) == (0, 4, 4)


def test_repeats_sweeps_the_realizations() -> None:
    cfg = compose_config(["repeats=5"], return_hydra_config=True)
    assert cfg.hydra.sweeper.params["workload.realization"] == "range(5)"
