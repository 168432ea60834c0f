"""The host's load around a real run (`executor=real`): its step times are measured, so on a
machine busier than its cores they include waiting for a core, unevenly over the run and
between jobs (issue 25: a TPOT of 2,618 against 1,925 ms between the schedulers from
contention alone). A run samples the 1-minute load average at its start and at its end,
warns when either is above the core count, and records both and the cores in summary.json
(`host_load_1m_start`, `host_load_1m_end`, `host_cpu_cores`; docs/METRICS.md)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class HostLoad:
    """One sample: the 1-minute load average (None where the platform has none) and the
    machine's CPU cores."""

    load_1m: float | None
    cores: int

    @property
    def overloaded(self) -> bool:
        """More runnable processes, on average, than cores."""
        return self.load_1m is not None and self.load_1m > self.cores


def sample_host_load(loadavg: Callable[[], tuple[float, float, float]] | None = None,
                     cores: int | None = None) -> HostLoad:
    """The load now (`os.getloadavg`, `os.cpu_count`; either replaced in tests)."""
    try:
        load: float | None = (loadavg or os.getloadavg)()[0]
    except (OSError, AttributeError):  # no load average on this platform
        load = None
    return HostLoad(load, cores if cores is not None else (os.cpu_count() or 1))


def load_fields(start: HostLoad, end: HostLoad) -> dict[str, float | int | None]:
    """summary.json's record of the load around the run."""
    return {"host_load_1m_start": _rounded(start.load_1m),
            "host_load_1m_end": _rounded(end.load_1m),
            "host_cpu_cores": end.cores}


def overload_warning(samples: dict[str, HostLoad]) -> str | None:
    """One line when the load was above the cores at any sample (`{"start": ..., "end":
    ...}`), naming each such sample; None when it never was."""
    over = {when: s for when, s in samples.items() if s.overloaded}
    if not over:
        return None
    cores = next(iter(over.values())).cores
    where = ", ".join(f"{s.load_1m:.1f} at the {when}" for when, s in over.items())
    return (f"host load average {where}, above its {cores} CPU cores: the real executor's "
            "measured step times are noise (wall-clock steps include waiting for a core; "
            "CPU-time steps, executor.timer=cpu, the contention for caches and memory), so "
            "compare its latencies and throughput only with runs on an idle machine")


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
