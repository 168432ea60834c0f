"""NewTokenRatioTracker: init 0.7 x conservativeness, floor 0.14 of it, 600-step linear decay,
re-estimate after a retraction."""

from __future__ import annotations

import pytest
from sglang_helpers import req

from schedulers.sglang.new_token_ratio import NewTokenRatioTracker
from schedulers.sglang.req import Req


def test_init_min_decay() -> None:
    t = NewTokenRatioTracker.from_config(1.0)
    assert t.init == pytest.approx(0.7) and t.current == t.init
    assert t.min == pytest.approx(0.7 * 0.14)
    assert t.decay == pytest.approx((0.7 - 0.098) / 600)
    t2 = NewTokenRatioTracker.from_config(0.5)
    assert t2.init == pytest.approx(0.35) and t2.min == pytest.approx(0.35 * 0.14)
    assert NewTokenRatioTracker.from_config(3.0).init == 1.0  # capped at 1


def test_linear_decay_to_the_floor_and_reset() -> None:
    t = NewTokenRatioTracker.from_config(1.0)
    for _ in range(300):
        t.decay_step()
    assert t.current == pytest.approx(0.7 - 300 * t.decay)
    for _ in range(400):
        t.decay_step()
    assert t.current == t.min
    t.reset()
    assert t.current == t.init


def test_estimate_after_retract() -> None:
    t = NewTokenRatioTracker.from_config(1.0)
    a, b = Req(req(0, [1, 2], 100)), Req(req(1, [3], 300))
    a.output_ids.extend([5] * 30)
    b.output_ids.extend([5] * 10)
    # (decoded + 20 per request) / (sum of max_new_tokens + 1)
    assert t.estimate_after_retract([a, b]) == pytest.approx((40 + 40) / 401)
    c = Req(req(2, [1], 10))
    c.output_ids.extend([5] * 9)
    assert t.estimate_after_retract([c]) == 1.0  # capped
    assert t.estimate_after_retract([]) == 0.0
