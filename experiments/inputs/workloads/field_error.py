"""The error of a workload field that fails its check: it names the field and its value."""

from __future__ import annotations


def field_error(params: object, name: str, why: str) -> ValueError:
    """`workload: NAME=VALUE: WHY` for the field `name` of the workload parameters `params`."""
    return ValueError(f"workload: {name}={getattr(params, name)!r}: {why}")
