"""`python -m experiments.report` (and `schedbench-report`): the report of one sweep folder,
or the comparison of two. A report set that no longer matches its job folders (stale, or
cut off while being written: `experiments.report.report_set`) is said so and written anew;
`--check` only says whether it matches (exit 1 when not)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from experiments.report.compare import write_comparison
from experiments.report.report_set import report_state
from experiments.report.tables import (
    failed_jobs_line,
    load_sweep,
    terminal_summary,
    write_report,
)

DESCRIPTION = "Tables and figures of a sweep folder, or the comparison of two sweeps."


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: write the report of a sweep folder, or compare two
    (`experiments.report.compare`)."""
    ap = argparse.ArgumentParser(description=DESCRIPTION)
    ap.add_argument("sweep_dir", nargs="+", metavar="SWEEP_DIR",
                    help="a sweep folder; with two, compare them (jobs matched by parameters)")
    ap.add_argument("--out", default=None, help="folder for tables and figures")
    ap.add_argument("--load-param", default=None,
                    help="override key on the figures' x axis (default: the sweep's "
                         "hydra.callbacks.comparison.load_param, else guessed)")
    ap.add_argument("--title", default="")
    ap.add_argument("--no-figures", action="store_true")
    ap.add_argument("--columns", default="",
                    help="comma-separated metrics for headline.csv/.md")
    ap.add_argument("--check", action="store_true",
                    help="write nothing: say whether the report set in the folder (its "
                         "report.json) matches the job folders now; exit 1 when it does not")
    ap.add_argument("--labels", default="",
                    help="with two sweeps: their names in tables and legends, A,B")
    args = ap.parse_args(argv)
    if len(args.sweep_dir) > 2:
        ap.error(f"give one sweep folder, or two to compare; got {len(args.sweep_dir)}")
    if len(args.sweep_dir) == 2:
        labels = tuple(args.labels.split(",")) if args.labels else None
        if labels is not None and len(labels) != 2:
            ap.error(f"--labels={args.labels!r}: give two names, A,B")
        paths = write_comparison(args.sweep_dir[0], args.sweep_dir[1], args.out, labels,
                                 args.load_param, not args.no_figures)
        print("\n".join(paths["compare.md"].read_text().split("\n\n")[:3]).lstrip("# "))
        print("wrote " + ", ".join(str(p) for p in paths.values()))
        return
    sweep_dir = args.sweep_dir[0]
    state = report_state(sweep_dir, args.out)
    if args.check:
        print(f"report in {args.out or sweep_dir}: {state.state}"
              + (f" ({state.reason})" if state.state != "ok" else ""))
        raise SystemExit(0 if state.state == "ok" else 1)
    if state.state in ("incomplete", "stale"):
        print(f"the report in {args.out or sweep_dir} was {state.state} ({state.reason}): "
              "writing it anew")
    columns = [c for c in args.columns.split(",") if c]
    paths = write_report(sweep_dir, args.out, not args.no_figures, args.load_param,
                         args.title, columns or None)
    jobs = load_sweep(sweep_dir)
    print(terminal_summary(jobs, columns or None))
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    failed = failed_jobs_line(jobs)
    if failed:
        print(failed)

