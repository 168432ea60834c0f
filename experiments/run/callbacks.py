"""Hydra callbacks. `ComparisonCallback` starts and closes a multirun: it checks the sweep
folder and guards the workers, writes the invocation's `sweep.json` (W&B group, swept keys)
when the multirun starts, and the sweep's comparison (and, with `logger=wandb`, the sweep's
W&B run) when it ends. Before a single run it checks the run's folder.

Registered in conf/config.yaml under `hydra.callbacks.comparison`; its fields can be set
there or from the command line (`hydra.callbacks.comparison.figures=false`).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

if TYPE_CHECKING:
    from experiments.report.tables import Job

log = logging.getLogger(__name__)


class ComparisonCallback(Callback):
    """At the start of a multirun: `<sweep dir>/sweep.json` (`experiments.run.sweep_info`). At
    the end: `experiments.report.tables.write_report` into the sweep folder (comparison.csv / .md,
    side_by_side.md, figures), the side-by-side table on stdout and, with `logger=wandb`,
    one more W&B run in the sweep's group with the comparison table and figures.

    `load_param` names the override on the figures' x axis (default: guessed from the varied
    parameters); `figures` false skips the figures; `print_table` false keeps stdout quiet.
    """

    def __init__(self, figures: bool = True, print_table: bool = True,
                 load_param: str | None = None) -> None:
        self.figures = figures
        self.print_table = print_table
        self.load_param = load_param

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Refuse, before Hydra writes into it, a run folder that a run must not write into
        (`experiments.results.job_folder.refuse_unsafe_folder`)."""
        from experiments.results.job_folder import refuse_unsafe_folder

        _refuse_or_exit(refuse_unsafe_folder, Path(str(config.hydra.run.dir)))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Refuse an unsafe sweep folder before Hydra or a job writes into it
        (`experiments.results.job_folder.refuse_unsafe_sweep`), guard the workers
        (`experiments.run.orphan_guard`), withdraw the folder's earlier report set
        (`experiments.report.report_set.retract_report`), then write the invocation's
        sweep.json (a new W&B group, the swept keys)."""
        from experiments.report.report_set import retract_report
        from experiments.results.job_folder import refuse_unsafe_sweep
        from experiments.run.orphan_guard import guard_sweep_workers
        from experiments.run.sweep_info import SweepInfo, swept_keys, write_sweep_info

        sweep_dir = Path(str(config.hydra.sweep.dir))
        _refuse_or_exit(refuse_unsafe_sweep, sweep_dir)
        guard_sweep_workers()  # before the launcher starts any worker
        # The jobs are about to change: an earlier invocation's report must not stay beside
        # them (this one's is written when the multirun ends).
        for p in retract_report(sweep_dir):
            log.info("withdrew the earlier report file %s", p)

        # resolved: the realisations (`${realization_sweep:...}`) are one value by default
        # (then they are not swept)
        params = OmegaConf.to_container(config.hydra.sweeper.get("params") or {},
                                        resolve=True)
        swept = swept_keys(list(config.hydra.overrides.task),
                           {str(k): v for k, v in params.items()}
                           if isinstance(params, dict) else None)
        info = SweepInfo.new(str(config.get("name", "sweep")), swept)
        write_sweep_info(Path(str(config.hydra.sweep.dir)), info)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Write the report of the sweep that just ended (and its W&B sweep run); then say
        "N of M jobs failed" last when a job did not complete (`_end_with_failures`)."""
        from experiments.report.tables import load_sweep, terminal_summary, write_report

        sweep_dir = Path(str(config.hydra.sweep.dir))
        try:
            jobs = load_sweep(sweep_dir)
        except FileNotFoundError as e:
            log.warning("comparison: %s", e)
            return
        title = str(config.get("name", ""))
        paths = write_report(sweep_dir, figures=self.figures, load_param=self.load_param,
                             title=title)
        logger = config.get("logger")
        if logger is not None and logger.get("name") == "wandb":
            _log_sweep_run(config, sweep_dir, paths, self.load_param)
        if self.print_table:
            print(f"\n{title}: {len(jobs)} jobs in {sweep_dir}")
            print(terminal_summary(jobs))
            print("wrote " + ", ".join(p.name for p in paths.values()))
        _end_with_failures(config, jobs)


def _end_with_failures(config: DictConfig, jobs: Sequence[Job]) -> None:
    """When a job did not complete: "N of M jobs failed" as the last line, and a non-zero
    exit when no job completed or the sweep did not ask for `on_error=record` (which lets a
    sweep go on past failed jobs)."""
    from experiments.report.tables import failed_jobs_line

    line = failed_jobs_line(jobs)
    if not line:
        return
    on_error = config.get("on_error")
    record = str(getattr(on_error, "value", on_error)) == "record"
    if record and any(j.summary.get("status") == "ok" for j in jobs):
        print(line, flush=True)
        return
    sys.exit(f"error: {line}")


def _refuse_or_exit(check: Callable[[Path], None], folder: Path) -> None:
    """Run `check` on `folder`; exit with its one-line reason when it refuses."""
    from experiments.results.job_folder import FolderBusyError, UnsafeFolderError

    try:
        check(folder)
    except (UnsafeFolderError, FolderBusyError) as e:
        sys.exit(f"error: {e}")


def _log_sweep_run(config: DictConfig, sweep_dir: Path, paths: dict[str, Path],
                   load_param: str | None = None) -> None:
    """The sweep's W&B run: comparison and side-by-side tables, the charts of its answers
    against `load_param`, figures (`experiments.run.wandb_log.log_sweep_dir`)."""
    from experiments.run.build import as_dict
    from experiments.run.provenance import git_state
    from experiments.run.sweep_info import read_sweep_info
    from experiments.run.wandb_log import WandbOptions, log_sweep_dir

    opts = WandbOptions.from_mapping(as_dict(config.logger))
    info = read_sweep_info(sweep_dir)
    name = str(config.get("name", "sweep"))
    run_dir = log_sweep_dir(
        sweep_dir, opts, info.group if info else str(sweep_dir), f"sweep {name}",
        {"name": name, "sweep_dir": str(sweep_dir), "swept": list(info.swept) if info else [],
         **git_state()},
        {k.removesuffix(".png"): p for k, p in paths.items() if p.suffix == ".png"},
        load_param)
    log.info("W&B %s sweep run: %s", opts.mode, run_dir)
