"""Per-readmission prefix recovery (experiments/report/recovery.py)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from experiments.report.recovery import readmissions, share_cdf
from experiments.results.metrics import _recovered


def _requests() -> pd.DataFrame:
    return pd.DataFrame({
        "job": [0, 0, 0, 1],
        "scheduler": ["vllm", "vllm", "vllm", "sglang"],
        "workload.load": [1.0, 1.0, 1.0, 2.0],
        "request_id": ["a", "b", "c", "d"],
        "prompt_len": [100, 50, 40, 30],
        "token_times": [[0.1], [0.2], [], [0.3]],
        # a: evicted twice, back both times; b: never evicted; c: evicted, never back;
        # d: evicted before computing anything, then back with a shared prefix hit
        "prefix_hit_tokens": [[0, 96, 16], [32], [0], [0, 16]],
        "computed_at_preemption": [[110, 64], [], [40], [0]],
    })


def test_one_row_per_readmission_paired_with_the_eviction_before_it() -> None:
    out = readmissions(_requests())
    assert out["request_id"].tolist() == ["a", "a", "d"]
    assert out["readmission"].tolist() == [1, 2, 1]
    assert out["computed"].tolist() == [110, 64, 0]
    assert out["hit"].tolist() == [96, 16, 16]
    # capped at what the victim had computed (d's shared prefix is not recovery)
    assert out["recovered"].tolist() == [96, 16, 0]
    share = out["recovered_share"].tolist()
    assert share[0] == 96 / 110 and share[1] == 16 / 64 and math.isnan(share[2])


def test_carries_the_request_and_sweep_columns_but_not_the_lists() -> None:
    out = readmissions(_requests())
    assert out["workload.load"].tolist() == [1.0, 1.0, 2.0]
    assert out["scheduler"].tolist() == ["vllm", "vllm", "sglang"]
    assert "token_times" not in out and "prefix_hit_tokens" not in out


def test_readmissions_add_up_to_the_summary_totals() -> None:
    req = _requests()
    batch = pa.RecordBatch.from_pandas(
        req.assign(num_preemptions=[len(x) for x in req["computed_at_preemption"]])[
            ["num_preemptions", "prefix_hit_tokens", "computed_at_preemption"]],
        preserve_index=False)
    readm = readmissions(req)
    # the summary's prefix_recovery_on_resume is over the same readmissions
    assert _recovered(batch) == (int(readm["recovered"].sum()), int(readm["computed"].sum()),
                                 len(readm)) == (112, 174, 3)


def test_no_readmission_gives_an_empty_frame_with_the_columns() -> None:
    out = readmissions(_requests().iloc[[1, 2]])
    assert out.empty and {"readmission", "recovered_share", "request_id"} <= set(out.columns)


def test_missing_list_column_is_named() -> None:
    with pytest.raises(KeyError, match="computed_at_preemption"):
        readmissions(_requests().drop(columns="computed_at_preemption"))


def test_share_cdf() -> None:
    grid = np.array([0.0, 0.5, 1.0])
    assert share_cdf(np.array([0.0, 0.25, 1.0, math.nan]), grid).tolist() == [
        1 / 3, 2 / 3, 1.0]
    assert np.isnan(share_cdf(np.array([math.nan]), grid)).all()
