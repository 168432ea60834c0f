#!/usr/bin/env python3
"""Record SGLang 0.5.22's real scheduling components on a conformance workload, in the loop the
workload's config line names (docs/CONFORMANCE.md): the project's recording driver for SGLang's
default deployment loop and for priority scheduling. It imports sglang, so it runs with the
oracle's python (../shared/oracles/sglang/install.sh):

    ~/oracle-sglang/bin/python scripts/sglang_oracle_loops.py --workload W.jsonl --out REF.jsonl

`"disable_overlap_schedule": false` drives the components the way
sglang/srt/managers/scheduler.py: Scheduler.event_loop_overlap does; true (or no key: the
cases recorded before the key existed) the way Scheduler.event_loop_normal does. One log line
is one loop iteration: the arrivals due (ingest_requests), `scheduled` and `preempted` from the
iteration's get_next_batch_to_run, `finished` from the batch whose result the iteration
processed (overlap: the batch launched one iteration earlier; `committed` names its step).

Real code: Req, SamplingParams, ScheduleBatch (init_new, prepare_for_extend/decode,
filter_batch, merge_batch, check_decode_mem, retract_decode, copy), SchedulePolicy,
PrefillAdder (add_chunked_req, add_one_req, preempt_to_schedule), RadixCache, ReqToTokenPool,
the token allocators, NewTokenRatioTracker, checkpoint_kv_cache / release_kv_cache. This file
holds the loop around them, written from scheduler.py (event loops, get_next_batch_to_run,
_get_new_batch_prefill_raw, _reqs_finishing_inflight, update_running_batch,
_add_request_to_queue, _set_or_validate_priority, on_idle, is_fully_idle) and
scheduler_components/batch_result_processor.py (process_batch_result_prefill / _decode), with
the fake model of the format: the token of a request is decided by its position, computed when
its result is processed.

Three things are made deterministic, none of which decides anything upstream: the radix
cache's LRU clock (`time.monotonic`) and the waiting-queue entry time (`time.perf_counter`,
the tie-break of the priority sorts) are logical clocks; PrefillAdder.preempt_to_schedule
extends `preempt_list` from a set (an order by object id), which is put back in the order
the method chose the victims (its own sort), as schedulers/sglang/schedule_policy.py does.

Importing sglang on a CPU box needs the oracle's import stubs (triton and torchvision are not
installed): `--stubs-dir`, by default ../shared/oracles/sglang/stubs. See
tests/conformance/sglang/README.md for what this driver does differently from the prototype
shared/oracles/sglang/drive_overlap.py.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import sys
from array import array
from pathlib import Path
from types import SimpleNamespace

from oracle_workload import fake_token, read_records  # beside this script

ROOT = Path(__file__).resolve().parent.parent
# The workload keys this driver reads, with the defaults of schedulers/sglang/conformance.py.
DEFAULTS = {"page_size": 1, "schedule_policy": "fcfs", "chunked_prefill_size": 8192,
            "max_prefill_tokens": 16384, "schedule_conservativeness": 1.0, "random_seed": 0,
            "enable_priority_scheduling": False, "disable_priority_preemption": False,
            "schedule_low_priority_values_first": False,
            "priority_scheduling_preemption_threshold": 10, "disable_overlap_schedule": True}


def read_workload(path: str) -> tuple[dict, list[dict]]:
    """The config line (defaults filled in) and the requests in file order."""
    cfg, reqs = read_records(path)
    if cfg is None or cfg.get("scheduler") != "sglang":
        raise SystemExit(f"{path}: the config line must say scheduler 'sglang'")
    return {**DEFAULTS, **cfg}, reqs


class LogicalClock:
    """Stands in for the `time` module where upstream stamps an order: one tick per call."""

    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        self.t += 1.0
        return self.t

    def __getattr__(self, name: str) -> object:
        import time  # everything else (timers of metrics) from the real module
        return getattr(time, name)


class Loop:
    """The scheduler state of managers/scheduler.py: Scheduler that the loops touch."""

    def __init__(self, cfg: dict, reqs: list[dict]) -> None:
        import torch
        from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
        from sglang.srt.managers.schedule_policy import (
            AddReqResult,
            PrefillAdder,
            SchedulePolicy,
        )
        from sglang.srt.managers.scheduler_components.new_token_ratio_tracker import (
            NewTokenRatioTracker,
        )
        from sglang.srt.mem_cache import radix_cache
        from sglang.srt.mem_cache.allocator import (
            PagedTokenToKVPoolAllocator,
            TokenToKVPoolAllocator,
        )
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.common import checkpoint_kv_cache, release_kv_cache
        from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
        from sglang.srt.mem_cache.radix_cache import RadixCache
        from sglang.srt.runtime_context import get_context, get_schedule
        from sglang.srt.sampling.sampling_params import SamplingParams
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        self.Req, self.ScheduleBatch, self.SamplingParams = Req, ScheduleBatch, SamplingParams
        self.PrefillAdder, self.AddReqResult = PrefillAdder, AddReqResult
        self.checkpoint_kv_cache, self.release_kv_cache = checkpoint_kv_cache, release_kv_cache
        self.spec_none = SpeculativeAlgorithm.NONE
        self.page_size = int(cfg["page_size"])
        self.max_running_requests = int(cfg["req_slots"])
        cps = cfg["chunked_prefill_size"]
        # Scheduler.__init__: a size <= 0 (or none) turns chunking off
        self.chunked_prefill_size = None if cps is None or int(cps) <= 0 else int(cps)
        self.max_prefill_tokens = int(cfg["max_prefill_tokens"])
        self.enable_priority_scheduling = bool(cfg["enable_priority_scheduling"])
        self.schedule_low_priority_values_first = bool(cfg["schedule_low_priority_values_first"])
        self.priority_threshold = int(cfg["priority_scheduling_preemption_threshold"])
        # scheduler.py: Scheduler.__init__ (preemption on by default with priority scheduling)
        self.enable_priority_preemption = (self.enable_priority_scheduling
                                           and not cfg["disable_priority_preemption"])
        # scheduler.py: Scheduler.__init__: enable_overlap = not disable_overlap_schedule
        self.enable_overlap = not bool(cfg["disable_overlap_schedule"])
        get_context().override_server_args(
            device="cpu", page_size=self.page_size, schedule_policy=cfg["schedule_policy"],
            chunked_prefill_size=cps, max_prefill_tokens=self.max_prefill_tokens,
            schedule_conservativeness=float(cfg["schedule_conservativeness"]),
            max_running_requests=self.max_running_requests,
            enable_priority_scheduling=self.enable_priority_scheduling,
            disable_priority_preemption=bool(cfg["disable_priority_preemption"]),
            schedule_low_priority_values_first=self.schedule_low_priority_values_first,
            priority_scheduling_preemption_threshold=self.priority_threshold,
            disable_overlap_schedule=not self.enable_overlap,
        ).install()
        self.get_schedule = get_schedule
        radix_cache.time = LogicalClock()  # the LRU stamps (see the module docstring)
        random.seed(int(cfg["random_seed"]))  # the random policy shuffles with `random`
        max_ctx = max([4096] + [len(r["prompt"]) + r["max_tokens"] + 16 for r in reqs])
        self.req_to_token_pool = ReqToTokenPool(size=self.max_running_requests,
                                                max_context_len=max_ctx, device="cpu",
                                                enable_memory_saver=False)
        kv_size = int(cfg["kv_size"])
        if self.page_size == 1:
            self.allocator = TokenToKVPoolAllocator(size=kv_size, dtype=torch.float16,
                                                    device="cpu", kvcache=SimpleNamespace(),
                                                    need_sort=False)
        else:
            self.allocator = PagedTokenToKVPoolAllocator(
                size=kv_size, page_size=self.page_size, dtype=torch.float16, device="cpu",
                kvcache=SimpleNamespace(), need_sort=False)
        self.tree_cache = RadixCache(CacheInitParams(
            disable=False, req_to_token_pool=self.req_to_token_pool,
            token_to_kv_pool_allocator=self.allocator, page_size=self.page_size))
        # scheduler.py: Scheduler.init_schedule_policy
        self.policy = SchedulePolicy(cfg["schedule_policy"], self.tree_cache, False,
                                     self.enable_priority_scheduling,
                                     self.schedule_low_priority_values_first)
        self.tracker = NewTokenRatioTracker.from_config()
        self.model_config = SimpleNamespace(vocab_size=32000, is_encoder_decoder=False,
                                            is_multimodal=False, context_len=max_ctx,
                                            hf_eos_token_id=None)
        self.waiting_queue: list = []
        self.running_batch = ScheduleBatch(reqs=[], batch_is_full=False)
        self.last_batch = None
        self.chunked_req = None
        # event_loop_overlap: result_queue and enable_skip_finishing_decode
        self.result_queue: collections.deque = collections.deque()
        self.enable_skip_finishing_decode = self.enable_overlap
        self.queue_clock = LogicalClock()

    # ---------------------------------------------------------------- intake
    def make_req(self, rec: dict):
        """scheduler.py: handle_generate_request: a Req with the request's priority (None
        when the line has none); no EOS ids, so a request ends by length."""
        params = self.SamplingParams(max_new_tokens=rec["max_tokens"],
                                     ignore_eos=bool(rec.get("ignore_eos")))
        params.normalize(None)
        return self.Req(rec["id"], "", array("q", rec["prompt"]), params, vocab_size=32000,
                        eos_token_ids=set(), priority=rec.get("priority"))

    def add_request_to_queue(self, req) -> None:
        """scheduler.py: _add_request_to_queue (disaggregation off, no queue limit) after
        _set_or_validate_priority (abort_on_priority_when_disabled is off by default)."""
        if self.enable_priority_scheduling and req.priority is None:
            req.priority = (sys.maxsize if self.schedule_low_priority_values_first
                            else -sys.maxsize - 1)
        self.waiting_queue.append(req)
        req.time_stats.set_wait_queue_entry_time(self.queue_clock.monotonic())

    def num_allocatable_reqs(self, running_bs: int) -> int:
        # scheduler.py: get_num_allocatable_reqs (one pipeline stage: the running cap)
        return min(self.max_running_requests - running_bs,
                   self.req_to_token_pool.available_size())

    # ---------------------------------------------------------------- planning
    def get_next_batch_to_run(self, line: dict):
        """scheduler.py: get_next_batch_to_run (no dllm, hisparse, DP attention)."""
        exclude = []
        if self.chunked_req is not None:
            exclude.append(self.chunked_req)
            if self.chunked_req.extend_end > self.chunked_req.prefix_len:
                self.checkpoint_kv_cache(self.chunked_req, self.tree_cache)  # stash
        last = self.last_batch
        if last is not None and last.forward_mode.is_extend():
            if last.chunked_req is not None and last.chunked_req not in exclude:
                exclude.append(last.chunked_req)
            last_bs = last.batch_size()
            last.filter_batch(reqs_to_exclude=exclude)
            if last.batch_size() < last_bs:
                self.running_batch.batch_is_full = False
            if not last.is_empty() and last is not self.running_batch:
                if self.running_batch.is_empty():
                    self.running_batch = last
                else:
                    self.running_batch.merge_batch(last)
        new_batch = self.get_new_batch_prefill(line)
        if new_batch is not None:
            return new_batch
        if not self.running_batch.is_empty():
            decode = self.update_running_batch(self.running_batch, line)
            return decode if decode is not None and not decode.is_empty() else None
        return None

    def get_new_batch_prefill(self, line: dict):
        """scheduler.py: _get_new_batch_prefill_raw (no grammar, LoRA, hicache, mixed chunk,
        prefill delayer)."""
        rb = self.running_batch
        if self.enable_priority_preemption:
            rb.batch_is_full = False
        if rb.is_empty():
            rb.batch_is_full = False
        if (rb.batch_is_full or not self.waiting_queue) and self.chunked_req is None:
            return None
        if (self.num_allocatable_reqs(len(rb.reqs)) <= 0 and self.chunked_req is None
                and not self.enable_priority_preemption):
            rb.batch_is_full = True
            return None
        self.policy.calc_priority(self.waiting_queue, rb, processed_tokens=0)
        line["queue_order"] = [r.rid for r in self.waiting_queue]
        adder = self.PrefillAdder(
            self.page_size, self.tree_cache, self.allocator, rb, self.tracker.current,
            self.max_prefill_tokens, self.chunked_prefill_size, 0, self.priority_threshold,
            max_prefill_bs=0, max_running_requests=self.max_running_requests,
            prefill_max_requests=self.get_schedule().prefill_max_requests,
            prefill_delayer_single_pass=None, dllm_config=None,
            waiting_queue_len=len(self.waiting_queue), prefill_tile_block_m=64)
        if self.chunked_req is not None:
            self.chunked_req.init_next_round_input()
            adder.chunked_req_limit = self.policy.shortest_prefill_chunk_limit(
                self.chunked_req, self.waiting_queue, adder.rem_chunk_tokens or 0,
                self.page_size)
            self.chunked_req = adder.add_chunked_req(self.chunked_req)
        for req in self.waiting_queue:
            if len(adder.can_run_list) >= self.num_allocatable_reqs(len(rb.reqs)):
                rb.batch_is_full = True
            if rb.batch_is_full and (not self.enable_priority_preemption
                                     or not self.preempt(adder, req)):
                break
            req.init_next_round_input(self.tree_cache)
            res = adder.add_one_req(req, has_chunked_req=self.chunked_req is not None,
                                    truncation_align_size=None)
            if res != self.AddReqResult.CONTINUE:
                if res == self.AddReqResult.NO_TOKEN:
                    rb.batch_is_full = len(adder.can_run_list) > 0 or not rb.is_empty()
                line["stop"] = res.name
                break
        line["preempted"] += [r.rid for r in adder.preempt_list]
        line["priority_preempted"] = [r.rid for r in adder.preempt_list]
        can_run = adder.can_run_list
        if not can_run:
            for r in adder.preempt_list:
                self.add_request_to_queue(r)
            return None
        chosen = set(can_run)
        self.waiting_queue = [r for r in self.waiting_queue if r not in chosen]
        for r in adder.preempt_list:
            self.add_request_to_queue(r)
        if adder.new_chunked_req is not None:
            assert self.chunked_req is None
            self.chunked_req = adder.new_chunked_req
        if self.chunked_req is not None:
            self.chunked_req.inflight_middle_chunks += 1
        batch = self.ScheduleBatch.init_new(
            can_run, self.req_to_token_pool, self.allocator, self.tree_cache,
            self.model_config, self.enable_overlap, self.spec_none,
            chunked_req=self.chunked_req)
        batch.prepare_for_extend()
        line["scheduled"] = [{"id": r.rid, "n": int(r.extend_end - r.prefix_len),
                              "start": int(r.prefix_len)} for r in can_run]
        return batch

    def preempt(self, adder, req) -> bool:
        """PrefillAdder.preempt_to_schedule, its victims in the order it chose them."""
        before = len(adder.preempt_list)
        ok = adder.preempt_to_schedule(req)
        if ok:
            sign = 1 if self.schedule_low_priority_values_first else -1
            adder.preempt_list[before:] = sorted(
                adder.preempt_list[before:],
                key=lambda r: (r.priority * (-sign), -r.time_stats.wait_queue_entry_time))
        return ok

    def reqs_finishing_inflight(self, batch) -> list:
        """scheduler.py: _reqs_finishing_inflight: requests of the queued batch whose result
        commits their last output by length."""
        if not self.enable_skip_finishing_decode or not self.result_queue:
            return []
        assert len(self.result_queue) == 1
        queued = set(self.result_queue[0][1].reqs)
        return [r for r in batch.reqs
                if r in queued and r.beam_group is None and r.next_output_finishes_by_length()]

    def update_running_batch(self, batch, line: dict):
        """scheduler.py: update_running_batch; None skips decode this iteration."""
        initial_bs = batch.batch_size()
        finishing = self.reqs_finishing_inflight(batch)
        batch.filter_batch(reqs_to_exclude=finishing)
        line["finishing_inflight"] = [r.rid for r in finishing]
        if batch.is_empty():
            batch.batch_is_full = False
            return batch
        full = not batch.check_decode_mem()
        if full and finishing:
            batch.batch_is_full = False
            line["skip_decode"] = True
            return None
        if full:
            retracted, ratio, aborted = batch.retract_decode()
            self.tracker.current = ratio
            line["preempted"] += [r.rid for r in retracted]
            line["aborted"] += [r.rid for r in aborted]
            for r in retracted:
                self.add_request_to_queue(r)
        else:
            self.tracker.decay_step()
        if batch.batch_size() < initial_bs:
            batch.batch_is_full = False
        if batch.is_empty():
            return batch
        batch.prepare_for_decode()
        line["scheduled"] = [{"id": r.rid, "n": 1, "start": int(r.kv.kv_committed_len) - 1}
                             for r in batch.reqs]
        return batch

    # ---------------------------------------------------------------- results
    def process_batch_result(self, batch) -> list[str]:
        """batch_result_processor.py: process_batch_result_prefill / _decode with the fake
        model; returns the requests that finished."""
        finished = []
        self.allocator.free_group_begin()
        if batch.forward_mode.is_extend():
            for req in batch.reqs:
                if (req.finished() and req.inflight_middle_chunks <= 0) or req.is_retracted:
                    continue
                if req.inflight_middle_chunks > 0:
                    req.inflight_middle_chunks -= 1
                    continue
                req.output_ids.append(fake_token(req.rid, req.seqlen))
                req.update_finish_state()
                if req.finished():
                    finished.append(req.rid)
                    self.release_kv_cache(req, self.tree_cache, checkpoint=True)
                else:
                    self.checkpoint_kv_cache(req, self.tree_cache)
        else:
            for req in batch.reqs:
                if self.enable_overlap and (req.finished() or req.is_retracted):
                    continue  # its token is dropped; release_kv_cache freed its slot
                req.output_ids.extend([fake_token(req.rid, req.seqlen)])
                req.update_finish_state(1)
                if req.finished():
                    finished.append(req.rid)
                    self.release_kv_cache(req, self.tree_cache, checkpoint=True)
        self.allocator.free_group_end()
        return finished

    def is_fully_idle(self) -> bool:
        # scheduler.py: is_fully_idle
        return (self.running_batch.is_empty() and self.chunked_req is None
                and (self.last_batch is None or self.last_batch.is_empty())
                and (not self.enable_overlap or not self.result_queue)
                and not self.waiting_queue)

    def on_idle(self) -> None:
        # scheduler.py: on_idle (the ratio reset, only when fully idle)
        if self.is_fully_idle():
            self.tracker.reset()

    # ---------------------------------------------------------------- one iteration
    def iterate(self, step: int, line: dict) -> None:
        """One iteration of event_loop_normal or event_loop_overlap after ingest_requests."""
        batch = self.get_next_batch_to_run(line)
        line["mode"] = ("idle" if batch is None else
                        "extend" if batch.forward_mode.is_extend() else "decode")
        if not self.enable_overlap:
            if batch is not None:
                line["finished"] = self.process_batch_result(batch)
                line["committed"] = step
            else:
                self.on_idle()
            self.last_batch = batch
            return
        if batch is not None:  # launch: the result waits in result_queue
            self.result_queue.append((step, batch.copy()))
        if self.last_batch is not None:
            planned, queued = self.result_queue.popleft()
            line["finished"] = self.process_batch_result(queued)
            line["committed"] = planned
        elif batch is None:
            self.on_idle()
        self.last_batch = batch


def record(workload: str, out_path: str, max_steps: int) -> dict:
    """Replay `workload` and write the decision log; returns the summary."""
    cfg, reqs = read_workload(workload)
    loop = Loop(cfg, reqs)
    pending = collections.deque(reqs)  # added in file order (ingest_requests)
    lines: list[dict] = []
    victims: collections.Counter = collections.Counter()
    ended: set[str] = set()
    skips = multi = max_preempted = 0
    stalled = False
    step = 0
    # until every request has ended (its last result processed), as the format's logs do
    while len(ended) < len(reqs) and step < max_steps:
        while pending and pending[0]["arrival_step"] <= step:
            loop.add_request_to_queue(loop.make_req(pending.popleft()))
        line: dict = {"type": "step", "step": step, "scheduled": [], "preempted": [],
                      "finished": [], "aborted": [], "committed": None}
        in_flight = bool(loop.result_queue)  # a result that may free what the head needs
        loop.iterate(step, line)
        ended.update(line["finished"], line["aborted"])
        victims.update(line["preempted"])
        multi += len(line["preempted"]) > 1
        max_preempted = max(max_preempted, len(line["preempted"]))
        skips += bool(line.get("skip_decode"))
        line.update(running=[r.rid for r in loop.running_batch.reqs if not r.finished()],
                    waiting=len(loop.waiting_queue), kv_avail=int(loop.allocator.available_size()),
                    evictable=int(loop.tree_cache.evictable_size()),
                    ratio=round(loop.tracker.current, 6))
        lines.append(line)
        step += 1
        # A true stall: everything arrived, nothing runs or was in flight when the iteration
        # planned, and admission was tried and found no room for the head (upstream would
        # retry it forever).
        if (not pending and not in_flight and line["mode"] == "idle"
                and line.get("stop") == "NO_TOKEN"
                and loop.running_batch.is_empty() and loop.chunked_req is None
                and not loop.result_queue and loop.last_batch is None):
            stalled = True
            break
    name = "overlap" if loop.enable_overlap else "synchronous"
    summary = {"type": "summary", "loop": name, "steps": step, "num_reqs": len(reqs),
               "finished": sum(len(x["finished"]) for x in lines),
               "aborted": sum(len(x["aborted"]) for x in lines), "stalled": stalled,
               "retractions": sum(victims.values()), "victims": len(victims),
               "multi_retraction_steps": multi, "max_preempted_in_step": max_preempted,
               "priority_preemptions": sum(len(x.get("priority_preempted", []))
                                           for x in lines),
               "skip_decode_steps": skips,
               "kv_avail_end": int(loop.allocator.available_size())}
    from importlib.metadata import version
    with open(out_path, "w") as f:
        f.write(json.dumps({**cfg, "type": "config", "loop": name,
                            "sglang_version": version("sglang")}) + "\n")
        for r in reqs:
            f.write(json.dumps({"type": "request", "id": r["id"],
                                "arrival_step": r["arrival_step"],
                                "prompt_len": len(r["prompt"]), "max_tokens": r["max_tokens"],
                                "priority": r.get("priority"),
                                "ignore_eos": bool(r.get("ignore_eos"))}) + "\n")
        for line in lines:
            f.write(json.dumps(line) + "\n")
        f.write(json.dumps(summary) + "\n")
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", required=True, help="a conformance workload (JSONL)")
    ap.add_argument("--out", required=True, help="where the decision log goes")
    ap.add_argument("--max-steps", type=int, default=100_000)
    ap.add_argument("--stubs-dir", default=str(ROOT.parent / "shared" / "oracles" / "sglang"
                                              / "stubs"))
    args = ap.parse_args()
    sys.path.insert(0, args.stubs_dir)
    import logging
    import warnings
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import oracle_stubs  # noqa: F401  (fakes the GPU-only packages the oracle venv lacks)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    print(json.dumps(record(args.workload, args.out, args.max_steps)))


if __name__ == "__main__":
    main()
