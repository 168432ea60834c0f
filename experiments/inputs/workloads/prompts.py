"""Real text prompts for a real model: questions templated over topics, asked for answers of
different lengths, tokenized with the checkpoint's tokenizer and chat template.

Each request asks one of the `ASKS` (a capital, a sum, a one-line answer, a short list, a
paragraph, a long essay) about a topic, a country or two numbers, drawn from the seed, so the
model's own outputs end at its EOS after a few tokens or a few hundred; `max_tokens` is only a
cap. Arrivals are Poisson (gamma
with `burstiness` != 1) at `request_rate`.

The model decides when a request ends, which the simulated executor cannot know: for a sim run
give `output_lengths`, a JSON file `{request_id: output length}` (e.g. written from a real run's
requests.parquet by scripts/real_vs_sim.py), and each request's EOS comes at that length;
without it a sim run's requests run to `max_tokens`. `output_tokens` (a JSON file
`{request_id: [token ids]}`, a real run's outputs) gives both at once: each request's EOS at
its list's length, and the simulated executor samples the listed tokens, so prefix caches see
what the real model produced (two requests with one prompt share their output blocks).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from experiments.inputs.workloads.arrivals import arrival_times, check_rate
from experiments.inputs.workloads.field_error import field_error
from experiments.inputs.workloads.parse import parse_params
from experiments.inputs.workloads.stream import RequestStream, ordered_stream
from experiments.paths import project_path
from schedulers.config_range import (
    ALL_AT_ONCE,
    INT64_MAX,
    MAX_GEN_TOKENS,
    MAX_RATE,
    MIN_RATE,
    ranged,
)
from schedulers.contract import Request

TOPICS = (
    "photosynthesis", "the water cycle", "black holes", "the French Revolution", "volcanoes",
    "the human heart", "machine learning", "the Roman Empire", "climate change", "honey bees",
    "the Moon", "electric cars", "the Internet", "DNA", "the Great Wall of China",
    "earthquakes", "coffee", "the solar system", "vaccines", "the printing press",
    "rainbows", "the Amazon rainforest", "gravity", "chess", "the Olympic Games",
    "penguins", "solar panels", "the Eiffel Tower", "tea", "sleep",
)
COUNTRIES = (
    "France", "Japan", "Italy", "Canada", "Egypt", "Brazil", "Germany", "Spain", "Kenya",
    "Norway", "Mexico", "India", "Greece", "Peru", "Sweden", "Chile", "Poland", "Portugal",
    "Turkey", "Vietnam",
)
# (label, template), from short answers (a few words) to a long essay. Templates may name
# {topic}, {country}, {a} and {b}.
ASKS = (
    ("capital", "What is the capital of {country}?"),
    ("arithmetic", "What is {a} + {b}?"),
    ("sentence", "In one short sentence, what do you know about {topic}?"),
    ("list", "List three facts about {topic}."),
    ("paragraph", "Explain {topic} in one paragraph."),
    ("essay", "Write a detailed essay about {topic} with an introduction, several sections "
              "and a conclusion."),
)


@dataclass(frozen=True, slots=True)
class PromptsWorkload:
    """Parameters of the real-prompt workload (see the module docstring).

    `tokenizer`: a checkpoint folder with tokenizer files and a chat template (relative to the
    project root). `asks`: how many of `ASKS` to draw from (the first ones: 1 gives only
    capitals, 6 all lengths).
    """

    num_requests: int = ranged(low=1, high=10**5)  # each prompt is tokenized up front
    request_rate: float = ranged(low=MIN_RATE, high=MAX_RATE, special=ALL_AT_ONCE)
    tokenizer: str = "models/smollm2-135m-instruct"
    max_tokens: int = ranged(256, low=1, high=MAX_GEN_TOKENS)
    asks: int = ranged(len(ASKS), low=1, high=len(ASKS))
    burstiness: float = ranged(1.0, low=0.01, high=100.0)
    output_lengths: str | None = None
    output_tokens: str | None = None
    seed: int = ranged(0, low=0, high=INT64_MAX)

    def __post_init__(self) -> None:
        bad = partial(field_error, self)

        if self.num_requests < 0:
            raise bad("num_requests", "must be >= 0")
        check_rate("workload", self.request_rate, self.burstiness)
        if self.max_tokens < 1:
            raise bad("max_tokens", "must be at least 1")
        if not 1 <= self.asks <= len(ASKS):
            raise bad("asks", f"must be 1..{len(ASKS)}")
        if self.output_lengths and self.output_tokens:
            raise bad("output_tokens", "give output_lengths or output_tokens, not both "
                      f"(output_lengths={self.output_lengths!r})")


def prompt_texts(w: PromptsWorkload) -> list[tuple[str, str]]:
    """(ask label, prompt text) of every request, drawn from the seed."""
    rng = np.random.default_rng(np.random.SeedSequence(w.seed).spawn(2)[1])
    n = w.num_requests
    asks = rng.integers(0, w.asks, size=n)
    topics = rng.integers(0, len(TOPICS), size=n)
    countries = rng.integers(0, len(COUNTRIES), size=n)
    numbers = rng.integers(2, 100, size=(n, 2))
    return [(ASKS[int(asks[i])][0],
             ASKS[int(asks[i])][1].format(topic=TOPICS[int(topics[i])],
                                          country=COUNTRIES[int(countries[i])],
                                          a=int(numbers[i, 0]), b=int(numbers[i, 1])))
            for i in range(n)]


def _per_request_json(field: str, path: str, num_requests: int, what: str) -> dict[str, Any]:
    """The JSON object `{request_id: value}` of `workload.<field>`; every request
    r0..r{n-1} must be named (`what`: the value's name in errors)."""
    try:
        data = json.loads(project_path(path).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"workload: {field}={path!r}: cannot read ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"workload: {field}={path!r}: expected a JSON object "
                         f"{{request_id: {what}}}")
    missing = [f"r{i}" for i in range(num_requests) if f"r{i}" not in data]
    if missing:
        raise ValueError(f"workload: {field}={path!r}: no {what} for {missing[0]!r} "
                         f"({len(missing)} request(s) missing)")
    return {str(k): v for k, v in data.items()}


def read_output_lengths(path: str, num_requests: int) -> dict[str, int]:
    """`{request_id: output length}` from a JSON file; every request r0..r{n-1} must be named."""
    data = _per_request_json("output_lengths", path, num_requests, "length")
    out = {k: int(v) for k, v in data.items()}
    bad = next((k for k, v in out.items() if v < 1), None)
    if bad is not None:
        raise ValueError(f"workload: output_lengths={path!r}: {bad!r} has length {out[bad]}")
    return out


def read_output_tokens(path: str, num_requests: int) -> dict[str, list[int]]:
    """`{request_id: [output token ids]}` from a JSON file; every request r0..r{n-1} must be
    named, each with at least one token id >= 0."""
    data = _per_request_json("output_tokens", path, num_requests, "tokens")
    for rid, toks in data.items():
        if (not isinstance(toks, list) or not toks
                or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0
                           for t in toks)):
            raise ValueError(f"workload: output_tokens={path!r}: {rid!r} must be a non-empty "
                             f"list of token ids >= 0, got {str(toks)[:60]}")
    return data


def prompts_from_config(cfg: Mapping[str, Any], seed: int | None = None) -> PromptsWorkload:
    """Build a `PromptsWorkload` from a config mapping (`name` is ignored)."""
    return parse_params(PromptsWorkload, cfg, seed)


def prompts_stream(w: PromptsWorkload) -> RequestStream:
    """The requests `r0 .. r{n-1}` in arrival order (prompts tokenized up front)."""
    from engines.model.text import chat_prompt_ids, load_tokenizer

    tok = load_tokenizer(str(project_path(w.tokenizer)))
    if tok.eos_token_id is None:
        raise ValueError(f"workload: tokenizer={w.tokenizer!r}: no eos_token_id")
    eos = int(tok.eos_token_id)
    replay = (read_output_tokens(w.output_tokens, w.num_requests) if w.output_tokens
              else None)
    lengths = (read_output_lengths(w.output_lengths, w.num_requests) if w.output_lengths
               else {rid: len(t) for rid, t in replay.items()} if replay else None)
    prompts = [chat_prompt_ids(tok, text) for _, text in prompt_texts(w)]
    s_arr = np.random.SeedSequence(w.seed).spawn(2)[0]
    arrivals = arrival_times(np.random.default_rng(s_arr), w.num_requests, w.request_rate,
                             w.burstiness)

    def make() -> Iterator[Request]:
        for i, prompt in enumerate(prompts):
            rid = f"r{i}"
            yield Request(
                request_id=rid,
                prompt_token_ids=list(prompt),
                max_tokens=w.max_tokens,
                arrival_time=float(arrivals[i]),
                eos_output_len=min(lengths[rid], w.max_tokens) if lengths else w.max_tokens,
                eos_token_id=eos,
                replay_token_ids=replay[rid] if replay else None,
            )

    return ordered_stream(w.num_requests, make, np.asarray(arrivals, dtype=np.float64))
