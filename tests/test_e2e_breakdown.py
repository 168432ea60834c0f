"""The E2E breakdown columns of requests.parquet (engines/records.py): queued, prefill,
decode, evicted and recompute time are each accrued on their own, and together they account
for every moment from arrival to finish, under both schedulers and both engine loops."""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa
import pytest

from engines.engine import Engine
from engines.executors.sim import SimExecutor
from engines.executors.specs import HardwareSpec, ModelSpec
from schedulers.contract import Request
from schedulers.sglang import SglangSchedulerConfig
from schedulers.sglang.build import build_scheduler as build_sglang
from schedulers.vllm import VllmSchedulerConfig
from schedulers.vllm.build import build_scheduler as build_vllm

TINY = ModelSpec(name="tiny", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, intermediate_size=128, vocab_size=512)
HW = HardwareSpec(name="hw", peak_flops=1e12, memory_bandwidth=1e9, host_link_bandwidth=1e9)
PARTS = ("queued_s", "prefill_s", "decode_s", "evicted_s", "recompute_s")


def requests(n: int = 40) -> list[Request]:
    """Requests arriving faster than a small pool drains them, their output lengths unknown
    to the schedulers (EOS not ignored: SGLang estimates, and retracts)."""
    return [Request(f"r{i}", [3 + (i * 31 + k * 7) % 500 for k in range(20 + (i * 13) % 60)],
                    max_tokens=200, eos_output_len=100 + (i * 17) % 90,
                    arrival_time=0.002 * i, ignore_eos=False)
            for i in range(n)]


def scheduler(kind: str, swap: bool) -> Any:
    extra: dict[str, Any] = ({"preemption_mode": "swap", "host_kv_capacity_tokens": 256}
                             if swap else {})
    if kind.startswith("vllm"):
        return build_vllm(VllmSchedulerConfig.from_capacity(
            384, block_size=16, max_num_batched_tokens=64, max_num_seqs=16,
            async_scheduling=kind == "vllm_async", **extra))
    return build_sglang(SglangSchedulerConfig.from_capacity(
        384, page_size=1, chunked_prefill_size=64, schedule_conservativeness=0.05,
        disable_overlap_schedule=kind != "sglang_overlap", **extra))


def run(kind: str, swap: bool = False, decode_runs: bool = True) -> pa.Table:
    engine = Engine(scheduler(kind, swap), SimExecutor(TINY, HW, step_overhead_s=0.001),
                    requests(), decode_runs=decode_runs)
    return engine.run().requests


@pytest.mark.parametrize("kind,swap", [("vllm", False), ("vllm", True), ("sglang", False),
                                       ("sglang", True), ("vllm_async", False),
                                       ("sglang_overlap", False)])
def test_parts_sum_to_e2e(kind: str, swap: bool) -> None:
    t = run(kind, swap).to_pylist()
    victims = [r for r in t if r["victim"]]
    assert victims, "the workload must evict for this test to mean anything"
    for r in t:
        assert r["finish_reason"] in ("stop", "length")
        e2e = r["finish_time"] - r["arrival_time"]
        parts = [r[p] for p in PARTS]
        assert all(p >= -1e-12 for p in parts), (r["request_id"], parts)
        assert math.isclose(sum(parts), e2e, rel_tol=1e-9, abs_tol=1e-12), (r, parts)
        assert math.isclose(r["queued_s"], r["first_scheduled_time"] - r["arrival_time"],
                            rel_tol=1e-9, abs_tol=1e-12)
        if not r["victim"]:
            assert r["evicted_s"] == 0.0 and r["recompute_s"] == 0.0
            # never evicted: prefill is first scheduled to first token, decode the rest
            assert math.isclose(r["prefill_s"],
                                r["first_token_time"] - r["first_scheduled_time"],
                                rel_tol=1e-9, abs_tol=1e-12)
    assert all(r["evicted_s"] > 0 for r in victims)
    if not swap:  # a recomputing victim spends time recomputing (swap-ins restore instead)
        assert any(r["recompute_s"] > 0 for r in victims)


@pytest.mark.parametrize("kind", ["vllm", "sglang", "vllm_async", "sglang_overlap"])
def test_decode_runs_keep_the_breakdown(kind: str) -> None:
    a, b = run(kind, decode_runs=True), run(kind, decode_runs=False)
    for p in PARTS:
        assert a.column(p).equals(b.column(p)), p
