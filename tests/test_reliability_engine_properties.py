"""Engine-level properties for both schedulers on random workloads: the run ends, every request
ends with a recorded outcome, the metrics agree with the records, and the same inputs give the
same records."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
from conftest import TINY_HW, TINY_MODEL, build_scheduler_for, invariant_check_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engines.engine import Engine
from engines.executors.sim import SimExecutor
from experiments.results.metrics import compute_metrics
from schedulers import registry
from schedulers.contract import Request, Scheduler
from schedulers.victim_policy import VICTIM_POLICIES

TINY, HW = TINY_MODEL, TINY_HW
EXAMPLES = int(os.environ.get("SCHEDBENCH_HYPOTHESIS_EXAMPLES", "40"))


KNOBS: dict[str, dict[str, object]] = {
    "vllm": {"block_size": 16, "max_num_seqs": 8, "max_num_batched_tokens": 128},
    "sglang": {"chunked_prefill_size": 128},
}


def build(kind: str, capacity: int, victim_policy: str = "default"
          ) -> tuple[Scheduler, object]:
    sched = build_scheduler_for(kind, capacity, **KNOBS.get(kind, {}),
                                victim_policy=victim_policy)
    return sched, invariant_check_for(sched)


def make_requests(spec: list[tuple[float, int, int, int, bool]]) -> list[Request]:
    return [Request(f"r{i}", [3 + (i * 31 + k * 7) % 500 for k in range(plen)], max_tokens=cap,
                    arrival_time=t, eos_output_len=min(eos, cap), ignore_eos=ig)
            for i, (t, plen, cap, eos, ig) in enumerate(spec)]


def run(kind: str, capacity: int, spec: list[tuple[float, int, int, int, bool]],
        victim_policy: str = "default") -> tuple[pa.Table, pa.Table]:
    sched, check = build(kind, capacity, victim_policy)
    result = Engine(sched, SimExecutor(TINY, HW, step_overhead_s=0.001), make_requests(spec),
                    check=check).run()  # type: ignore[arg-type]
    return result.requests, result.steps


workloads = st.lists(
    st.tuples(st.floats(0, 2, allow_nan=False).map(lambda x: round(x, 3)),
              st.integers(1, 200), st.integers(1, 120), st.integers(1, 120), st.booleans()),
    min_size=1, max_size=25,
).map(lambda xs: sorted(xs, key=lambda x: x[0]))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(registry.names()), capacity=st.sampled_from([256, 512, 2048]),
       spec=workloads, victim_policy=st.sampled_from(VICTIM_POLICIES))
def test_runs_end_and_metrics_agree_with_records(kind: str, capacity: int,
                                                 spec: list[tuple[float, int, int, int, bool]],
                                                 victim_policy: str) -> None:
    reqs, steps = run(kind, capacity, spec, victim_policy)
    rows = reqs.to_pylist()
    assert len(rows) == len(spec)
    for row, (_, _, cap, eos, ignore) in zip(rows, spec, strict=True):
        reason = row["finish_reason"]
        assert reason in ("stop", "length", "abort", "rejected"), row
        if reason == "length":
            assert row["output_len"] == cap
        elif reason == "stop":
            assert not ignore and row["output_len"] == min(eos, cap)
        else:
            assert row["finish_detail"], "an abort or rejection carries its reason"
    # the per-request and per-step records tell the same story
    assert sum(r["num_preemptions"] for r in rows) == sum(steps.column("num_preempted").to_pylist())
    assert sum(r["output_len"] for r in rows) == sum(len(r["token_times"]) for r in rows)
    m = compute_metrics(reqs, steps)
    assert m["num_preemptions"] == sum(r["num_preemptions"] for r in rows)
    assert m["completed"] == sum(r["finish_reason"] in ("stop", "length") for r in rows)
    assert m["total_output_tokens"] == sum(
        r["output_len"] for r in rows if r["finish_reason"] in ("stop", "length"))
    # same inputs, same records
    again = run(kind, capacity, spec, victim_policy)
    assert parquet_bytes(again[0]) == parquet_bytes(reqs)
    assert parquet_bytes(again[1]) == parquet_bytes(steps)


def parquet_bytes(table: pa.Table) -> bytes:
    """The table as parquet bytes (NaN-safe equality, unlike Table.equals)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return bytes(sink.getvalue())
