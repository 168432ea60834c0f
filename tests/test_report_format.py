"""Tables: one number format per kind of metric, units in headers, n/a for no data."""

from __future__ import annotations

import math

import pandas as pd

from experiments.report.tables import (
    EVICTION_NOTE,
    SIDE_BY_SIDE,
    format_metric,
    format_ratio,
    markdown,
)


def test_one_format_per_kind_of_metric() -> None:
    assert format_metric("preempted_request_share", 0.1234) == "12.34"
    assert format_metric("median_e2el_ms", 12345.678) == "12,345.7"
    assert format_metric("output_throughput", 2864.4) == "2,864"
    assert format_metric("request_throughput", 10.857) == "10.86"
    assert format_metric("num_preemptions", 1234) == "1,234"
    for missing in (None, math.nan, pd.NA):
        assert format_metric("median_e2el_victim_ms", missing) == "n/a"
    assert format_metric("status", "ok") == "ok"


def test_side_by_side_headers_carry_units_and_evicted_is_defined() -> None:
    for _key, label in SIDE_BY_SIDE:
        assert label.endswith(")"), label  # (ms), (req/s), (%), (count)
    assert "evicted: preempted (vLLM) or retracted (SGLang)" in EVICTION_NOTE


def test_markdown_formats_metric_columns_and_marks_percentages() -> None:
    df = pd.DataFrame({"workload.rate_scale": [1.0, 1.5],
                       "preempted_request_share[vllm]": [0.5, float("nan")],
                       "p99_e2el_ms": [1000.04, 2.0]})
    md = markdown(df)
    assert "| workload.rate_scale | preempted_request_share[vllm] (%) | p99_e2el_ms |" in md
    assert "| 1 | 50.00 | 1,000.0 |" in md and "| 1.5 | n/a | 2.0 |" in md


def test_ratios_are_ratios_whatever_the_metric() -> None:
    assert format_ratio(1.535) == "1.53x" and format_ratio(0.0665) == "0.0665x"
    assert format_ratio(2.0) == "2x" and format_ratio(1234.5) == "1,234x"
    assert format_ratio(float("nan")) == "n/a" and format_ratio(None) == "n/a"
    df = pd.DataFrame({"output_throughput [B/A]": [1.535],
                       "preempted_request_share [B/A]": [0.0665],
                       "preempted_request_share [A]": [0.25]})
    md = markdown(df, ratio_columns=["output_throughput [B/A]",
                                     "preempted_request_share [B/A]"])
    assert ("| output_throughput [B/A] | preempted_request_share [B/A] | "
            "preempted_request_share [A] (%) |") in md
    assert "| 1.53x | 0.0665x | 25.00 |" in md
