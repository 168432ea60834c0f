"""`executor=real` through the Hydra entry point: a tiny checkpoint, tokens in requests.parquet."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

from engines.model.tiny import save_tiny_checkpoint

ROOT = Path(__file__).resolve().parents[1]


def test_real_executor_run_writes_output_token_ids(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    save_tiny_checkpoint(ckpt)
    out = tmp_path / "run"
    subprocess.run(
        [sys.executable, "-m", "experiments.run", "executor=real",
         f"executor.model_path={ckpt}", "executor.kernel=torch", "scheduler=sglang",
         "workload.num_requests=6", "workload.vocab_size=256", "kv_capacity_tokens=256",
         "workload.prompt_len={dist:uniform,low:8,high:24}",
         "workload.output_len={dist:uniform,low:2,high:12}", f"hydra.run.dir={out}"],
        cwd=ROOT, check=True, capture_output=True, text=True, env={**os.environ, "CI": "true"})
    df = pd.read_parquet(out / "requests.parquet")
    assert len(df) == 6
    assert (df["output_token_ids"].map(len) == df["output_len"]).all()
    assert all(0 <= t < 256 for toks in df["output_token_ids"] for t in toks)

