"""Streaming records: lazy workloads, spooled parquet records and metrics read from files
give the same results as the in-memory path."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import build_scheduler_for

from engines.engine import Engine
from engines.executors.sim import SimExecutor
from engines.executors.specs import HardwareSpec, ModelSpec
from engines.records import Recorder
from experiments.inputs.workloads import build_workload, stream_workload
from experiments.results.metrics import compute_metrics, compute_metrics_from_files
from experiments.results.quantiles import exact_ranks, replayable, stats_ms
from schedulers import registry
from schedulers.contract import Scheduler

MODEL = ModelSpec(name="m", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=128, vocab_size=1000)
HW = HardwareSpec(name="h", peak_flops=1e12, memory_bandwidth=1e11, host_link_bandwidth=1e9)
WORKLOAD = {"name": "synthetic", "num_requests": 120, "request_rate": 400.0,
            "prompt_len": {"dist": "uniform", "low": 16, "high": 200},
            "output_len": {"dist": "uniform", "low": 1, "high": 40}}


def scheduler(name: str) -> Scheduler:
    return build_scheduler_for(name, 1024)


def test_a_stream_counts_without_building_and_yields_the_list() -> None:
    stream = stream_workload(WORKLOAD, seed=3)
    assert len(stream) == 120
    first = next(iter(stream))
    listed = build_workload(WORKLOAD, seed=3)
    assert asdict(first) == asdict(listed[0])
    # each iteration starts afresh from the seed
    assert [asdict(r) for r in stream] == [asdict(r) for r in listed]


@pytest.mark.parametrize("name", registry.names())
def test_spooled_records_and_file_metrics_match_memory(name: str, tmp_path: Path) -> None:
    mem = Engine(scheduler(name), SimExecutor(MODEL, HW), build_workload(WORKLOAD, 0)).run()
    spool = (tmp_path / "r.parquet", tmp_path / "s.parquet")
    rec = Recorder(spool=spool, request_batch_rows=7, step_batch_rows=11)
    res = Engine(scheduler(name), SimExecutor(MODEL, HW), stream_workload(WORKLOAD, 0),
                 recorder=rec).run()
    assert res.requests_path == spool[0] and res.num_steps == mem.num_steps
    steps = pq.read_table(spool[1])
    assert steps.equals(mem.steps)
    reqs = pq.read_table(spool[0])
    assert pq.ParquetFile(spool[0]).metadata.num_row_groups > 1
    assert reqs.column("finish_time").to_pylist() == sorted(
        reqs.column("finish_time").to_pylist())  # written in the order requests ended
    order = pc.sort_indices(reqs, [("arrival_time", "ascending")])
    by_id = {r["request_id"]: r for r in reqs.take(order).to_pylist()}
    assert [by_id[r["request_id"]] for r in mem.requests.to_pylist()] == \
        mem.requests.to_pylist()
    want = compute_metrics(mem.requests, mem.steps, slo_ms={"ttft": 50.0},
                           kv_capacity_tokens=1024)
    got = compute_metrics_from_files(*spool, slo_ms={"ttft": 50.0}, kv_capacity_tokens=1024)
    assert got.keys() == want.keys()
    for k, v in want.items():
        if isinstance(v, float) and not math.isnan(v):
            assert got[k] == pytest.approx(v, rel=1e-12, abs=1e-12), k
        elif isinstance(v, float):
            assert math.isnan(got[k]), k
        else:
            assert got[k] == v, k


def test_a_failed_spooled_run_leaves_no_files(tmp_path: Path) -> None:
    spool = (tmp_path / "r.parquet", tmp_path / "s.parquet")
    rec = Recorder(spool=spool, request_batch_rows=2, step_batch_rows=2)
    eng = Engine(scheduler("vllm"), SimExecutor(MODEL, HW), stream_workload(WORKLOAD, 0),
                 recorder=rec, max_steps=40)
    with pytest.raises(RuntimeError, match="max_steps=40"):
        eng.run()
    assert spool[0].exists()  # the rows written so far
    rec.discard()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("n", [1, 2, 5, 1000, 4097])
def test_exact_quantiles_equal_numpy(n: int) -> None:
    rng = np.random.default_rng(n)
    x = np.concatenate([rng.exponential(0.02, n - n // 2), np.round(rng.random(n // 2), 2)])
    chunks = lambda: iter(np.array_split(x, 5))  # noqa: E731
    got = stats_ms("itl", chunks, (90, 99))
    ms = x * 1000.0
    assert got["median_itl_ms"] == np.median(ms)
    assert got["p90_itl_ms"] == np.percentile(ms, 90)
    assert got["p99_itl_ms"] == np.percentile(ms, 99)
    assert got["mean_itl_ms"] == pytest.approx(np.mean(ms), rel=1e-12)
    assert got["std_itl_ms"] == pytest.approx(np.std(ms), rel=1e-9, abs=1e-12)
    y = np.array([3.0, -1.5, 0.0, -0.0, 2.5, -7.0])
    assert list(exact_ranks(lambda: [y[:2], y[2:]], range(6)).values()) == sorted(y.tolist())


def test_exact_ranks_in_memory_picks_the_same_values_as_the_radix_passes() -> None:
    """Given the number of values, exact_ranks partitions their keys in memory: the same
    values, bit for bit (signed zeros and ties included), as the four radix passes."""
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.exponential(0.02, 3000), np.zeros(50), -np.zeros(50),
                        np.round(rng.normal(0, 1, 900), 1)])
    rng.shuffle(x)
    chunks = lambda: iter(np.array_split(x, 7))  # noqa: E731
    ranks = [*range(0, x.size, 37), x.size - 1]
    radix = exact_ranks(chunks, ranks)
    memory = exact_ranks(chunks, ranks, x.size)
    assert np.array([radix[r] for r in ranks]).view(np.uint64).tolist() == \
        np.array([memory[r] for r in ranks]).view(np.uint64).tolist()
    with pytest.raises(ValueError, match="num_values"):
        exact_ranks(chunks, ranks, x.size + 1)


@pytest.mark.parametrize("budget", [0, 40, 1 << 20])
def test_replayable_reads_the_stream_once_when_it_fits_the_budget(budget: int) -> None:
    parts = [np.arange(3.0), np.arange(2.0), np.zeros(0)]  # 24 + 16 + 0 bytes
    calls = []

    def chunks() -> Iterator[np.ndarray]:
        calls.append(1)
        return iter(parts)

    again = replayable(chunks, budget)
    first = list(again())
    second = list(again())
    assert all(a is b for a, b in zip(first, parts, strict=True))
    assert [a.tolist() for a in second] == [a.tolist() for a in parts]
    assert len(calls) == (1 if budget >= 40 else 2)
    # a pass cut short keeps nothing: the next one reads the stream again
    cut = replayable(chunks, 1 << 20)
    next(cut())
    assert len(list(cut())) == 3
    x = np.random.default_rng(0).random(1000)
    split = lambda: iter(np.array_split(x, 7))  # noqa: E731
    assert stats_ms("itl", replayable(split), (90, 99)) == stats_ms("itl", split, (90, 99))


def test_the_parquet_sink_writes_in_order_and_reports_a_failed_write(tmp_path: Path) -> None:
    """The writer thread keeps the batches' order (one row group each); a batch it cannot
    write fails the next write or close, naming the file, and discard leaves nothing."""
    import pyarrow as pa

    from engines.record_sinks import ParquetSink

    schema = pa.schema([("x", pa.int64())])
    sink = ParquetSink(schema, tmp_path / "ok.parquet")
    for i in range(7):
        sink.write(pa.record_batch([pa.array(range(i * 10, i * 10 + 10))], schema=schema))
    sink.close()
    meta = pq.ParquetFile(tmp_path / "ok.parquet").metadata
    assert meta.num_row_groups == 7
    assert pq.read_table(tmp_path / "ok.parquet").column("x").to_pylist() == list(range(70))

    bad = ParquetSink(schema, tmp_path / "bad.parquet")
    other = pa.schema([("y", pa.string())])
    bad.write(pa.record_batch([pa.array(["a"])], schema=other))
    with pytest.raises(RuntimeError, match=r"bad\.parquet"):
        bad.close()
    bad.discard()
    assert not (tmp_path / "bad.parquet").exists()
