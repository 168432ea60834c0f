"""`python -m experiments.report`."""

from experiments.cli import report

report()
