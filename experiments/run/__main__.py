"""`python -m experiments.run`."""

from experiments.cli import run

run()
