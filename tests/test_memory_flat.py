"""A replay's memory does not grow with its number of requests (issues 6 and 7).

A child process replays N short synthetic requests the way experiments.run does (a lazy
workload, records spooled to parquet, the summary computed from the files) and reports the
peak of traced Python and numpy allocations; 4x the requests must not move that peak by more
than a small bound. The same replay with today's in-memory records and the whole request list
built up front grows by far more than the bound, which shows the check can fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, tempfile, tracemalloc
from pathlib import Path
from engines.engine import Engine
from engines.executors.sim import SimExecutor
from engines.executors.specs import HardwareSpec, ModelSpec
from engines.records import Recorder
from experiments.results.metrics import compute_metrics, compute_metrics_from_files
from experiments.inputs.workloads import build_workload, stream_workload
from schedulers.vllm.scheduler import VllmScheduler, VllmSchedulerConfig

n, mode = int(sys.argv[1]), sys.argv[2]
cfg = {"name": "synthetic", "num_requests": n, "request_rate": 200.0,
       "prompt_len": {"dist": "uniform", "low": 16, "high": 48},
       "output_len": {"dist": "uniform", "low": 2, "high": 12}}
model = ModelSpec(name="m", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=128, vocab_size=1000)
hw = HardwareSpec(name="h", peak_flops=1e12, memory_bandwidth=1e11, host_link_bandwidth=1e9)
sched = VllmScheduler(VllmSchedulerConfig.from_capacity(4096))
ex = SimExecutor(model, hw)
with tempfile.TemporaryDirectory() as d:
    tracemalloc.start()
    if mode == "spool":
        spool = (Path(d) / "r.parquet", Path(d) / "s.parquet")
        rec = Recorder(spool=spool, request_batch_rows=256, step_batch_rows=1024)
        res = Engine(sched, ex, stream_workload(cfg, 0), recorder=rec).run()
        m = compute_metrics_from_files(*spool)
    else:
        res = Engine(sched, ex, build_workload(cfg, 0)).run()
        m = compute_metrics(res.requests, res.steps)
    peak = tracemalloc.get_traced_memory()[1]
print(json.dumps({"peak": peak, "completed": m["completed"], "steps": res.num_steps}))
"""


def peak_bytes(sizes: tuple[int, ...], mode: str) -> list[dict[str, int]]:
    """One child per size, run side by side; each child's peak and counts."""
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(n), mode], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
             for n in sizes]
    rows = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        rows.append(json.loads(out.strip().splitlines()[-1]))
    return rows


def test_replay_memory_is_flat_in_the_number_of_requests() -> None:
    small, large = peak_bytes((1000, 4000), "spool")
    assert (small["completed"], large["completed"]) == (1000, 4000)
    assert large["steps"] > 3 * small["steps"]
    # O(requests) scalars remain (arrival times and lengths drawn up front, ~10 summary
    # columns): a few tens of bytes per request; the bound leaves no room for prompts, token
    # times or step rows (hundreds of bytes per request).
    assert large["peak"] - small["peak"] < 600_000, (small, large)


def test_the_in_memory_path_grows_with_the_requests() -> None:
    small, large = peak_bytes((1000, 4000), "memory")
    assert large["peak"] - small["peak"] > 2_000_000, (small, large)
