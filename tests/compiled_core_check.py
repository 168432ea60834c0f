"""Run by tests/test_compiled_core.py in a fresh process under each core (SCHEDBENCH_CORE):
replays configurations of both schedulers that preempt, retract, swap, rank victims and hit
the prefix cache, and prints one JSON line: the core's module files and, per configuration,
a digest of the records and the number of evictions."""

from __future__ import annotations

import json
import sys
from typing import Any

import experiments  # noqa: F401  (applies SCHEDBENCH_CORE before the engine is imported)
from engines.engine import Engine
from engines.executors.sim import SimExecutor
from engines.executors.specs import HardwareSpec, ModelSpec
from experiments.inputs.workloads import LengthDist, SyntheticWorkload, generate_synthetic
from experiments.results.record_source import table_digest
from schedulers.sglang import SglangScheduler, SglangSchedulerConfig
from schedulers.vllm import VllmSchedulerConfig, build_scheduler

MODEL = ModelSpec(name="tiny", hidden_size=256, num_hidden_layers=4, num_attention_heads=8,
                  num_key_value_heads=4, intermediate_size=512, vocab_size=32000)
HW = HardwareSpec(name="hw", peak_flops=1e13, memory_bandwidth=1e11, host_link_bandwidth=1e10)
CAPACITY = 4096
SWAP = {"preemption_mode": "swap", "host_kv_capacity_tokens": 2048}
# SGLang admits more than it can finish, so that it retracts
EAGER = {"schedule_conservativeness": 0.1, "new_token_ratio_decay_steps": 20}
CONFIGS: list[tuple[str, dict[str, Any]]] = [
    ("vllm", {"block_size": 16, "max_num_seqs": 32}),
    ("vllm", {"block_size": 16, "victim_policy": "most_kv", "max_num_batched_tokens": 512,
              "long_prefill_token_threshold": 128}),
    ("vllm", {"block_size": 8, "policy": "priority", "watermark": 0.05, **SWAP}),
    # the pipelined loop (engines/pipeline.py, schedulers/vllm/async_scheduler.py)
    ("vllm", {"block_size": 16, "max_num_seqs": 32, "async_scheduling": True}),
    ("vllm", {"block_size": 8, "policy": "priority", "async_scheduling": True, **SWAP}),
    ("sglang", {"page_size": 16, **EAGER}),
    ("sglang", {"page_size": 1, "schedule_policy": "lpm", "chunked_prefill_size": 256,
                **EAGER}),
    ("sglang", {"page_size": 16, "enable_priority_scheduling": True,
                "victim_policy": "least_progress", **EAGER, **SWAP}),
]


def workload() -> SyntheticWorkload:
    return SyntheticWorkload(
        num_requests=240, request_rate=200.0, seed=7, mode="eos", max_tokens=400,
        prompt_len=LengthDist(dist="lognormal", mean=300, sigma=0.6, min=16, max=1500),
        output_len=LengthDist(dist="lognormal", mean=350, sigma=0.3, min=4, max=400),
        shared_prefix_len=128, num_prefix_groups=4)


def main() -> int:
    out: dict[str, Any] = {
        "modules": {m: getattr(sys.modules[m], "__file__", "") for m in
                    ("schedulers.vllm.scheduler", "schedulers.vllm.async_scheduler",
                     "schedulers.sglang.scheduler", "engines.engine", "engines.pipeline",
                     "engines.records")},
        "runs": [],
    }
    for kind, fields in CONFIGS:
        sched = (build_scheduler(VllmSchedulerConfig.from_capacity(CAPACITY, **fields))
                 if kind == "vllm" else
                 SglangScheduler(SglangSchedulerConfig.from_capacity(CAPACITY, **fields)))
        res = Engine(sched, SimExecutor(MODEL, HW), generate_synthetic(workload())).run()
        evictions = sum(res.requests.column("num_preemptions").to_pylist())
        out["runs"].append([kind, table_digest(res.requests, res.steps), evictions])
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
