#!/usr/bin/env bash
# Shared body of scripts/reproduce_*.sh: run one experiment preset as a Hydra multirun (joblib,
# 2 workers, W&B offline), then write its tables and figures to results/<name>/, print the
# study's table and, last, the script's wall time and the machine's cores.
#   scripts/_reproduce.sh NAME "TITLE" COLUMNS [Hydra overrides...]
# COLUMNS: the comma-separated metrics of results/<name>/headline.md.
# The raw job folders (parquet, summary.json, .hydra/, wandb/) go to results/<name>/runs/,
# which git ignores. Traces come from $SCHEDBENCH_TRACE_DIR, else data/traces
# (scripts/fetch_traces.sh downloads them there).
set -euo pipefail
start=$SECONDS
cd "$(dirname "$0")/.."
source scripts/_wall_time.sh
name=$1
title=$2
columns=$3
shift 3
py=${PYTHON:-.venv/bin/python}
out=results/$name
runs=$out/runs
export CI=${CI:-true}  # no progress bars in the workers
"$py" scripts/check_traces.py  # fails, naming the folder to fix, when a trace is missing
rm -rf "$runs"
# The callback draws the figures once into $runs for the sweep's W&B run; the report below
# redraws them into results/<name>/ with the study's title and headline columns.
"$py" -m experiments.run -m "experiment=$name" logger=wandb "hydra.sweep.dir=$runs" \
    hydra.callbacks.comparison.print_table=false "$@"
"$py" -m experiments.report "$runs" --out "$out" --title "$title" --columns "$columns"
wall_time "$name" "$start" "tables and figures in $out, raw runs in $runs"
