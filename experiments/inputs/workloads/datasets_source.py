"""Length-only workloads from local files or Hugging Face `datasets`, with synthetic arrivals.

`file` is a local CSV, JSON, JSON-lines or parquet file (relative to `trace_dir`), or
`hf:<dataset name>` for a hub dataset (a ShareGPT dump, say; needs internet the first time,
then `datasets` serves it from its cache; `streaming: true` reads a large one lazily instead).
Two row formats:
- `lengths`: integer columns `input_column` and `output_column` (prompt and output tokens);
- `sharegpt`: a `conversations` list whose first two turns are the prompt and the answer
  (`value` or `content` text); tokens are counted with the Hugging Face tokenizer named by
  `tokenizer`, or, when it is null, as whitespace-separated words (a rough stand-in).
CSV, JSON-lines and parquet files are read here (`experiments.inputs.traces`' row readers),
every row of them checked before the run, even past `max_requests`: a bad one raises
`TraceError` naming the file, the line (blank lines counted; the row of a parquet file), the
field and the value as written. JSON files and hub datasets go through `datasets` (rows
named by number, read up to `max_requests`). Arrivals are Poisson or gamma at
`request_rate`; then the usual transforms apply; prompts are seeded random ids.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from experiments.inputs.traces import (
    TraceError,
    TraceRecord,
    csv_rows,
    json_lines,
    parquet_rows,
    positive_int,
    text_lines,
)
from experiments.inputs.workloads.arrivals import arrival_times, check_rate
from experiments.inputs.workloads.parse import parse_params
from experiments.inputs.workloads.replay import random_prompts, request_stream, trace_path
from experiments.inputs.workloads.stream import RequestStream
from experiments.inputs.workloads.transforms import ReplayOptions, select_records
from schedulers.config_range import (
    ALL_AT_ONCE,
    MAX_RATE,
    MIN_RATE,
    ranged,
)
from schedulers.contract import Request

FORMATS = ("lengths", "sharegpt")
SUFFIXES = (".csv", ".json", ".jsonl", ".parquet")
HUB_PREFIX = "hf:"
SHAREGPT_COLUMN = "conversations"

# Where a row is: (line of a text file, row number from 1); one of them is None.
Place = tuple[int | None, int | None]
Rows = Iterator[tuple[Place, Mapping[str, Any]]]


@dataclass(frozen=True, slots=True, kw_only=True)
class LengthsWorkload(ReplayOptions):
    """A length-only dataset (see the module docstring) with synthetic arrivals."""

    file: str
    trace_dir: str | None = None
    format: str = "lengths"
    input_column: str = "input_length"
    output_column: str = "output_length"
    data_files: str | None = None
    split: str = "train"
    tokenizer: str | None = None
    streaming: bool = False
    cache_dir: str | None = None
    request_rate: float = ranged(1.0, low=MIN_RATE, high=MAX_RATE, special=ALL_AT_ONCE)
    burstiness: float = ranged(1.0, low=0.01, high=100.0)

    def __post_init__(self) -> None:
        ReplayOptions.__post_init__(self)
        if self.format not in FORMATS:
            raise ValueError(f"workload: format={self.format!r}: valid: {', '.join(FORMATS)}")
        check_rate("workload", self.request_rate, self.burstiness)


def _columns(w: LengthsWorkload) -> tuple[str, ...]:
    """The columns a row of the workload's format needs."""
    return (w.input_column, w.output_column) if w.format == "lengths" else (SHAREGPT_COLUMN,)


def _numbered(rows: Iterable[Mapping[str, Any]]) -> Rows:
    return (((None, i), row) for i, row in enumerate(rows, 1))


def _local_rows(path: Path, w: LengthsWorkload) -> Rows:
    """The rows of a CSV, JSON-lines or parquet file, read here with exact places."""
    if path.suffix == ".csv":
        return (((line, None), row) for line, row in csv_rows(path, _columns(w), only=False))
    if path.suffix == ".jsonl":
        return (((line, None), row) for line, row in json_lines(path))
    return (((None, row), cells) for row, cells in parquet_rows(path, _columns(w)))


def _hub_rows(w: LengthsWorkload) -> Rows:
    """The rows of a hub dataset, through `datasets`."""
    import datasets  # heavy: imported only for these sources

    ds = datasets.load_dataset(w.file[len(HUB_PREFIX):], data_files=w.data_files,
                               split=w.split, streaming=w.streaming, cache_dir=w.cache_dir)
    return _numbered(ds)


def _json_file_rows(path: Path, w: LengthsWorkload) -> Rows:
    """The rows of a local JSON file (a list of objects, or JSON lines), through `datasets`."""
    import datasets

    _check_has_rows(path)
    try:
        ds = datasets.load_dataset("json", data_files=str(path), split="train",
                                   streaming=w.streaming, cache_dir=w.cache_dir)
    except Exception as e:
        cause = e.__cause__ or e.__context__ or e
        raise TraceError(path, None, None, None, f"could not be read as json "
                         f"({type(cause).__name__}: {cause})") from e
    return _numbered(ds)


def _open(w: LengthsWorkload) -> tuple[str, Rows, bool]:
    """The source's display name, its rows, and whether every row is to be checked (a
    file read here) rather than only those up to the limit."""
    if w.file.startswith(HUB_PREFIX):
        return w.file, _hub_rows(w), False
    path = trace_path(w.trace_dir, w.file)
    if path.suffix not in SUFFIXES:
        raise TraceError(path, None, None, None, f"has suffix {path.suffix!r}; valid: "
                         f"{', '.join(SUFFIXES)} (or use hf:<dataset name>)")
    if path.suffix == ".json":
        return str(path), _json_file_rows(path, w), False
    return str(path), _local_rows(path, w), True


def _check_has_rows(path: Path) -> None:
    """Refuse an empty file, or bytes that are not UTF-8 (naming the line), before
    `datasets` does with a message that names neither."""
    if not any(text.strip() for text in text_lines(path)):
        raise TraceError(path, None, None, None, "is empty")


def _count_tokens(tokenizer: str | None) -> Callable[[str], int]:
    if tokenizer is None:
        return lambda text: len(text.split())
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer)
    return lambda text: len(tok(text).input_ids)


def _row_lengths(src: str, place: Place, row: Mapping[str, Any], w: LengthsWorkload
                 ) -> tuple[int, int]:
    """The checked (input, output) lengths of a `lengths` row."""
    line, number = place
    for col in (w.input_column, w.output_column):
        if col not in row:
            raise TraceError(src, line, None, None, f"has no column {col!r}; columns: "
                             f"{sorted(row)}", row=number)
    return (positive_int(src, line, w.input_column, row[w.input_column], row=number),
            positive_int(src, line, w.output_column, row[w.output_column], row=number))


def _conversation_lengths(src: str, place: Place, row: Mapping[str, Any],
                          count: Callable[[str], int]) -> tuple[int, int] | None:
    """The counted (prompt, answer) tokens of a `sharegpt` row; None for a row without both
    (skipped, as vLLM's ShareGPT sampler does)."""
    conv = row.get(SHAREGPT_COLUMN)
    if not isinstance(conv, list) or len(conv) < 2:
        return None
    texts = [t.get("value", t.get("content")) if isinstance(t, dict) else None
             for t in conv[:2]]
    if not all(isinstance(t, str) for t in texts):
        line, number = place
        raise TraceError(src, line, SHAREGPT_COLUMN, str(conv[:2])[:80],
                         "first two turns need a 'value' or 'content' text", row=number)
    n_in, n_out = count(str(texts[0])), count(str(texts[1]))
    return (n_in, n_out) if n_in >= 1 and n_out >= 1 else None


def read_lengths(w: LengthsWorkload, limit: int | None = None) -> Iterator[TraceRecord]:
    """Validated (input, output) lengths of the source's rows (arrival 0), at most `limit`;
    the rows of a local file past the limit are still checked (not tokenized)."""
    src, rows, check_all = _open(w)
    count = _count_tokens(w.tokenizer) if w.format == "sharegpt" else None
    n = 0
    try:
        for place, row in rows:
            if limit is not None and n >= limit:
                if not check_all:
                    return
                if count is None:
                    _row_lengths(src, place, row, w)
                continue
            lengths = (_row_lengths(src, place, row, w) if count is None
                       else _conversation_lengths(src, place, row, count))
            if lengths is not None:
                n += 1
                yield TraceRecord(0.0, *lengths)
    except TraceError:
        raise
    except Exception as e:  # datasets / pyarrow parse errors
        raise TraceError(src, None, None, None,
                         f"cannot be read ({type(e).__name__}: {e})") from e
    if n == 0:
        raise TraceError(src, None, None, None, "has no usable rows")


def lengths_workload(w: LengthsWorkload) -> list[Request]:
    """The requests of a length-only dataset with synthetic arrivals."""
    return list(lengths_stream(w))


def lengths_stream(w: LengthsWorkload) -> RequestStream:
    """The requests of a length-only dataset with synthetic arrivals, built lazily (the
    dataset's lengths are read now)."""
    early_stop = w.time_window is None and (w.max_input_len is None
                                            or w.long_inputs == "clip")
    recs = list(read_lengths(w, w.max_requests if early_stop else None))
    rng = np.random.default_rng(np.random.SeedSequence(w.seed).spawn(2)[0])
    times = arrival_times(rng, len(recs), w.request_rate, w.burstiness)
    recs = [TraceRecord(float(t), r.input_length, r.output_length)
            for t, r in zip(times, recs, strict=True)]
    return request_stream(select_records(recs, w), w, lambda: random_prompts(w))


def lengths_from_config(cfg: Mapping[str, Any], seed: int | None = None) -> list[Request]:
    """Build the workload of a `name: lengths` config mapping."""
    return lengths_workload(parse_params(LengthsWorkload, cfg, seed))

