"""Malformed input is refused before the run, naming file, line, field and value; silent
changes of the input are errors or logged, counted changes (issue 15, items 7-9)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import compose_config
from omegaconf import DictConfig

from experiments.inputs.input_changes import ContextCapCounter
from experiments.inputs.traces import TraceError, read_trace
from experiments.inputs.workloads import stream_workload
from experiments.inputs.workloads.arrivals import check_rate
from experiments.run.config import explain_override_error
from experiments.run.main import CONF_DIR, validate_run_config
from schedulers.contract import Request
from schedulers.vllm import VllmSchedulerConfig

AZURE_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
ROW = "2023-11-16 18:15:46.6805900,374,44\n"


def mooncake(tmp_path: Path, *timestamps: str) -> Path:
    p = tmp_path / "m.jsonl"
    p.write_text("".join(f'{{"timestamp": {t}, "input_length": 10, "output_length": 5, '
                         f'"hash_ids": [1]}}\n' for t in timestamps))
    return p


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity", "1e300"])
def test_mooncake_timestamps_must_be_finite_and_plausible(tmp_path: Path, bad: str) -> None:
    p = mooncake(tmp_path, "0", "10", bad)
    with pytest.raises(TraceError, match=r"m\.jsonl:3: field 'timestamp'=") as e:
        list(read_trace("mooncake", p))
    assert e.value.line == 3 and e.value.field == "timestamp"
    # also before a run that keeps only a time window (the row used to be dropped silently)
    cfg = {"name": "mooncake", "trace_dir": str(tmp_path), "file": "m.jsonl",
           "time_window": [0, 1], "max_input_len": None}
    with pytest.raises(TraceError, match="timestamp"):
        stream_workload(cfg, 0)


@pytest.mark.parametrize(("row", "field"), [
    ("2023-11-16 18:15:50.9951690,1000000000000,44\n", "ContextTokens"),
    ("2023-11-16 18:15:50.9951690,396,1000000000\n", "GeneratedTokens"),
])
def test_lengths_beyond_any_context_are_refused(tmp_path: Path, row: str, field: str) -> None:
    p = tmp_path / "a.csv"
    p.write_text(AZURE_HEAD + ROW + row)
    with pytest.raises(TraceError, match=rf"a\.csv:3: field '{field}'=.*beyond any model"):
        list(read_trace("azure", p))


def test_non_utf8_bytes_and_huge_csv_fields_name_the_line(tmp_path: Path) -> None:
    p = tmp_path / "a.csv"
    p.write_bytes((AZURE_HEAD + ROW).encode() + b"2023-11-16 18:15:47.1,3\xff4,4\n")
    with pytest.raises(TraceError, match=r"a\.csv:3: is not UTF-8 text \(byte 0xff"):
        list(read_trace("azure", p))
    p.write_text(AZURE_HEAD + ROW + '2023-11-16 18:15:47.1,"' + "9" * 140_000 + '",4\n')
    with pytest.raises(TraceError, match=r"a\.csv:3: is not valid CSV \(field larger"):
        list(read_trace("azure", p))
    m = tmp_path / "m.jsonl"
    m.write_bytes(b'{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}\n'
                  b'{"timestamp": 1\xfe}\n')
    with pytest.raises(TraceError, match=r"m\.jsonl:2: is not UTF-8"):
        list(read_trace("mooncake", m))


def test_azure_time_zones_are_read_not_cut(tmp_path: Path) -> None:
    p = tmp_path / "a.csv"
    p.write_text(AZURE_HEAD + "2023-11-16 18:15:46.5+01:00,374,44\n"
                 "2023-11-16 17:15:47.5Z,396,109\n")
    recs = list(read_trace("azure", p))
    assert [r.arrival_s for r in recs] == [0.0, 1.0]  # the same instant base, 1 s later
    p.write_text(AZURE_HEAD + ROW + "2023-11-16 18:15:47.5+01:00,396,109\n")
    with pytest.raises(TraceError, match=r"a\.csv:3: field 'TIMESTAMP'=.*mixes stamps"):
        list(read_trace("azure", p))
    p.write_text(AZURE_HEAD + ROW + "2023-11-16 18:15:47.5 EST,396,109\n")
    with pytest.raises(TraceError, match=r"a\.csv:3: field 'TIMESTAMP'=.*not a timestamp"):
        list(read_trace("azure", p))


@pytest.mark.parametrize(("text", "why"), [("", "is empty"),
                                           ("input_length,output_length\n",
                                            "has a header but no rows"),
                                           ("input_length,output_length\n1,2\n\xe9\n",
                                            "is not UTF-8")])
def test_a_lengths_file_without_rows_is_named(tmp_path: Path, text: str, why: str) -> None:
    p = tmp_path / "l.csv"
    p.write_bytes(text.encode("latin-1"))
    cfg = {"name": "lengths", "trace_dir": str(tmp_path), "file": "l.csv"}
    with pytest.raises(TraceError, match=rf"l\.csv(:3)?: {why}"):
        stream_workload(cfg, 0)


def compose_cfg(*overrides: str) -> DictConfig:
    return compose_config(list(overrides))


@pytest.mark.parametrize(("override", "message"), [
    ("seed=-1", r"^seed=-1: out of range; valid: \[0, 2\^63-1\]$"),
    ("workload.seed=-3", r"^workload\.seed=-3: out of range; valid: \[0, 2\^63-1\]$"),
    ("+foo=1", r"unknown top-level key\(s\) foo"),
    ("slo.ttft=-1", r"^slo\.ttft=-1\.0: out of range; valid: \(0, 1e9\]$"),
    ("slo.tpot=0", r"^slo\.tpot=0\.0: out of range; valid: \(0, 1e9\]$"),
])
def test_run_config_values_are_checked(override: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate_run_config(compose_cfg(override))
    validate_run_config(compose_cfg())  # the defaults pass


def test_block_size_zero_is_named() -> None:
    with pytest.raises(ValueError, match=r"block_size=0: must be at least 1"):
        VllmSchedulerConfig.from_capacity(1024, block_size=0)


def test_hints_are_right() -> None:
    # a `???` value is missing, not an absent key: no "has no key 'file'" hint
    assert explain_override_error(["workload=lengths", "workload.file=x.csv"], CONF_DIR) is None
    assert "has no key 'fil'" in str(explain_override_error(
        ["workload=lengths", "workload.fil=x.csv"], CONF_DIR))
    # the hint's spelling parses on the command line
    with pytest.raises(ValueError, match=r"request_rate=inf on the command line") as e:
        check_rate("workload", -1.0, 1.0)
    hint = str(e.value).split("all at once: ")[1].split(" on the command line")[0]
    assert compose_cfg(f"workload.{hint}").workload.request_rate == float("inf")


def test_outputs_cut_at_the_context_are_counted() -> None:
    reqs = [Request(f"r{i}", [5] * 100, max_tokens=m) for i, m in enumerate((10, 5000, 924,
                                                                            925))]
    counter = ContextCapCounter(reqs, 1024)
    assert list(counter) == reqs and len(counter) == 4
    assert counter.report() == {"outputs_cut_at_context": 2}
    warning = counter.warning()
    assert warning is not None and warning.startswith("2 request(s)")
    assert "r1 (100 + 5000)" in warning
    assert ContextCapCounter(reqs[:1], 1024).warning() is None
    json.dumps(counter.report())
