"""docs/CONFIG.md is generated from the structured configs and kept up to date."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.run.config import SCHEDULER_SCHEMAS, WandbConfig
from experiments.run.config_docs import DOC_PATH, generate
from schedulers import registry

ROOT = Path(__file__).resolve().parents[1]


def test_config_reference_is_up_to_date_and_complete(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCHEDBENCH_TRACE_DIR", "/somewhere/else")  # not this machine's values
    text = generate()
    assert DOC_PATH.read_text() == text, "run: python -m experiments.run.config_docs"
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert rows and all(not line.rstrip().endswith("|  |") for line in rows), [
        line for line in rows if line.rstrip().endswith("|  |")]
    for name in [n for n in registry.all_names() if not registry.get(n).test_only]:
        schema = SCHEDULER_SCHEMAS[name]
        assert f"### `scheduler={name}`" in text
        for f in dataclasses.fields(schema):
            if f.name != "name":
                assert f"| `scheduler.{f.name}` |" in text
    for f in dataclasses.fields(WandbConfig):
        if f.name != "name":
            assert f"| `logger.{f.name}` |" in text
    assert ("| `scheduler.max_num_seqs` | int \\| None | [1, 2^20] | `null` | most requests "
            "running at once |") in text
    assert ("| `kv_capacity_tokens` | Any | auto (the pool vLLM leaves on the hardware) or "
            "[1, 2^26] | `auto` |") in text
    # issue 24, item 5: every numeric key shows its declared range
    numeric = [row for row in rows if row.split(" | ")[1].split(" ")[0] in ("int", "float")]
    assert len(numeric) > 150 and all(row.split(" | ")[2] for row in numeric), [
        row for row in numeric if not row.split(" | ")[2]]
    assert "| `scheduler.chunked_prefill_size` | int \\| None | -1 (off) or [1, 2^24] |" in text
    assert "| `workload.request_rate` | float | inf (all at t=0) or [0.0001, 1e9] |" in text
    assert "`experiment=preemption`" in text and "`hydra/launcher=slurm`" in text
    assert "docs/CONFIG.md" in (ROOT / "README.md").read_text()


def test_run_help_prints_the_reference() -> None:
    proc = subprocess.run([sys.executable, "-m", "experiments.run", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CI": "true"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "== Configuration groups ==" in proc.stdout
    assert "# Configuration reference" in proc.stdout
    assert "| `workload.rate_scale` |" in proc.stdout
    # issue 25, item 8: the schemas (base_*) are not options
    groups = proc.stdout.split("== Configuration groups ==", 1)[1].split("== Config ==", 1)[0]
    options = sorted(p.stem for p in (ROOT / "conf" / "scheduler").glob("*.yaml"))
    assert f"scheduler: {', '.join(options)}" in groups
    assert "base_" not in groups


def test_scheduler_target_is_documented_as_running_code() -> None:
    """Issue 24, item 13: `scheduler.target` imports and calls what a config names; the
    reference and the README say so, as for Hydra's `_target_`."""
    text = generate()
    scheduler = text.split("## `scheduler`", 1)[1].split("\n## ", 1)[0]
    assert "**Runs code named in the config**: `+scheduler.target=package.module:factory`" \
        in scheduler
    assert "Hydra's `_target_`" in scheduler and "trust" in scheduler
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert ("`+scheduler.target=package.module:factory` imports that module and calls "
            "`factory(kv_capacity_tokens, **the other scheduler keys)`. This runs code named "
            "in a config, as Hydra's `_target_` does") in readme
