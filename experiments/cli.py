"""The command-line entry points: `python -m experiments.run|report|conformance|capacity` and
the installed `schedbench-run`, `schedbench-report`, `schedbench-conformance`,
`schedbench-capacity`.

Each first says, as one line, why a requested compiled core (`SCHEDBENCH_CORE`) cannot be
used, and only then imports the command's module (which imports the core).
"""

from __future__ import annotations

import sys

from engines.compiled_core import refusal


def _core_or_exit() -> None:
    error = refusal()
    if error is not None:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2)


def run() -> None:
    """`python -m experiments.run`: one job, or a sweep with -m."""
    _core_or_exit()
    from experiments.run.main import cli

    cli()


def report() -> None:
    """`python -m experiments.report`: a sweep's report, or two sweeps compared."""
    _core_or_exit()
    from experiments.report.cli import main

    main()


def conformance() -> None:
    """`python -m experiments.conformance`: replay and compare conformance logs."""
    _core_or_exit()
    from experiments.conformance.replay import main

    raise SystemExit(main())


def capacity() -> None:
    """`python -m experiments.capacity`: per scheduler, the highest rate meeting the SLO."""
    _core_or_exit()
    from experiments.capacity.main import main

    main()
