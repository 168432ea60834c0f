"""Replay a conformance workload (docs/CONFORMANCE.md) through our schedulers and compare
decision logs with the ones the real upstream schedulers wrote.

    python -m experiments.conformance replay W.jsonl --out OURS.jsonl
    python -m experiments.conformance compare REF.jsonl OURS.jsonl

The step loop is the format's: at step k add every request whose `arrival_step <= k`, schedule,
run the fake model (one token per request whose prefill is complete, value
`3 + (i * 7919 + p * 104729) % 31000`), commit. Two logs agree at a step when `scheduled` (as a
set of id, n, start), `preempted` (as a list) and `finished` (as a set) are equal.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from engines.pipeline import must_commit, must_commit_overlap
from schedulers import registry
from schedulers.contract import (
    OVERLAP,
    SYNCHRONOUS,
    LoopDeclaringScheduler,
    Request,
    Scheduler,
    StepEvents,
    StepPlan,
    StepResult,
)

WorkloadConfig = dict[str, Any]
RequestRecord = dict[str, Any]


def fake_token(request_id: str, seq_len: int) -> int:
    """The conformance format's token for request `r<i>` when its sequence holds `seq_len`
    tokens."""
    return 3 + (int(request_id[1:]) * 7919 + seq_len * 104729) % 31000


def _open_text(path: str | Path) -> IO[str]:
    """Open a JSONL file, gzipped when its name ends in .gz."""
    if str(path).endswith(".gz"):
        return gzip.open(path, "rt")
    return open(path)


def load_workload(path: str | Path) -> tuple[WorkloadConfig, list[RequestRecord]]:
    """Read a workload file: a config line, then one line per request."""
    cfg: WorkloadConfig | None = None
    reqs: list[RequestRecord] = []
    with _open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not JSON ({e.msg})") from None
            kind = rec.get("type")
            if kind == "config":
                cfg = rec
            elif kind == "request":
                for key in ("id", "arrival_step", "prompt", "max_tokens"):
                    if key not in rec:
                        raise ValueError(f"{path}:{lineno}: request lacks field {key!r}")
                if rec["prompt"] is None:
                    raise ValueError(
                        f"{path}:{lineno}: field 'prompt' is null (a reference log, "
                        "not a workload?)"
                    )
                reqs.append(rec)
            else:
                raise ValueError(f"{path}:{lineno}: unknown record type {kind!r}")
    if cfg is None:
        raise ValueError(f"{path}: no config line")
    entry = registry.find(str(cfg.get("scheduler")))
    if entry is None or entry.conformance is None:
        raise ValueError(
            f"{path}: config field 'scheduler' is {cfg.get('scheduler')!r}; "
            f"valid: {sorted(e.name for e in registry.entries() if e.conformance)}"
        )
    if entry.conformance_rules.sort_arrivals:
        # e.g. the vLLM oracle sorts arrivals by (arrival_step, request number).
        reqs.sort(key=lambda r: (r["arrival_step"], int(r["id"][1:])))
    return cfg, reqs


def _entry(cfg: WorkloadConfig) -> registry.SchedulerEntry:
    entry = registry.get(cfg["scheduler"])
    if entry.conformance is None:
        raise ValueError(f"scheduler {entry.name!r} has no conformance builder")
    return entry


def replay(
    cfg: WorkloadConfig, reqs: list[RequestRecord], max_steps: int = 100_000
) -> Iterable[dict[str, Any]]:
    """Yield our decision log, record by record (config, requests, steps, summary), in the
    loop the built scheduler declares (docs/CONFORMANCE.md, "The step loop")."""
    entry = _entry(cfg)
    assert entry.conformance is not None
    sched = entry.conformance(cfg)
    yield {"type": "config", **{k: v for k, v in cfg.items() if k != "type"}}
    for r in reqs:
        yield {
            "type": "request",
            "id": r["id"],
            "arrival_step": r["arrival_step"],
            "prompt_len": len(r["prompt"]),
            "max_tokens": r["max_tokens"],
        }
    loop = sched.engine_loop if isinstance(sched, LoopDeclaringScheduler) else SYNCHRONOUS
    run = _Replay(sched, entry.conformance_rules, reqs)
    if loop.name == OVERLAP.name:
        yield from run.overlap_steps(max_steps)
    elif loop.pipelined:
        yield from run.batch_queue_steps(loop.batch_queue_size, max_steps)
    else:
        yield from run.synchronous_steps(max_steps)
    yield run.summary()


class _Replay:
    """One workload's requests through one scheduler, step by step, with the fake model."""

    def __init__(self, sched: Scheduler, rules: registry.ConformanceRules,
                 reqs: list[RequestRecord]) -> None:
        self.sched = sched
        self.rules = rules
        self.pending = reqs
        self.next_arrival = 0
        self.n_finished = self.n_aborted = self.n_preempted = 0
        self.steps = 0

    def arrivals_left(self) -> bool:
        return self.next_arrival < len(self.pending)

    def admit(self, step: int) -> list[tuple[str, str]]:
        """Add the requests due at `step`; returns the ones the scheduler refused."""
        rejected: list[tuple[str, str]] = []
        pending = self.pending
        while self.next_arrival < len(pending) and pending[self.next_arrival]["arrival_step"] \
                <= step:
            r = pending[self.next_arrival]
            self.next_arrival += 1
            req = Request(
                request_id=r["id"],
                prompt_token_ids=list(r["prompt"]),
                max_tokens=r["max_tokens"],
                arrival_time=float(step),
                priority=r.get("priority", 0),
                ignore_eos=bool(r.get("ignore_eos", False)),
                eos_token_id=None,  # the format: requests finish by length only
            )
            reason = self.sched.add_request(req)
            if reason is not None:
                rejected.append((req.request_id, reason))
        return rejected

    @staticmethod
    def fake_result(plan: StepPlan) -> StepResult:
        """The fake model: the format's token for every chunk that samples, at the sequence
        length after the chunk (a pipelined plan's placeholder included)."""
        sampled = {c.request_id: fake_token(c.request_id, c.start_pos + len(c.token_ids))
                   for c in plan.chunks if c.sample}
        return StepResult(sampled, duration_s=1.0)

    def synchronous_steps(self, max_steps: int) -> Iterable[dict[str, Any]]:
        """Step k: add the arrivals, schedule, run the fake model, commit."""
        sched = self.sched
        # e.g. the vLLM oracle loops while `Scheduler.has_requests()`, which stays true for
        # one more (empty) step after the last finish, until `finished_req_ids` is flushed.
        flush_finished = self.rules.flush_finished
        finished_last_step = False
        step = 0
        while (self.arrivals_left() or sched.has_unfinished()
               or (flush_finished and finished_last_step)) and step < max_steps:
            rejected = self.admit(step)
            plan = sched.schedule()
            events = sched.update_from_output(plan, self.fake_result(plan))
            rec = self.step_record(step, plan, events, rejected)
            finished_last_step = bool(rec["finished"] or rec["aborted"])
            yield rec
            step += 1

    def batch_queue_steps(self, size: int, max_steps: int) -> Iterable[dict[str, Any]]:
        """One step per call of vLLM's EngineCore.step_with_batch_queue (engines/pipeline.py):
        add the arrivals; if the scheduler has requests, schedule and queue the plan (its fake
        result is known at once: the token depends only on the position); commit the oldest
        plan when the queue is full or nothing more is to be scheduled. A call with nothing
        to schedule or commit is an idle step (upstream blocks on its input queue)."""
        sched = self.sched
        flush_finished = self.rules.flush_finished
        queue: deque[tuple[StepPlan, StepResult]] = deque()
        # upstream's `finished_req_ids`: set by a commit that finishes, cleared by schedule()
        finished_unflushed = False
        step = 0
        while (self.arrivals_left() or sched.has_unfinished() or queue
               or (flush_finished and finished_unflushed)) and step < max_steps:
            rejected = self.admit(step)
            plan: StepPlan | None = None
            commit = bool(queue)
            if sched.has_unfinished() or (flush_finished and finished_unflushed):
                plan = sched.schedule()
                finished_unflushed = False
                queue.appendleft((plan, self.fake_result(plan)))
                commit = must_commit(len(queue), size, bool(plan.chunks), sched.has_unfinished())
            events = sched.update_from_output(*queue.pop()) if commit else None
            finished_unflushed = finished_unflushed or bool(events and events.finished)
            yield self.step_record(step, plan, events, rejected)
            step += 1

    def overlap_steps(self, max_steps: int) -> Iterable[dict[str, Any]]:
        """One step per iteration of SGLang's Scheduler.event_loop_overlap (engines/pipeline.py):
        add the arrivals; plan batch k and launch it (its fake result is known at once);
        process batch k-1's result when one was launched; an idle plan is committed then (it
        carries only aborts). Runs until every request has ended."""
        sched = self.sched
        queue: deque[tuple[StepPlan, StepResult]] = deque()
        step = 0
        while (self.arrivals_left() or sched.has_unfinished() or queue) and step < max_steps:
            rejected = self.admit(step)
            plan = sched.schedule()
            queue.appendleft((plan, self.fake_result(plan)))
            executed = bool(plan.chunks or plan.has_swaps)
            events: StepEvents | None = None
            if must_commit_overlap(len(queue), executed):
                events = sched.update_from_output(*queue.pop())
                if queue and not executed:
                    idle = sched.update_from_output(*queue.pop())
                    events.finished.extend(idle.finished)
            yield self.step_record(step, plan, events, rejected)
            step += 1

    def step_record(self, step: int, plan: StepPlan | None, events: StepEvents | None,
                    rejected: list[tuple[str, str]]) -> dict[str, Any]:
        """The log line of one step: `plan` made in it (None: none), `events` of the plan
        committed in it (None: none)."""
        plan = plan if plan is not None else StepPlan(step=0, page_size=1, forward_mode="idle")
        events = events if events is not None else StepEvents()
        aborted = rejected + plan.aborted + [f for f in events.finished if f[1] == "abort"]
        finished = [rid for rid, why in events.finished if why != "abort"]
        preempted = list(plan.preempted)
        if self.rules.preempted_as_set:
            # e.g. vLLM's SchedulerOutput keeps preempted ids in a set; the oracle sorts them.
            preempted = sorted(preempted, key=lambda x: int(x[1:]))
        self.n_finished += len(finished)
        self.n_aborted += len(aborted)
        self.n_preempted += len(preempted)
        self.steps = step + 1
        return {
            "type": "step",
            "step": step,
            "mode": plan.forward_mode,
            "scheduled": [
                {"id": c.request_id, "n": len(c.token_ids), "start": c.start_pos}
                for c in plan.chunks
            ],
            "preempted": preempted,
            "preempted_order": list(plan.preempted),
            "finished": finished,
            "aborted": [rid for rid, _ in aborted],
            "abort_reasons": {rid: why for rid, why in aborted},
        }

    def summary(self) -> dict[str, Any]:
        return {
            "type": "summary",
            "steps": self.steps,
            "finished": self.n_finished,
            "aborted": self.n_aborted,
            "preemptions": self.n_preempted,
            "num_reqs": len(self.pending),
        }


StepKey = tuple[frozenset[tuple[str, int, int]], list[str], frozenset[str]]


def _step_key(rec: dict[str, Any]) -> StepKey:
    sched = frozenset((s["id"], s["n"], s["start"]) for s in rec.get("scheduled", []))
    return sched, list(rec.get("preempted", [])), frozenset(rec.get("finished", []))


@dataclass
class Comparison:
    """How two decision logs agree, step by step."""

    steps_ref: int
    steps_ours: int
    agreeing: int
    first_diff: int | None
    ref_entry: dict[str, Any] | None
    ours_entry: dict[str, Any] | None

    @property
    def share(self) -> float:
        total = max(self.steps_ref, self.steps_ours)
        return self.agreeing / total if total else 1.0

    @property
    def identical(self) -> bool:
        return self.first_diff is None


def read_steps(path: str | Path) -> list[dict[str, Any]]:
    """The step records of a decision log, in order."""
    with _open_text(path) as f:
        records = (json.loads(line) for line in f if line.strip())
        return [rec for rec in records if rec.get("type") == "step"]


def compare_logs(ref: list[dict[str, Any]], ours: list[dict[str, Any]]) -> Comparison:
    """Compare two lists of step records on the format's common fields."""
    agreeing = 0
    first_diff: int | None = None
    for i in range(max(len(ref), len(ours))):
        a = ref[i] if i < len(ref) else None
        b = ours[i] if i < len(ours) else None
        if a is not None and b is not None and _step_key(a) == _step_key(b):
            agreeing += 1
        elif first_diff is None:
            first_diff = i
    return Comparison(
        steps_ref=len(ref),
        steps_ours=len(ours),
        agreeing=agreeing,
        first_diff=first_diff,
        ref_entry=ref[first_diff] if first_diff is not None and first_diff < len(ref) else None,
        ours_entry=ours[first_diff] if first_diff is not None and first_diff < len(ours) else None,
    )


COMMON_FIELDS = ("step", "scheduled", "preempted", "finished")


def _common(rec: dict[str, Any] | None) -> dict[str, Any] | None:
    if rec is None:
        return None
    out = {k: rec.get(k) for k in COMMON_FIELDS}
    out["scheduled"] = sorted(
        ({"id": s["id"], "n": s["n"], "start": s["start"]} for s in rec.get("scheduled", [])),
        key=lambda s: int(s["id"][1:]),
    )
    return out


def _cmd_replay(args: argparse.Namespace) -> int:
    cfg, reqs = load_workload(args.workload)
    out = Path(args.out)
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "w") as f:
        for rec in replay(cfg, reqs, max_steps=args.max_steps):
            f.write(json.dumps(rec) + "\n")
            if rec["type"] == "summary":
                print(json.dumps(rec))
    tmp.replace(out)
    return 0


def read_summary(path: str | Path) -> dict[str, Any]:
    """The summary record of a decision log ({} when it has none)."""
    with _open_text(path) as f:
        for line in f:
            if line.strip() and (rec := json.loads(line)).get("type") == "summary":
                return dict(rec)
    return {}


def _cmd_compare(args: argparse.Namespace) -> int:
    ref, ours = read_steps(args.ref), read_steps(args.ours)
    if read_summary(args.ref).get("stalled"):
        # The SGLang oracle stops where the real scheduler would spin forever; we abort the
        # stuck request there and go on, so only the steps up to the stall can be compared.
        print(f"reference stalled after {len(ref)} steps: comparing those")
        ours = ours[: len(ref)]
    cmp = compare_logs(ref, ours)
    print(
        f"steps: reference {cmp.steps_ref}, ours {cmp.steps_ours}; "
        f"agreeing {cmp.agreeing} ({100 * cmp.share:.2f}%)"
    )
    if cmp.identical:
        print("every step agrees")
        return 0
    print(f"first differing step: {cmp.first_diff}")
    print("reference:", json.dumps(_common(cmp.ref_entry)))
    print("ours:     ", json.dumps(_common(cmp.ours_entry)))
    return 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.conformance", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("replay", help="replay a workload through our scheduler")
    r.add_argument("workload")
    r.add_argument("--out", required=True)
    r.add_argument("--max-steps", type=int, default=100_000)
    c = sub.add_parser("compare", help="compare a reference log with ours")
    c.add_argument("ref")
    c.add_argument("ours")
    args = ap.parse_args(argv)
    try:
        return _cmd_replay(args) if args.cmd == "replay" else _cmd_compare(args)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
