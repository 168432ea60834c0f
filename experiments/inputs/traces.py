"""Readers for real request traces, with errors that name the file, line, field and value.

Formats (see ../shared/data/traces/README.md):
- Azure LLM inference 2023 CSV: `TIMESTAMP,ContextTokens,GeneratedTokens` (read by name, in
  any order), wall-clock stamps.
- Mooncake FAST'25 JSONL: `timestamp` (ms), `input_length`, `output_length`, `hash_ids` (one id per
  512-token block of the prompt; equal leading ids mean a shared prefix).
- A length-only CSV or parquet file: `input_length,output_length` (arrivals come from a
  generator).

Each reader yields `TraceRecord`s lazily, so a large file streams; `validate_trace` reads a
whole file once to fail before a run starts. The row readers (`csv_rows`, `json_lines`,
`parquet_rows`) and `positive_int` are shared with the `lengths` workload, so every format
locates a bad value the same way: the line of a text file (blank lines counted), the row of
a parquet file.
"""

from __future__ import annotations

import csv
import json
import math
import random
import re
import reprlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from experiments.user_error import UserError

MOONCAKE_BLOCK_TOKENS = 512
AZURE_FIELDS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
LENGTH_FIELDS = ("input_length", "output_length")
MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
# Plausibility bounds, checked before a run: no model has a context of 10M tokens, and a
# trace clock beyond 1e13 ms (317 years; epoch milliseconds are ~1.7e12) is a broken row.
MAX_TRACE_TOKENS = 10_000_000
MAX_TIMESTAMP_MS = 1e13
# Azure stamps: date, time, an optional fraction (any number of digits), an optional zone.
_AZURE_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)(?:\.(\d+))?"
                          r"(Z|[+-]\d\d:?\d\d)?$", re.ASCII)
# An integer as text: ASCII digits (str.isdigit() also takes '²', which int() refuses), an
# optional sign and an optional zero fraction ("12.0", as a float column is written).
_INTEGER_TEXT = re.compile(r"([+-]?)0*([0-9]+)(?:\.0*)?", re.ASCII)
# Digits kept of a longer integer text: such a number is beyond every bound anyway, and int()
# refuses texts of more than 4,300 digits.
_MAX_DIGITS = 20
# A bad value is shown cut short: a message stays one line of reasonable length.
_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = 80
_SHOWN.maxlist = _SHOWN.maxdict = 8
_SHOWN.maxlevel = 3


class TraceError(UserError):
    """A malformed trace file: the message names file, line (or row), field and value."""

    def __init__(self, path: str | Path, line: int | None, field: str | None, value: object,
                 why: str, *, row: int | None = None) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        if row is not None:
            where += f": row {row}"
        if field is not None:
            what = f" field {field!r}={_SHOWN.repr(value)}"
        else:
            what = f" row {_SHOWN.repr(value)}" if value is not None else ""
        super().__init__(f"{where}:{what} {why}")
        self.path, self.line, self.row = str(path), line, row
        self.field, self.value = field, value


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One request of a trace: arrival (seconds from the trace start) and lengths."""

    arrival_s: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...] | None = None


def _integer(raw: object) -> int | None:
    """The integer `raw` holds (an int, an integral float, or its text), else None."""
    if isinstance(raw, str):
        return _integer_text(raw)
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw
    if isinstance(raw, float):
        return int(raw) if raw.is_integer() else None
    return None


def _integer_text(text: str) -> int | None:
    if len(text) <= _MAX_DIGITS and text.isascii() and text.isdigit():
        return int(text)  # the common case, first: a trace has millions of cells
    m = _INTEGER_TEXT.fullmatch(text.strip())
    return None if m is None else int(m.group(1) + m.group(2)[:_MAX_DIGITS])


def positive_int(path: str | Path, line: int | None, field: str, raw: object, *,
                 row: int | None = None) -> int:
    """The token count `raw` holds (an int, an integral float or its text), when positive
    and plausible; else a TraceError naming the place (`line` or `row`), field and value."""
    value = _integer(raw)
    if value is None:
        why = ("is missing (null)" if raw is None else "is empty" if raw == ""
               else "is not an integer")
        raise TraceError(path, line, field, raw, why, row=row)
    if value <= 0:
        raise TraceError(path, line, field, raw, "must be positive", row=row)
    return check_token_count(path, line, field, raw, value, row=row)


def check_token_count(path: str | Path, line: int | None, field: str, raw: object,
                      value: int, *, row: int | None = None) -> int:
    """`value` when it is a plausible token count (at most `MAX_TRACE_TOKENS`), else a
    TraceError naming the field (refused before anything is allocated for it)."""
    if value > MAX_TRACE_TOKENS:
        raise TraceError(path, line, field, raw, f"is beyond any model's context (more than "
                                                 f"{MAX_TRACE_TOKENS:,} tokens)", row=row)
    return value


def check_trace_time(path: str | Path, line: int, field: str, raw: object, ms: float,
                     start: str = "the trace's start") -> None:
    """Refuse (TraceError) a time `ms` milliseconds after `start` beyond `MAX_TIMESTAMP_MS`:
    the one plausibility bound of every trace clock."""
    if not ms <= MAX_TIMESTAMP_MS:
        raise TraceError(path, line, field, raw,
                         f"is not a plausible trace time (more than {MAX_TIMESTAMP_MS:g} ms, "
                         f"317 years, after {start})")


def text_lines(path: Path) -> Iterator[str]:
    """The lines of a UTF-8 text file (a leading byte-order mark dropped), decoded one by one
    so that a bad byte is reported with its line."""
    with open(path, "rb") as f:
        for line, raw in enumerate(f, 1):
            try:
                yield raw.decode("utf-8-sig" if line == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise TraceError(path, line, None, None,
                                 f"is not UTF-8 text (byte 0x{raw[e.start]:02x} at column "
                                 f"{e.start + 1})") from None


def _csv_lines(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(first line, fields) of each record of a CSV file, blank lines left out; a
    malformed line raises TraceError naming it."""
    reader = csv.reader(text_lines(path))
    while True:
        first = reader.line_num + 1  # a quoted field may run over several lines
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise TraceError(path, reader.line_num, None, None, f"is not valid CSV ({e})"
                             ) from None
        if fields and not (len(fields) == 1 and not fields[0].strip()):
            yield first, fields


def _check_header(path: Path, header: list[str], expected: Iterable[str],
                  only: bool) -> None:
    expected = list(expected)
    missing = [f for f in expected if f not in header]
    extra = [f for f in header if f not in expected] if only else []
    repeated = sorted({f for f in header if header.count(f) > 1})
    if missing:
        raise TraceError(path, 1, None, None,
                         f"header {header} lacks column(s) {missing}; expected {expected}")
    if extra:
        raise TraceError(path, 1, None, None, f"header {header} has unexpected column(s) "
                                              f"{extra}; expected {expected}")
    if repeated:
        raise TraceError(path, 1, None, None, f"header {header} repeats column(s) {repeated}")


def csv_rows(path: str | Path, columns: Iterable[str], only: bool = True
             ) -> Iterator[tuple[int, dict[str, str]]]:
    """(line, {column: text}) of each row of a CSV file whose header names `columns`, in any
    order (and, when `only`, no other). A header that lacks one, repeats one, or a row whose
    field count is not the header's raises TraceError naming the file and the line."""
    path = Path(path)
    records = _csv_lines(path)
    first = next(records, None)
    if first is None:
        raise TraceError(path, None, None, None, "is empty (no header line)")
    header = [h.strip() for h in first[1]]
    _check_header(path, header, columns, only)
    n = 0
    for line, fields in records:
        if len(fields) != len(header):
            raise TraceError(path, line, None, ",".join(fields),
                             f"has {len(fields)} fields, expected {len(header)} "
                             f"({', '.join(header)})")
        n += 1
        yield line, dict(zip(header, fields, strict=True))
    if n == 0:
        raise TraceError(path, None, None, None, "has a header but no rows")


def json_lines(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line, object) of each non-blank line of a JSON-lines file; a line that is not a JSON
    object raises TraceError naming it."""
    path = Path(path)
    for line, text in enumerate(text_lines(path), 1):
        if not text.strip():
            continue
        try:
            rec = json.loads(text)
        except RecursionError:
            raise TraceError(path, line, None, text.strip(), "is nested too deeply") from None
        except ValueError as e:  # JSONDecodeError, or an integer of over 4,300 digits
            why = e.msg if isinstance(e, json.JSONDecodeError) else str(e).split(";")[0]
            raise TraceError(path, line, None, text.strip(), f"is not JSON ({why})") from None
        if not isinstance(rec, dict):
            raise TraceError(path, line, None, rec, "is not a JSON object")
        yield line, rec


def parquet_rows(path: str | Path, columns: Iterable[str]
                 ) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row, {column: value}) of each row of a parquet file (rows count from 1), read in
    batches; a file that is not parquet, or lacks one of `columns`, raises TraceError."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    columns = list(dict.fromkeys(columns))
    try:
        with pq.ParquetFile(path) as f:
            names = f.schema_arrow.names
            missing = [c for c in columns if c not in names]
            if missing:
                raise TraceError(path, None, None, None,
                                 f"lacks column(s) {missing}; columns: {names}")
            row = 0
            for batch in f.iter_batches(columns=columns):
                values = [batch.column(c).to_pylist() for c in columns]
                for cells in zip(*values, strict=True):
                    row += 1
                    yield row, dict(zip(columns, cells, strict=True))
    except (pa.ArrowException, OSError) as e:
        raise TraceError(path, None, None, None, f"is not a readable parquet file ({e})"
                         ) from None


def _check_time(path: Path, line: int, field: str, raw: object, t: float, prev: float) -> None:
    if t < prev:
        raise TraceError(path, line, field, raw, f"goes backwards (previous row at {prev:g} s)")


def _azure_stamp(path: Path, line: int, raw_ts: str) -> datetime:
    m = _AZURE_STAMP.match(raw_ts)
    if m is None:
        raise TraceError(path, line, "TIMESTAMP", raw_ts, "is not a timestamp "
                         "(YYYY-MM-DD HH:MM:SS[.fraction][zone])")
    head, frac, zone = m.groups()
    # Python parses at most 6 fractional digits; the trace has 7 (100 ns, below any step).
    text = head + (f".{frac[:6]}" if frac else "") + ("+00:00" if zone == "Z" else zone or "")
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise TraceError(path, line, "TIMESTAMP", raw_ts, "is not a timestamp") from None


def read_azure_csv(path: str | Path) -> Iterator[TraceRecord]:
    """Stream an Azure 2023 trace; arrivals are seconds since its first row. Columns are read
    by name. Stamps with a time zone are compared as instants; a file must not mix stamps
    with and without one."""
    path = Path(path)
    t0: datetime | None = None
    start = ""
    prev = 0.0
    for line, row in csv_rows(path, AZURE_FIELDS):
        raw_ts = row["TIMESTAMP"].strip()
        stamp = _azure_stamp(path, line, raw_ts)
        if t0 is not None and (stamp.tzinfo is None) != (t0.tzinfo is None):
            raise TraceError(path, line, "TIMESTAMP", raw_ts,
                             "mixes stamps with and without a time zone (the first row "
                             f"{'has' if t0.tzinfo else 'has none'})")
        if t0 is None:
            t0, start = stamp, f"the first row's {raw_ts} (line {line})"
        t = (stamp - t0).total_seconds()
        _check_time(path, line, "TIMESTAMP", raw_ts, t, prev)
        check_trace_time(path, line, "TIMESTAMP", raw_ts, t * 1000.0, start)
        prev = t
        yield TraceRecord(t, positive_int(path, line, "ContextTokens", row["ContextTokens"]),
                          positive_int(path, line, "GeneratedTokens", row["GeneratedTokens"]))


def read_length_csv(path: str | Path) -> Iterator[TraceRecord]:
    """Stream a length-only CSV (`input_length,output_length`); arrival_s is 0 for all rows."""
    for line, row in csv_rows(path, LENGTH_FIELDS):
        yield TraceRecord(0.0, positive_int(path, line, "input_length", row["input_length"]),
                          positive_int(path, line, "output_length", row["output_length"]))


def read_length_parquet(path: str | Path) -> Iterator[TraceRecord]:
    """Stream a length-only parquet file (columns `input_length`, `output_length`; others are
    left unread); arrival_s is 0 for all rows."""
    n = 0
    for row, cells in parquet_rows(path, LENGTH_FIELDS):
        n += 1
        yield TraceRecord(0.0, positive_int(path, None, "input_length", cells["input_length"],
                                            row=row),
                          positive_int(path, None, "output_length", cells["output_length"],
                                       row=row))
    if n == 0:
        raise TraceError(path, None, None, None, "has no rows")


def read_lengths(path: str | Path) -> Iterator[TraceRecord]:
    """Stream a length-only file: parquet by its suffix, else CSV."""
    if Path(path).suffix == ".parquet":
        return read_length_parquet(path)
    return read_length_csv(path)


def _mooncake_seconds(path: Path, line: int, raw_ts: object) -> float:
    if isinstance(raw_ts, bool) or not isinstance(raw_ts, int | float) or not raw_ts >= 0:
        raise TraceError(path, line, "timestamp", raw_ts,
                         "must be a finite, non-negative number of milliseconds")
    check_trace_time(path, line, "timestamp", raw_ts, raw_ts)
    return raw_ts / 1000.0


def _mooncake_hash_ids(path: Path, line: int, hash_ids: object, input_length: int
                       ) -> tuple[int, ...]:
    if not isinstance(hash_ids, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in hash_ids
    ):
        raise TraceError(path, line, "hash_ids", hash_ids,
                         "must be a list of non-negative integers")
    need = math.ceil(input_length / MOONCAKE_BLOCK_TOKENS)
    if len(hash_ids) != need:
        raise TraceError(path, line, "hash_ids", f"<{len(hash_ids)} ids>",
                         f"do not cover input_length={input_length}: need {need} ids "
                         f"of {MOONCAKE_BLOCK_TOKENS} tokens")
    return tuple(hash_ids)


def _check_mooncake_fields(path: Path, line: int, rec: Mapping[str, Any]) -> None:
    missing = [k for k in MOONCAKE_FIELDS if k not in rec]
    extra = [k for k in rec if k not in MOONCAKE_FIELDS]
    if missing or extra:
        raise TraceError(path, line, None, None,
                         f"missing field(s) {missing}, unexpected field(s) {extra}; "
                         f"expected {list(MOONCAKE_FIELDS)}")


def read_mooncake_jsonl(path: str | Path) -> Iterator[TraceRecord]:
    """Stream a Mooncake trace; `timestamp` is in milliseconds."""
    path = Path(path)
    prev = 0.0
    n = 0
    for line, rec in json_lines(path):
        _check_mooncake_fields(path, line, rec)
        t = _mooncake_seconds(path, line, rec["timestamp"])
        _check_time(path, line, "timestamp", rec["timestamp"], t, prev)
        prev = t
        input_length = positive_int(path, line, "input_length", rec["input_length"])
        output_length = positive_int(path, line, "output_length", rec["output_length"])
        hash_ids = _mooncake_hash_ids(path, line, rec["hash_ids"], input_length)
        n += 1
        yield TraceRecord(t, input_length, output_length, hash_ids)
    if n == 0:
        raise TraceError(path, None, None, None, "is empty")


READERS = {
    "azure": read_azure_csv,
    "mooncake": read_mooncake_jsonl,
    "lengths": read_lengths,
}


def read_trace(kind: str, path: str | Path) -> Iterator[TraceRecord]:
    """Stream a trace of one of the known kinds (`azure`, `mooncake`, `lengths`: a CSV, or
    a parquet file by its suffix)."""
    if kind not in READERS:
        raise ValueError(f"trace kind {kind!r} is unknown; valid: {sorted(READERS)}")
    if not Path(path).is_file():
        raise FileNotFoundError(f"trace file {path} does not exist")
    return READERS[kind](path)


def validate_trace(kind: str, path: str | Path) -> int:
    """Read a whole trace once, raising TraceError at the first bad row; returns its rows."""
    return sum(1 for _ in read_trace(kind, path))


def mooncake_block_tokens(hash_id: int, n: int = MOONCAKE_BLOCK_TOKENS,
                          vocab_size: int = 32000) -> list[int]:
    """The deterministic token ids of one Mooncake block: the same id always gives the same
    tokens, so prefix caches see the sharing the trace records."""
    base = hash_id * 2654435761
    return [3 + (base + k * 40503) % (vocab_size - 3) for k in range(n)]


def mooncake_prompt(hash_ids: Iterable[int], input_length: int,
                    vocab_size: int = 32000) -> list[int]:
    """A prompt of `input_length` tokens built from its blocks' ids (the last block is cut)."""
    tokens: list[int] = []
    for hid in hash_ids:
        tokens.extend(mooncake_block_tokens(hid, vocab_size=vocab_size))
    del tokens[input_length:]
    return tokens


def spread_ticks(records: Iterable[TraceRecord], tick_s: float, seed: int
                 ) -> Iterator[TraceRecord]:
    """Spread requests that share a quantized timestamp uniformly over their tick, seeded.

    Mooncake's conversation trace stamps arrivals in ~3 s ticks; replaying every request of a
    tick at one instant would fake a burst. Order within a tick is kept (multi-turn order).
    """
    rng = random.Random(seed)
    group: list[TraceRecord] = []

    def flush() -> Iterator[TraceRecord]:
        offsets = sorted(rng.random() * tick_s for _ in group)
        for rec, off in zip(group, offsets, strict=True):
            yield TraceRecord(rec.arrival_s + off, rec.input_length, rec.output_length,
                              rec.hash_ids)

    for rec in records:
        if group and rec.arrival_s != group[0].arrival_s:
            yield from flush()
            group = []
        group.append(rec)
    if group:
        yield from flush()
