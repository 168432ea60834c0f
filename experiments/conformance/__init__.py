"""Replaying conformance workloads and comparing against the real upstream schedulers'
logs (`python -m experiments.conformance`, docs/CONFORMANCE.md).
"""
