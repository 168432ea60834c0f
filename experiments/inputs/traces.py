"""Readers for real request traces, with errors that name the file, line, field and value.

Formats (see ../shared/data/traces/README.md):
- Azure LLM inference 2023 CSV: `TIMESTAMP,ContextTokens,GeneratedTokens`, wall-clock stamps.
- Mooncake FAST'25 JSONL: `timestamp` (ms), `input_length`, `output_length`, `hash_ids` (one id per
  512-token block of the prompt; equal leading ids mean a shared prefix).
- A length-only CSV: `input_length,output_length` (arrivals come from a generator).

Each reader yields `TraceRecord`s lazily, so a large file streams; `validate_trace` reads a
whole file once to fail before a run starts.
"""

from __future__ import annotations

import csv
import json
import math
import random
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

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
                          r"(Z|[+-]\d\d:?\d\d)?$")


class TraceError(ValueError):
    """A malformed trace file: the message names file, line, field and value."""

    def __init__(self, path: str | Path, line: int | None, field: str | None, value: object,
                 why: str) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        if field is not None:
            what = f" field {field!r}={value!r}"
        else:
            what = f" row {value!r}" if value is not None else ""
        super().__init__(f"{where}:{what} {why}")
        self.path, self.line, self.field, self.value = str(path), line, field, value


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One request of a trace: arrival (seconds from the trace start) and lengths."""

    arrival_s: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...] | None = None


def _positive_int(path: Path, line: int, field: str, raw: object) -> int:
    integral = (
        (isinstance(raw, int) and not isinstance(raw, bool))
        or (isinstance(raw, float) and raw.is_integer())
        or (isinstance(raw, str) and raw.strip().lstrip("+-").isdigit())
    )
    if not integral:
        raise TraceError(path, line, field, raw, "is not an integer")
    value = int(raw)  # type: ignore[call-overload]
    if value <= 0:
        raise TraceError(path, line, field, raw, "must be positive")
    return check_token_count(path, line, field, raw, value)


def check_token_count(path: str | Path, line: int | None, field: str, raw: object,
                      value: int) -> int:
    """`value` when it is a plausible token count (at most `MAX_TRACE_TOKENS`), else a
    TraceError naming the field (refused before anything is allocated for it)."""
    if value > MAX_TRACE_TOKENS:
        raise TraceError(path, line, field, raw, f"is beyond any model's context (more than "
                                                 f"{MAX_TRACE_TOKENS:,} tokens)")
    return value


def text_lines(path: Path) -> Iterator[str]:
    """The lines of a UTF-8 text file, decoded one by one so that a bad byte is reported
    with its line."""
    with open(path, "rb") as f:
        for line, raw in enumerate(f, 1):
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise TraceError(path, line, None, None,
                                 f"is not UTF-8 text (byte 0x{raw[e.start]:02x} at column "
                                 f"{e.start + 1})") from None


def _csv_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(line, fields) of a CSV file; a malformed line raises TraceError naming it."""
    reader = csv.reader(text_lines(path))
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise TraceError(path, reader.line_num, None, None, f"is not valid CSV ({e})"
                             ) from None
        yield reader.line_num, row


def _check_header(path: Path, header: list[str] | None, expected: tuple[str, ...]) -> None:
    if header is None:
        raise TraceError(path, None, None, None, "is empty (no header line)")
    got = [h.strip() for h in header]
    missing = [f for f in expected if f not in got]
    extra = [f for f in got if f not in expected]
    if missing:
        raise TraceError(path, 1, None, None,
                         f"header lacks column(s) {missing}; expected {list(expected)}")
    if extra:
        raise TraceError(path, 1, None, None,
                         f"header has unexpected column(s) {extra}; expected {list(expected)}")


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
    """Stream an Azure 2023 trace; arrivals are seconds since its first row. Stamps with a
    time zone are compared as instants; a file must not mix stamps with and without one."""
    path = Path(path)
    rows = _csv_rows(path)
    first = next(rows, None)
    _check_header(path, first[1] if first else None, AZURE_FIELDS)
    t0: datetime | None = None
    prev = 0.0
    n = 0
    for line, row in rows:
        if not row:
            continue
        if len(row) != 3:
            raise TraceError(path, line, None, ",".join(row),
                             f"has {len(row)} fields, expected 3 ({', '.join(AZURE_FIELDS)})")
        raw_ts = row[0].strip()
        stamp = _azure_stamp(path, line, raw_ts)
        if t0 is not None and (stamp.tzinfo is None) != (t0.tzinfo is None):
            raise TraceError(path, line, "TIMESTAMP", raw_ts,
                             "mixes stamps with and without a time zone (the first row "
                             f"{'has' if t0.tzinfo else 'has none'})")
        t0 = t0 or stamp
        t = (stamp - t0).total_seconds()
        _check_time(path, line, "TIMESTAMP", raw_ts, t, prev)
        prev = t
        n += 1
        yield TraceRecord(t, _positive_int(path, line, "ContextTokens", row[1].strip()),
                          _positive_int(path, line, "GeneratedTokens", row[2].strip()))
    if n == 0:
        raise TraceError(path, None, None, None, "has a header but no rows")


def read_length_csv(path: str | Path) -> Iterator[TraceRecord]:
    """Stream a length-only CSV (`input_length,output_length`); arrival_s is 0 for all rows."""
    path = Path(path)
    rows = _csv_rows(path)
    first = next(rows, None)
    header = first[1] if first else None
    _check_header(path, header, LENGTH_FIELDS)
    assert header is not None
    cols = [h.strip() for h in header]
    i_in, i_out = cols.index("input_length"), cols.index("output_length")
    n = 0
    for line, row in rows:
        if not row:
            continue
        if len(row) != 2:
            raise TraceError(path, line, None, ",".join(row),
                             f"has {len(row)} fields, expected 2")
        n += 1
        yield TraceRecord(0.0, _positive_int(path, line, "input_length", row[i_in].strip()),
                          _positive_int(path, line, "output_length", row[i_out].strip()))
    if n == 0:
        raise TraceError(path, None, None, None, "has a header but no rows")


def read_mooncake_jsonl(path: str | Path) -> Iterator[TraceRecord]:
    """Stream a Mooncake trace; `timestamp` is in milliseconds."""
    path = Path(path)
    prev = 0.0
    n = 0
    for line, text in enumerate(text_lines(path), 1):
        if not text.strip():
            continue
        try:
            rec = json.loads(text)
        except json.JSONDecodeError as e:
            raise TraceError(path, line, None, text.strip()[:80],
                             f"is not JSON ({e.msg})") from None
        if not isinstance(rec, dict):
            raise TraceError(path, line, None, rec, "is not a JSON object")
        missing = [k for k in MOONCAKE_FIELDS if k not in rec]
        extra = [k for k in rec if k not in MOONCAKE_FIELDS]
        if missing or extra:
            raise TraceError(path, line, None, None,
                             f"missing field(s) {missing}, unexpected field(s) {extra}; "
                             f"expected {list(MOONCAKE_FIELDS)}")
        raw_ts = rec["timestamp"]
        if (isinstance(raw_ts, bool) or not isinstance(raw_ts, int | float)
                or not math.isfinite(raw_ts) or raw_ts < 0):
            raise TraceError(path, line, "timestamp", raw_ts,
                             "must be a finite, non-negative number of milliseconds")
        if raw_ts > MAX_TIMESTAMP_MS:
            raise TraceError(path, line, "timestamp", raw_ts,
                             f"is not a plausible trace time (more than {MAX_TIMESTAMP_MS:g}"
                             " ms)")
        t = raw_ts / 1000.0
        _check_time(path, line, "timestamp", raw_ts, t, prev)
        prev = t
        input_length = _positive_int(path, line, "input_length", rec["input_length"])
        output_length = _positive_int(path, line, "output_length", rec["output_length"])
        hash_ids = rec["hash_ids"]
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
        n += 1
        yield TraceRecord(t, input_length, output_length, tuple(hash_ids))
    if n == 0:
        raise TraceError(path, None, None, None, "is empty")


READERS = {
    "azure": read_azure_csv,
    "mooncake": read_mooncake_jsonl,
    "lengths": read_length_csv,
}


def read_trace(kind: str, path: str | Path) -> Iterator[TraceRecord]:
    """Stream a trace of one of the known kinds (`azure`, `mooncake`, `lengths`)."""
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
