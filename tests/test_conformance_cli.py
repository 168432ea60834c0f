"""The conformance CLI: replay writes a log, compare reports agreement and exits non-zero on a
difference, naming the first differing step with both sides' entries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.conformance.replay import main

CASES = Path(__file__).parent / "conformance"


def test_replay_then_compare_agrees(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ours = tmp_path / "ours.jsonl"
    assert main(["replay", str(CASES / "vllm" / "watermark.workload.jsonl.gz"),
                 "--out", str(ours)]) == 0
    assert main(["compare", str(CASES / "vllm" / "watermark.ref.jsonl.gz"), str(ours)]) == 0
    assert "every step agrees" in capsys.readouterr().out


def test_compare_names_the_first_difference(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    ours = tmp_path / "ours.jsonl"
    main(["replay", str(CASES / "vllm" / "watermark.workload.jsonl.gz"), "--out", str(ours)])
    lines = ours.read_text().splitlines()
    steps = [i for i, line in enumerate(lines) if json.loads(line)["type"] == "step"]
    rec = json.loads(lines[steps[7]])
    rec["scheduled"][0]["n"] += 1
    lines[steps[7]] = json.dumps(rec)
    ours.write_text("\n".join(lines) + "\n")
    assert main(["compare", str(CASES / "vllm" / "watermark.ref.jsonl.gz"), str(ours)]) == 1
    out = capsys.readouterr().out
    assert "first differing step: 7" in out and "reference:" in out and "ours:" in out


def test_compare_stops_at_an_oracle_stall(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    ours = tmp_path / "ours.jsonl"
    main(["replay", str(CASES / "sglang" / "stall_never_fits.workload.jsonl"), "--out", str(ours)])
    assert main(["compare", str(CASES / "sglang" / "stall_never_fits.ref.jsonl"), str(ours)]) == 0
    assert "reference stalled" in capsys.readouterr().out


def test_replay_rejects_a_reference_log_as_workload(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "w.jsonl"
    bad.write_text(json.dumps({"type": "config", "scheduler": "vllm", "num_blocks": 8}) + "\n"
                   + json.dumps({"type": "request", "id": "r0", "arrival_step": 0,
                                 "prompt": None, "max_tokens": 3}) + "\n")
    assert main(["replay", str(bad), "--out", str(tmp_path / "o.jsonl")]) == 2
    assert "field 'prompt' is null" in capsys.readouterr().err
