"""docs/METRICS.md defines every key a job writes to summary.json, in the section of the W&B
group that key lands in, and every series of the W&B history (issue 25: `prefix_cache_hit_rate`
beside `prefix_cache_hit_tokens` with no definition anywhere)."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import compose_config

from experiments.run.host_load import load_fields, sample_host_load
from experiments.run.main import run_experiment
from experiments.run.wandb_log import HISTORY, HISTORY_PREFIX, summary_key

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "METRICS.md"


def documented() -> dict[str, str]:
    """Each key a table row of METRICS.md defines -> the W&B group of its section."""
    out: dict[str, str] = {}
    group = ""
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            found = re.search(r"\(`([a-z_]+/)`", line)
            group = found.group(1) if found else ""
        elif line.startswith("| `"):
            first_cell = line.split("|")[1]
            out.update(dict.fromkeys(re.findall(r"`([a-z0-9_]+)`", first_cell), group))
    return out


def job_summary(tmp_path: Path) -> dict[str, object]:
    cfg = compose_config([
        "workload.num_requests=40", "workload.request_rate=400",
        "kv_capacity_tokens=2048", "progress=off"])
    return run_experiment(cfg, tmp_path / "job")


def test_every_summary_key_is_defined_in_the_section_of_its_wandb_group(tmp_path: Path
                                                                         ) -> None:
    summary = job_summary(tmp_path)
    doc = documented()
    # `error`: a failed job's; the host's load: a real run's (experiments/run/host_load.py)
    sample = sample_host_load()
    keys = [*summary, "error", *load_fields(sample, sample)]
    missing = sorted(k for k in keys if k not in doc)
    assert not missing, f"not defined in docs/METRICS.md: {missing}"
    misplaced = {k: (doc[k], summary_key(k).split("/")[0] + "/") for k in keys
                 if doc[k] != summary_key(k).split("/")[0] + "/"}
    assert not misplaced, f"documented under another W&B group: {misplaced}"
    text = DOC.read_text()
    assert "**first** admission" in text  # what prefix_cache_hit_rate leaves out, said


def test_every_history_series_is_named_in_the_metrics_doc() -> None:
    text = DOC.read_text()
    for key, _table, _column in HISTORY:
        assert f"`{key.removeprefix(HISTORY_PREFIX)}`" in text, key
