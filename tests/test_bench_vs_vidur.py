"""scripts/bench_vs_vidur.py: the workload is Vidur 0.0.26's, and a tiny round runs end to end.

The expected values were printed by vidur 0.0.26's own TraceRequestLengthGenerator
(max_tokens=4096, seed 42) on data/processed_traces/splitwise_conv.csv and its
PoissonRequestIntervalGenerator (qps 5.5) after set_seeds(42).
"""

from __future__ import annotations

import csv
import itertools
import json
from pathlib import Path

import pytest
from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "data" / "traces"
needs_trace = pytest.mark.skipif(
    not (TRACES / "azure2023" / "AzureLLMInferenceTrace_conv.csv").exists(),
    reason="traces not available")


def _bench():  # type: ignore[no-untyped-def]
    return load_script("bench_vs_vidur")


def test_arrivals_are_vidurs_poisson() -> None:
    times = _bench().vidur_arrivals(19366)
    assert times[:2] == [0.18546550677723656, 0.19007075023955272]
    assert times[-1] == pytest.approx(3355.135595517914, abs=1e-9)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert max(gaps) <= 3 / 5.5 + 1e-12  # Vidur caps a gap at three mean gaps


@needs_trace
def test_pairs_are_vidurs_clip_and_order() -> None:
    pairs = _bench().vidur_pairs(TRACES / "azure2023" / "AzureLLMInferenceTrace_conv.csv")
    assert len(pairs) == 19366
    assert pairs[:3] == [(395, 112), (1030, 403), (389, 120)]
    assert pairs[-1] == (77, 98)
    # clipped pairs, as vidur printed them: the excess leaves both sides in proportion
    assert [pairs[i] for i in (18, 32, 54)] == [(4050, 45), (4048, 47), (4031, 64)]
    assert max(p + d for p, d in pairs) == 4095


@needs_trace
def test_one_small_round(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SCHEDBENCH_TRACE_DIR", str(TRACES))
    bench = _bench()
    assert bench.main(["--rounds", "1", "--max-requests", "30", "--schedulers", "vllm",
                       "--cores", "python", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "workload: 30 requests" in out and "vllm" in out
    with open(tmp_path / "vidur_conv_pairs.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 30 and list(rows[0]) == ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
    assert (tmp_path / "round0" / "vllm" / "requests.parquet").is_file()


def test_each_loop_is_given_by_its_override() -> None:
    """The bench names the loop of every run explicitly (never the config's default)."""
    bench = _bench()
    pairs, job = Path("p.csv"), Path("j")
    assert bench.our_command("vllm", pairs, job, 1)[-1] == "scheduler.async_scheduling=false"
    assert bench.our_command("vllm", pairs, job, 1, loop="pipelined")[-1] == \
        "scheduler.async_scheduling=true"
    assert bench.our_command("sglang", pairs, job, 1)[-1] == \
        "scheduler.disable_overlap_schedule=true"
    assert bench.our_command("sglang", pairs, job, 1, loop="pipelined")[-1] == \
        "scheduler.disable_overlap_schedule=false"
    with pytest.raises(SystemExit):
        bench.main(["--loops", "async"])


@needs_trace
def test_a_round_of_both_loops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SCHEDBENCH_TRACE_DIR", str(TRACES))
    bench = _bench()
    assert bench.main(["--rounds", "1", "--max-requests", "20", "--schedulers", "sglang",
                       "--cores", "python", "--loops", "sync,pipelined",
                       "--out", str(tmp_path), "--json", str(tmp_path / "rows.json")]) == 0
    out = capsys.readouterr().out
    assert "sglang-overlap / sglang = " in out
    rows = {r["who"]: r for r in json.loads((tmp_path / "rows.json").read_text())}
    assert rows["sglang"]["engine_loop"] == "synchronous"
    assert rows["sglang-overlap"]["engine_loop"] == "overlap"
