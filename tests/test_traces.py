"""Trace readers: the real files parse, and each malformed input names file, line, field, value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.inputs.traces import (
    TraceError,
    mooncake_prompt,
    read_trace,
    spread_ticks,
    validate_trace,
)

TRACES = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"
needs_traces = pytest.mark.skipif(not TRACES.is_dir(), reason="../shared/data/traces absent")


@needs_traces
@pytest.mark.parametrize(("kind", "rel", "rows"), [
    ("azure", "azure2023/AzureLLMInferenceTrace_conv.csv", 19366),
    ("azure", "azure2023/AzureLLMInferenceTrace_code.csv", 8819),
    ("mooncake", "mooncake/synthetic_trace.jsonl", 3993),
    ("mooncake", "mooncake/conversation_trace_first1000.jsonl", 1000),
])
def test_real_traces_parse(kind: str, rel: str, rows: int) -> None:
    assert validate_trace(kind, TRACES / rel) == rows


@needs_traces
def test_azure_arrivals_are_relative_seconds() -> None:
    recs = list(read_trace("azure", TRACES / "azure2023/AzureLLMInferenceTrace_conv.csv"))
    assert recs[0].arrival_s == 0.0
    assert recs[1].arrival_s == pytest.approx(4.314579)
    assert 3400 < recs[-1].arrival_s < 3700


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


AZ_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


@pytest.mark.parametrize(("body", "expect"), [
    ("", "is empty"),
    (AZ_HEADER, "no rows"),
    ("TIMESTAMP,ContextTokens\n", "lacks column(s) ['GeneratedTokens']"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens,Extra\n", "unexpected column(s) ['Extra']"),
    (AZ_HEADER + "2023-11-16 18:15:46.68,374,abc\n",
     ":2: field 'GeneratedTokens'='abc' is not an integer"),
    (AZ_HEADER + "2023-11-16 18:15:46.68,-3,4\n",
     ":2: field 'ContextTokens'='-3' must be positive"),
    (AZ_HEADER + "2023-11-16 18:15:46.68,0,4\n", ":2: field 'ContextTokens'='0' must be positive"),
    (AZ_HEADER + "yesterday,3,4\n", ":2: field 'TIMESTAMP'='yesterday' is not a timestamp"),
    (AZ_HEADER + "2023-11-16 18:15:46.68,3,4\n2023-11-16 18:15:45.00,3,4\n",
     ":3: field 'TIMESTAMP'='2023-11-16 18:15:45.00' goes backwards"),
    (AZ_HEADER + "2023-11-16 18:15:46.68,3\n",
     ":2: row '2023-11-16 18:15:46.68,3' has 2 fields, expected 3"),
])
def test_azure_errors(tmp_path: Path, body: str, expect: str) -> None:
    p = write(tmp_path, "t.csv", body)
    with pytest.raises(TraceError) as e:
        validate_trace("azure", p)
    assert str(p) in str(e.value)
    assert expect in str(e.value)


def mooncake_line(**kw: object) -> str:
    rec = {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}
    rec.update(kw)
    return json.dumps(rec) + "\n"


@pytest.mark.parametrize(("body", "expect"), [
    ("", "is empty"),
    ("{not json\n", ":1: row '{not json' is not JSON"),
    (mooncake_line(hash_ids=[1]), "field 'hash_ids'='<1 ids>' do not cover input_length=600"),
    (mooncake_line(output_length=0), "field 'output_length'=0 must be positive"),
    (mooncake_line(timestamp=5) + mooncake_line(timestamp=4),
     ":2: field 'timestamp'=4 goes backwards"),
    (mooncake_line(extra=1), "unexpected field(s) ['extra']"),
    (json.dumps({"timestamp": 0, "input_length": 5, "output_length": 1}) + "\n",
     "missing field(s) ['hash_ids']"),
    (mooncake_line(input_length="many"), "field 'input_length'='many' is not an integer"),
])
def test_mooncake_errors(tmp_path: Path, body: str, expect: str) -> None:
    p = write(tmp_path, "t.jsonl", body)
    with pytest.raises(TraceError) as e:
        validate_trace("mooncake", p)
    assert str(p) in str(e.value)
    assert expect in str(e.value)


def test_length_csv(tmp_path: Path) -> None:
    p = write(tmp_path, "l.csv", "output_length,input_length\n5,100\n7,20\n")
    recs = list(read_trace("lengths", p))
    assert [(r.input_length, r.output_length) for r in recs] == [(100, 5), (20, 7)]
    bad = write(tmp_path, "b.csv", "input_length,output_length\n5,x\n")
    with pytest.raises(TraceError, match=r"b.csv:2: field 'output_length'='x'"):
        validate_trace("lengths", bad)


def test_unknown_kind_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="valid: \\['azure', 'lengths', 'mooncake'\\]"):
        read_trace("sharegpt", tmp_path / "x")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_trace("azure", tmp_path / "nope.csv")


def test_mooncake_prompts_share_prefixes_deterministically() -> None:
    a = mooncake_prompt([7, 8, 9], 1100)
    b = mooncake_prompt([7, 8, 10], 1300)
    assert len(a) == 1100 and len(b) == 1300
    assert a[:1024] == b[:1024] and a[1024:1100] != b[1024:1100]
    assert mooncake_prompt([7, 8, 9], 1100) == a


def test_spread_ticks_keeps_order_and_stays_in_tick(tmp_path: Path) -> None:
    body = "".join(mooncake_line(timestamp=t, input_length=10, hash_ids=[1])
                   for t in (0, 0, 0, 3000, 3000))
    recs = list(spread_ticks(read_trace("mooncake", write(tmp_path, "m.jsonl", body)), 3.0, 1))
    times = [r.arrival_s for r in recs]
    assert times == sorted(times)
    assert all(0 <= t < 3 for t in times[:3]) and all(3 <= t < 6 for t in times[3:])
    again = list(spread_ticks(read_trace("mooncake", tmp_path / "m.jsonl"), 3.0, 1))
    assert [r.arrival_s for r in again] == times
