#!/usr/bin/env bash
# Issue 16's workload as one command: our two schedulers (and Vidur, when --vidur VENV
# [--vidur-dir DIR] are given) in alternated rounds; see scripts/bench_vs_vidur.py.
set -euo pipefail
cd "$(dirname "$0")/.."
export SCHEDBENCH_TRACE_DIR="${SCHEDBENCH_TRACE_DIR:-$(cd .. && pwd)/shared/data/traces}"
exec "${PYTHON:-python}" scripts/bench_vs_vidur.py "$@"
