"""The synthetic workload generator."""

from __future__ import annotations

import math

import numpy as np
import pytest

from experiments.inputs.workloads import (
    LengthDist,
    SyntheticWorkload,
    build_workload,
    generate_synthetic,
    synthetic_from_config,
)

CFG = {
    "name": "synthetic", "num_requests": 2000, "request_rate": 50.0,
    "prompt_len": {"dist": "lognormal", "mean": 300, "sigma": 0.5, "max": 1000},
    "output_len": {"dist": "uniform", "low": 10, "high": 20},
}


def test_deterministic_and_shaped() -> None:
    a = build_workload(CFG, seed=7)
    b = build_workload(CFG, seed=7)
    c = build_workload(CFG, seed=8)
    key = [(r.request_id, r.arrival_time, r.prompt_token_ids, r.max_tokens) for r in a]
    assert key == [(r.request_id, r.arrival_time, r.prompt_token_ids, r.max_tokens) for r in b]
    assert [r.prompt_token_ids for r in a] != [r.prompt_token_ids for r in c]
    assert [r.request_id for r in a[:3]] == ["r0", "r1", "r2"]
    t = np.array([r.arrival_time for r in a])
    assert t[0] == 0.0 and np.all(np.diff(t) >= 0)
    assert t[-1] / (len(a) - 1) == pytest.approx(1 / 50, rel=0.1)  # Poisson at 50/s
    plen = np.array([r.num_prompt_tokens for r in a])
    assert plen.max() <= 1000 and plen.mean() == pytest.approx(300, rel=0.1)
    olen = [r.eos_output_len or 0 for r in a]
    assert min(olen) == 10 and max(olen) == 20
    # fixed mode: max_tokens is the drawn length and EOS is ignored
    assert all(r.max_tokens == r.eos_output_len and r.ignore_eos for r in a)
    assert all(min(r.prompt_token_ids) >= 3 for r in a[:50])


def test_eos_mode_and_changing_lengths_keeps_arrivals() -> None:
    eos = build_workload({**CFG, "mode": "eos", "max_tokens": 64}, seed=1)
    assert all(r.max_tokens == 64 and not r.ignore_eos for r in eos)
    assert all((r.eos_output_len or 0) <= 20 for r in eos)
    other = build_workload({**CFG, "output_len": {"dist": "fixed", "value": 5}}, seed=1)
    assert [r.arrival_time for r in other] == [r.arrival_time for r in eos]
    assert all(r.eos_output_len == 5 for r in other)


def test_shared_prefixes_and_infinite_rate() -> None:
    w = synthetic_from_config({**CFG, "num_requests": 20, "request_rate": math.inf,
                               "shared_prefix_len": 32, "num_prefix_groups": 2}, seed=0)
    reqs = generate_synthetic(w)
    assert all(r.arrival_time == 0.0 for r in reqs)
    assert len({tuple(r.prompt_token_ids[:32]) for r in reqs}) == 2


def test_errors_name_field_and_valid_values() -> None:
    with pytest.raises(ValueError, match=r"workload.prompt_len: .*dist='zipf': unknown; "
                                         r"valid: fixed, uniform, lognormal"):
        build_workload({**CFG, "prompt_len": {"dist": "zipf"}})
    with pytest.raises(ValueError, match=r"'uniform': parameter 'high' is required"):
        LengthDist("uniform", low=3)
    with pytest.raises(ValueError, match=r"workload: unknown field.*rate; valid:"):
        build_workload({**CFG, "rate": 3})
    with pytest.raises(ValueError, match=r"mode='greedy': valid: fixed, eos"):
        SyntheticWorkload(num_requests=1, request_rate=1.0, mode="greedy",
                          prompt_len=LengthDist("fixed", value=1),
                          output_len=LengthDist("fixed", value=1))
    with pytest.raises(ValueError, match=r"mode 'eos' needs a positive max_tokens"):
        build_workload({**CFG, "mode": "eos"})
