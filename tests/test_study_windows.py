"""Realisations spread over the trace (issue 30: "does it hold in other windows?"): every
study preset lists its windows (`realizations`) and held-out ones (`holdout_realizations`),
the sweep reads the list through `${realization_sweep:...}` (experiments/run/
realizations.py), the capacity search searches the same windows, and scripts/_study.sh
searches each window's own capacity unless told not to."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import compose_config
from test_capacity import BASE
from test_capacity_per_window import fake_runs

from experiments.capacity.main import compose, default_realizations
from experiments.capacity.main import run as run_capacity
from experiments.inputs.traces import read_trace
from experiments.inputs.workloads.transforms import ReplayOptions, select_records
from experiments.run.realizations import (
    checked_realizations,
    holdout_ids,
    realization_ids,
    realization_sweep,
)
from experiments.user_error import ConfigError

ROOT = Path(__file__).resolve().parents[1]
TRACES = Path(os.environ.get("SCHEDBENCH_TRACE_DIR") or ROOT / "data" / "traces")
SWEPT = "workload.realization"


def sweep_of(overrides: list[str]) -> str:
    """The sweeper's choice of realisations a multirun of `overrides` makes."""
    cfg = compose_config(overrides, return_hydra_config=True)
    return str(cfg.hydra.sweeper.params[SWEPT])


# --- the resolver --------------------------------------------------------------------------


def test_the_resolver_renders_a_list_as_the_sweepers_choice() -> None:
    assert realization_sweep([0, 4, 8]) == "0,4,8"
    assert realization_sweep([7]) == "7"
    assert realization_sweep(None, 3) == "range(3)"
    assert realization_sweep([0, 4, 8], 3) == "0,4,8"  # repeats = the list's length
    assert checked_realizations(None) == [0]
    for bad, match in (([], "at least one"), ([1, 1], "twice"), ([-1], "not a realisation"),
                       (["a"], "not a realisation"), ("0,4", "give a list")):
        with pytest.raises(ConfigError, match=match):
            realization_sweep(bad)
    with pytest.raises(ConfigError, match=r"repeats=2 with realizations=\[0, 4, 8\]"):
        realization_sweep([0, 4, 8], 2)


def test_the_sweep_reads_the_list_and_the_command_line_overrides_it() -> None:
    assert sweep_of([]) == "range(1)"
    assert sweep_of(["repeats=4"]) == "range(4)"
    assert sweep_of(["realizations=[1,3,5]"]) == "1,3,5"
    assert sweep_of(["experiment=victim_choice"]) == "0,4,8,12,16"
    assert sweep_of(["experiment=victim_choice", "realizations=[1,3]"]) == "1,3"
    cfg = compose_config(["experiment=victim_choice", "realizations=[1,3]"])
    assert realization_ids(cfg) == [1, 3] and holdout_ids(cfg) == [2, 6, 10, 14, 18]
    with pytest.raises(ConfigError, match="share"):  # a held-out window the sweep uses
        holdout_ids(compose_config(["experiment=victim_choice", "realizations=[2,4]"]))
    with pytest.raises(Exception, match="repeats=3 with realizations"):
        sweep_of(["experiment=victim_choice", "repeats=3"])


def test_a_multirun_sweeps_the_listed_realisations(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.run", "-m", "scheduler=vllm",
         "workload.num_requests=5", "realizations=[1,4]", "progress=off",
         f"hydra.sweep.dir={sweep}", "hydra.callbacks.comparison.figures=false",
         "hydra.callbacks.comparison.print_table=false"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "CI": "true"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = sorted(json.loads(p.read_text())["realization"] for p in sweep.glob("*/summary.json"))
    assert done == [1, 4]


# --- every preset's windows ------------------------------------------------------------------

def _script_overrides(script: str, marker: str) -> list[str]:
    """The Hydra overrides of the setting of scripts/`script` whose line holds `marker`."""
    text = (ROOT / "scripts" / script).read_text().replace("\\\n", " ")
    line = next(line for line in text.splitlines() if marker in line)
    return [w.strip("'\"") for w in line.split() if "=" in w and not w.startswith("$")
            and "columns" not in w]


# (study setting, the overrides its reproduce script gives)
SETTINGS: list[tuple[str, list[str]]] = [
    ("preemption conv", ["experiment=preemption"]),
    ("preemption code", ["experiment=preemption",
                         *_script_overrides("reproduce_preemption.sh", "workload=azure_code")]),
    ("prefix_recovery mooncake", ["experiment=prefix_recovery"]),
    ("prefix_recovery azure_conv", ["experiment=prefix_recovery",
                                    *_script_overrides("reproduce_prefix_recovery.sh",
                                                       "workload=azure_conv")]),
    ("victim_choice", ["experiment=victim_choice"]),
    ("victim_policies", ["experiment=victim_policies"]),
    ("sensitivity", ["experiment=sensitivity"]),
    ("capacity_load", ["experiment=capacity_load"]),
]


def test_the_script_overrides_name_their_own_windows() -> None:
    code = dict(SETTINGS)["preemption code"]
    assert "workload=azure_code" in code and "realizations=[0,1,2,3,4]" in code
    conv = dict(SETTINGS)["prefix_recovery azure_conv"]
    assert "workload.max_requests=500" in conv and "realizations=[0,9,18,27,36]" in conv


@pytest.mark.parametrize(("name", "overrides"), SETTINGS, ids=[s for s, _ in SETTINGS])
def test_every_preset_lists_disjoint_windows(name: str, overrides: list[str]) -> None:
    cfg = compose(overrides)
    used, held = realization_ids(cfg), holdout_ids(cfg)  # holdout_ids checks disjointness
    assert cfg.get("realizations") is not None, f"{name}: lists no realizations"
    assert len(used) >= 3 and used == sorted(used)
    assert not set(used) & set(held)
    if name == "preemption code":
        assert held == []  # the code trace holds five windows of 1,700: all used
    elif name != "capacity_load":  # a generator's draws: nothing to hold out
        assert len(held) >= 4
    # the sweep and the capacity search read the same list
    assert sweep_of(overrides) == ",".join(map(str, used))
    assert default_realizations(cfg) == used


def _records(workload: Any) -> list[Any] | None:
    path = TRACES / str(workload.file)
    if not path.is_file():
        return None
    return list(read_trace(str(workload.name), path))


REPLAYS = [s for s in SETTINGS if s[0] != "capacity_load"]


@pytest.mark.parametrize(("name", "overrides"), REPLAYS, ids=[s for s, _ in REPLAYS])
def test_every_listed_window_exists_in_its_trace(name: str, overrides: list[str]) -> None:
    cfg = compose(overrides)
    records = _records(cfg.workload)
    if records is None:
        pytest.skip(f"trace {TRACES / str(cfg.workload.file)} absent (set "
                    "SCHEDBENCH_TRACE_DIR or run scripts/fetch_traces.sh)")
    size = int(cfg.workload.max_requests)
    windows = len(records) // size
    listed = realization_ids(cfg) + holdout_ids(cfg)
    assert max(listed) < windows, f"{name}: window {max(listed)} of {windows}"
    for k in listed:
        sel = select_records(records, ReplayOptions(max_requests=size, realization=k))
        assert len(sel.records) == size
    # spread over the trace: the last window used lies in the trace's last third
    assert max(realization_ids(cfg)) >= 2 * (windows - 1) / 3, (name, windows)


# --- the capacity search reads the list ------------------------------------------------------

def test_the_capacity_search_searches_the_listed_windows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made = fake_runs(monkeypatch)
    _, data = run_capacity([*BASE, "scheduler=vllm", "workload.request_rate=4",
                            "realizations=[0,2]", "--per-window", "--out",
                            str(tmp_path / "cap")], log=lambda _m: None)
    assert {k for _, k in made} == {0, 2}
    assert data["realization_ids"] == [0, 2]
    assert sorted(data["schedulers"]["vllm"]["per_realization"]) == ["0", "2"]
    # without a list: 0-2 as before; --realizations still picks others
    assert default_realizations(compose([*BASE, "scheduler=vllm"])) == [0, 1, 2]
    assert default_realizations(compose([*BASE, "scheduler=vllm", "repeats=2"])) == [0, 1]
    made.clear()
    _, data = run_capacity([*BASE, "scheduler=vllm", "workload.request_rate=4",
                            "realizations=[0,2]", "--realizations", "1", "--out",
                            str(tmp_path / "cap1")], log=lambda _m: None)
    assert {k for _, k in made} == {0} and data["realization_ids"] == [0]


# --- scripts/_study.sh -----------------------------------------------------------------------

def study_commands(tmp_path: Path, **env: str) -> list[str]:
    """The command lines scripts/_study.sh runs (PYTHON: a stand-in that logs them), in a
    scratch copy of the script."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True, exist_ok=True)
    shutil.copy2(ROOT / "scripts" / "_study.sh", repo / "scripts" / "_study.sh")
    log = tmp_path / "log.txt"
    fake = tmp_path / "py.sh"
    fake.write_text(f'#!/usr/bin/env bash\necho "$*" >> {log}\n')
    fake.chmod(0o755)
    log.write_text("")
    subprocess.run(["bash", str(repo / "scripts" / "_study.sh"), "victim_choice", "main",
                    "T", "num_preemptions", "hardware=a10"], cwd=repo, check=True,
                   timeout=60, env={**os.environ, "PYTHON": str(fake), **env})
    return log.read_text().splitlines()


def test_study_searches_each_window_by_default(tmp_path: Path) -> None:
    (cap,) = [c for c in study_commands(tmp_path) if c.startswith("-m experiments.capacity")]
    assert "--per-window" in cap.split() and "--realizations" not in cap
    assert "experiment=victim_choice hardware=a10" in cap
    (off,) = [c for c in study_commands(tmp_path, CAPACITY_PER_WINDOW="0")
              if c.startswith("-m experiments.capacity")]
    assert "--per-window" not in off.split()
    (some,) = [c for c in study_commands(tmp_path, CAPACITY_REALIZATIONS="0,4")
               if c.startswith("-m experiments.capacity")]
    assert "--realizations 0,4" in some and "--per-window" in some.split()
    (run,) = [c for c in study_commands(tmp_path) if c.startswith("-m experiments.run")]
    assert "workload.capacity_file=results/victim_choice/runs/main/capacity/capacity.json" in run
