"""A sweep's report files are one set behind their marker `report.json` (issue 24, item 11):
a kill anywhere inside `write_report` never leaves a set that checks out with files of two
reports in it, a set made from earlier job results is known stale, `experiments.report`
says so and writes it anew, and a new invocation of a sweep withdraws the earlier report
before its jobs change anything. Also: the report and `analysis.load` on one job folder cut
off before its summary (issue 24, item 14), and each job's status in every table (issue 25,
item 2)."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from experiments.report.analysis import load
from experiments.report.cli import main as report_main
from experiments.report.report_set import REPORT_MARKER, report_state
from experiments.report.tables import (
    Job,
    comparison_frame,
    load_sweep,
    scheduler_pivot,
    terminal_summary,
    write_report,
)
from experiments.results.job_folder import commit_run
from experiments.results.sinks import temp_path

ROOT = Path(__file__).resolve().parents[1]
SET = ("comparison.csv", "comparison.md", "side_by_side.md")


class Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs."""


def commit_job(d: Path, tag: str) -> None:
    """A committed ok job labelled `seed=<tag>` whose `completed` is `len(tag)`."""
    d.mkdir(parents=True, exist_ok=True)
    spools = (temp_path(d / "requests.parquet"), temp_path(d / "steps.parquet"))
    for p in spools:
        pq.write_table(pa.table({"tag": [tag]}), p)
    commit_run(d, *spools, {"status": "ok", "config_hash": f"hash-{tag}", "scheduler": "vllm",
                            "overrides": [f"seed={tag}"], "completed": len(tag)})


def kill_at(monkeypatch: pytest.MonkeyPatch, k: int) -> list[str]:
    """Raise `Killed` before the k-th file-system change (rename or delete)."""
    done: list[str] = []
    real_replace, real_unlink = os.replace, os.unlink

    def step(name: str, real: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if len(done) == k:
                raise Killed(f"killed before {name} #{k}")
            done.append(name)
            return real(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(os, "replace", step("replace", real_replace))
    monkeypatch.setattr(os, "unlink", step("unlink", real_unlink))
    return done


def seeds_in_set(d: Path) -> set[str]:
    """Which report each file of the set shows for job 0: 'bb' (job 0's new label) or
    'a'."""
    return {"bb" if "bb" in (d / n).read_text() else "a" for n in SET if (d / n).exists()}


def test_a_kill_anywhere_in_write_report_leaves_no_mixed_set_that_checks_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    k = 0
    while True:
        sweep = tmp_path / f"k{k}"
        commit_job(sweep / "0", "a")
        commit_job(sweep / "1", "z")
        write_report(sweep, figures=False)
        assert report_state(sweep).state == "ok"
        commit_job(sweep / "0", "bb")  # job 0 ran again: the report is now stale
        assert report_state(sweep).state == "stale"
        with monkeypatch.context() as m:
            done = kill_at(m, k)
            try:
                write_report(sweep, figures=False)
                finished = True
            except Killed:
                finished = False
        state = report_state(sweep)
        if state.state == "ok":  # the new set, whole
            assert seeds_in_set(sweep) == {"bb"}, (k, done)
        elif state.state == "stale":  # killed before anything was withdrawn: the old set
            assert seeds_in_set(sweep) == {"a"} and not done, (k, done)
        elif state.state == "none":  # withdrawn, nothing new yet
            assert not seeds_in_set(sweep), (k, done)
        else:
            assert state.state == "incomplete", (k, state)
        if finished:
            break
        k += 1
    assert k > 5  # the kills hit the withdrawal, every file and the marker


def test_the_report_command_redoes_a_stale_set_and_check_refuses_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = tmp_path / "sweep"
    commit_job(sweep / "0", "a")
    commit_job(sweep / "1", "z")
    report_main([str(sweep), "--no-figures"])
    commit_job(sweep / "0", "bb")
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        report_main([str(sweep), "--check"])
    assert stop.value.code == 1
    assert capsys.readouterr().out.strip() == (
        f"report in {sweep}: stale (made from other job results: job 0 has a new result)")
    report_main([str(sweep), "--no-figures"])
    assert capsys.readouterr().out.startswith(
        f"the report in {sweep} was stale (made from other job results: job 0 has a new "
        "result): writing it anew")
    with open(sweep / "comparison.csv") as f:
        assert [r["seed"] for r in csv.DictReader(f)] == ["bb", "z"]
    with pytest.raises(SystemExit) as stop:
        report_main([str(sweep), "--check"])
    assert stop.value.code == 0
    marker = json.loads((sweep / REPORT_MARKER).read_text())
    assert set(marker["jobs"]) == {"0", "1"} and set(SET) <= set(marker["files"])


def config_hash(d: Path) -> str | None:
    """The config hash of the summary in `d` (None while a commit has withdrawn it)."""
    try:
        return str(json.loads((d / "summary.json").read_text())["config_hash"])
    except (OSError, ValueError):
        return None


def rows(sweep: Path) -> dict[str, dict[str, str]]:
    with open(sweep / "comparison.csv") as f:
        return {r["job"]: r for r in csv.DictReader(f)}


def test_a_resumed_sweep_killed_midway_shows_no_earlier_report(tmp_path: Path) -> None:
    """kill -9 of a `resume=true` re-run with a new seed once it has committed a job: the
    first invocation's comparison is not left beside the new job results."""
    sweep = tmp_path / "sweep"
    args = [sys.executable, "-m", "experiments.run", "-m", f"hydra.sweep.dir={sweep}",
            "hydra.callbacks.comparison.figures=false", "progress=off", "resume=true",
            "scheduler=vllm", "workload.request_rate=200", "workload.prompt_len.mean=100",
            "workload.output_len.mean=20"]
    env = {**os.environ, "CI": "1"}
    first = subprocess.run([*args, "workload.num_requests=12,13"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr[-2000:]
    assert report_state(sweep).state == "ok"
    old = json.loads((sweep / "0" / "summary.json").read_text())["config_hash"]
    # job 1 replays many more requests: the kill lands while it runs
    proc = subprocess.Popen([*args, "seed=1", "workload.num_requests=12,2000000"], cwd=ROOT,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 60
        while config_hash(sweep / "0") in (old, None):
            assert proc.poll() is None and time.monotonic() < end, "job 0 did not re-run"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not any((sweep / n).exists() for n in (*SET, REPORT_MARKER)), \
        "the first invocation's report is still there"
    report_main([str(sweep), "--no-figures"])
    # the report of the folders as they are: job 0 re-run, job 1 still the first run's
    assert [(r["seed"], r["workload.num_requests"]) for r in rows(sweep).values()] == [
        ("1", "12"), ("", "13")]
    assert report_state(sweep).state == "ok"


def test_one_job_cut_off_before_its_summary_is_listed_incomplete(tmp_path: Path) -> None:
    job = tmp_path / "job"
    (job / ".hydra").mkdir(parents=True)
    (job / ".schedbench.lock").write_text("")
    (job / f".requests.parquet.{os.getpid()}.0123456789ab.tmp").write_bytes(b"PAR1")
    res = load(job)
    assert res.jobs["status"].tolist() == ["incomplete"]
    assert res.requests.empty and res.steps.empty
    (only,) = load_sweep(job)
    assert only.summary["status"] == "incomplete"
    assert "incomplete" in write_report(job, figures=False)["comparison.md"].read_text()


def job(num: int, sched: str, rate: str, status: str = "ok") -> Job:
    summary: dict[str, Any] = {"status": status, "scheduler": sched}
    if status == "ok":
        summary.update(num_preemptions=3, median_e2el_ms=120.0)
    else:
        summary["error"] = "FileNotFoundError: no trace"
    return Job(Path(str(num)), num, {"scheduler": sched, "workload.rate_scale": rate}, summary)


def test_every_table_shows_each_jobs_status_when_one_failed() -> None:
    jobs = [job(i, s, r, "failed" if i < 7 else "ok")
            for i, (s, r) in enumerate((s, r) for r in "1234" for s in ("vllm", "sglang"))]
    params = ["scheduler", "workload.rate_scale"]
    pivot = scheduler_pivot(comparison_frame(jobs, params), params)
    assert pivot is not None
    assert list(pivot.columns[1:3]) == ["status[vllm]", "status[sglang]"]
    assert pivot["status[vllm]"].tolist() == ["failed", "failed", "failed", "failed"]
    assert pivot["status[sglang]"].tolist() == ["failed", "failed", "failed", "ok"]
    text = terminal_summary(jobs, width=400)  # one block, headers unwrapped
    assert "vllm status" in text and "sglang status" in text
    assert text.count("failed") >= 7
    done = [job(i, s, r) for i, (s, r) in enumerate((s, r) for r in "12" for s in ("a", "b"))]
    pivot = scheduler_pivot(comparison_frame(done, params), params)
    assert pivot is not None and not any(str(c).startswith("status") for c in pivot.columns)
