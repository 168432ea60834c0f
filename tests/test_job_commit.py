"""A job's commit is all or nothing as resume and the report see it (issue 15, items 1-4).

Kills are injected before every file-system change of a commit (`os.replace`, `os.unlink`):
whatever the folder then holds, resume accepts a result only with the tables and summary of
one and the same run, and the report labels a job only by its own parameters.
"""

from __future__ import annotations

import csv
import json
import os
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from experiments.report.tables import load_sweep, write_report
from experiments.results.sinks import temp_path
from experiments.run import main as run_mod
from experiments.run.main import complete_result

FILES = ("requests.parquet", "steps.parquet", "summary.json")


class Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs (not even `except Exception`)."""


def spool(d: Path, tag: str) -> tuple[Path, Path]:
    """Two complete spooled tables marked with `tag`, as a replay leaves them."""
    paths = (temp_path(d / "requests.parquet"), temp_path(d / "steps.parquet"))
    for p in paths:
        pq.write_table(pa.table({"tag": [tag] * 3}), p)
    return paths


def summary(tag: str) -> dict[str, Any]:
    return {"status": "ok", "config_hash": f"hash-{tag}", "scheduler": "vllm", "tag": tag,
            "overrides": [f"seed={tag}"], "completed": 3}


def commit(d: Path, tag: str) -> None:
    run_mod.commit_run(d, *spool(d, tag), summary(tag))


def tags(d: Path) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in FILES:
        p = d / name
        if not p.exists():
            out[name] = None
        elif name == "summary.json":
            out[name] = json.loads(p.read_text())["tag"]
        else:
            out[name] = pq.read_table(p).column("tag")[0].as_py()
    return out


def check_accepted(d: Path, candidates: tuple[str, ...]) -> str | None:
    """What resume accepts must be one run's files only; returns that run's tag."""
    accepted = None
    for tag in candidates:
        s = complete_result(d, f"hash-{tag}")
        if s is not None:
            assert set(tags(d).values()) == {tag}, (tag, tags(d))
            accepted = tag
    return accepted


def kill_at(monkeypatch: pytest.MonkeyPatch, k: int) -> list[str]:
    """Raise `Killed` before the k-th file-system change (rename or delete)."""
    done: list[str] = []
    real_replace, real_unlink = os.replace, os.unlink

    def step(name: str, real: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if len(done) == k:
                raise Killed(f"killed before {name} #{k}")
            done.append(f"{name} {args[-1] if name == 'replace' else args[0]}")
            return real(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(os, "replace", step("replace", real_replace))
    monkeypatch.setattr(os, "unlink", step("unlink", real_unlink))
    return done


def test_a_kill_at_every_commit_point_never_pairs_old_and_new(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    k = 0
    while True:
        d = tmp_path / f"k{k}"
        d.mkdir()
        commit(d, "old")
        assert check_accepted(d, ("old", "new")) == "old"
        with monkeypatch.context() as m:
            done = kill_at(m, k)
            try:
                commit(d, "new")
                finished = True
            except Killed:
                finished = False
        got = check_accepted(d, ("old", "new"))
        if finished:
            assert got == "new" and tags(d) == dict.fromkeys(FILES, "new")
            assert k >= 4, done  # at least: three files moved in and a marker
            break
        # cut off mid-commit: never the new result; the old one only if all of it is there
        assert got in (None, "old"), (k, done, tags(d))
        states = {j.summary.get("status") for j in load_sweep(tmp_path) if j.path == d}
        assert states <= {"ok", "incomplete", "inconsistent"}
        k += 1


def test_resume_refuses_truncated_empty_or_replaced_files(tmp_path: Path) -> None:
    for damage in ("truncate", "empty", "swap", "garbage_summary", "delete"):
        d = tmp_path / damage
        d.mkdir()
        commit(d, "a")
        assert complete_result(d, "hash-a") is not None
        p = d / "requests.parquet"
        if damage == "truncate":
            p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
        elif damage == "empty":
            p.write_bytes(b"")
        elif damage == "swap":  # a whole, readable table of another run
            pq.write_table(pa.table({"tag": ["b"] * 3}), p)
        elif damage == "garbage_summary":
            (d / "summary.json").write_text('{"status": "ok", "config_hash": "hash-a"}')
        else:
            (d / "steps.parquet").unlink()
        assert complete_result(d, "hash-a") is None, damage


def test_report_labels_a_job_by_its_own_summary_not_hydra_overrides(tmp_path: Path) -> None:
    for num, tag in ((0, "1"), (1, "2")):
        d = tmp_path / str(num)
        (d / ".hydra").mkdir(parents=True)
        commit(d, tag)
    # An interrupted re-sweep: Hydra rewrote job 1's overrides.yaml, the run never finished.
    (tmp_path / "1" / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["seed=7"]))
    # job 2 started and was cut off before any result; job 3's summary was edited afterwards
    (tmp_path / "2" / ".hydra").mkdir(parents=True)
    (tmp_path / "2" / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["seed=9"]))
    d3 = tmp_path / "3"
    (d3 / ".hydra").mkdir(parents=True)
    commit(d3, "3")
    (d3 / "summary.json").write_text(json.dumps({**summary("3"), "completed": 99}))
    jobs = {j.num: j for j in load_sweep(tmp_path)}
    assert jobs[0].overrides == {"seed": "1"} and jobs[1].overrides == {"seed": "2"}
    assert jobs[1].summary["tag"] == "2"
    assert jobs[2].summary["status"] == "incomplete" and not jobs[2].overrides
    assert jobs[3].summary["status"] == "inconsistent" and "completed" not in jobs[3].summary
    out = tmp_path / "report"
    write_report(tmp_path, out, figures=False)
    with open(out / "comparison.csv") as f:
        rows = {r["job"]: r for r in csv.DictReader(f)}
    assert [rows[k]["seed"] for k in "0123"] == ["1", "2", "", ""]
    assert [rows[k]["status"] for k in "0123"] == ["ok", "ok", "incomplete", "inconsistent"]
    assert rows["1"]["completed"] == "3" and rows["3"]["completed"] == ""
    side = (out / "side_by_side.md").read_text()
    assert "| 2 (incomplete) | 3 (inconsistent) |" in side


def test_a_failed_job_keeps_no_older_tables(tmp_path: Path) -> None:
    commit(tmp_path, "old")
    failed = {"status": "failed", "config_hash": "hash-x", "error": "ValueError: boom",
              "overrides": ["seed=x"]}
    run_mod.commit_failure(tmp_path, failed)
    assert not (tmp_path / "requests.parquet").exists()
    assert not (tmp_path / "steps.parquet").exists()
    assert complete_result(tmp_path, "hash-old") is None
    assert run_mod.verify_folder(tmp_path).state == "failed"


@pytest.mark.parametrize("seed", range(3))
def test_fuzz_commit_resume_report_sequences(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             seed: int) -> None:
    """Random commits, failures, kills mid-commit and damage, each followed by the checks of
    resume and the report: an accepted result is always one run's own files."""
    rng = random.Random(seed)
    sweep = tmp_path
    d = sweep / "0"
    (d / ".hydra").mkdir(parents=True)
    tagset = ("a", "b", "c")
    for _ in range(60):
        op = rng.choice(("commit", "commit", "fail", "kill", "damage", "hydra"))
        tag = rng.choice(tagset)
        if op == "commit":
            commit(d, tag)
            assert check_accepted(d, tagset) == tag
        elif op == "fail":
            run_mod.commit_failure(d, {"status": "failed", "config_hash": f"hash-{tag}",
                                       "error": "E: x", "overrides": [f"seed={tag}"]})
            assert check_accepted(d, tagset) is None
        elif op == "kill":
            with monkeypatch.context() as m:
                kill_at(m, rng.randrange(8))
                try:
                    if rng.random() < 0.5:
                        commit(d, tag)
                    else:
                        run_mod.commit_failure(d, {"status": "failed",
                                                   "config_hash": f"hash-{tag}",
                                                   "error": "E: x", "overrides": []})
                except Killed:
                    pass
        elif op == "damage":
            victims = [p for p in d.iterdir() if p.is_file()]
            if victims:
                p = rng.choice(victims)
                p.write_bytes(p.read_bytes()[: rng.randrange(max(1, p.stat().st_size))])
        else:
            (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"seed={tag}"]))
        accepted = check_accepted(d, tagset)
        (job,) = load_sweep(sweep)
        status = job.summary.get("status")
        if status == "ok":
            assert accepted is not None and job.overrides == {"seed": accepted}
            assert job.summary["tag"] == accepted
        else:
            assert accepted is None
            assert status in ("failed", "incomplete", "inconsistent")
