#!/usr/bin/env python3
"""Time the real SGLang components on a decode-heavy workload (run with the oracle's python).

    $ORACLE/bin/python scripts/bench_sglang_oracle.py --oracle-dir ../shared/oracles/sglang \
        --workload W.jsonl --steps 300

Drives shared/oracles/sglang/drive.py's `Oracle` (real SchedulePolicy, PrefillAdder,
ScheduleBatch, RadixCache, pools) the way its trace loop does, until every request runs, then
times `get_next_batch_to_run()` + `run_batch()` (the result processing) per decode step.
Prints one JSON line: median and p90 in microseconds, and the batch size.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--oracle-dir", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--steps", type=int, default=300)
    a = ap.parse_args()
    sys.path.insert(0, os.path.abspath(a.oracle_dir))
    import drive  # the shared oracle

    cfg, reqs = drive.load_workload(a.workload)
    o = drive.Oracle(cfg, reqs)
    for r in reqs:  # all arrive at step 0
        o.waiting.append(o.make_req(r))
    for _ in range(100):  # until every request decodes
        batch = o.get_next_batch_to_run({})
        if batch is not None:
            o.run_batch(batch)
        o.last_batch = batch
        if batch is not None and batch.forward_mode.is_decode() and batch.batch_size() == len(reqs):
            break
    else:
        raise SystemExit("the requests did not all reach decoding")
    times = []
    bs = 0
    for _ in range(a.steps):
        rec: dict = {}
        t0 = time.perf_counter()
        batch = o.get_next_batch_to_run(rec)
        if batch is not None:
            o.run_batch(batch)
        t1 = time.perf_counter()
        o.last_batch = batch
        if batch is None or not batch.forward_mode.is_decode():
            raise SystemExit("expected a decode step")
        bs = batch.batch_size()
        times.append((t1 - t0) * 1e6)
    times.sort()
    print(json.dumps({"median_us": statistics.median(times),
                      "p90_us": times[int(0.9 * (len(times) - 1))], "batch_size": bs,
                      "steps": len(times)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
