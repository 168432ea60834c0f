"""Length-only workloads loaded through Hugging Face `datasets`, paired with synthetic arrivals.

`file` is a local CSV, JSON, JSON-lines or parquet file (relative to `trace_dir`), or
`hf:<dataset name>` for a hub dataset (a ShareGPT dump, say; needs internet the first time,
then `datasets` serves it from its cache; `streaming: true` reads a large one lazily instead).
Two row formats:
- `lengths`: integer columns `input_column` and `output_column` (prompt and output tokens);
- `sharegpt`: a `conversations` list whose first two turns are the prompt and the answer
  (`value` or `content` text); tokens are counted with the Hugging Face tokenizer named by
  `tokenizer`, or, when it is null, as whitespace-separated words (a rough stand-in).
Rows are validated as they are read; a bad one raises `TraceError` naming the file, the line
(CSV and JSON lines; the row number otherwise), the field and the value. Arrivals are Poisson
or gamma at `request_rate`; then the usual transforms apply; prompts are seeded random ids.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from experiments.inputs.traces import MAX_TRACE_TOKENS, TraceError, TraceRecord, text_lines
from experiments.inputs.workloads.arrivals import arrival_times, check_rate
from experiments.inputs.workloads.parse import parse_params
from experiments.inputs.workloads.replay import random_prompts, request_stream, trace_path
from experiments.inputs.workloads.stream import RequestStream
from experiments.inputs.workloads.transforms import ReplayOptions, select_records
from schedulers.contract import Request

FORMATS = ("lengths", "sharegpt")
_BUILDERS = {".csv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}
HUB_PREFIX = "hf:"


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
    request_rate: float = 1.0
    burstiness: float = 1.0

    def __post_init__(self) -> None:
        ReplayOptions.__post_init__(self)
        if self.format not in FORMATS:
            raise ValueError(f"workload: format={self.format!r}: valid: {', '.join(FORMATS)}")
        check_rate("workload", self.request_rate, self.burstiness)


def _open(w: LengthsWorkload) -> tuple[str, Any, Callable[[int], int | None]]:
    """The source's display name, the `datasets` rows, and row index -> line number."""
    import datasets  # heavy: imported only for this workload

    if w.file.startswith(HUB_PREFIX):
        name = w.file[len(HUB_PREFIX):]
        ds = datasets.load_dataset(name, data_files=w.data_files, split=w.split,
                                   streaming=w.streaming, cache_dir=w.cache_dir)
        return w.file, ds, lambda _i: None
    path = trace_path(w.trace_dir, w.file)
    builder = _BUILDERS.get(path.suffix)
    if builder is None:
        raise TraceError(path, None, None, None, f"has suffix {path.suffix!r}; valid: "
                         f"{', '.join(_BUILDERS)} (or use hf:<dataset name>)")
    _check_has_rows(path)
    try:
        ds = datasets.load_dataset(builder, data_files=str(path), split="train",
                                   streaming=w.streaming, cache_dir=w.cache_dir)
    except Exception as e:
        cause = e.__cause__ or e.__context__ or e
        raise TraceError(path, None, None, None, f"could not be read as {builder} "
                         f"({type(cause).__name__}: {cause})") from e
    if path.suffix == ".csv":
        return str(path), ds, lambda i: i + 2  # after the header
    if path.suffix == ".jsonl":
        return str(path), ds, lambda i: i + 1
    return str(path), ds, lambda _i: None


def _check_has_rows(path: Path) -> None:
    """Refuse an empty file, a CSV with a header and no row, or bytes that are not UTF-8
    (naming the line) before `datasets` does with a message that names neither."""
    lines = 0
    for text in text_lines(path):
        if text.strip():
            lines += 1
    if lines >= 2:
        return
    if lines == 0:
        raise TraceError(path, None, None, None, "is empty")
    if path.suffix == ".csv":
        raise TraceError(path, None, None, None, "has a header but no rows")


def _count_tokens(tokenizer: str | None) -> Callable[[str], int]:
    if tokenizer is None:
        return lambda text: len(text.split())
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer)
    return lambda text: len(tok(text).input_ids)


def _positive(src: str, line: int | None, row: int, field: str, raw: object) -> int:
    def err(why: str) -> TraceError:
        return TraceError(src, line, field, raw, why if line is not None else f"(row {row}) "
                          + why)

    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise err("is not an integer")
    try:
        value = float(raw)
    except ValueError:
        raise err("is not an integer") from None
    if not value.is_integer():
        raise err("is not an integer")
    if value <= 0:
        raise err("must be positive")
    if value > MAX_TRACE_TOKENS:
        raise err(f"is beyond any model's context (more than {MAX_TRACE_TOKENS:,} tokens)")
    return int(value)


def read_lengths(w: LengthsWorkload, limit: int | None = None) -> Iterator[TraceRecord]:
    """Validated (input, output) lengths of the source's rows (arrival 0), at most `limit`."""
    src, ds, line_of = _open(w)
    count = _count_tokens(w.tokenizer) if w.format == "sharegpt" else None
    n = 0
    try:
        rows = iter(ds)
        for i, row in enumerate(rows):
            if limit is not None and n >= limit:
                return
            line = line_of(i)
            if count is None:
                for col in (w.input_column, w.output_column):
                    if col not in row:
                        raise TraceError(src, line, None, None, f"has no column {col!r}; "
                                         f"columns: {sorted(row)}")
                n_in = _positive(src, line, i, w.input_column, row[w.input_column])
                n_out = _positive(src, line, i, w.output_column, row[w.output_column])
            else:
                conv = row.get("conversations")
                if not isinstance(conv, list) or len(conv) < 2:
                    continue  # as vLLM's ShareGPT sampler: needs a prompt and an answer
                texts = [t.get("value", t.get("content")) if isinstance(t, dict) else None
                         for t in conv[:2]]
                if not all(isinstance(t, str) for t in texts):
                    raise TraceError(src, line, "conversations", str(conv[:2])[:80],
                                     "first two turns need a 'value' or 'content' text")
                n_in, n_out = count(str(texts[0])), count(str(texts[1]))
                if n_in < 1 or n_out < 1:
                    continue
            n += 1
            yield TraceRecord(0.0, n_in, n_out)
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

