"""Replays of real traces: the Azure 2023 CSVs and the Mooncake JSONL files.

The trace folder is `trace_dir` (config `workload.trace_dir`; when unset, the environment
variable `SCHEDBENCH_TRACE_DIR`, else `data/traces`); `file` is relative to it. The whole file
is read and validated (`experiments.inputs.traces`) before any request is built, so a malformed row
fails before the run with its file, line, field and value. Then `transforms.select_records`
picks and rescales the requests and `transforms.output_spec` sets their `max_tokens`.

Prompts: Azure rows carry lengths only, so prompts are seeded random ids (no sharing).
Mooncake rows name their 512-token blocks; with `share_prefixes` every block id becomes the
same 512 tokens wherever it appears (`experiments.inputs.traces.mooncake_block_tokens`), so prefix
caches see the trace's sharing; without, every request gets its own random ids (same lengths,
nothing shared). Mooncake's conversation trace stamps arrivals in ~3 s ticks; `tick_s` spreads
the requests of a tick uniformly over it (seeded, order kept).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from experiments.inputs.traces import (
    MOONCAKE_BLOCK_TOKENS,
    TraceRecord,
    mooncake_block_tokens,
    read_trace,
    spread_ticks,
)
from experiments.inputs.workloads.parse import parse_params
from experiments.inputs.workloads.stream import RequestStream, ordered_stream
from experiments.inputs.workloads.tokens import random_tokens
from experiments.inputs.workloads.transforms import (
    ReplayOptions,
    Selection,
    output_spec,
    select_records,
)
from schedulers.config_range import ranged
from schedulers.contract import Request

TRACE_DIR_ENV = "SCHEDBENCH_TRACE_DIR"
MAX_CACHED_BLOCKS = 4096  # Mooncake blocks kept built (512 tokens each) while replaying
DEFAULT_TRACE_DIR = "data/traces"


def trace_path(trace_dir: str | None, file: str) -> Path:
    """`file` inside the trace folder (see the module docstring); absolute files stay."""
    p = Path(file)
    if not p.is_absolute():
        base = trace_dir or os.environ.get(TRACE_DIR_ENV) or DEFAULT_TRACE_DIR
        p = Path(base) / p
    if not p.is_file():
        raise FileNotFoundError(
            f"trace file {p} does not exist (workload.trace_dir={trace_dir!r}; run "
            f"scripts/fetch_traces.sh, or point workload.trace_dir or ${TRACE_DIR_ENV} at a "
            "folder holding the traces)")
    return p


@dataclass(frozen=True, slots=True, kw_only=True)
class AzureWorkload(ReplayOptions):
    """An Azure LLM inference 2023 trace (`file`: conv or code CSV) and its transforms."""

    file: str = "azure2023/AzureLLMInferenceTrace_conv.csv"
    trace_dir: str | None = None

    def __post_init__(self) -> None:
        ReplayOptions.__post_init__(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class MooncakeWorkload(ReplayOptions):
    """A Mooncake FAST'25 trace (`file`: JSONL) and its transforms (see the module
    docstring for `share_prefixes` and `tick_s`)."""

    file: str = "mooncake/synthetic_trace.jsonl"
    trace_dir: str | None = None
    share_prefixes: bool = True
    tick_s: float | None = ranged(None, low=0.0, low_open=True, high=1e6)

    def __post_init__(self) -> None:
        ReplayOptions.__post_init__(self)
        if self.tick_s is not None and not self.tick_s > 0:
            raise ValueError(f"workload: tick_s={self.tick_s!r}: must be positive (or null)")


PromptFn = Callable[[int, TraceRecord], list[int]]


def request_stream(records: Sequence[TraceRecord] | Selection, opts: ReplayOptions,
                   prompts: Callable[[], PromptFn]) -> RequestStream:
    """Requests `r0 ..` from transformed records, built lazily; `prompts()` gives a fresh
    prompt function `prompt(i, record)` per iteration (seeded state starts afresh). From a
    `Selection`, the stream carries what the transforms dropped or clipped."""
    sel = records if isinstance(records, Selection) else None
    recs = list(records.records if isinstance(records, Selection) else records)

    def make() -> Iterator[Request]:
        prompt = prompts()
        for i, rec in enumerate(recs):
            spec = output_spec(rec.output_length, opts.max_tokens_policy, opts.max_tokens)
            yield Request(
                request_id=f"r{i}",
                prompt_token_ids=prompt(i, rec),
                max_tokens=spec.max_tokens,
                arrival_time=rec.arrival_s,
                ignore_eos=spec.ignore_eos,
                eos_output_len=spec.eos_output_len,
                eos_token_id=opts.eos_token_id,
            )

    arrivals = np.fromiter((r.arrival_s for r in recs), dtype=np.float64, count=len(recs))
    stream = ordered_stream(len(recs), make, arrivals)
    if sel is not None:
        stream = replace(stream, dropped=dict(sel.dropped), clipped=sel.clipped)
    return stream


def random_prompts(opts: ReplayOptions) -> PromptFn:
    """Seeded random prompt ids of each record's length, drawn in request order."""
    rng = np.random.default_rng(np.random.SeedSequence(opts.seed).spawn(2)[1])
    return lambda _i, rec: random_tokens(rng, rec.input_length, opts.vocab_size)


def azure_stream(w: AzureWorkload) -> RequestStream:
    """The requests of an Azure trace replay, built lazily (the trace is read and validated
    now)."""
    records = list(read_trace("azure", trace_path(w.trace_dir, w.file)))
    return request_stream(select_records(records, w), w, lambda: random_prompts(w))


def mooncake_stream(w: MooncakeWorkload) -> RequestStream:
    """The requests of a Mooncake trace replay, built lazily (the trace is read and validated
    now)."""
    records: Sequence[TraceRecord] = list(read_trace("mooncake", trace_path(w.trace_dir,
                                                                            w.file)))
    if w.tick_s is not None:
        records = list(spread_ticks(records, w.tick_s, w.seed))
    selection = select_records(records, w)
    if not w.share_prefixes:
        return request_stream(selection, w, lambda: random_prompts(w))

    def prompts() -> PromptFn:
        # Recently used blocks only: a block's tokens are a pure function of its id, so the
        # bound changes memory, not prompts.
        blocks: OrderedDict[int, list[int]] = OrderedDict()

        def prompt(_i: int, rec: TraceRecord) -> list[int]:
            tokens: list[int] = []
            for hid in rec.hash_ids or ():
                block = blocks.get(hid)
                if block is None:
                    block = blocks[hid] = mooncake_block_tokens(hid, MOONCAKE_BLOCK_TOKENS,
                                                                w.vocab_size)
                    if len(blocks) > MAX_CACHED_BLOCKS:
                        blocks.popitem(last=False)
                else:
                    blocks.move_to_end(hid)
                tokens.extend(block)
                if len(tokens) >= rec.input_length:
                    break
            del tokens[rec.input_length:]
            return tokens

        return prompt

    return request_stream(selection, w, prompts)


def azure_stream_from_config(cfg: Mapping[str, Any], seed: int | None = None) -> RequestStream:
    """The lazy workload of a `name: azure` config mapping."""
    return azure_stream(parse_params(AzureWorkload, cfg, seed))


def mooncake_stream_from_config(cfg: Mapping[str, Any], seed: int | None = None
                                ) -> RequestStream:
    """The lazy workload of a `name: mooncake` config mapping."""
    return mooncake_stream(parse_params(MooncakeWorkload, cfg, seed))
