"""The simulated executor: roofline time on a hand-computed case, rule tokens, EOS."""

from __future__ import annotations

import pytest

from engines.cost_model import RooflineCostModel, StepShape
from engines.executors.sim import SimExecutor, rule_token, rule_tokens
from engines.executors.specs import HardwareSpec, ModelSpec
from experiments.conformance.replay import fake_token
from schedulers.contract import Request, ScheduledChunk, StepPlan

# Per layer: q,o 2*8*8=128, k,v 2*8*4=64, MLP 3*8*16=384, norms 16 -> 592; x2 layers = 1184;
# embedding 80 + LM head 80 + final norm 8 -> 1352 parameters.
TOY = ModelSpec(name="toy", hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=1, head_dim=4, intermediate_size=16, vocab_size=10)
SLOW_MEM = HardwareSpec(name="slow-mem", peak_flops=1e6, memory_bandwidth=1e5,
                        host_link_bandwidth=1e5)
FAST_MEM = HardwareSpec(name="fast-mem", peak_flops=1e6, memory_bandwidth=1e7,
                        host_link_bandwidth=1e5)


def chunk(rid: str, start: int, n: int, sample: bool = True) -> ScheduledChunk:
    return ScheduledChunk(rid, [7] * n, start, [0], sample)


def plan(*chunks: ScheduledChunk) -> StepPlan:
    return StepPlan(step=0, page_size=16, chunks=list(chunks))


def registered(*reqs: Request, **kw: object) -> SimExecutor:
    ex = SimExecutor(TOY, SLOW_MEM, step_overhead_s=0.001, **kw)  # type: ignore[arg-type]
    for r in reqs:
        ex.register(r)
    return ex


def test_toy_shape() -> None:
    assert TOY.params == 1352
    assert TOY.kv_bytes_per_token == 2 * 2 * 1 * 4 * 2  # K and V, layers, kv heads, d, bf16


def test_real_parameter_counts() -> None:
    llama3 = ModelSpec(name="llama3_8b", hidden_size=4096, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336,
                       vocab_size=128256)
    qwen2 = ModelSpec(name="qwen2_7b", hidden_size=3584, num_hidden_layers=28,
                      num_attention_heads=28, num_key_value_heads=4, intermediate_size=18944,
                      vocab_size=152064, attention_bias=True)
    assert llama3.params == 8_030_261_248  # as Hugging Face reports it
    assert qwen2.params == 7_615_616_512


def test_roofline_hand_computed() -> None:
    # r0: prefill of 3 tokens at 0; r1: decode at position 5.
    p = plan(chunk("r0", 0, 3), chunk("r1", 5, 1))
    shape = StepShape.of(p)
    # T = 4; A = (3*0 + 3*4/2) + (1*5 + 1) = 12; R = 3 + 6 = 9
    assert (shape.num_tokens, shape.attn_pairs, shape.kv_read_tokens) == (4, 12, 9)
    cost = RooflineCostModel(TOY, SLOW_MEM, step_overhead_s=0.001).cost(shape)
    # FLOPs = 2*1352*4 + 4*L*H*d*A = 10816 + 4*2*2*4*12 = 10816 + 768
    assert cost.flops == 11584
    # bytes = 1352*2 (weights) + 32*9 (KV read) + 32*4 (KV written)
    assert cost.bytes == 2704 + 288 + 128
    assert cost.compute_s == pytest.approx(0.011584)
    assert cost.memory_s == pytest.approx(0.0312)
    assert cost.seconds == pytest.approx(0.0322)  # memory-bound + overhead

    fast = RooflineCostModel(TOY, FAST_MEM, step_overhead_s=0.001).step_time(shape)
    assert fast == pytest.approx(0.011584 + 0.001)  # compute-bound + overhead

    derated = RooflineCostModel(TOY, SLOW_MEM, bandwidth_efficiency=0.5).step_time(shape)
    assert derated == pytest.approx(0.0624)

    r0 = Request("r0", [1, 2, 3], max_tokens=10)
    r1 = Request("r1", [1, 2, 3, 4], max_tokens=10)
    assert registered(r0, r1).execute(p).duration_s == pytest.approx(0.0322)


def test_rule_token() -> None:
    assert rule_token(0, 3) == 4190  # 3 + (3 * 104729) % 31000
    assert rule_token(12, 100) == 27931  # 3 + (12*7919 + 100*104729) % 31000
    assert rule_token(12, 100) == fake_token("r12", 100)


@pytest.mark.parametrize("n", [0, 1, 2, 97, 4096, 30999, 31000, 31001, 62001])
def test_rule_tokens_are_the_rule_at_consecutive_positions(n: int) -> None:
    # decode runs take their tokens from one slice of the rule's cycle: every start residue,
    # runs that wrap around the cycle and runs longer than it
    for index, pos in ((0, 0), (1, 30999), (7, 123456), (19365, 4095), (10**6, 10**7 + 3)):
        assert rule_tokens(index, pos, n) == [rule_token(index, p)
                                              for p in range(pos, pos + n)]


def test_tokens_follow_the_rule_and_eos_comes_at_the_output_length() -> None:
    r = Request("r12", [5] * 10, max_tokens=50, eos_output_len=3)
    ex = registered(r)
    out = []
    for start, n in ((0, 6), (6, 4), (10, 1), (11, 1)):
        res = ex.execute(plan(chunk("r12", start, n, sample=start + n >= 10)))
        out.append(res.sampled_token_ids.get("r12"))
    # Mid-prefill: nothing; then outputs 1 and 2 by the rule (sequence holds 10, 11
    # tokens), and output 3 is EOS.
    assert out == [None, rule_token(12, 10), rule_token(12, 11), 2]
    # A recompute after preemption samples the same tokens at the same positions.
    again = ex.execute(plan(chunk("r12", 4, 7)))
    assert again.sampled_token_ids == {"r12": rule_token(12, 11)}


def test_eos_token_id_and_index_fallback() -> None:
    a = Request("req-a", [1] * 4, max_tokens=2, eos_token_id=99)
    b = Request("req-b", [1] * 4, max_tokens=2, eos_token_id=None)
    ex = registered(a, b)
    res = ex.execute(plan(chunk("req-a", 4, 1), chunk("req-b", 4, 1)))
    # Output 2 of each: a's EOS is 99; b has none, so the rule applies (index = order 1).
    assert res.sampled_token_ids == {"req-a": 99, "req-b": rule_token(1, 5)}


def test_registration_errors() -> None:
    r = Request("r0", [1], max_tokens=1)
    ex = registered(r)
    with pytest.raises(ValueError, match=r"'r0' registered twice"):
        ex.register(r)
    with pytest.raises(KeyError, match=r"'r9' was never registered"):
        ex.execute(plan(chunk("r9", 0, 1)))


def test_bad_specs_name_the_field() -> None:
    with pytest.raises(ValueError, match=r"num_key_value_heads=3 does not divide"):
        ModelSpec(name="m", hidden_size=8, num_hidden_layers=1, num_attention_heads=4,
                  num_key_value_heads=3, intermediate_size=8, vocab_size=8)
    with pytest.raises(ValueError, match=r"peak_flops=0"):
        HardwareSpec(name="h", peak_flops=0, memory_bandwidth=1, host_link_bandwidth=1)
    with pytest.raises(ValueError, match=r"flops_efficiency=1.5"):
        RooflineCostModel(TOY, SLOW_MEM, flops_efficiency=1.5)


def test_replay_tokens_are_sampled_in_order_then_the_rule() -> None:
    """A request with a real run's outputs samples them (execute, token_for and decode runs
    alike), the EOS rule first, rule tokens past the list's end."""
    from schedulers.contract import DecodeRun

    eos = 2
    req = Request("r3", [1] * 10, max_tokens=8, eos_output_len=6, eos_token_id=eos,
                  replay_token_ids=[50, 51, 52, 53])
    ex = registered(req)
    assert ex.execute(plan(chunk("r3", 0, 10))).sampled_token_ids == {"r3": 50}  # after the prompt
    assert [ex.token_for("r3", n) for n in range(10, 16)] == [
        50, 51, 52, 53, rule_token(3, 14), eos]  # output 6 is the EOS
    run = DecodeRun(["r3"], [11], max_steps=8, forward_mode="decode")
    assert ex.decode_run_limit(run) == 5  # its 5th step samples output 6, the EOS
    assert ex.decode_run_tokens(run, 5) == [[51, 52, 53, rule_token(3, 14), eos]]
    assert ex.execute(plan(chunk("r3", 10, 1))).sampled_token_ids == {"r3": 51}
    with pytest.raises(ValueError, match="inside the prompt of 10 tokens"):
        ex.token_for("r3", 9)


def test_a_replayed_eos_before_the_output_length_stops_a_decode_run() -> None:
    from schedulers.contract import DecodeRun

    req = Request("r0", [1] * 4, max_tokens=9, eos_output_len=9, eos_token_id=2,
                  replay_token_ids=[7, 2, 7])
    ex = registered(req)
    run = DecodeRun(["r0"], [5], max_steps=6, forward_mode="decode")
    assert ex.decode_run_limit(run) == 1  # after 5 tokens it samples replay[1] = EOS
    assert ex.decode_run_tokens(run, 1) == [[2]]
