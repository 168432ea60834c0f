#!/usr/bin/env python3
"""Trace a workload through the SGLang oracle (shared/oracles/sglang/drive.py), stopping only at
a true stall.

Run with the oracle's python: `$ORACLE/bin/python scripts/sglang_oracle_trace.py --oracle-dir
../shared/oracles/sglang --workload W.jsonl --out REF.jsonl`.

It drives drive.py's own `Oracle` (the real SGLang components and drive.py's mirror of
`Scheduler.get_next_batch_to_run`) with the step loop of drive.py's `run_trace`, and writes the
same records. One difference: `run_trace` declares a stall at the first idle step with nothing
running once every request has arrived, but that step can be the one iteration in which the
running batch still holds the requests that just finished with `batch_is_full` set, so
admission was not even attempted; upstream admits the queue head at the next iteration. Here a
stall needs an idle step in which admission was attempted (`queue_order` is in the record) and
nothing runs. Where `run_trace` does not stop early both write the same bytes
(scripts/record_sglang_conformance.py checks that on every case).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


def trace(drive: Any, workload: str, out_path: str, max_steps: int = 100000) -> dict[str, Any]:
    cfg, reqs = drive.load_workload(workload)
    o = drive.Oracle(cfg, reqs)
    lines: list[str] = []

    def w(obj: dict[str, Any]) -> None:
        lines.append(json.dumps(obj))

    w(dict(cfg, **o.info))
    for r in reqs:
        w({"type": "request", "id": r["id"], "arrival_step": r["arrival_step"],
           "prompt_len": len(r["prompt"]), "max_tokens": r["max_tokens"],
           "ignore_eos": bool(r.get("ignore_eos"))})
    added = [False] * len(reqs)
    n_total, n_fin, n_abort = len(reqs), 0, 0
    n_retract, multi, max_retract = 0, 0, 0
    readmit_hits, readmits, hit_tokens, hits = 0, 0, 0, 0
    seen: set[str] = set()
    prev_chunked = None
    stalled = False
    step = 0
    while n_fin + n_abort < n_total and step < max_steps:
        for i, r in enumerate(reqs):
            if not added[i] and r["arrival_step"] <= step:
                o.waiting.append(o.make_req(r))
                added[i] = True
        rec: dict[str, Any] = {"type": "step", "step": step, "scheduled": [], "preempted": [],
                               "finished": [], "aborted": [],
                               "ratio_in": round(o.tracker.current, 6)}
        batch = o.get_next_batch_to_run(rec)
        if batch is not None:
            rec["mode"] = "extend" if batch.forward_mode.is_extend() else "decode"
            if rec["mode"] == "extend":
                for s in rec["scheduled"]:
                    if s["id"] == prev_chunked:
                        continue
                    if s["id"] in seen:
                        readmits += 1
                        readmit_hits += s["start"] > 0
                    else:
                        hit_tokens += s["start"]
                        hits += s["start"] > 0
                    seen.add(s["id"])
            rec["finished"] = o.run_batch(batch)
        else:
            rec["mode"] = "idle"
            if o.is_fully_idle():
                o.tracker.reset()
            elif (all(added) and o.running.is_empty() and o.chunked_req is None
                  and "queue_order" in rec):
                stalled = True  # admission was tried with nothing running: it never fits
        o.last_batch = batch
        prev_chunked = o.chunked_req.rid if o.chunked_req is not None else None
        n_fin += len(rec["finished"])
        n_abort += len(rec["aborted"])
        n_retract += len(rec["preempted"])
        multi += len(rec["preempted"]) > 1
        max_retract = max(max_retract, len(rec["preempted"]))
        rec.update(running=[r.rid for r in o.running.reqs if not r.finished()],
                   num_waiting=len(o.waiting), kv_avail=int(o.allocator.available_size()),
                   evictable=int(o.tree_cache.evictable_size()),
                   protected=int(o.tree_cache.protected_size()),
                   ratio_out=round(o.tracker.current, 6))
        w(rec)
        step += 1
        if stalled:
            break
    summary = {"type": "summary", "steps": step, "finished": n_fin, "aborted": n_abort,
               "num_reqs": n_total, "stalled": stalled, "retractions": n_retract,
               "multi_retraction_steps": multi, "max_retracted_in_step": max_retract,
               "readmissions": readmits, "readmissions_with_prefix_hit": readmit_hits,
               "first_admissions_with_prefix_hit": hits,
               "first_admission_prefix_hit_tokens": hit_tokens,
               "kv_avail_end": int(o.allocator.available_size()),
               "evictable_end": int(o.tree_cache.evictable_size()),
               "protected_end": int(o.tree_cache.protected_size())}
    w(summary)
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--oracle-dir", required=True, help="the folder holding drive.py")
    ap.add_argument("--workload", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-steps", type=int, default=100000)
    a = ap.parse_args()
    sys.path.insert(0, os.path.abspath(a.oracle_dir))
    import drive  # the shared oracle

    print(json.dumps(trace(drive, a.workload, a.out, a.max_steps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
