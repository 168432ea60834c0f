"""Capacity per trace window (issue 30's held-out finding): `python -m experiments.capacity
--per-window` searches each realisation's own capacity beside the pooled one, a job of
realisation k runs at load x window k's capacity (experiments/run/load.py), and the
held-out check can search the held-out windows' own (scripts/holdout_check.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import compose_config, load_script
from test_capacity import BASE, hand_config

import experiments.capacity.probes as probes
from experiments.capacity.main import format_table, realization_ids
from experiments.capacity.main import run as run_capacity
from experiments.capacity.probes import RunOutcome
from experiments.run.load import resolve_load
from experiments.user_error import ConfigError

# each window saturates at its own rate: realisation k meets the SLO up to WINDOW_CAPACITY[k]
WINDOW_CAPACITY = {0: 6.0, 1: 11.0, 2: 23.0}


def fake_runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, int]]:
    """Replace the simulated run by a step: realisation k attains 1 up to its window's
    capacity and 0.5 past it; returns the list the runs made are appended to."""
    made: list[tuple[float, int]] = []

    def run_once(cfg: Any, param: str, rate: float, realization: int, out: Path,
                 keep: bool = False) -> RunOutcome:
        made.append((rate, realization))
        ok = rate <= WINDOW_CAPACITY[realization]
        return RunOutcome(realization=realization, attainment=1.0 if ok else 0.5,
                          offered_request_rate=rate * (realization + 1),
                          request_goodput=None)

    monkeypatch.setattr(probes, "run_once", run_once)
    return made


def test_each_window_gets_its_own_capacity_and_the_runs_are_shared(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made = fake_runs(monkeypatch)
    _, data = run_capacity([*BASE, "scheduler=vllm", "workload.request_rate=4",
                            "--realizations", "3", "--per-window", "--out",
                            str(tmp_path / "cap")], log=lambda _m: None)
    entry = data["schedulers"]["vllm"]
    assert data["per_window"] is True and data["realization_ids"] == [0, 1, 2]
    windows = entry["per_realization"]
    assert sorted(windows) == ["0", "1", "2"]
    for k, true in WINDOW_CAPACITY.items():
        w = windows[str(k)]
        lo, hi = w["bracket"]
        assert w["capacity"] == lo and lo <= true < hi and hi - lo <= 0.02 * lo
        assert w["attainment"] == 1.0
        assert w["capacity_request_rate"] == pytest.approx(w["capacity"] * (k + 1))
        assert all(len(p["per_realization"]) == 1 for p in w["probes"])
    # pooled: mean over the three windows >= 0.9 needs all three (2 of 3 gives 0.833), so
    # the pooled capacity is the tightest window's; its entry keeps the fields it had
    assert entry["capacity"] <= WINDOW_CAPACITY[0] < entry["bracket"][1]
    assert "attainment" not in entry
    # each (rate, realisation) ran once, and the shared ones were not rerun
    assert len(made) == len(set(made)) == entry["simulated_runs"]
    probed = 3 * len(entry["probes"]) + sum(len(w["probes"]) for w in windows.values())
    assert entry["simulated_runs"] < probed
    table = format_table(data)
    assert "Per window" in table and "(3.83x)" in table  # 23 / 6 to the bracket
    assert table.splitlines()[0].endswith("over 3 realisation(s), to 2%")


def test_the_windows_can_be_any_realisations(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    made = fake_runs(monkeypatch)
    _, data = run_capacity([*BASE, "scheduler=vllm", "workload.request_rate=4",
                            "--realizations", "1-2", "--per-window", "--out",
                            str(tmp_path / "cap")], log=lambda _m: None)
    assert {k for _, k in made} == {1, 2}
    assert sorted(data["schedulers"]["vllm"]["per_realization"]) == ["1", "2"]
    assert data["realizations"] == 2 and "realisation(s) (1-2)" in format_table(data)
    assert realization_ids("5,7") == [5, 7] and realization_ids("4") == [0, 1, 2, 3]
    for bad in ("x", "0", "3-1", "2,2"):
        with pytest.raises(ConfigError, match="--realizations"):
            realization_ids(bad)


def test_one_window_equals_the_pooled_search(tmp_path: Path) -> None:
    """On the hand-computed setup (test_capacity), the search of realisation 0 alone is the
    pooled search over that one realisation, probe for probe, and reruns nothing."""
    _, data = run_capacity([*hand_config(tmp_path), "--realizations", "1", "--per-window",
                            "--out", str(tmp_path / "cap")], log=lambda _m: None)
    entry = data["schedulers"]["vllm"]
    window = entry["per_realization"]["0"]
    for key in ("capacity", "capacity_request_rate", "bracket", "probes"):
        assert window[key] == entry[key], key
    assert entry["simulated_runs"] == len(entry["probes"])


# --- workload.load against a per-window file -------------------------------------------------


def _per_window_file(tmp_path: Path, windows: dict[str, Any] | None) -> Path:
    from experiments.capacity.main import compose
    from experiments.run.load import (
        CAPACITY_FORMAT,
        CAPACITY_KIND,
        capacity_config,
        scheduler_config,
    )

    cfg = compose([*BASE, "scheduler=vllm"])
    entry: dict[str, Any] = {"capacity": 20.0, "capacity_request_rate": 19.5,
                             "scheduler_config": scheduler_config(cfg)}
    if windows is not None:
        entry["per_realization"] = windows
    data = {"kind": CAPACITY_KIND, "format": CAPACITY_FORMAT,
            "rate_param": "workload.request_rate",
            "rate_value": float(cfg.workload.request_rate), "target": 0.9,
            "config": capacity_config(cfg), "schedulers": {"vllm": entry}}
    path = tmp_path / "capacity.json"
    path.write_text(json.dumps(data))
    return path


WINDOWS = {"0": {"capacity": 10.0, "capacity_request_rate": 9.5},
           "1": {"capacity": 30.0, "capacity_request_rate": 29.0},
           "3": {"capacity": None, "note": "attainment failed down to rate 0.0001"}}


def _job(path: Path, realization: int, load: float = 0.5) -> Any:
    return compose_config([*BASE, "scheduler=vllm", f"workload.load={load}",
                           f"workload.capacity_file={path}",
                           f"workload.realization={realization}"])


@pytest.mark.parametrize(("realization", "capacity", "req_s"), [(0, 10.0, 9.5),
                                                                (1, 30.0, 29.0)])
def test_a_job_runs_at_its_own_windows_capacity(tmp_path: Path, realization: int,
                                                capacity: float, req_s: float) -> None:
    path = _per_window_file(tmp_path, WINDOWS)
    workload, res = resolve_load(_job(path, realization))
    assert res is not None
    assert workload["request_rate"] == pytest.approx(0.5 * capacity)
    summary = res.summary()
    assert summary["load_capacity"] == capacity
    assert summary["load_capacity_request_rate"] == req_s
    assert summary["load_capacity_source"] == f"window {realization}"


def test_a_pooled_file_resolves_as_before(tmp_path: Path) -> None:
    path = _per_window_file(tmp_path, None)
    for k in (0, 7):
        workload, res = resolve_load(_job(path, k))
        assert res is not None and workload["request_rate"] == pytest.approx(10.0)
        assert res.summary()["load_capacity"] == 20.0
        assert res.summary()["load_capacity_source"] == "pooled"


def test_a_window_the_file_lacks_is_refused(tmp_path: Path) -> None:
    path = _per_window_file(tmp_path, WINDOWS)
    with pytest.raises(ConfigError, match=r"of realisations 0, 1, 3, not "
                                          r"workload\.realization=2"):
        resolve_load(_job(path, 2))
    with pytest.raises(ConfigError, match=r"no capacity for window 3 \(attainment failed"):
        resolve_load(_job(path, 3))


def test_a_job_records_the_capacity_it_used(tmp_path: Path) -> None:
    from experiments.run.main import run_experiment

    path = _per_window_file(tmp_path, WINDOWS)
    cfg = compose_config([*BASE, "scheduler=vllm", "workload.load=0.5",
                          f"workload.capacity_file={path}", "workload.realization=1",
                          "progress=off"])
    summary = run_experiment(cfg, tmp_path / "job", bar=False)
    assert summary["load_capacity_source"] == "window 1"
    assert summary["load_capacity"] == 30.0 and summary["load_rate"] == 15.0


# --- the held-out check at the held-out windows' own capacities ------------------------------


def test_holdout_can_search_the_held_out_windows(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    holdout = load_script("holdout_check")
    ran: list[list[str]] = []

    def fake_run(command: list[str], **_kw: Any) -> None:
        ran.append(command)
        out = Path(command[command.index("--out") + 1])
        out.mkdir(parents=True)
        (out / "capacity.json").write_text(json.dumps(
            {"target": 0.9, "tolerance": 0.02, "schedulers": {}}))

    monkeypatch.setattr(holdout.subprocess, "run", fake_run)
    data = holdout.per_window_capacity("victim_choice", ["scheduler=vllm"], [5, 6, 8],
                                       tmp_path / "search")
    (command,) = ran
    assert command[1:] == ["-m", "experiments.capacity", "experiment=victim_choice",
                           "scheduler=vllm", "--per-window", "--realizations", "5,6,8",
                           "--out", str(tmp_path / "search")]
    assert "held-out windows themselves" in data["note"] and "5,6,8" in data["note"]


# Q3's pooled capacity table as results/victim_choice/main/capacity.md held it before the
# studies searched each window (commit 019ae28).
POOLED_TABLE = ("Capacity: the highest workload.rate_scale with mean SLO attainment >= 0.9 "
                "over 5 realisation(s), to 2%\n") + """\
scheduler         workload.rate_scale     req/s               bracket  probes
vLLM                           0.9688      4.39      [0.9688, 0.9844)       7
SGLang                         0.9531      4.32      [0.9531, 0.9688)       7"""


def test_a_pooled_table_is_printed_as_before() -> None:
    """A file without windows prints the pooled table as it was committed, byte for byte."""
    probe = {"offered_request_rate": 0.0}
    data = {"rate_param": "workload.rate_scale", "target": 0.9, "realizations": 5,
            "tolerance": 0.02, "schedulers": {
                "vllm": {"capacity": 0.96875, "capacity_request_rate": 4.39,
                         "bracket": [0.96875, 0.984375], "probes": [probe] * 7},
                "sglang": {"capacity": 0.953125, "capacity_request_rate": 4.32,
                           "bracket": [0.953125, 0.96875], "probes": [probe] * 7}}}
    assert format_table(data) == POOLED_TABLE


def test_the_recovery_settings_name_per_window_capacities() -> None:
    report = load_script("prefix_recovery_report")
    pooled = [{"load_capacity": 1.5, "load_capacity_source": "pooled"},
              {"load_capacity": 1.5}]
    assert report._capacity_text(pooled) == "1.5"
    windows = [{"load_capacity": 1.25, "load_capacity_source": "window 5"},
               {"load_capacity": 0.90625, "load_capacity_source": "window 6"}]
    assert report._capacity_text(windows) == "per window: 1.25, 0.9062"


def test_holdout_md_says_which_capacity_the_held_out_jobs_ran_at() -> None:
    holdout = load_script("holdout_check")
    committed = holdout.capacity_sentence("committed")
    assert holdout.capacity_sentence(None) == committed and "rounded to 4" in committed
    assert "each held-out window's own" in holdout.capacity_sentence("per-window")
    assert "pooled" in holdout.capacity_sentence("per-window")
    both = holdout.capacity_sentence("per-window", committed_per_window=True)
    assert "as the committed points ran at their windows' own" in both
