"""Mistakes on the command line caught before any job runs, each with one message that says
what is wrong and what to type: executor=real without a checkpoint, and a scheduler-specific
key in a sweep over both schedulers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engines.model.tiny import save_tiny_checkpoint
from experiments.run.preflight import ConfigError, check_real_executor, explain_scheduler_keys

ROOT = Path(__file__).resolve().parents[1]
CONF = str(ROOT / "conf")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "experiments.run", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=180,
                          env={**os.environ, "CI": "true"})


@pytest.mark.parametrize("extra,says", [
    ([], "error: executor=real needs executor.model_path: a Hugging Face checkpoint folder"),
    (["executor.model_path={tmp}"], "error: executor.model_path='{tmp}' is not a checkpoint: "
                                    "it has no config.json and no *.safetensors"),
    (["executor.model_path={tmp}/nowhere"], "error: executor.model_path='{tmp}/nowhere' does "
                                            "not exist"),
])
def test_real_executor_without_a_checkpoint_says_which(tmp_path: Path, extra: list[str],
                                                       says: str) -> None:
    out = tmp_path / "job"
    proc = run(f"hydra.run.dir={out}", "executor=real",
               *[e.format(tmp=tmp_path) for e in extra])
    assert proc.returncode == 1
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines == [lines[0]] and lines[0].startswith(says.format(tmp=tmp_path)), proc.stderr
    assert "Traceback" not in proc.stderr and "has no key" not in proc.stderr
    assert not (out / "summary.json").exists()


def test_check_real_executor_accepts_a_checkpoint_and_names_what_is_missing(
        tmp_path: Path) -> None:
    ckpt = save_tiny_checkpoint(tmp_path / "llama", "llama", seed=0)
    assert check_real_executor({"name": "real", "model_path": str(ckpt)}) == ckpt
    (ckpt / "config.json").unlink()
    with pytest.raises(ConfigError, match=r"is not a checkpoint: it has no config.json;"):
        check_real_executor({"name": "real", "model_path": str(ckpt)})
    with pytest.raises(ConfigError, match=r"is a file, not a folder"):
        check_real_executor({"name": "real", "model_path": str(next(ckpt.iterdir()))})


def test_a_vllm_key_in_the_default_sweep_gets_the_projects_explanation(
        tmp_path: Path) -> None:
    proc = run("-m", "scheduler.max_num_seqs=64", f"hydra.sweep.dir={tmp_path}")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "error: override 'scheduler.max_num_seqs=64': max_num_seqs is a setting of the vllm "
        "scheduler; this command runs vllm, sglang, and sglang has no key 'max_num_seqs'.",
        "  Fix the scheduler:  -m scheduler=vllm scheduler.max_num_seqs=64",
        "  sglang's closest setting is scheduler.max_running_requests (in its own sweep: "
        "-m scheduler=sglang scheduler.max_running_requests=...)"]
    assert "+scheduler" not in proc.stderr
    assert not any(tmp_path.iterdir())  # nothing ran


@pytest.mark.parametrize("argv,problem", [
    (["-m", "scheduler.page_size=4"], "page_size is a setting of the sglang scheduler; this "
                                      "command runs vllm, sglang, and vllm has no key"),
    (["scheduler.page_size=4"], "this command runs vllm, and vllm has no key 'page_size'"),
    (["scheduler=sglang", "scheduler.max_num_seqs=4"], "runs sglang, and sglang has no key"),
    (["-m", "experiment=preemption", "scheduler.block_size=32"], "runs vllm, sglang"),
    (["-m", "scheduler.context_length=2048"], "use the top-level key, e.g. max_model_len=2048"),
    (["-m", "scheduler=vllm", "scheduler.max_num_seqs=64"], None),
    (["-m", "scheduler=sglang", "scheduler.page_size=1,16"], None),
    (["-m", "scheduler.victim_policy=most_kv"], None),  # both schedulers have it
    (["scheduler.max_num_seqs=4"], None),
    (["-m", "experiment=prefix_recovery", "scheduler=vllm", "scheduler.watermark=0.05"], None),
    (["-m", "experiment=prefix_recovery", "scheduler.watermark=0.05"], "runs vllm, sglang"),
    (["scheduler.max_seqs=4"], None),  # a typo: explain_override_error lists the valid keys
])
def test_explain_scheduler_keys(argv: list[str], problem: str | None) -> None:
    got = explain_scheduler_keys(argv, CONF)
    if problem is None:
        assert got is None
    else:
        assert got is not None and problem in got, got
