"""What a reader of a run's numbers must know, for summary.json `warnings` and the log:
requests the workload's transforms dropped or clipped, a large share of requests refused or
aborted (the latency statistics then describe a selection), a context length set above the
model's own, schedulers left at different built-in context lengths."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# A run warns when at least this share of the offered requests did not complete (rejected
# for any reason or aborted): the latency statistics then describe a selection.
REFUSED_WARN_SHARE = 0.1


def run_warnings(summary: Mapping[str, Any]) -> list[str]:
    """What a reader of this run's numbers must know (summary.json `warnings`)."""
    out: list[str] = []
    dropped = summary.get("workload_dropped") or {}
    if dropped.get("max_input_len"):
        out.append(f"workload: {dropped['max_input_len']} requests dropped before the run, "
                   "their prompts longer than workload.max_input_len")
    if summary.get("workload_clipped"):
        out.append(f"workload: {summary['workload_clipped']} prompts clipped to "
                   "workload.max_input_len")
    offered = int(summary.get("offered") or 0)
    refused = {"too long for max_model_len": summary.get("rejected_too_long", 0),
               "larger than the KV pool": summary.get("rejected_kv_pool", 0),
               "rejected for another reason": summary.get("rejected_other", 0),
               "refused with 503": summary.get("rejected_503", 0),
               "aborted": summary.get("aborted", 0)}
    not_served = sum(int(v or 0) for v in refused.values())
    if offered and not_served / offered >= REFUSED_WARN_SHARE:
        parts = ", ".join(f"{n} {why}" for why, n in refused.items() if n)
        out.append(f"{summary.get('completed')} of {offered} requests completed; "
                   f"{not_served} ({not_served / offered:.0%}) did not: {parts} "
                   f"(max_model_len={summary.get('max_model_len')} from "
                   f"{summary.get('max_model_len_source')}); latency statistics cover the "
                   "completed requests only")
    ctx, model_ctx = summary.get("max_model_len"), summary.get("model_context_length")
    if ctx is not None and model_ctx is not None and int(ctx) > int(model_ctx):
        out.append(f"max_model_len={ctx} (from {summary.get('max_model_len_source')}) is above "
                   f"the model's context length ({model_ctx}), set so on purpose "
                   "(allow_long_max_model_len=true): requests may run past the positions the "
                   "model was trained for, which a real server would compute wrongly")
    if summary.get("max_model_len_source") == "scheduler default":
        out.append("no context length given (max_model_len, the scheduler's own, or the "
                   "model's max_position_embeddings): each scheduler uses its built-in "
                   "default (vllm 4096, sglang the KV pool), which differ")
    return out
