"""Trace and lengths files are read by column name, every row is checked before the run, and
a bad value is named with its file, line (or parquet row), field and value as written
(issue 24, items 1-4 and 8)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from experiments.inputs.traces import TraceError, read_trace
from experiments.inputs.workloads import stream_workload
from experiments.inputs.workloads.lengths import LengthDist

AZURE_ROWS = ("2023-11-16 18:15:46.6805900", "2023-11-16 18:15:47.6805900")


def lengths_workload(tmp_path: Path, file: str, **extra: object) -> list[tuple[int, int]]:
    """(prompt, max_tokens) of every request of a `lengths` workload over `file`."""
    cfg = {"name": "lengths", "trace_dir": str(tmp_path), "file": file, **extra}
    return [(r.num_prompt_tokens, r.max_tokens) for r in stream_workload(cfg, 0)]


def write_parquet(path: Path, **columns: pa.Array) -> Path:
    pq.write_table(pa.table(columns), path)
    return path


# item 1


def test_azure_columns_are_read_by_name_not_position(tmp_path: Path) -> None:
    p = tmp_path / "a.csv"
    p.write_text("TIMESTAMP,GeneratedTokens,ContextTokens\n"
                 f"{AZURE_ROWS[0]},5,300\n{AZURE_ROWS[1]},6,400\n")
    recs = list(read_trace("azure", p))
    assert [(r.input_length, r.output_length) for r in recs] == [(300, 5), (400, 6)]
    reqs = list(stream_workload({"name": "azure", "trace_dir": str(tmp_path), "file": "a.csv",
                                 "max_tokens_policy": "trace"}, 0))
    assert [(r.num_prompt_tokens, r.max_tokens) for r in reqs] == [(300, 5), (400, 6)]
    # a length distribution finds the Azure header wherever TIMESTAMP stands
    q = tmp_path / "b.csv"
    q.write_text(f"ContextTokens,TIMESTAMP,GeneratedTokens\n300,{AZURE_ROWS[0]},5\n")
    drawn = LengthDist("file", path=str(q), column="input_length").sample(
        np.random.default_rng(0), 3)
    assert drawn.tolist() == [300, 300, 300]


def test_a_repeated_column_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "l.csv"
    p.write_text("input_length,output_length,input_length\n1,2,3\n")
    with pytest.raises(TraceError, match=r"l\.csv:1: header \[.*\] repeats column\(s\) "
                                         r"\['input_length'\]"):
        lengths_workload(tmp_path, "l.csv")


def test_another_header_is_named_and_a_byte_order_mark_is_no_fault(tmp_path: Path) -> None:
    p = tmp_path / "a.csv"
    p.write_text(f"TIMESTAMP,Context,GeneratedTokens\n{AZURE_ROWS[0]},5,3\n")
    with pytest.raises(TraceError, match=r"a\.csv:1: header \['TIMESTAMP', 'Context', "
                                         r"'GeneratedTokens'\] lacks column\(s\) "
                                         r"\['ContextTokens'\]"):
        list(read_trace("azure", p))
    p.write_text(f"\ufeffTIMESTAMP,ContextTokens,GeneratedTokens\n{AZURE_ROWS[0]},5,3\n",
                 encoding="utf-8")
    assert [r.input_length for r in read_trace("azure", p)] == [5]


# item 2


@pytest.mark.parametrize("row", ["1,2,3", "7"])
def test_lengths_rows_with_another_field_count_are_refused(tmp_path: Path, row: str) -> None:
    p = tmp_path / "l.csv"
    p.write_text(f"input_length,output_length\n4,5\n{row}\n")
    fields = len(row.split(","))
    with pytest.raises(TraceError, match=rf"l\.csv:3: row '{row}' has {fields} fields, "
                                         r"expected 2 \(input_length, output_length\)"):
        lengths_workload(tmp_path, "l.csv")


def test_lengths_csv_may_hold_other_columns(tmp_path: Path) -> None:
    p = tmp_path / "l.csv"
    p.write_text("id,output_length,input_length\na,5,40\nb,6,\"50\"\n")
    assert lengths_workload(tmp_path, "l.csv") == [(40, 5), (50, 6)]


# item 3


def test_parquet_lengths_files_are_read(tmp_path: Path) -> None:
    write_parquet(tmp_path / "l.parquet", input_length=pa.array([40, 50, 60]),
                  output_length=pa.array([5.0, 6.0, 7.0]), note=pa.array(["x", "y", "z"]))
    (tmp_path / "l.csv").write_text("input_length,output_length\n40,5\n50,6\n60,7\n")
    assert lengths_workload(tmp_path, "l.parquet") == [(40, 5), (50, 6), (60, 7)]
    assert lengths_workload(tmp_path, "l.parquet") == lengths_workload(tmp_path, "l.csv")
    assert list(read_trace("lengths", tmp_path / "l.parquet"))[2].input_length == 60
    drawn = LengthDist("file", path=str(tmp_path / "l.parquet"), column="output_length")
    assert set(drawn.sample(np.random.default_rng(0), 50).tolist()) == {5, 6, 7}


@pytest.mark.parametrize(("values", "shown", "why"), [
    ([1, -2], "-2", "must be positive"),
    ([1.0, float("nan")], "nan", "is not an integer"),
    ([1.0, 2.5], "2.5", "is not an integer"),
    ([1, None], "None", r"is missing \(null\)"),
    ([1, 10**9], "1000000000", "is beyond any model's context"),
])
def test_parquet_values_are_checked_naming_the_row(tmp_path: Path, values: list[object],
                                                   shown: str, why: str) -> None:
    write_parquet(tmp_path / "l.parquet",
                  input_length=pa.array(values, from_pandas=False),
                  output_length=pa.array([3, 4]))
    message = rf"l\.parquet: row 2: field 'input_length'={shown} {why}"
    with pytest.raises(TraceError, match=message):
        lengths_workload(tmp_path, "l.parquet")
    with pytest.raises(TraceError, match=message):
        list(read_trace("lengths", tmp_path / "l.parquet"))


def test_parquet_files_without_a_column_or_rows_or_not_parquet(tmp_path: Path) -> None:
    write_parquet(tmp_path / "c.parquet", input_length=pa.array([1]))
    with pytest.raises(TraceError, match=r"c\.parquet: lacks column\(s\) \['output_length'\]"):
        lengths_workload(tmp_path, "c.parquet")
    write_parquet(tmp_path / "e.parquet", input_length=pa.array([], pa.int64()),
                  output_length=pa.array([], pa.int64()))
    with pytest.raises(TraceError, match=r"e\.parquet: has no usable rows"):
        lengths_workload(tmp_path, "e.parquet")
    (tmp_path / "t.parquet").write_text("input_length,output_length\n1,2\n")
    with pytest.raises(TraceError, match=r"t\.parquet: is not a readable parquet file"):
        lengths_workload(tmp_path, "t.parquet")


# item 4


def test_azure_times_have_the_mooncake_bound(tmp_path: Path) -> None:
    p = tmp_path / "a.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 f"{AZURE_ROWS[0]},5,3\n{AZURE_ROWS[1]},5,3\n9999-12-31 00:00:00,5,3\n")
    message = (r"a\.csv:4: field 'TIMESTAMP'='9999-12-31 00:00:00' is not a plausible trace "
               r"time \(more than 1e\+13 ms, 317 years, after the first row's 2023-11-16 "
               r"18:15:46\.6805900 \(line 2\)\)")
    with pytest.raises(TraceError, match=message):
        list(read_trace("azure", p))
    with pytest.raises(TraceError, match=message):  # before a run that keeps a time window
        stream_workload({"name": "azure", "trace_dir": str(tmp_path), "file": "a.csv",
                         "time_window": [0, 10]}, 0)
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 f"{AZURE_ROWS[0]},5,3\n2323-01-01 00:00:00,5,3\n")  # 299 years: kept
    assert list(read_trace("azure", p))[1].arrival_s == pytest.approx(9.435e9, rel=1e-3)


def test_mooncake_keeps_its_bound_for_integers_beyond_floats(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    p.write_text('{"timestamp": 1' + "0" * 400 + ', "input_length": 10, "output_length": 5, '
                 '"hash_ids": [1]}\n')
    with pytest.raises(TraceError, match=r"m\.jsonl:1: field 'timestamp'=1000.*not a "
                                         r"plausible trace time"):
        list(read_trace("mooncake", p))


# item 8


@pytest.mark.parametrize("cell", ["\u00b2", "\u0663", "1e3"])
def test_non_ascii_digits_are_not_integers(tmp_path: Path, cell: str) -> None:
    p = tmp_path / "a.csv"
    p.write_text(f"TIMESTAMP,ContextTokens,GeneratedTokens\n{AZURE_ROWS[0]},5,3\n"
                 f"{AZURE_ROWS[1]},{cell},3\n", encoding="utf-8")
    with pytest.raises(TraceError, match=rf"a\.csv:3: field 'ContextTokens'='{cell}' is not "
                                         r"an integer"):
        list(read_trace("azure", p))


def test_a_huge_integer_text_is_named(tmp_path: Path) -> None:
    p = tmp_path / "l.csv"
    p.write_text("input_length,output_length\n" + "9" * 5000 + ",3\n-" + "9" * 5000 + ",3\n")
    with pytest.raises(TraceError, match=r"l\.csv:2: field 'input_length'='9999.*beyond any"):
        list(read_trace("lengths", p))
    p.write_text("input_length,output_length\n-" + "9" * 5000 + ",3\n")
    with pytest.raises(TraceError, match=r"l\.csv:2: field 'input_length'='-999.*positive"):
        list(read_trace("lengths", p))


def test_deeply_nested_json_is_named(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    good = {"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}
    p.write_text(json.dumps(good) + "\n" + '{"timestamp": 1, "input_length": 10, '
                 '"output_length": 5, "hash_ids": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with pytest.raises(TraceError, match=r"m\.jsonl:2: row '.*' is nested too deeply") as e:
        list(read_trace("mooncake", p))
    assert len(str(e.value)) < 300  # one line of reasonable length
    p.write_text(json.dumps({**good, "hash_ids": [[[[[[1]]]]]]}) + "\n")
    with pytest.raises(TraceError, match=r"m\.jsonl:1: field 'hash_ids'=\[\[\[\[\.\.\.\]\]\]\] "
                                         r"must be a list"):
        list(read_trace("mooncake", p))


@pytest.mark.parametrize(("file", "text"), [
    ("l.csv", "input_length,output_length\n1,2\n\n\n-4,5\n"),
    ("l.jsonl", '{"input_length": 1, "output_length": 2}\n\n\n\n'
                '{"input_length": -4, "output_length": 5}\n'),
])
def test_lines_count_blank_lines(tmp_path: Path, file: str, text: str) -> None:
    (tmp_path / file).write_text(text)
    with pytest.raises(TraceError, match=rf"{file}:5: field 'input_length'=('-4'|-4) must be "
                                         r"positive"):
        lengths_workload(tmp_path, file)


def test_a_quoted_field_over_several_lines_is_named_by_its_first_line(tmp_path: Path) -> None:
    (tmp_path / "l.csv").write_text('id,input_length,output_length\n"a\nb",1,2\n"c\nd",x,2\n')
    with pytest.raises(TraceError, match=r"l\.csv:4: field 'input_length'='x'"):
        lengths_workload(tmp_path, "l.csv")


@pytest.mark.parametrize(("cell", "why"), [("nan", "'nan' is not an integer"),
                                           ("", "'' is empty"),
                                           ("2.5", "'2.5' is not an integer")])
def test_a_cell_is_shown_as_written(tmp_path: Path, cell: str, why: str) -> None:
    (tmp_path / "l.csv").write_text(f"input_length,output_length\n1,2\n{cell},5\n")
    with pytest.raises(TraceError, match=rf"l\.csv:3: field 'input_length'={why}"):
        lengths_workload(tmp_path, "l.csv")


def test_integral_floats_still_count(tmp_path: Path) -> None:
    (tmp_path / "l.csv").write_text("input_length,output_length\n10.0,2\n+11,3.\n")
    assert lengths_workload(tmp_path, "l.csv") == [(10, 2), (11, 3)]


def test_every_row_of_a_local_file_is_checked_past_max_requests(tmp_path: Path) -> None:
    (tmp_path / "l.csv").write_text("input_length,output_length\n1,2\n3,4\n5,0\n")
    with pytest.raises(TraceError, match=r"l\.csv:4: field 'output_length'='0' must be "
                                         r"positive"):
        lengths_workload(tmp_path, "l.csv", max_requests=1)
