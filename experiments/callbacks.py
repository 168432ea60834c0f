"""Hydra callbacks. `ComparisonCallback` writes a sweep's comparison when a multirun ends.

Registered in conf/config.yaml under `hydra.callbacks.comparison`; its fields can be set
there or from the command line (`hydra.callbacks.comparison.figures=false`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

log = logging.getLogger(__name__)


class ComparisonCallback(Callback):
    """At the end of a multirun: `experiments.report.write_report` into the sweep folder
    (comparison.csv / .md, side_by_side.md, figures) and the side-by-side table on stdout.

    `load_param` names the override on the figures' x axis (default: guessed from the varied
    parameters); `figures` false skips the PNGs; `print_table` false keeps stdout quiet.
    """

    def __init__(self, figures: bool = True, print_table: bool = True,
                 load_param: str | None = None) -> None:
        self.figures = figures
        self.print_table = print_table
        self.load_param = load_param

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Write the report of the sweep that just ended."""
        from experiments.report import load_sweep, terminal_summary, write_report

        sweep_dir = Path(str(config.hydra.sweep.dir))
        try:
            jobs = load_sweep(sweep_dir)
        except FileNotFoundError as e:
            log.warning("comparison: %s", e)
            return
        title = str(config.get("name", ""))
        paths = write_report(sweep_dir, figures=self.figures, load_param=self.load_param,
                             title=title)
        if self.print_table:
            print(f"\n{title}: {len(jobs)} jobs in {sweep_dir}")
            print(terminal_summary(jobs))
            print("wrote " + ", ".join(p.name for p in paths.values()))
