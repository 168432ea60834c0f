"""The real-prompt workload (experiments/inputs/workloads/prompts.py) and decoded outputs: prompts
templated over topics and asks, tokenized with a checkpoint's chat template; a real run writes
each request's output text beside its token ids. Uses a tiny word-level tokenizer (no model
download); the SmolLM2 runs are in test_real_model_parity.py."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from engines.model.text import chat_prompt_ids, decode, load_tokenizer
from engines.model.tiny import save_tiny_checkpoint
from experiments.inputs.workloads import build_workload
from experiments.inputs.workloads.prompts import (
    ASKS,
    COUNTRIES,
    TOPICS,
    PromptsWorkload,
    prompt_texts,
)

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ("{% for m in messages %}<|im_start|> {{ m['role'] }} {{ m['content'] }} <|im_end|> "
            "{% endfor %}{% if add_generation_prompt %}<|im_start|> assistant {% endif %}")


def save_word_tokenizer(folder: Path) -> None:
    """A word-level tokenizer of < 256 ids (the tiny model's vocabulary) with a chat template,
    EOS `<|im_end|>` = 2."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words: set[str] = {"user", "assistant"}
    for _, t in ASKS:
        words |= set(t.replace("?", " ").replace(".", " ").replace(",", " ").split())
    for t in TOPICS[:10] + COUNTRIES[:10]:
        words |= set(t.split())
    vocab = {"<unk>": 0, "<|im_start|>": 1, "<|im_end|>": 2}
    for w in sorted(words):
        vocab.setdefault(w, len(vocab))
    assert len(vocab) < 256
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>",
                                   bos_token="<|im_start|>", eos_token="<|im_end|>")
    fast.chat_template = TEMPLATE
    fast.save_pretrained(str(folder))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = save_tiny_checkpoint(tmp_path_factory.mktemp("tok") / "llama")
    save_word_tokenizer(folder)
    return folder


def test_prompts_are_deterministic_and_cover_every_ask() -> None:
    w = PromptsWorkload(num_requests=60, request_rate=1.0, seed=3)
    texts = prompt_texts(w)
    assert texts == prompt_texts(w)
    assert {label for label, _ in texts} == {label for label, _ in ASKS}
    assert texts != prompt_texts(PromptsWorkload(num_requests=60, request_rate=1.0, seed=4))
    only_capitals = prompt_texts(PromptsWorkload(num_requests=10, request_rate=1.0, asks=1))
    assert {label for label, _ in only_capitals} == {"capital"}
    assert all("{" not in text for _, text in texts)


def test_requests_use_the_chat_template_and_the_tokenizer_eos(checkpoint: Path) -> None:
    cfg = {"name": "prompts", "num_requests": 12, "request_rate": 4.0,
           "tokenizer": str(checkpoint), "max_tokens": 9}
    reqs = build_workload(cfg, seed=1)
    tok = load_tokenizer(str(checkpoint))
    texts = prompt_texts(PromptsWorkload(num_requests=12, request_rate=4.0, seed=1))
    for r, (_, text) in zip(reqs, texts, strict=True):
        assert r.prompt_token_ids == chat_prompt_ids(tok, text)
        assert r.prompt_token_ids[:2] == [1, tok.convert_tokens_to_ids("user")]
        assert r.eos_token_id == 2 and r.max_tokens == 9 and not r.ignore_eos
    arrivals = [r.arrival_time for r in reqs]
    assert arrivals == sorted(arrivals) and arrivals[0] == 0.0 and arrivals[-1] > 0
    all_at_once = build_workload({**cfg, "request_rate": math.inf}, seed=1)
    assert {r.arrival_time for r in all_at_once} == {0.0}


def test_output_lengths_file_sets_each_eos(tmp_path: Path, checkpoint: Path) -> None:
    cfg = {"name": "prompts", "num_requests": 3, "request_rate": 1.0,
           "tokenizer": str(checkpoint), "max_tokens": 20}
    good = tmp_path / "lengths.json"
    good.write_text(json.dumps({"r0": 5, "r1": 50, "r2": 1}))
    reqs = build_workload({**cfg, "output_lengths": str(good)})
    assert [r.eos_output_len for r in reqs] == [5, 20, 1]  # capped at max_tokens
    assert [r.eos_output_len for r in build_workload(cfg)] == [20, 20, 20]
    short = tmp_path / "short.json"
    short.write_text(json.dumps({"r0": 5}))
    with pytest.raises(ValueError, match=r"output_lengths=.*no length for 'r1'"):
        build_workload({**cfg, "output_lengths": str(short)})
    with pytest.raises(ValueError, match=r"output_lengths=.*cannot read"):
        build_workload({**cfg, "output_lengths": str(tmp_path / "none.json")})
    with pytest.raises(ValueError, match=r"workload: asks=9"):
        build_workload({**cfg, "asks": 9})
    with pytest.raises(ValueError, match=r"holds no tokenizer files"):
        build_workload({**cfg, "tokenizer": str(tmp_path)})


def test_output_tokens_file_sets_each_eos_and_the_replayed_tokens(tmp_path: Path,
                                                                  checkpoint: Path) -> None:
    cfg = {"name": "prompts", "num_requests": 2, "request_rate": 1.0,
           "tokenizer": str(checkpoint), "max_tokens": 20}
    good = tmp_path / "tokens.json"
    good.write_text(json.dumps({"r0": [5, 6, 2], "r1": list(range(30))}))
    reqs = build_workload({**cfg, "output_tokens": str(good)})
    assert [r.eos_output_len for r in reqs] == [3, 20]  # capped at max_tokens
    assert reqs[0].replay_token_ids == [5, 6, 2] and reqs[1].replay_token_ids == list(range(30))
    assert build_workload(cfg)[0].replay_token_ids is None
    for data, msg in (({"r0": [1]}, r"output_tokens=.*no tokens for 'r1'"),
                      ({"r0": [1], "r1": []}, r"output_tokens=.*'r1' must be a non-empty"),
                      ({"r0": [1], "r1": [-1]}, r"'r1' must be a non-empty list of token ids"),
                      ([1, 2], r"output_tokens=.*expected a JSON object")):
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(data))
        with pytest.raises(ValueError, match=msg):
            build_workload({**cfg, "output_tokens": str(bad)})
    with pytest.raises(ValueError, match=r"output_tokens.*not both"):
        build_workload({**cfg, "output_tokens": str(good), "output_lengths": str(good)})


def test_real_run_writes_output_text(tmp_path: Path, checkpoint: Path) -> None:
    out = tmp_path / "run"
    subprocess.run(
        [sys.executable, "-m", "experiments.run", "executor=real",
         f"executor.model_path={checkpoint}", "executor.kernel=torch", "scheduler=vllm",
         "workload=smollm2_prompts", f"workload.tokenizer={checkpoint}",
         "workload.num_requests=4", "workload.max_tokens=6", "kv_capacity_tokens=512",
         f"hydra.run.dir={out}"],
        cwd=ROOT, check=True, capture_output=True, text=True, env={**os.environ, "CI": "true"})
    df = pd.read_parquet(out / "requests.parquet")
    tok = load_tokenizer(str(checkpoint))
    assert len(df) == 4
    for ids, text in zip(df["output_token_ids"], df["output_text"], strict=True):
        assert len(ids) > 0 and text == decode(tok, list(ids))
    assert any(t.strip() for t in df["output_text"])
