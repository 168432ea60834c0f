"""Held-out windows against the committed study (issue 30; experiments/report/holdout.py,
scripts/holdout_check.py): on a tiny synthetic sweep aggregated by the report's own CI code,
a statistic that stays is inside and overlapping, one that moves is neither, and the table
says so; the capacity a held-out run uses is the committed one, for the committed config
only."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from conftest import load_script

from experiments.report.holdout import (
    RECOVERY_STATS,
    SWEEP_STATS,
    Comparison,
    compare,
    holdout_markdown,
    read_report,
    with_recovery,
)
from experiments.report.realizations import aggregate
from experiments.user_error import ConfigError

METRICS = ["num_preemptions", "preempted_request_share", "victim_e2el_median_ratio"]


def sweep(realizations: range, evictions_at_2: float) -> pd.DataFrame:
    """One row per job: vLLM evicts about 100 times a window at load 1.25 and about
    `evictions_at_2` at load 2, SGLang never; victims' median E2E 1.2x the others'."""
    rows = []
    for k in realizations:
        wobble = (-4.0, 2.0, 0.0, 3.0, -1.0)[k % 5]
        for load, base in ((1.25, 100.0), (2.0, evictions_at_2)):
            for sched in ("vllm", "sglang"):
                ev = base + wobble if sched == "vllm" else 0.0
                rows.append({"scheduler": sched, "workload.load": load,
                             "workload.realization": k, "status": "ok",
                             "num_preemptions": ev, "preempted_request_share": ev / 1000.0,
                             "num_victims": ev,
                             "victim_e2el_median_ratio": 1.2 + wobble / 100 if ev else np.nan})
    return pd.DataFrame(rows)


def report_folder(path: Path, jobs: pd.DataFrame) -> Path:
    """aggregated.csv as the sweep report writes it, plus a headline.csv holding one
    statistic aggregated.csv lacks."""
    path.mkdir()
    params = ["scheduler", "workload.load", "workload.realization"]
    agg = aggregate(jobs, params, METRICS)
    agg.to_csv(path / "aggregated.csv", index=False)
    head = pd.DataFrame({"workload.load": [1.25, 2.0],
                         "prefix_recovery_on_resume[vllm]": [0.8, 0.7],
                         "prefix_recovery_on_resume_ci_lo[vllm]": [0.75, 0.6],
                         "prefix_recovery_on_resume_ci_hi[vllm]": [0.85, 0.8],
                         "prefix_recovery_on_resume_n[vllm]": [400, 500]})
    head.to_csv(path / "headline.csv", index=False)
    return path


def cell(rows: list[Comparison], sched: str, load: float, stat: str) -> Comparison:
    (row,) = [r for r in rows if (r.scheduler, r.load, r.stat) == (sched, load, stat)]
    return row


def test_a_statistic_that_stays_holds_and_one_that_moves_does_not(tmp_path: Path) -> None:
    committed = read_report(report_folder(tmp_path / "c", sweep(range(5), 150.0)))
    held = read_report(report_folder(tmp_path / "h", sweep(range(5, 10), 40.0)))
    rows = compare(committed, held, SWEEP_STATS)
    stays = cell(rows, "vllm", 1.25, "num_preemptions")
    assert stays.inside is True and stays.overlap is True
    assert stays.committed.lo <= stays.held_out.mean <= stays.committed.hi
    moved = cell(rows, "vllm", 2.0, "num_preemptions")
    assert moved.inside is False and moved.overlap is False
    assert moved.held_out.mean == pytest.approx(40.0)
    # a victim statistic carries its n (victims summed over the realisations)
    ratio = cell(rows, "vllm", 2.0, "victim_e2el_median_ratio")
    assert ratio.committed.n == 750 and ratio.held_out.n == 200
    # SGLang at 0 on both sides: a zero-width CI that holds; its victim ratio, undefined on
    # both sides, is left out
    zero = cell(rows, "sglang", 2.0, "num_preemptions")
    assert zero.inside is True and zero.overlap is True
    assert not [r for r in rows
                if (r.scheduler, r.stat) == ("sglang", "victim_e2el_median_ratio")]
    # headline.csv's statistic joined in; one the committed side lacks is not compared
    assert cell(rows, "vllm", 1.25, "prefix_recovery_on_resume").inside is True
    assert "matched_victim_ratio" not in {r.stat for r in rows}
    text = holdout_markdown(rows, "s/x", "A setting.", "pinned", [5, 6, 7, 8, 9], "cmd")
    assert text == holdout_markdown(rows, "s/x", "A setting.", "pinned", [5, 6, 7, 8, 9],
                                    "cmd")
    line = next(ln for ln in text.splitlines() if ln.startswith("| 2 | evictions per window"))
    assert line.endswith("| **no** | **no** |"), line
    assert "| 1.25 | evictions per window | 100 [" in text
    assert "Held-out realisations (trace windows) 5, 6, 7, 8, 9" in text


def test_a_point_without_a_ci_or_on_one_side_only(tmp_path: Path) -> None:
    committed = read_report(report_folder(tmp_path / "c", sweep(range(5), 150.0)))
    one = sweep(range(7, 8), 150.0)  # one realisation (at the mean): a mean, no CI
    extra = one[one["workload.load"] == 2.0].assign(**{"workload.load": 3.0})
    held = read_report(report_folder(tmp_path / "h", pd.concat([one, extra])))
    rows = compare(committed, held, SWEEP_STATS)
    assert {r.load for r in rows} == {1.25, 2.0}  # load 3 was not in the study: nothing to hold
    r = cell(rows, "vllm", 2.0, "num_preemptions")
    assert r.inside is True and r.overlap is None
    assert "n/a" in holdout_markdown(rows, "s/x", "", "pinned", [5])


def test_recovery_per_readmission_joins_by_setting(tmp_path: Path) -> None:
    folder = report_folder(tmp_path / "c", sweep(range(5), 150.0))
    pd.DataFrame({"setting": ["a", "b"], "scheduler": ["vllm", "vllm"], "load": [2, 2],
                  "readmissions": [55, 9], "mean_share": [0.415, 0.9],
                  "mean_share_ci_lo": [0.33, 0.8], "mean_share_ci_hi": [0.5, 0.95]}
                 ).to_csv(tmp_path / "recovery.csv", index=False)
    report = with_recovery(read_report(folder), tmp_path / "recovery.csv", "a")
    rows = compare(report, report, SWEEP_STATS + RECOVERY_STATS)
    r = cell(rows, "vllm", 2.0, "mean_share")
    assert r.committed.n == 55 and r.inside is True
    assert "41.5 % [33.0, 50.0] (n = 55)" in holdout_markdown(rows, "s", "", "p", [5])


def test_the_held_out_run_uses_the_committed_capacity_of_the_committed_config(
        tmp_path: Path) -> None:
    from experiments.run.config import compose_run_config
    from experiments.run.load import resolve_load

    holdout = load_script("holdout_check")
    assert holdout.realizations("5-8") == [5, 6, 7, 8]
    assert holdout.realizations("5,7") == [5, 7]
    with pytest.raises(ConfigError, match="--realizations"):
        holdout.realizations("five")
    from experiments.capacity.main import compose
    from experiments.run.load import capacity_config, config_digest

    # the committed capacity is that of this checkout's composition of the setting (the
    # digest holds no machine path: workload.trace_dir is left out of it)
    digest = config_digest(capacity_config(compose(["experiment=victim_choice",
                                                    "scheduler=vllm"])))
    committed = Path(__file__).resolve().parent.parent / "results/victim_choice/main/capacity.md"
    assert holdout.committed_capacity(committed) == (
        {"vLLM": (1.062, 5.58), "SGLang": (1.031, 5.42)}, digest[:16])
    # a capacity table as scripts/_study.sh writes it
    md = tmp_path / "capacity.md"
    md.write_text("# Capacity: Q3\n\n```\nCapacity: ...\n"
                  "scheduler         workload.rate_scale     req/s               bracket  probes\n"
                  "vLLM                           0.9688      4.39      [0.9688, 0.9844)       7\n"
                  "SGLang                         0.9531      4.32      [0.9531, 0.9688)       7\n"
                  f"```\n\nCommand: `...`. Config digest `{digest[:16]}`.\n")
    data = holdout.pinned_capacity("victim_choice", [], md)
    assert data["schedulers"]["vllm"]["capacity"] == 0.9688
    assert data["schedulers"]["sglang"]["capacity"] == 0.9531
    path = tmp_path / "capacity.json"
    path.write_text(json.dumps(data))
    cfg = compose_run_config(["experiment=victim_choice", "scheduler=vllm",
                              "workload.load=1.25", f"workload.capacity_file={path}"])
    workload, resolved = resolve_load(cfg)
    assert resolved is not None and workload["rate_scale"] == pytest.approx(1.25 * 0.9688)
    with pytest.raises(ConfigError, match="config digest"):
        holdout.pinned_capacity("victim_choice", ["workload.max_requests=500"], md)


# --- the held-out windows of the presets, at their own capacities ----------------------------


def test_the_held_out_windows_are_the_presets_own() -> None:
    holdout = load_script("holdout_check")
    assert holdout.held_out_windows("victim_choice", []) == [2, 6, 10, 14, 18]
    assert holdout.held_out_windows("victim_policies", ["scheduler=vllm"]) == [2, 6, 10, 14, 18]
    assert holdout.held_out_windows("sensitivity", []) == [7, 22, 37, 52]
    conv = ["workload=azure_conv", "workload.max_requests=500",
            "realizations=[0,9,18,27,36]", "holdout_realizations=[4,13,22,31]"]
    assert holdout.held_out_windows("prefix_recovery", conv) == [4, 13, 22, 31]
    with pytest.raises(ConfigError, match="holds no window out"):
        holdout.held_out_windows("preemption", ["holdout_realizations=[]"])


def fake_holdout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[list[str]]]:
    """holdout_check with its checkout at `tmp_path` (the committed capacity tables copied
    there) and its commands recorded, not run (a capacity search writes an empty file)."""
    holdout = load_script("holdout_check")
    root = Path(__file__).resolve().parent.parent
    for study, setting in (("victim_choice", "main"), ("sensitivity", "a100_llama2_7b")):
        (tmp_path / "results" / study / setting).mkdir(parents=True)
        shutil.copy2(root / "results" / study / setting / "capacity.md",
                     tmp_path / "results" / study / setting / "capacity.md")
    ran: list[list[str]] = []

    def fake_run(command: list[str], **_kw: Any) -> None:
        ran.append([str(c) for c in command])
        if "--out" in command and "experiments.capacity" in command:
            out = Path(command[command.index("--out") + 1])
            out.mkdir(parents=True)
            (out / "capacity.json").write_text(json.dumps(
                {"target": 0.9, "tolerance": 0.02, "schedulers": {}}))

    monkeypatch.setattr(holdout, "ROOT", tmp_path)
    monkeypatch.setattr(holdout.subprocess, "run", fake_run)
    return holdout, ran


def test_the_held_out_run_searches_each_held_out_window_by_default(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    holdout, ran = fake_holdout(tmp_path, monkeypatch)
    free = "host_kv_capacity_tokens,preemption_mode,victim_policy"
    assert holdout.main(["run", "victim_policies", "vllm", "--loads", "1.25", "scheduler=vllm",
                         "--capacity-md", "results/victim_choice/main/capacity.md",
                         "--scheduler-free", free]) == 0
    search, sweep = ran[0], ran[1]
    assert search[1:4] == ["-m", "experiments.capacity", "experiment=victim_policies"]
    assert "--per-window" in search and "2,6,10,14,18" in search
    assert search[search.index("--scheduler-free") + 1] == free
    assert "workload.realization=2,6,10,14,18" in sweep and "workload.load=1.25" in sweep
    runs = tmp_path / "results" / "victim_policies" / "runs" / "holdout_vllm"
    meta = json.loads((runs / "holdout.json").read_text())
    assert meta["capacity"] == "per-window" and meta["realizations"] == [2, 6, 10, 14, 18]
    # HOLDOUT_CAPACITY=committed: no search, the committed capacity, marked free
    ran.clear()
    assert holdout.main(["run", "victim_policies", "vllm", "--loads", "1.25", "scheduler=vllm",
                         "--capacity-md", "results/victim_choice/main/capacity.md",
                         "--scheduler-free", free, "--capacity", "committed"]) == 0
    assert not any("experiments.capacity" in c for c in ran)
    pinned = json.loads((runs / "capacity.json").read_text())
    assert pinned["schedulers"]["vllm"]["scheduler_free"] == free.split(",")
    assert pinned["schedulers"]["vllm"]["capacity"] == 1.062


def test_the_script_checks_every_study_at_its_held_out_windows() -> None:
    text = (Path(__file__).resolve().parent.parent / "scripts" / "holdout_check.sh").read_text()
    for study in ("preemption", "prefix_recovery", "victim_choice", "victim_policies",
                  "sensitivity"):
        assert f"\ncheck {study} " in text, study
    assert "--realizations" not in text  # the presets' holdout_realizations
    assert '${HOLDOUT_CAPACITY:+--capacity "$HOLDOUT_CAPACITY"}' in text


def test_policies_and_modes_are_compared_row_by_row(tmp_path: Path) -> None:
    def side(evictions: dict[str, float]) -> pd.DataFrame:
        return pd.DataFrame([
            {"scheduler.preemption_mode": "recompute", "scheduler.victim_policy": p,
             "scheduler": "vllm", "num_preemptions": v, "num_preemptions_ci_lo": v - 5,
             "num_preemptions_ci_hi": v + 5} for p, v in evictions.items()])

    folder = tmp_path / "one_load"
    folder.mkdir()
    side({"default": 100.0, "most_kv": 50.0}).to_csv(folder / "aggregated.csv", index=False)
    with pytest.raises(ValueError, match="one load"):
        read_report(folder)
    committed = read_report(folder, 1.25)
    held = side({"default": 102.0, "most_kv": 80.0}).assign(load=1.25)
    rows = compare(committed, held, SWEEP_STATS)
    assert [(r.case, r.inside) for r in rows] == [("recompute, default", True),
                                                 ("recompute, most_kv", False)]
    text = holdout_markdown(rows, "victim_policies/vllm", "", "per window", [2, 6])
    assert "| load | mode, policy | statistic |" in text
    assert "| 1.25 | recompute, most_kv | evictions per window |" in text


def test_every_setting_with_windows_to_hold_out_is_checked() -> None:
    """Each setting the study scripts run has its held-out check, but Q1 code (its trace's
    five blocks are all swept): the sensitivity settings as reproduce_sensitivity.sh names
    them, Q2's three, Q3's and the policies' A10."""
    root = Path(__file__).resolve().parent.parent
    text = (root / "scripts" / "holdout_check.sh").read_text().replace("\\\n", " ")
    checked = set(re.findall(r"^\s*check (\w+) \"?([\w/$]+)\"? ", text, re.M))
    checked |= {("sensitivity", s) for s in re.findall(r"^sens (\w+) ", text, re.M)}
    if ("victim_policies", "a10/$s") in checked:  # the loop over both schedulers
        checked |= {("victim_policies", "a10/vllm"), ("victim_policies", "a10/sglang")}
    sensitivity = (root / "scripts" / "reproduce_sensitivity.sh").read_text()
    expected = {("sensitivity", s) for s in re.findall(r"^study (\w+) ", sensitivity, re.M)}
    expected |= {("preemption", "conv"), ("preemption", "conv_sync"),
                 ("prefix_recovery", "mooncake"), ("prefix_recovery", "mooncake_noshare"),
                 ("prefix_recovery", "azure_conv"), ("victim_choice", "main"),
                 ("victim_choice", "a10"), ("victim_policies", "vllm"),
                 ("victim_policies", "a10/vllm"), ("victim_policies", "a10/sglang")}
    assert len(expected) == 17
    assert expected <= checked, sorted(expected - checked)


def test_a_one_scheduler_sweep_reads_its_long_headline(tmp_path: Path) -> None:
    """A sweep of one scheduler (Q2's mooncake_noshare) writes headline.csv one row per
    load with a `scheduler` column, not `<stat>[<scheduler>]` columns: read as it is."""
    folder = tmp_path / "one"
    folder.mkdir()
    jobs = sweep(range(5), 150.0)
    agg = aggregate(jobs[jobs["scheduler"] == "vllm"],
                    ["scheduler", "workload.load", "workload.realization"], METRICS)
    agg.to_csv(folder / "aggregated.csv", index=False)
    pd.DataFrame({"workload.load": [1.25, 2.0], "scheduler": ["vllm", "vllm"],
                  "prefix_recovery_on_resume": [0.8, 0.7],
                  "prefix_recovery_on_resume_ci_lo": [0.75, 0.6],
                  "prefix_recovery_on_resume_ci_hi": [0.85, 0.8],
                  "prefix_recovery_on_resume_n": [400, 500]}).to_csv(
        folder / "headline.csv", index=False)
    report = read_report(folder)
    assert list(report["scheduler"]) == ["vllm", "vllm"]
    assert list(report["prefix_recovery_on_resume"]) == [0.8, 0.7]
    rows = compare(report, report, SWEEP_STATS)
    assert cell(rows, "vllm", 2.0, "prefix_recovery_on_resume").held_out.n == 500


def test_the_sensitivity_checks_give_the_overrides_of_their_study() -> None:
    """holdout_check.sh lists each sensitivity setting's overrides again (the study script's
    are not importable into it): the same ones, so a setting's held-out run is that setting
    (the config digest check would not see a scheduler key such as block_size)."""
    root = Path(__file__).resolve().parent.parent
    held = (root / "scripts" / "holdout_check.sh").read_text().replace("\\\n", " ")
    study = (root / "scripts" / "reproduce_sensitivity.sh").read_text().replace("\\\n", " ")
    ran = {m[0]: m[1].split() for m in re.findall(
        r'^study (\w+) "[^"]*" "\$columns"(.*)$', study, re.M)}
    checked = {m[0]: m[1].split() for m in re.findall(r'^sens (\w+) "[^"]*"(.*)$', held, re.M)}
    assert checked, "no sens lines found"
    for setting, overrides in checked.items():
        assert overrides == ran[setting], setting
