"""`make reproduce` and `make check-reproduce` (issue 30 item 8): a missing trace stops
everything before a job runs; the runner prints each study's wall time and the total, and
stops at a missing or failing study; the check fails unless results/ is byte for byte what
git holds after the rerun, and names a committed file the rerun did not write (stale).
The shell scripts run in a scratch git repository with stand-in studies."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


def test_a_missing_trace_is_named_and_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    check = load_script("check_traces")
    files = check.trace_files()
    # every trace-replay preset, the inherited one (mooncake_conversation) included
    assert files["azure_conv"] == "azure2023/AzureLLMInferenceTrace_conv.csv"
    assert files["mooncake_conversation"] == "mooncake/conversation_trace_first1000.jsonl"
    assert "synthetic" not in files and "lengths" not in files
    (tmp_path / "azure2023").mkdir()
    (tmp_path / "azure2023" / "AzureLLMInferenceTrace_conv.csv").write_text("x\n")
    monkeypatch.setenv("SCHEDBENCH_TRACE_DIR", str(tmp_path))
    assert check.main(["azure_conv"]) == 0
    assert check.main([]) == 1
    err = capsys.readouterr().err
    assert "workload=azure_code" in err and "AzureLLMInferenceTrace_code.csv" in err
    assert "workload=azure_conv" not in err and "nothing was run" in err
    with pytest.raises(SystemExit, match="no trace-replay workload preset named"):
        check.main(["azure_cnov"])


def scratch_repo(tmp_path: Path, study: str) -> Path:
    """A git repository with the runner, the check and a stand-in `reproduce_a.sh`
    (`study`: its body), results/a/x.txt committed as `1`."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    for name in ("reproduce_all.sh", "check_reproduce.sh", "_wall_time.sh", "holdout_check.sh"):
        shutil.copy2(ROOT / "scripts" / name, repo / "scripts" / name)
    script = repo / "scripts" / "reproduce_a.sh"
    script.write_text("#!/usr/bin/env bash\nset -e\ncd \"$(dirname \"$0\")/..\"\n" + study)
    script.chmod(0o755)
    (repo / "results" / "a").mkdir(parents=True)
    (repo / "results" / "a" / "x.txt").write_text("1\n")
    (repo / "results" / "a" / "README.md").write_text("by hand\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "results"], check=True)
    return repo


def sh(repo: Path, script: str, studies: str = "a") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STUDIES": studies, "PYTHON": "true"}  # `true`: traces present
    return subprocess.run([str(repo / "scripts" / script)], cwd=repo, capture_output=True,
                          text=True, timeout=120, env=env)


def test_the_check_passes_when_the_rerun_writes_the_same_bytes(tmp_path: Path) -> None:
    repo = scratch_repo(tmp_path, "echo 1 > results/a/x.txt\n")
    proc = sh(repo, "check_reproduce.sh")
    assert proc.returncode == 0, proc.stderr
    assert "a: 0 s" in proc.stdout or "a: 1 s" in proc.stdout  # each study's wall time
    assert "reproduce:" in proc.stdout and "CPU cores" in proc.stdout  # and the total
    assert "holdout_check: " in proc.stdout  # the held-out windows last (none of study a)
    assert "byte for byte as committed" in proc.stdout


@pytest.mark.parametrize(("study", "says"), [
    ("echo 2 > results/a/x.txt\n", "NOT byte for byte"),
    ("echo 1 > results/a/x.txt\necho new > results/a/y.txt\n", "?? results/a/y.txt"),
    ("true\n", "(stale):\n  results/a/x.txt"),  # README.md, by hand, is no stale file
])
def test_the_check_fails_on_other_bytes_new_files_and_stale_ones(
        tmp_path: Path, study: str, says: str) -> None:
    proc = sh(scratch_repo(tmp_path, study), "check_reproduce.sh")
    assert proc.returncode == 1 and says in proc.stderr, proc.stderr
    assert "README" not in proc.stderr


def test_the_runner_stops_at_a_missing_or_failing_study(tmp_path: Path) -> None:
    repo = scratch_repo(tmp_path, "exit 3\n")
    proc = sh(repo, "reproduce_all.sh", "a b")
    assert proc.returncode == 1 and "reproduce_b.sh is missing" in proc.stderr
    proc = sh(repo, "reproduce_all.sh", "a")
    assert proc.returncode == 3 and "reproduce_a.sh failed (exit 3)" in proc.stderr
    (repo / "results" / "a" / "x.txt").write_text("dirty\n")
    proc = sh(repo, "check_reproduce.sh")  # a results/ that differs before: nothing runs
    assert proc.returncode == 1 and "before the rerun" in proc.stderr
