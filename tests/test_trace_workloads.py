"""Workloads from real traces (../shared/data/traces), their transforms, and the generators."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from experiments.inputs.traces import TraceError
from experiments.inputs.workloads import build_workload
from experiments.inputs.workloads.lengths import LengthDist
from experiments.inputs.workloads.tokens import sim_answer
from experiments.inputs.workloads.transforms import output_spec

TRACES = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"
needs_traces = pytest.mark.skipif(not TRACES.is_dir(), reason="../shared/data/traces absent")
CONV = "azure2023/AzureLLMInferenceTrace_conv.csv"


def azure(**kw: object) -> dict[str, object]:
    return {"name": "azure", "trace_dir": str(TRACES), "file": CONV, **kw}


@needs_traces
def test_azure_replay_window_scale_and_determinism() -> None:
    reqs = build_workload(azure(max_requests=200), seed=3)
    assert [r.request_id for r in reqs[:2]] == ["r0", "r1"] and len(reqs) == 200
    assert reqs[0].arrival_time == 0.0
    assert reqs[1].arrival_time == pytest.approx(4.314579)  # the trace's second row
    assert reqs[0].num_prompt_tokens == 374 and reqs[0].max_tokens == 44  # first row
    assert all(r.ignore_eos and r.max_tokens == r.eos_output_len for r in reqs)
    again = build_workload(azure(max_requests=200), seed=3)
    assert [r.prompt_token_ids for r in again] == [r.prompt_token_ids for r in reqs]
    fast = build_workload(azure(max_requests=200, rate_scale=4.0), seed=3)
    assert fast[-1].arrival_time == pytest.approx(reqs[-1].arrival_time / 4)
    window = build_workload(azure(time_window=[100.0, 200.0]), seed=3)
    assert 10 < len(window) < 2000 and window[0].arrival_time == 0.0
    assert window[-1].arrival_time < 100.0


@needs_traces
def test_azure_max_tokens_policies_and_input_limit() -> None:
    capped = build_workload(azure(max_requests=300, max_tokens_policy="cap_eos",
                                  max_tokens=100), seed=0)
    exact = build_workload(azure(max_requests=300), seed=0)
    assert all(r.max_tokens == 100 and not r.ignore_eos for r in capped)
    assert [r.eos_output_len for r in capped] == [min(r.max_tokens, 100) for r in exact]
    fixed = build_workload(azure(max_requests=10, max_tokens_policy="fixed", max_tokens=7), 0)
    assert all(r.max_tokens == r.eos_output_len == 7 and r.ignore_eos for r in fixed)
    dropped = build_workload(azure(max_requests=300, max_input_len=1000), seed=0)
    assert len(dropped) < 300 and all(r.num_prompt_tokens <= 1000 for r in dropped)
    clipped = build_workload(azure(max_requests=300, max_input_len=1000, long_inputs="clip"),
                             seed=0)
    assert len(clipped) == 300 and max(r.num_prompt_tokens for r in clipped) == 1000


@needs_traces
def test_mooncake_shares_prefixes_only_when_asked() -> None:
    base = {"name": "mooncake", "trace_dir": str(TRACES),
            "file": "mooncake/synthetic_trace.jsonl", "max_requests": 120}
    shared = build_workload(base, seed=0)
    plain = build_workload({**base, "share_prefixes": False}, seed=0)
    recs = [json.loads(line) for line in
            (TRACES / "mooncake/synthetic_trace.jsonl").read_text().splitlines()[:120]]
    assert [r.num_prompt_tokens for r in shared] == [r["input_length"] for r in recs]
    # Two requests whose first hash id agrees share their first 512 tokens, and only then.
    first: dict[int, int] = {}
    pair = None
    for i, rec in enumerate(recs):
        h = rec["hash_ids"][0]
        if h in first and rec["input_length"] >= 512 and recs[first[h]]["input_length"] >= 512:
            pair = (first[h], i)
            break
        first.setdefault(h, i)
    assert pair is not None
    a, b = pair
    assert shared[a].prompt_token_ids[:512] == shared[b].prompt_token_ids[:512]
    assert plain[a].prompt_token_ids[:512] != plain[b].prompt_token_ids[:512]
    assert [r.num_prompt_tokens for r in plain] == [r.num_prompt_tokens for r in shared]


@needs_traces
def test_mooncake_conversation_ticks_are_spread() -> None:
    cfg = {"name": "mooncake", "trace_dir": str(TRACES),
           "file": "mooncake/conversation_trace_first1000.jsonl", "max_requests": 100,
           "max_input_len": 200000}
    stamped = build_workload(cfg, seed=0)
    spread = build_workload({**cfg, "tick_s": 3.0}, seed=0)
    assert len({r.arrival_time for r in stamped}) < len({r.arrival_time for r in spread})
    assert [r.arrival_time for r in spread] == sorted(r.arrival_time for r in spread)


def test_trace_folder_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "t.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                    "2023-11-16 18:15:46.6805900,5,3\n"
                                    "2023-11-16 18:15:47.6805900,6,2\n")
    monkeypatch.setenv("SCHEDBENCH_TRACE_DIR", str(tmp_path))
    reqs = build_workload({"name": "azure", "file": "t.csv"}, seed=0)
    assert [(r.num_prompt_tokens, r.max_tokens, r.arrival_time) for r in reqs] == [
        (5, 3, 0.0), (6, 2, 1.0)]
    monkeypatch.setenv("SCHEDBENCH_TRACE_DIR", str(tmp_path / "none"))
    with pytest.raises(FileNotFoundError, match=r"none/t.csv does not exist.*fetch_traces"):
        build_workload({"name": "azure", "file": "t.csv"}, seed=0)


def test_malformed_trace_fails_before_the_run_naming_file_line_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                   "2023-11-16 18:15:46.68,5,3\n2023-11-16 18:15:47.68,-5,3\n")
    with pytest.raises(TraceError, match=r"bad.csv:3: field 'ContextTokens'='-5' must be "
                                         r"positive"):
        build_workload({"name": "azure", "file": str(bad), "max_requests": 1}, seed=0)


def test_lengths_through_datasets(tmp_path: Path) -> None:
    csv = tmp_path / "l.csv"
    csv.write_text("input_length,output_length\n" + "".join(f"{10 + i},{1 + i % 5}\n"
                                                            for i in range(50)))
    cfg = {"name": "lengths", "file": str(csv), "request_rate": 5.0,
           "cache_dir": str(tmp_path / "cache"), "max_requests": 20}
    reqs = build_workload(cfg, seed=1)
    assert [r.num_prompt_tokens for r in reqs] == list(range(10, 30))
    assert [r.max_tokens for r in reqs[:5]] == [1, 2, 3, 4, 5]
    gaps = np.diff([r.arrival_time for r in build_workload({**cfg, "max_requests": None}, 1)])
    assert gaps.mean() == pytest.approx(1 / 5, rel=0.5)
    jsonl = tmp_path / "l.jsonl"
    jsonl.write_text('{"p": 4, "o": 2}\n{"p": 0, "o": 2}\n')
    with pytest.raises(TraceError, match=r"l.jsonl:2: field 'p'=0 must be positive"):
        build_workload({**cfg, "file": str(jsonl), "input_column": "p", "output_column": "o",
                        "max_requests": None}, seed=0)
    share = tmp_path / "sg.json"
    share.write_text(json.dumps([
        {"conversations": [{"from": "human", "value": "a b c"},
                           {"from": "gpt", "value": "d e"}]},
        {"conversations": [{"from": "human", "value": "only one turn"}]},
    ]))
    sg = build_workload({**cfg, "file": str(share), "format": "sharegpt",
                         "max_requests": None}, seed=0)
    assert [(r.num_prompt_tokens, r.max_tokens) for r in sg] == [(3, 2)]


def test_shared_prefix_generator() -> None:
    cfg = {"name": "shared_prefix", "num_groups": 3, "prompts_per_group": 4,
           "system_prompt_len": 64, "question_len": 8, "output_len": 5, "request_rate": 10.0}
    reqs = build_workload(cfg, seed=0)
    assert len(reqs) == 12 and all(r.num_prompt_tokens == 72 for r in reqs)
    groups = {tuple(r.prompt_token_ids[:64]) for r in reqs}
    assert len(groups) == 3
    ordered = build_workload({**cfg, "shuffle": False}, seed=0)
    assert [r.prompt_token_ids[:64] for r in ordered[:4]] == [ordered[0].prompt_token_ids[:64]] * 4
    assert [r.prompt_token_ids for r in reqs] != [r.prompt_token_ids for r in ordered]


def test_multi_turn_history_holds_earlier_turns_and_answers() -> None:
    cfg = {"name": "multi_turn", "num_conversations": 3, "conversation_rate": 1.0,
           "turns": {"dist": "fixed", "value": 3}, "user_len": {"dist": "fixed", "value": 10},
           "output_len": {"dist": "fixed", "value": 4}, "system_prompt_len": 6,
           "turn_gap_s": 5.0}
    reqs = {r.request_id: r for r in build_workload(cfg, seed=0)}
    assert len(reqs) == 9
    t0, t1 = reqs["r0"], reqs["r1"]  # conversation 0, turns 1 and 2
    assert t0.num_prompt_tokens == 16 and t1.num_prompt_tokens == 16 + 4 + 10
    assert t1.prompt_token_ids[:16] == t0.prompt_token_ids
    assert t1.prompt_token_ids[16:20] == sim_answer(0, 16, 4, t0.eos_token_id)
    assert t1.arrival_time > t0.arrival_time
    assert reqs["r3"].prompt_token_ids[:6] == t0.prompt_token_ids[:6]  # shared system prompt
    capped = build_workload({**cfg, "max_context_len": 40}, seed=0)
    assert max(r.num_prompt_tokens + (r.eos_output_len or 0) for r in capped) <= 40


def test_lengths_from_a_file(tmp_path: Path) -> None:
    f = tmp_path / "lens.csv"
    f.write_text("input_length,output_length\n100,1\n200,2\n")
    d = LengthDist("file", path=str(f), column="output_length")
    x = d.sample(np.random.default_rng(0), 200)
    assert set(x.tolist()) == {1, 2}
    with pytest.raises(ValueError, match=r"column='prompt': valid: input_length"):
        LengthDist("file", path=str(f), column="prompt")


def test_output_spec_policies() -> None:
    assert output_spec(50, "trace", None) == output_spec(50, "trace", 80)
    assert output_spec(50, "trace", 20).max_tokens == 20
    assert output_spec(50, "trace", None).ignore_eos
    trace_eos = output_spec(50, "trace_eos", None)
    assert (trace_eos.max_tokens, trace_eos.eos_output_len, trace_eos.ignore_eos) == (50, 50, False)
    assert (output_spec(50, "cap_eos", 20).eos_output_len,
            output_spec(10, "cap_eos", 20).eos_output_len) == (20, 10)
    with pytest.raises(ValueError, match=r"workload: max_tokens=None: max_tokens_policy='fixed' "
                                         r"needs a max_tokens cap"):
        build_workload({"name": "azure", "file": "x.csv", "max_tokens_policy": "fixed"})
    with pytest.raises(ValueError, match=r"workload: unknown field\(s\) window; valid:"):
        build_workload({"name": "azure", "file": "x.csv", "window": [0, 1]})
