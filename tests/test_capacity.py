"""The capacity search (experiments/capacity/) and load relative to it (`workload.load`,
experiments/run/load.py): the bisection on a known monotone test, a whole search against a
capacity computed by hand from the cost model, the load's resolution and its errors."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from conftest import compose_config

from experiments.capacity.main import run as run_capacity
from experiments.capacity.search import BracketError, find_capacity
from experiments.run.load import RATE_PARAMS, resolve_load
from experiments.user_error import ConfigError

# --- the search itself, on a synthetic monotone test ------------------------------------------


@pytest.mark.parametrize("start", [0.5, 5.0, 37.3, 1000.0])
def test_search_brackets_and_bisects_to_the_tolerance(start: float) -> None:
    true = 37.3
    found = find_capacity(lambda r: r <= true, start, tolerance=0.02)
    assert found.lo <= true < found.hi
    assert found.capacity == found.lo
    assert found.hi - found.lo <= 0.02 * found.lo
    rates = [r for r, _ in found.probes]
    assert rates[0] == start
    # bracketing: geometric steps of 2 from the start until the outcome flips
    flip = next(i for i, (_, ok) in enumerate(found.probes) if ok != found.probes[0][1])
    for a, b in itertools.pairwise(rates[:flip + 1]):
        assert b / a == pytest.approx(2.0 if found.probes[0][1] else 0.5)
    # then bisection: each later probe halves the bracket [passed, failed] it is in
    lo, hi = sorted((rates[flip - 1], rates[flip])) if flip else (start, start)
    for rate, ok in found.probes[flip + 1:]:
        assert rate == 0.5 * (lo + hi)
        lo, hi = (rate, hi) if ok else (lo, rate)
    assert (lo, hi) == (found.lo, found.hi)


def test_search_without_a_boundary_says_so() -> None:
    with pytest.raises(BracketError, match="no saturation"):
        find_capacity(lambda r: True, 1.0, max_expansions=5)
    with pytest.raises(BracketError, match="not met even at a low rate"):
        find_capacity(lambda r: False, 1.0, max_expansions=5)


# --- a whole search against a hand-computed capacity ------------------------------------------

STEP_S = 0.01    # every step takes 10 ms, whatever it computes
SLOTS = 4        # vLLM max_num_seqs
OUTPUT = 10      # tokens per request: one prefill step (its first token) + 9 decode steps
# Each running request holds one of SLOTS slots for OUTPUT steps, so the engine serves
# SLOTS / (OUTPUT x STEP_S) requests per second; arrivals faster than that queue without
# bound and the E2E target (service 100 ms + 150 ms of slack) is missed by most requests.
HAND_CAPACITY = SLOTS / (OUTPUT * STEP_S)  # 40 req/s


def constant_profile(path: Path) -> Path:
    """A cost-model profile whose every measured step took STEP_S: the fitted model is
    c_step = STEP_S and nothing else."""
    shapes = [(16, 136, 16, 1), (64, 2080, 64, 1), (4, 200, 200, 4), (8, 900, 900, 8),
              (300, 20000, 400, 6), (32, 528, 32, 2)]
    measurements = [{"kind": "step", "num_tokens": t, "attn_pairs": a, "kv_read_tokens": r,
                     "num_seqs": s, "seconds": STEP_S} for t, a, r, s in shapes]
    path.write_text(json.dumps({"format": 1, "measurements": measurements}))
    return path


def hand_config(tmp_path: Path) -> list[str]:
    """Every setting the known answer rests on, stated (none left to the defaults)."""
    profile = constant_profile(tmp_path / "constant.json")
    return [
        "scheduler=vllm", f"scheduler.max_num_seqs={SLOTS}",
        "scheduler.max_num_batched_tokens=4096", "scheduler.async_scheduling=false",
        "scheduler.enable_prefix_caching=false",
        "executor=sim", "executor.cost_model=profile", f"executor.profile={profile}",
        "model=llama3_8b", "hardware=h200", "kv_capacity_tokens=16384", "max_model_len=4096",
        "workload=synthetic", "workload.num_requests=300", "workload.request_rate=10",
        "workload.burstiness=100",  # nearly regular arrivals (gap CV 0.1)
        "workload.prompt_len={dist:fixed,value:32}",
        f"workload.output_len={{dist:fixed,value:{OUTPUT}}}", "workload.mode=fixed",
        "workload.shared_prefix_len=0",
        "slo.ttft=null", "slo.tpot=null", "slo.e2el=250",
    ]


def test_capacity_matches_the_hand_computed_one(tmp_path: Path) -> None:
    out = tmp_path / "cap"
    path, data = run_capacity([*hand_config(tmp_path), "--realizations", "1",
                               "--out", str(out)], log=lambda _m: None)
    entry = data["schedulers"]["vllm"]
    assert path == out / "capacity.json"
    assert json.loads(path.read_text())["schedulers"]["vllm"]["capacity"] == entry["capacity"]
    assert data["rate_param"] == "workload.request_rate" and data["rate_value"] == 10.0
    assert entry["capacity"] == pytest.approx(HAND_CAPACITY, rel=0.05)
    lo, hi = entry["bracket"]
    assert (hi - lo) <= 0.02 * lo
    assert entry["capacity_request_rate"] == pytest.approx(HAND_CAPACITY, rel=0.05)
    passed = [p for p in entry["probes"] if p["passed"]]
    failed = [p for p in entry["probes"] if not p["passed"]]
    assert all(p["attainment"] >= 0.9 for p in passed)
    assert all(p["attainment"] < 0.9 for p in failed)
    # well past the capacity the queue collapses attainment
    assert min(p["attainment"] for p in failed) < 0.5


# --- workload.load against a capacity file ---------------------------------------------------


def _capacity_file(tmp_path: Path, overrides: list[str], capacity: float = 20.0) -> Path:
    """A capacity file for the config of `overrides`, as experiments.capacity writes it."""
    from experiments.capacity.main import compose
    from experiments.run.load import (
        CAPACITY_FORMAT,
        CAPACITY_KIND,
        capacity_config,
        scheduler_config,
    )

    cfg = compose([*overrides, "scheduler=vllm"])
    data = {"kind": CAPACITY_KIND, "format": CAPACITY_FORMAT,
            "rate_param": "workload.request_rate",
            "rate_value": float(cfg.workload.request_rate), "target": 0.9,
            "config": capacity_config(cfg),
            "schedulers": {"vllm": {"capacity": capacity, "capacity_request_rate": 19.5,
                                    "scheduler_config": scheduler_config(cfg)}}}
    path = tmp_path / "capacity.json"
    path.write_text(json.dumps(data))
    return path


BASE = ["workload=synthetic", "workload.num_requests=50", "executor=sim",
        "executor.cost_model=roofline", "model=llama3_8b", "hardware=h200",
        "kv_capacity_tokens=16384"]


@pytest.mark.parametrize("load", [0.5, 1.1])
def test_load_resolves_to_load_times_capacity(tmp_path: Path, load: float) -> None:
    path = _capacity_file(tmp_path, BASE)
    cfg = compose_config([*BASE, "scheduler=vllm", f"workload.load={load}",
                          f"workload.capacity_file={path}"])
    workload, res = resolve_load(cfg)
    assert res is not None
    assert workload["request_rate"] == pytest.approx(load * 20.0)
    assert "load" not in workload and "capacity_file" not in workload
    assert res.summary()["load_rate"] == pytest.approx(load * 20.0)
    assert res.summary()["load_capacity"] == 20.0 and res.summary()["load"] == load


def test_a_job_at_a_load_records_it(tmp_path: Path) -> None:
    from experiments.run.main import run_experiment

    path = _capacity_file(tmp_path, BASE)
    cfg = compose_config([*BASE, "scheduler=vllm", "workload.load=0.5",
                          f"workload.capacity_file={path}", "progress=off"])
    summary = run_experiment(cfg, tmp_path / "job", bar=False)
    assert summary["load"] == 0.5 and summary["load_capacity"] == 20.0
    assert summary["load_rate"] == 10.0 and summary["load_rate_param"] == \
        "workload.request_rate"
    assert summary["load_target"] == 0.9
    from test_metrics_doc import documented

    from experiments.run.wandb_log import summary_key

    doc = documented()
    for key in (k for k in summary if k.startswith("load")):
        assert doc.get(key) == summary_key(key).split("/")[0] + "/", key


def test_every_workload_has_a_rate_parameter() -> None:
    from experiments.inputs.workloads import PARAMS

    assert set(RATE_PARAMS) == set(PARAMS)
    for name, param in RATE_PARAMS.items():
        assert param in {f for f in PARAMS[name].__dataclass_fields__}, name


@pytest.mark.parametrize(("extra", "match"), [
    (["workload.capacity_file=MISSING"], "no such file"),
    (["scheduler=sglang"], "has no capacity for scheduler=sglang"),
    (["kv_capacity_tokens=8192"], "made for another config: kv_capacity_tokens=16384 there, "
                                  "8192 here"),
    (["workload.num_requests=60"], "made for another config: workload.num_requests=50 there"),
    (["slo.ttft=500"], "made for another config: slo.ttft"),
    (["scheduler.max_num_seqs=8"], "made for another config: scheduler.max_num_seqs"),
    (["workload.request_rate=3"], "workload.load=0.5 and workload.request_rate=3.0 together"),
])
def test_load_errors_name_the_field_and_value(tmp_path: Path, extra: list[str],
                                              match: str) -> None:
    path = _capacity_file(tmp_path, BASE)
    overrides = [*BASE, "scheduler=vllm", "workload.load=0.5",
                 f"workload.capacity_file={path}", *extra]
    overrides = [o.replace("MISSING", str(tmp_path / "none.json")) for o in overrides]
    cfg = compose_config(overrides)
    with pytest.raises(ConfigError, match=match):
        resolve_load(cfg)


def test_load_needs_a_capacity_file_and_a_positive_value() -> None:
    with pytest.raises(ConfigError, match=r"workload.load=0.5 needs workload.capacity_file"):
        resolve_load(compose_config([*BASE, "workload.load=0.5"]))
    from experiments.run.ranges import check_ranges

    with pytest.raises(ConfigError, match=r"workload.load=0.0: out of range"):
        check_ranges(compose_config([*BASE, "workload.load=0"]))
    with pytest.raises(ConfigError, match=r"without workload\.load"):
        resolve_load(compose_config([*BASE, "workload.capacity_file=x.json"]))


def test_capacities_are_keyed_by_the_scheduler_a_job_looks_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A config option that runs another scheduler's code (vllm_sync, sglang_sync) is
    searched under that scheduler's name, the key a job's `workload.load` resolves: a sweep
    of the synchronous loops at loads of their own capacity finds its entries."""
    import experiments.capacity.main as capacity_main

    searched: list[tuple[str, bool]] = []

    def fake_search(cfg, *_args, **_kw):  # type: ignore[no-untyped-def]
        loop = cfg.scheduler.get("async_scheduling", not cfg.scheduler.get(
            "disable_overlap_schedule", True))
        searched.append((str(cfg.scheduler.name), bool(loop)))
        return {"capacity": 1.0, "capacity_request_rate": 1.0, "bracket": [1.0, 1.0],
                "scheduler_config": capacity_main.scheduler_config(cfg), "probes": []}

    monkeypatch.setattr(capacity_main, "search_scheduler", fake_search)
    _, data = run_capacity([*BASE, "scheduler=vllm_sync,sglang_sync", "--out",
                            str(tmp_path / "cap")], log=lambda _m: None)
    assert sorted(data["schedulers"]) == ["sglang", "vllm"]
    assert sorted(searched) == [("sglang", False), ("vllm", False)]
    cfg = compose_config([*BASE, "scheduler=vllm_sync", "workload.load=0.5",
                          f"workload.capacity_file={tmp_path / 'cap' / 'capacity.json'}"])
    _, resolution = resolve_load(cfg)
    assert resolution is not None and resolution.rate == 0.5
    # the pipelined loop is another config: its jobs cannot borrow the synchronous capacity
    with pytest.raises(ConfigError, match=r"scheduler\.async_scheduling"):
        resolve_load(compose_config([*BASE, "scheduler=vllm", "workload.load=0.5",
                                     "workload.capacity_file="
                                     f"{tmp_path / 'cap' / 'capacity.json'}"]))
    with pytest.raises(ConfigError, match="both run scheduler vllm"):
        run_capacity([*BASE, "scheduler=vllm,vllm_sync", "--out", str(tmp_path / "dup")],
                     log=lambda _m: None)
    assert not (tmp_path / "dup" / "capacity.json").exists()


# --- the report's load curves ----------------------------------------------------------------


def test_load_curves_draw_means_with_bootstrap_bands(tmp_path: Path) -> None:
    import pandas as pd

    from experiments.report.load_curves import curve_points, load_curves
    from experiments.report.realizations import bootstrap_ci

    rows = [{"job": i, "scheduler": s, "workload.load": load, "workload.realization": k,
             "status": "ok", "slo_attainment": 1.0 - 0.2 * load * (k + 1) / 3,
             "request_goodput": 10 * load, "p99_ttft_ms": 100 * load + k,
             "p99_tpot_ms": 5.0 + k}
            for i, (s, load, k) in enumerate((s, load, k) for s in ("vllm", "sglang")
                                              for load in (0.5, 1.1) for k in range(3))]
    frame = pd.DataFrame(rows)
    points = curve_points(frame, ["scheduler"], "p99_ttft_ms")
    one = points[(points["scheduler"] == "vllm") & (points["workload.load"] == 0.5)].iloc[0]
    assert one["mean"] == pytest.approx(51.0) and one["n"] == 3
    assert (one["lo"], one["hi"]) == bootstrap_ci([50.0, 51.0, 52.0])
    path = load_curves(frame, tmp_path / "load_curves.png", target=0.9)
    assert path.is_file() and path.with_suffix(".pdf").is_file()
