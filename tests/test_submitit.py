"""The Slurm path (hydra-submitit-launcher) run in its local mode: each job in its own
process, started and awaited by submitit, the comparison written by the launching process."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_two_job_sweep_through_the_submitit_local_launcher(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.run", "-m", "hydra/launcher=submitit_local",
         "hydra.launcher.timeout_min=5", f"hydra.sweep.dir={sweep}", "workload.num_requests=12",
         "workload.request_rate=200", "kv_capacity_tokens=4096",
         "hydra.callbacks.comparison.figures=false"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "CI": "true"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(sweep / "comparison.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["scheduler"], r["status"], r["completed"]) for r in rows] == [
        ("vllm", "ok", "12"), ("sglang", "ok", "12")]
    assert "Median E2EL (ms)" in proc.stdout  # the launching process printed the table
    # each job ran under submitit (its own process and log), as on a Slurm node
    logs = sorted((sweep / ".submitit").glob("*/*_log.out"))
    assert len(logs) == 2
    printed = "".join(p.read_text() for p in logs)
    assert "[job 0 | vllm] vllm: 12 of 12 done" in printed
    assert "[job 1 | sglang] sglang: 12 of 12 done" in printed
    for job in ("0", "1"):
        assert json.loads((sweep / job / "summary.json").read_text())["status"] == "ok"


def test_the_readme_slurm_command_composes() -> None:
    import re
    import shlex

    from experiments.run.config import compose_run_config

    text = (ROOT / "README.md").read_text()
    block = re.search(r"```\n(python -m experiments.run -m experiment=preemption "
                      r"hydra/launcher=slurm.*?)```", text, re.S)
    assert block, "README: the Slurm command is missing"
    args = shlex.split(block.group(1).replace("\\\n", " "))[4:]
    cfg = compose_run_config(args, str(ROOT / "conf"), return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert (launcher.partition, launcher.account, launcher.timeout_min) == ("cpu", "my_project",
                                                                           30)
    assert list(launcher.setup) == ["source .venv/bin/activate"]
