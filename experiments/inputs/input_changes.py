"""Changes a run makes to its input, counted and logged instead of silent.

A request whose prompt plus `max_tokens` exceeds the scheduler's context (vLLM
`max_model_len`, SGLang `max_req_len`) stops at the context length (finish_reason length),
as upstream does: its output is shorter than the workload asked for. `ContextCapCounter`
counts such requests as they stream by; the run writes the count to summary.json under
`input_changes` (`outputs_cut_at_context`) and logs a warning when any.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sized

from schedulers import registry
from schedulers.contract import Request, Scheduler

_EXAMPLES = 5


def context_limit(scheduler: Scheduler) -> int | None:
    """The most tokens (prompt + output) one request may reach in `scheduler`, as its registry
    entry declares it (None: unknown, e.g. a `target` scheduler)."""
    entry = registry.find(scheduler.name)
    if entry is None or entry.request_limit is None:
        return None
    return entry.request_limit(scheduler)


class ContextCapCounter:
    """Passes `requests` through (same order, same length) counting those whose output the
    context `limit` will cut."""

    def __init__(self, requests: Iterable[Request], limit: int | None) -> None:
        self.requests = requests
        self.limit = limit
        self.count = 0
        self.examples: list[str] = []

    def __iter__(self) -> Iterator[Request]:
        limit = self.limit
        for r in self.requests:
            # a prompt that does not fit is rejected, not cut (counted as a rejection)
            if (limit is not None and r.num_prompt_tokens < limit
                    and r.num_prompt_tokens + r.max_tokens > limit):
                self.count += 1
                if len(self.examples) < _EXAMPLES:
                    self.examples.append(f"{r.request_id} ({r.num_prompt_tokens} + "
                                         f"{r.max_tokens})")
            yield r

    def __len__(self) -> int:
        assert isinstance(self.requests, Sized)
        return len(self.requests)

    def report(self) -> dict[str, int]:
        """The summary's `input_changes` entry."""
        return {"outputs_cut_at_context": self.count}

    def warning(self) -> str | None:
        """The line the run logs when any output is cut."""
        if not self.count:
            return None
        return (f"{self.count} request(s) ask for more tokens than the context of "
                f"{self.limit} holds: their output stops at the context length "
                f"(finish_reason length), e.g. {', '.join(self.examples)}")
