"""`python -m experiments.conformance`."""

from experiments.cli import conformance

conformance()
