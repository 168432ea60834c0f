"""`executor=real model=smollm2_135m` through the Hydra entry point: the model config names its
checkpoint (no executor.model_path), summary.json names the model (the checkpoint's
`_name_or_path`, written by scripts/build_smollm2.py), requests.parquet holds the output text;
without a built checkpoint the error names `make model`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from experiments.run.config import compose_run_config
from experiments.run.preflight import ConfigError, check_real_executor, resolve_model_path
from tests.real_model import ROOT, real_model_test


def compose(overrides: list[str]) -> Any:
    return compose_run_config(overrides, str(ROOT / "conf"))


def test_model_group_names_the_checkpoint_for_executor_real() -> None:
    cfg = compose(["executor=real", "model=smollm2_135m"])
    assert cfg.executor.model_path == "models/smollm2-135m-instruct"
    assert (resolve_model_path(cfg.executor.model_path).resolve()
            == (ROOT / "models/smollm2-135m-instruct").resolve())
    # A model without a checkpoint leaves it unset: the preflight names what to set.
    bare = compose(["executor=real"])
    assert bare.executor.model_path is None
    with pytest.raises(ConfigError, match=r"executor=real needs executor.model_path.*"
                                          r"model=smollm2_135m"):
        check_real_executor(bare.executor)
    # The sim executor has no model_path; the model group still composes with it.
    assert "model_path" not in compose(["model=smollm2_135m"]).executor


def test_a_missing_checkpoint_names_make_model(tmp_path: Path) -> None:
    absent = tmp_path / "models" / "smollm2-135m-instruct"
    with pytest.raises(ConfigError, match=r"does not exist.*`make model`"):
        check_real_executor({"name": "real", "model_path": str(absent)})


@real_model_test
def test_executor_real_model_smollm2_needs_no_other_key(tmp_path: Path) -> None:
    out = tmp_path / "run"
    subprocess.run(
        [sys.executable, "-m", "experiments.run", "executor=real", "model=smollm2_135m",
         "workload=smollm2_prompts", "workload.num_requests=3", "workload.max_tokens=12",
         "workload.asks=2", f"hydra.run.dir={out}"],
        cwd=ROOT, check=True, capture_output=True, text=True,
        env={**os.environ, "CI": "true", "OMP_NUM_THREADS": "1"})
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert summary["model_path"] == "models/smollm2-135m-instruct"
    assert summary["executor"] == "real"
    df = pd.read_parquet(out / "requests.parquet")
    assert len(df) == 3 and all(t.strip() for t in df["output_text"])
    # Capitals and sums: short answers that end at the model's own EOS, before the cap.
    assert (df["finish_reason"] == "stop").any()
