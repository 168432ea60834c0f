#!/usr/bin/env python3
"""Record the real vLLM 0.32.0 scheduler's decisions on a conformance workload, in the engine
loop the workload's config line names (docs/CONFORMANCE.md): the project's recording driver for
vLLM's default deployment loop. It imports vllm, so it runs in the oracle's environment:

    ../shared/oracles/vllm/install.sh ~/oracle-vllm
    ~/oracle-vllm/bin/python scripts/vllm_oracle_loops.py --workload W.jsonl --out REF.jsonl

`"async_scheduling": true` drives the `AsyncScheduler` the way vllm/v1/engine/core.py:
EngineCore.step_with_batch_queue does, with a queue of `VllmConfig.max_concurrent_batches`
plans (2 for async scheduling on one pipeline stage); without the key (or false), the
`Scheduler` the way EngineCore.step does. One log line is one engine-loop call: the arrivals due
at that call (EngineCore._process_input_queue runs before each), `scheduled` and `preempted`
from the call's `schedule()`, `finished` from the plan whose result the call committed
(`committed` names that plan's step). A call with nothing to schedule or commit is logged as an
idle line (upstream blocks on its input queue instead): `arrival_step` counts loop calls.

The fake model runner samples, for each scheduled request whose prefill is complete, the
format's token for the sequence length after its chunk (`num_computed_tokens` once scheduled,
the output placeholder included): the token depends only on (request, position), so computing
it at launch gives the value the GPU would return. A partial prefill chunk samples nothing.

Written after a reading of the installed sources; not shared with ../shared/oracles/vllm (see
tests/conformance/vllm/README.md for what this driver does differently from its prototype
drive_async.py).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PYTHONHASHSEED", "0")

import torch
from oracle_workload import fake_token, read_records  # beside this script
from vllm import SamplingParams
from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

# A config.json of a tiny Llama: the scheduler reads only the context length from the model.
MODEL_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
    "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
    "num_hidden_layers": 2, "vocab_size": 32000, "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-6, "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2,
    "tie_word_embeddings": False,
}
# The workload keys and the defaults of schedulers/vllm/conformance.py for absent ones.
DEFAULTS = {"block_size": 16, "max_num_seqs": 128, "max_num_batched_tokens": 2048,
            "max_model_len": 4096, "long_prefill_token_threshold": 0, "reserve_full_isl": True,
            "watermark": 0.0, "policy": "fcfs", "enable_prefix_caching": True,
            "async_scheduling": False}


def read_workload(path: str) -> tuple[dict, list[dict]]:
    """The config line (defaults filled in) and the requests, by (arrival_step, number)."""
    cfg, reqs = read_records(path)
    if cfg is None or "num_blocks" not in cfg:
        raise SystemExit(f"{path}: the config line has no num_blocks")
    reqs.sort(key=lambda r: (r["arrival_step"], int(r["id"][1:])))
    return {**DEFAULTS, **cfg}, reqs


def build_scheduler(cfg: dict, model_dir: str):
    """The upstream scheduler class the config selects, and the batch queue size."""
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(MODEL_CONFIG, f)
    bs = cfg["block_size"]
    async_scheduling = bool(cfg["async_scheduling"])
    vllm_config = VllmConfig(
        model_config=ModelConfig(model=model_dir, skip_tokenizer_init=True, dtype="float32",
                                 max_model_len=cfg["max_model_len"], seed=0),
        scheduler_config=SchedulerConfig(
            max_num_seqs=cfg["max_num_seqs"],
            max_num_batched_tokens=cfg["max_num_batched_tokens"],
            max_model_len=cfg["max_model_len"], is_encoder_decoder=False,
            enable_chunked_prefill=True,
            long_prefill_token_threshold=cfg["long_prefill_token_threshold"],
            scheduler_reserve_full_isl=cfg["reserve_full_isl"], watermark=cfg["watermark"],
            policy=cfg["policy"], async_scheduling=async_scheduling),
        cache_config=CacheConfig(block_size=bs, gpu_memory_utilization=0.9, cache_dtype="auto",
                                 enable_prefix_caching=cfg["enable_prefix_caching"],
                                 prefix_caching_hash_algo="sha256"),
    )
    # vllm/platforms/cpu.py: CpuPlatform.check_and_update_config turns async scheduling off
    # (this is the CPU build); a GPU server keeps it. Set it back, as on a GPU.
    vllm_config.scheduler_config.async_scheduling = async_scheduling
    vllm_config.cache_config.num_gpu_blocks = cfg["num_blocks"]
    kv_cache_config = KVCacheConfig(
        num_blocks=cfg["num_blocks"], kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], FullAttentionSpec(
            block_size=bs, num_kv_heads=1, head_size=1, dtype=torch.float32))],
        hash_block_size=bs)
    # vllm/config/scheduler.py: SchedulerConfig.get_scheduler_cls (AsyncScheduler when async)
    cls = vllm_config.scheduler_config.get_scheduler_cls()
    sched = cls(vllm_config=vllm_config, kv_cache_config=kv_cache_config,
                structured_output_manager=StructuredOutputManager(vllm_config),
                block_size=bs, hash_block_size=bs, log_stats=True)
    # vllm/v1/engine/core.py: EngineCore.__init__ (a batch queue when it holds more than one)
    queue_size = vllm_config.max_concurrent_batches
    if async_scheduling != (queue_size > 1) or async_scheduling != (cls.__name__ ==
                                                                    "AsyncScheduler"):
        raise SystemExit(f"async_scheduling={async_scheduling}: got {cls.__name__} with "
                         f"max_concurrent_batches={queue_size}")
    return sched, queue_size


def make_request(rec: dict, step: int, hasher) -> Request:
    """A request as the frontend hands it over (length-capped only: ignore_eos)."""
    params = SamplingParams(max_tokens=rec["max_tokens"], ignore_eos=True, temperature=0.0)
    return Request(request_id=rec["id"], prompt_token_ids=list(rec["prompt"]),
                   sampling_params=params, pooling_params=None, arrival_time=float(step),
                   priority=rec.get("priority", 0), block_hasher=hasher)


def fake_runner_output(sched, out) -> ModelRunnerOutput:
    """The sampled tokens of plan `out`, made right after `schedule()` returned it."""
    ids = list(out.num_scheduled_tokens)
    sampled = []
    for rid in ids:
        req = sched.requests[rid]
        sampled.append([] if req.is_prefill_chunk else
                       [fake_token(rid, req.num_computed_tokens)])
    return ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                             sampled_token_ids=sampled)


def decisions(sched, out) -> list[dict]:
    """The plan's chunks: n tokens from position start (an admission's start: its hit)."""
    new = {d.req_id for d in out.scheduled_new_reqs}
    resumed = set(out.scheduled_cached_reqs.resumed_req_ids)
    rows = []
    for rid, n in out.num_scheduled_tokens.items():
        req = sched.requests[rid]
        kind = "new" if rid in new else "resumed" if rid in resumed else "running"
        rows.append({"id": rid, "n": n, "start": req.num_computed_tokens - n, "kind": kind,
                     "placeholders": req.num_output_placeholders})
    return rows


def record(workload: str, out_path: str, max_steps: int) -> dict:
    """Replay `workload`, write the decision log to `out_path`; returns the summary."""
    cfg, reqs = read_workload(workload)
    with tempfile.TemporaryDirectory() as model_dir:
        sched, queue_size = build_scheduler(cfg, model_dir)
        hash_fn = get_hash_fn_by_name("sha256")
        init_none_hash(hash_fn)
        hasher = get_request_block_hasher(cfg["block_size"], hash_fn)
        lines, summary = run_loop(sched, queue_size, reqs, hasher, max_steps)
    pool = sched.kv_cache_manager.block_pool
    loop = "batch_queue" if queue_size > 1 else "synchronous"
    with open(out_path, "w") as f:
        f.write(json.dumps({**cfg, "type": "config", "loop": loop,
                            "batch_queue_size": queue_size}) + "\n")
        for r in reqs:
            f.write(json.dumps({"type": "request", "id": r["id"],
                                "arrival_step": r["arrival_step"],
                                "prompt_len": len(r["prompt"]), "max_tokens": r["max_tokens"],
                                "priority": r.get("priority", 0)}) + "\n")
        for line in lines:
            f.write(json.dumps(line) + "\n")
        summary.update(loop=loop, num_reqs=len(reqs),
                       free_blocks_end=pool.get_num_free_blocks())
        f.write(json.dumps(summary) + "\n")
    return summary


def run_loop(sched, queue_size: int, reqs: list[dict], hasher, max_steps: int
             ) -> tuple[list[dict], dict]:
    """EngineCore.step (queue of 1) or EngineCore.step_with_batch_queue, one call per step."""
    pending = collections.deque(reqs)
    queue: collections.deque = collections.deque()  # (step, plan, output), newest first
    lines = []
    victims: collections.Counter = collections.Counter()
    finished = resumed_hits = max_preempted = 0
    step = 0
    while (pending or sched.has_requests() or queue) and step < max_steps:
        while pending and pending[0]["arrival_step"] <= step:
            sched.add_request(make_request(pending.popleft(), step, hasher))
        line = {"type": "step", "step": step, "scheduled": [], "preempted": [],
                "finished": [], "committed": None}
        commit = bool(queue)  # with nothing to schedule the call waits for the oldest plan
        if sched.has_requests():
            out = sched.schedule()
            line["scheduled"] = decisions(sched, out)
            line["preempted"] = sorted(out.preempted_req_ids, key=lambda x: int(x[1:]))
            queue.appendleft((step, out, fake_runner_output(sched, out)))
            executed = out.total_num_scheduled_tokens > 0
            # core.py: step_with_batch_queue returns without waiting while the queue has room
            # and the plan ran something or more is to be scheduled
            commit = len(queue) >= queue_size or not (executed or sched.has_requests())
        if commit:
            planned, out, runner_output = queue.pop()
            line["committed"] = planned
            for outputs in sched.update_from_output(out, runner_output).values():
                line["finished"] += [o.request_id for o in outputs.outputs
                                     if o.finish_reason is not None]
        victims.update(line["preempted"])
        finished += len(line["finished"])
        resumed_hits += sum(1 for s in line["scheduled"] if s["kind"] == "resumed"
                            and s["start"] > 0)
        max_preempted = max(max_preempted, len(line["preempted"]))
        line.update(in_flight=len(queue), running=len(sched.running),
                    waiting=len(sched.waiting) + len(sched.kv_holding_waiting),
                    free_blocks=sched.kv_cache_manager.block_pool.get_num_free_blocks())
        lines.append(line)
        step += 1
    summary = {"type": "summary", "steps": step, "finished": finished,
               "preemptions": sum(victims.values()), "victims": len(victims),
               "max_preempted_in_step": max_preempted,
               "resumed_with_prefix_hit": resumed_hits}
    return lines, summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", required=True, help="a conformance workload (JSONL)")
    ap.add_argument("--out", required=True, help="where the decision log goes")
    ap.add_argument("--max-steps", type=int, default=200_000)
    args = ap.parse_args()
    print(json.dumps(record(args.workload, args.out, args.max_steps)))


if __name__ == "__main__":
    sys.exit(main())
