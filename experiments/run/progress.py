"""A progress bar for long replays: requests done, simulated time, steps per second.

`ProgressRecorder` is an `engines.records.Recorder` that also moves a tqdm bar (on stderr).
It touches the bar once every `every` steps, so the replay's step loop stays as fast as
without it. `progress_enabled` decides when to show it: `on`, `off`, or `auto` (stderr is a
terminal and the `CI` environment variable is not set to true / 1).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engines.records import Launched, Recorder, _Row
from schedulers.contract import (
    DecodeRun,
    DecodeRunStats,
    SchedulerStats,
    StepEvents,
    StepPlan,
    StepResult,
)

MODES = ("auto", "on", "off")


def progress_enabled(mode: str, stream: Any = None) -> bool:
    """Whether to show the bar for `mode` ("auto", "on", "off")."""
    if mode not in MODES:
        raise ValueError(f"progress={mode!r}: valid: {', '.join(MODES)}")
    if mode != "auto":
        return mode == "on"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        return False
    stream = stream if stream is not None else sys.stderr
    return bool(getattr(stream, "isatty", lambda: False)())


class ProgressRecorder(Recorder):
    """A Recorder that shows requests done, the simulated clock and steps/s in a tqdm bar."""

    def __init__(self, desc: str = "replay", every: int = 512,
                 spool: tuple[str | Path, str | Path] | None = None) -> None:
        super().__init__(spool=spool)
        self._desc = desc
        self._every = every
        self._pending = 0
        self._done = 0
        self._bar: Any = None

    def start(self, total: int | None = None) -> None:
        """Open the bar with one unit per request (`total`: how many, when known)."""
        super().start(total)
        from tqdm import tqdm

        self._bar = tqdm(total=total, desc=self._desc, unit="req", leave=False,
                         dynamic_ncols=True, file=sys.stderr)
        self._steps_at_refresh = 0
        self._wall_at_refresh = self._bar.format_dict["elapsed"]

    def _end(self, row: _Row, reason: str, detail: str, now: float) -> None:
        if not row.reason:
            self._done += 1
        super()._end(row, reason, detail, now)

    def on_commit(self, plan: StepPlan, result: StepResult, events: StepEvents,
                  launched: Launched, start: float, end: float, stats: SchedulerStats,
                  planned_at: float, in_flight: int) -> None:
        """Record the committed step (of either loop); every `every` steps, move the bar."""
        super().on_commit(plan, result, events, launched, start, end, stats, planned_at,
                          in_flight)
        self._pending += 1
        if self._pending >= self._every:
            self._refresh(end)

    def on_decode_run(self, run: DecodeRun, starts: Sequence[float], ends: Sequence[float],
                      stats: DecodeRunStats, planned_at: Sequence[float] | None = None,
                      in_flight: int = 0) -> None:
        """Record the run (of either loop); move the bar when `every` steps have passed."""
        super().on_decode_run(run, starts, ends, stats, planned_at, in_flight)
        self._pending += len(starts)
        if self._pending >= self._every:
            self._refresh(ends[-1])

    def _refresh(self, now: float) -> None:
        bar = self._bar
        if bar is None:
            return
        self._pending = 0
        bar.update(self._done - bar.n)
        elapsed = bar.format_dict["elapsed"]
        steps = self.num_steps
        rate = (steps - self._steps_at_refresh) / max(elapsed - self._wall_at_refresh, 1e-9)
        self._steps_at_refresh, self._wall_at_refresh = steps, elapsed
        bar.set_postfix_str(f"sim {now:,.1f} s, {rate:,.0f} steps/s", refresh=False)

    def close(self) -> None:
        """Close the bar (call once the run ends, also on errors)."""
        if self._bar is not None:
            self._bar.update(self._done - self._bar.n)
            self._bar.close()
            self._bar = None
