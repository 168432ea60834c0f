"""`executor=real model=smollm2_135m` through the Hydra entry point: the model config names its
checkpoint (no executor.model_path), summary.json names the model, requests.parquet holds the
output text; without a built checkpoint the error names `make model`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from engines.executors.specs import HardwareSpec, ModelSpec
from experiments.build import build_executor
from tests.real_model import ROOT, real_model_test

SMOLLM2 = dict(name="smollm2_135m", hidden_size=576, num_hidden_layers=30,
               num_attention_heads=9, num_key_value_heads=3, head_dim=64,
               intermediate_size=1536, vocab_size=49152, tie_word_embeddings=True)
CPU = HardwareSpec(name="cpu", peak_flops=1e11, memory_bandwidth=1e10, host_link_bandwidth=1e10)


def test_a_missing_checkpoint_names_make_model(tmp_path: Path) -> None:
    spec = ModelSpec(**SMOLLM2, checkpoint=str(tmp_path / "absent"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"model.checkpoint=.*absent.*`make model`"):
        build_executor({"name": "real"}, spec, CPU)


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
    assert summary["model"] == "smollm2_135m" and summary["executor"] == "real"
    df = pd.read_parquet(out / "requests.parquet")
    assert len(df) == 3 and all(t.strip() for t in df["output_text"])
    # Capitals and sums: short answers that end at the model's own EOS, before the cap.
    assert (df["finish_reason"] == "stop").any()
