#!/usr/bin/env bash
# `make reproduce`: every study of results/ in turn (scripts/reproduce_<study>.sh), after
# checking that every trace they replay is there (scripts/check_traces.py: a missing trace
# stops everything before the first job, rather than leaving tables of failed jobs). Prints
# each script's wall time and, last, the total with the machine's cores. Stops at the first
# study that fails, naming it. Last, scripts/holdout_check.sh: the held-out windows of the
# studies it ran (results/<study>/<setting>/holdout.md).
#   scripts/reproduce_all.sh                   every study of STUDIES
#   STUDIES="preemption victim_choice" scripts/reproduce_all.sh     some of them
# Not here: results/real_model (scripts/reproduce_real_model.sh runs a real model and
# measures its time, so it is neither quick nor byte for byte), the benchmarks.
set -euo pipefail
start=$SECONDS
cd "$(dirname "$0")/.."
source scripts/_wall_time.sh
py=${PYTHON:-.venv/bin/python}
read -r -a studies <<< "${STUDIES:-preemption prefix_recovery victim_choice victim_policies sensitivity}"
for s in "${studies[@]}"; do
    if [ ! -x "scripts/reproduce_$s.sh" ]; then
        echo "reproduce: scripts/reproduce_$s.sh is missing (or not executable); nothing was run" >&2
        exit 1
    fi
done
"$py" scripts/check_traces.py
times=()
for s in "${studies[@]}"; do
    t0=$SECONDS
    echo "=== reproduce_$s.sh"
    status=0
    "scripts/reproduce_$s.sh" || status=$?
    if [ "$status" != 0 ]; then
        echo "reproduce: scripts/reproduce_$s.sh failed (exit $status) after $((SECONDS - t0)) s;" \
             "the studies after it did not run" >&2
        exit "$status"
    fi
    times+=("$s: $((SECONDS - t0)) s")
done
# the held-out windows of the studies run (results/<study>/<setting>/holdout.md), against the
# statistics just rewritten, each held-out window at its own capacity (searched on it)
t0=$SECONDS
echo "=== holdout_check.sh"
STUDIES="${studies[*]}" scripts/holdout_check.sh
times+=("holdout_check: $((SECONDS - t0)) s")
echo "wall time per study on $(nproc) CPU cores:"
printf '  %s\n' "${times[@]}"
wall_time reproduce "$start" "studies: ${studies[*]}"
