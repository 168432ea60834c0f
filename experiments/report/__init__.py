"""Reporting on finished jobs: sweep tables (`python -m experiments.report`), the
comparison of two sweeps, figures, and `analysis.load` (results in pandas).
"""
