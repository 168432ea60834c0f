#!/usr/bin/env bash
# Shared body of the load-relative studies (issue 30): for one setting of a study preset,
#   1. find each scheduler's capacity (python -m experiments.capacity) on the windows the
#      preset lists (`realizations`, spread over the trace), pooled and per window,
#   2. sweep the preset's loads as fractions of that capacity (workload.load, a Hydra
#      multirun, W&B offline) over the same windows, realisation k at load x window k's own
#      capacity,
#   3. write the setting's tables and figures to results/<name>/<setting>/, with
#      capacity.md (the capacity table, per window) beside them.
#   scripts/_study.sh NAME SETTING "TITLE" COLUMNS [Hydra overrides of this setting...]
# COLUMNS: the comma-separated metrics of headline.md. The realisations are the preset's
# `realizations` (a setting on another trace overrides them: realizations=[0,1,2]); the
# capacity search reads the same list. CAPACITY_REALIZATIONS (e.g. 0-4 or 0,4,8) searches
# the capacity on those realisations instead (a per-window file must hold every window the
# sweep runs). SWEEP_LOADS (e.g. 1.0,1.25,1.5) sweeps those loads instead of the preset's (the
# capacity search refuses a sweep override). CAPACITY_PER_WINDOW (default 1: on) searches
# each listed window's own capacity beside the pooled one (--per-window), and the sweep runs
# realisation k at load x window k's capacity, the same distance from that window's
# saturation whatever the window; CAPACITY_PER_WINDOW=0 searches the pooled capacity alone
# and runs every window at load x that. The raw folders (capacity probes, job folders,
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
per_window=()
[ "${CAPACITY_PER_WINDOW:-1}" = 0 ] || per_window=(--per-window)
"$py" -m experiments.capacity "experiment=$name" "$@" --out "$runs/capacity" \
    ${CAPACITY_REALIZATIONS:+--realizations "$CAPACITY_REALIZATIONS"} "${per_window[@]}"
"$py" scripts/capacity_md.py "$runs/capacity/capacity.json" "$out/capacity.md" "$title"
"$py" -m experiments.run -m "experiment=$name" "$@" logger=wandb "hydra.sweep.dir=$runs/sweep" \
    "workload.capacity_file=$runs/capacity/capacity.json" \
    hydra.callbacks.comparison.print_table=false ${SWEEP_LOADS:+"workload.load=$SWEEP_LOADS"}
"$py" -m experiments.report "$runs/sweep" --out "$out" --title "$title" --columns "$columns"
