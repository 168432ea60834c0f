#!/usr/bin/env bash
# Shared body of the load-relative studies (issue 30): for one setting of a study preset,
#   1. find each scheduler's capacity (python -m experiments.capacity, R realisations),
#   2. sweep the preset's loads as fractions of that capacity (workload.load, a Hydra
#      multirun, W&B offline),
#   3. write the setting's tables and figures to results/<name>/<setting>/, with
#      capacity.md (the capacity table) beside them.
#   scripts/_study.sh NAME SETTING "TITLE" COLUMNS [Hydra overrides of this setting...]
# COLUMNS: the comma-separated metrics of headline.md. CAPACITY_REALIZATIONS (default 5) sets
# the realisations of each capacity probe; SWEEP_LOADS (e.g. 1.0,1.25,1.5) sweeps those loads
# instead of the preset's (the capacity search refuses a sweep override). CAPACITY_PER_WINDOW=1
# also searches each realisation's (trace window's) own capacity (--per-window), and the sweep
# then runs realisation k at load x window k's capacity; off by default (the committed
# results were made with the pooled capacity). The raw folders (capacity probes, job folders,
# wandb/) go to results/<name>/runs/<setting>/, which git ignores; everything written under
# results/<name>/<setting>/ is a function of the command alone (no dates, no wall times), so
# a rerun rewrites it byte for byte.
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1
setting=$2
title=$3
columns=$4
shift 4
py=${PYTHON:-.venv/bin/python}
out=results/$name/$setting
runs=results/$name/runs/$setting
export CI=${CI:-true}  # no progress bars in the workers
# a missing trace stops the study here (the presets record failed jobs and go on)
"$py" scripts/check_traces.py
rm -rf "$runs"
mkdir -p "$runs" "$out"
"$py" -m experiments.capacity "experiment=$name" "$@" \
    --realizations "${CAPACITY_REALIZATIONS:-5}" --out "$runs/capacity" \
    ${CAPACITY_PER_WINDOW:+--per-window}
"$py" scripts/capacity_md.py "$runs/capacity/capacity.json" "$out/capacity.md" "$title"
"$py" -m experiments.run -m "experiment=$name" "$@" logger=wandb "hydra.sweep.dir=$runs/sweep" \
    "workload.capacity_file=$runs/capacity/capacity.json" \
    hydra.callbacks.comparison.print_table=false ${SWEEP_LOADS:+"workload.load=$SWEEP_LOADS"}
"$py" -m experiments.report "$runs/sweep" --out "$out" --title "$title" --columns "$columns"
