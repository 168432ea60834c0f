"""scripts/bench_replay.py: a small slice replays to the same bytes twice, for both schedulers."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import load_script

from schedulers import registry

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "data" / "traces"


def _bench():  # type: ignore[no-untyped-def]
    return load_script("bench_replay")


@pytest.mark.skipif(not (TRACES / "azure2023").exists(), reason="traces not available")
@pytest.mark.parametrize("scheduler", registry.names())
def test_replay_slice_is_deterministic(scheduler: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCHEDBENCH_TRACE_DIR", str(TRACES))
    bench = _bench()
    a = bench.replay_once(scheduler, "azure_conv", 60, 2048)
    b = bench.replay_once(scheduler, "azure_conv", 60, 2048)
    assert a["requests"] == 60 and a["steps"] > 0
    assert a["digest"] == b["digest"]
    assert a["req_per_wall_s"] > 0 and a["peak_rss_mib"] > 0
