"""Readers of the public per-operator GPU measurements behind `cost_model=measured`.

Shared by scripts/build_measured_profiles.py (the derived tables under
conf/profiles/measured/) and scripts/gpu_timing_error.py (the error table on shapes held out
from those tables). Every source, its repository, path, commit and blob, is in `SOURCES`; the
raw files are read from a folder laid out as the repositories are (see `raw_path`):

    RAW/vidur/data/profiling/compute/<gpu>/meta-llama/<model>/mlp.csv      (microsoft/vidur)
    RAW/llmservingsim/profiler/v0/perf_models/H100/meta-llama/Llama-3.1-8B/tp1/layers.csv
                                                                         (casys-kaist/LLMServingSim)

The attention measurements of Vidur (attention.csv, 10 MB) are read from the transcribed
subset committed at scripts/vidur_offline/attention_sample.txt (its header names the blob, the
fork it was read from and the byte ranges).

Every time here is in milliseconds per call of one layer's operator (Vidur's and
LLMServingSim's unit after conversion), as the source's median.
"""

from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ATTENTION_SAMPLE = ROOT / "scripts" / "vidur_offline" / "attention_sample.txt"

# The linear-layer operators (per layer unless noted), in Vidur's names.
LINEAR_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
ELEMENTWISE_OPS = ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act",
                   "add")
# Once per step, not per layer.
STEP_OPS = ("emb",)
# LLMServingSim's extra operators (once per step).
HEAD_OPS = ("lm_head", "final_layernorm")


@dataclass(frozen=True)
class Source:
    """One measured (model, GPU) pair and where its files come from."""

    key: str                # folder name under conf/profiles/measured/
    label: str              # the provenance label (summary.json `step_time_source`)
    gpu: str                # conf/hardware name
    model: str              # conf/model name
    repo: str
    path: str
    commit: str             # the last commit that changed the file
    blob: str
    snapshot: str           # the repository snapshot it was read from
    kind: str               # "vidur_mlp" | "llmservingsim_layers"
    attention: bool = False  # Vidur's attention.csv transcribed (scripts/vidur_offline)
    notes: tuple[str, ...] = field(default_factory=tuple)


VIDUR = "microsoft/vidur"
VIDUR_SNAPSHOT = "7d47513363ec447a741ac5e47241580b47724fbf"
SOURCES: tuple[Source, ...] = (
    Source("vidur_a100_llama2_7b", "vidur a100 llama-2-7b", "a100_80g", "llama2_7b", VIDUR,
           "data/profiling/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv",
           "bee57dafa1eb2dc422dcaec46a66975599a6a242", "479ed2f6ed22049ac444bca9fa44578532cbf28a",
           VIDUR_SNAPSHOT, "vidur_mlp", attention=True),
    Source("vidur_a100_llama3_8b", "vidur a100 llama-3-8b", "a100_80g", "llama3_8b", VIDUR,
           "data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv",
           "2bb7a086c74cd4639e86ff74ab07cd1fa0f9a97f", "36db734a6943305b540bec7544002b12cc74639b",
           VIDUR_SNAPSHOT, "vidur_mlp",
           notes=("attention.csv (FlashInfer backend, blob aa049dead757a81e41cecd4de19d51478fb89497"
                  ") not transcribed: its tp1 attn_kv_cache_save for a 64-token chunk varies "
                  "0.019-0.037 ms with the prior context (it writes only the new tokens), and "
                  "its attn_prefill is flat over kv 512-3008 then jumps; linear layers only",)),
    Source("vidur_h100_llama2_7b", "vidur h100 llama-2-7b", "h100", "llama2_7b", VIDUR,
           "data/profiling/compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv",
           "e26eb8f79fa9a6a7c38eac0f5291302402b20364", "661ea954e9508d67f37d3b24f0e07eb96f83ca46",
           VIDUR_SNAPSHOT, "vidur_mlp",
           notes=("attention.csv not in any stored copy (LFS pointer only); linear layers only",)),
    Source("vidur_a40_llama2_7b", "vidur a40 llama-2-7b", "a40", "llama2_7b", VIDUR,
           "data/profiling/compute/a40/meta-llama/Llama-2-7b-hf/mlp.csv",
           "e26eb8f79fa9a6a7c38eac0f5291302402b20364", "bd8dbc6cbca472e9e82078b2e4f417b9849fe216",
           VIDUR_SNAPSHOT, "vidur_mlp",
           notes=("attention.csv not in any stored copy (LFS pointer only); linear layers only",)),
    Source("llmservingsim_h100_llama3_8b", "llmservingsim h100 llama-3.1-8b", "h100",
           "llama3_8b", "casys-kaist/LLMServingSim",
           "profiler/v0/perf_models/H100/meta-llama/Llama-3.1-8B/tp1/layers.csv",
           "3012eb1843305512415ac66dfef7743c9f1dea64", "8996d40dafbe513b8f6ea78602606a903f6ac39a",
           "5daddb21a545658d5150b535712d0494584b5278", "llmservingsim_layers",
           notes=("attention measured only without prior context (kv_cache 0): prefill from "
                  "scratch, no decode; Llama-3.1-8B has Llama-3-8B's shapes",)),
)
# Where the attention transcription was read (its header repeats this).
VIDUR_ATTENTION = {
    "repo": VIDUR, "path": "data/profiling/compute/a100/meta-llama/Llama-2-7b-hf/attention.csv",
    "blob": "6ce0a3beab1618969d429b4313666b5dff6850dd",
    "read_from": "sw5sh/cs378-assignment3@7ac2fe9fb6cea9d4630659a10c5cccfc9fbdd776",
    "transcription": "scripts/vidur_offline/attention_sample.txt"}


def raw_path(raw: Path, source: Source) -> Path:
    """Where a source's file lies in the raw folder."""
    top = "vidur" if source.kind == "vidur_mlp" else "llmservingsim"
    return raw / top / source.path


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def read_linear(raw: Path, source: Source) -> dict[int, dict[str, float]]:
    """Per number of tokens, each operator's median (ms per call), as the source has it.

    Vidur: the rows of one tensor-parallel worker (several profiling runs of a shape: their
    median). LLMServingSim: q/k/v summed into attn_pre_proj, gate/up into mlp_up_proj, o_proj
    is attn_post_proj, ns converted to ms; its `attn` (prior context 0) is kept as
    `attn_prefill_no_context`.
    """
    path = raw_path(raw, source)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing (see scripts/build_measured_profiles.py for "
                                "where to get it)")
    runs: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        if source.kind == "vidur_mlp":
            for row in reader:
                if row["num_tensor_parallel_workers"] != "1":
                    continue
                n = int(row["num_tokens"])
                for op in (*LINEAR_OPS, *ELEMENTWISE_OPS, *STEP_OPS):
                    runs[n][op].append(float(row[f"time_stats.{op}.median"]))
        else:
            names = {"q_proj": "attn_pre_proj", "k_proj": "attn_pre_proj",
                     "v_proj": "attn_pre_proj", "o_proj": "attn_post_proj",
                     "gate_proj": "mlp_up_proj", "up_proj": "mlp_up_proj",
                     "down_proj": "mlp_down_proj", "act_fn": "mlp_act", "rope": "attn_rope",
                     "input_layernorm": "input_layernorm",
                     "post_layernorm": "post_attention_layernorm", "embedding": "emb",
                     "lm_head": "lm_head", "final_layernorm": "final_layernorm",
                     "attn": "attn_prefill_no_context"}
            sums: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
            for row in reader:
                if row["tp_size"] != "1" or row["kv_cache"] != "0":
                    continue
                op = names[row["layer_name"]]
                sums[int(row["input"])][op] += float(row["latency(ns)"]) / 1e6
            for n, ops in sums.items():
                for op, v in ops.items():
                    runs[n][op].append(v)
    return {n: {op: _median(v) for op, v in ops.items()} for n, ops in sorted(runs.items())}


def read_attention_sample(path: Path = ATTENTION_SAMPLE) -> tuple[
        dict[int, dict[int, float]], dict[int, dict[int, float]]]:
    """The transcribed Vidur attention medians: decode {kv_cache_size: {batch: ms}} and
    prefill {chunk: {kv_cache_size: ms}} (a shape listed twice: the mean of its values)."""
    decode: dict[int, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    prefill: dict[int, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for line in path.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        kind, key, colon, *pairs = line.split()
        if kind not in ("D", "P") or colon != ":":
            raise ValueError(f"{path}: unreadable line {line[:40]!r}")
        table = decode if kind == "D" else prefill
        for pair in pairs:
            k, v = pair.split("=")
            table[int(key)][int(k)].append(float(v))
    return ({g: {k: sum(v) / len(v) for k, v in sorted(row.items())}
             for g, row in sorted(decode.items())},
            {g: {k: sum(v) / len(v) for k, v in sorted(row.items())}
             for g, row in sorted(prefill.items())})


# --- which measured shapes go into the committed tables and which are held out ----------
# Linear operators: every other measured token count is held out (the first and the last are
# kept, so that every held-out count lies between two table rows).
def split_tokens(tokens: list[int]) -> tuple[list[int], list[int]]:
    """(table, held out) of a source's token counts."""
    table = [n for i, n in enumerate(tokens) if i % 2 == 0 or i == len(tokens) - 1]
    held = [n for n in tokens if n not in set(table)]
    return table, held


# Attention: whole groups are held out: the decode contexts 1856 and 1920 (every batch), and
# the prefill chunks 576, 1280, 2560, 3072 and 3392 (every prior context). The transcription
# has two chunk lengths below 544 (160, measured only at prior contexts 2624-3904, and 192):
# both stay in the table.
HELD_DECODE_KV = (1856, 1920)
HELD_PREFILL_CHUNKS = (576, 1280, 2560, 3072, 3392)
