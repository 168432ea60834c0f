#!/usr/bin/env bash
# Question 3: victim choice, vLLM's latest arrival against SGLang's fewest outputs, then
# longest prompt: under which loads do they differ most in evictions, recomputed tokens and
# what the victims pay? Preset: conf/experiment/victim_choice.yaml (the project's defaults,
# Azure 2023 conv trace in 1,000-request windows, real output lengths with EOS not ignored).
# Two settings, each through scripts/_study.sh (each scheduler's capacity on the preset's 5
# windows, 0,4,8,12,16 of the trace's 19, pooled and per window, then loads 0.5-3 x each
# window's own capacity over those windows) and scripts/victim_report.py
# (recompute per eviction, the E2E parts of victims and others) and
# scripts/victim_contrast.py (the two choices side by side per load, paired by window):
#   main  Llama-2-7B on an A100-80GB, cost_model=measured (124,688 KV slots: SGLang hardly
#         ever retracts);
#   a10   Llama-2-7B on an NVIDIA A10 24GB (the common cloud GPU of 7B serving),
#         cost_model=fitted_roofline with the A40's fit (conf/hardware/a10.yaml: fit_from),
#         16,320 KV slots: the tight setting in which SGLang retracts.
# Then the main setting's capacity per trace window, windows 0-9 (per_window_capacity.md:
# how far apart the windows' own saturations are; one search, about 4 min on 2 shared cores).
# VICTIM_SETTINGS (default "main a10 per_window") runs a subset. Extra arguments are Hydra overrides of
# every setting. Results: results/victim_choice/<setting>/; raw runs:
# results/victim_choice/runs/<setting>/ (git-ignored).
set -euo pipefail
start=$SECONDS
cd "$(dirname "$0")/.."
source scripts/_wall_time.sh
py=${PYTHON:-.venv/bin/python}
"$py" - <<'PY'
from experiments.inputs.workloads.replay import trace_path
trace_path(None, "azure2023/AzureLLMInferenceTrace_conv.csv")  # fails with the folder to fix
PY
columns=num_preemptions,num_victims,recomputed_tokens,recomputed_token_share,median_e2el_victim_ms,median_e2el_nonvictim_ms,p99_e2el_ms,slo_attainment
setting() {  # setting NAME "TITLE" [Hydra overrides of the setting...]
    local name=$1 title=$2
    shift 2
    case " ${VICTIM_SETTINGS:-main a10 per_window} " in *" $name "*) ;; *) return 0 ;; esac
    scripts/_study.sh victim_choice "$name" "$title" "$columns" "$@" "${extra[@]}"
    "$py" scripts/victim_report.py "results/victim_choice/runs/$name/sweep" \
        "results/victim_choice/$name"
    "$py" scripts/victim_contrast.py "results/victim_choice/$name"
}
extra=("$@")
setting main "Q3: victim choice, main setting"
setting a10 "Q3: victim choice, A10 24GB setting" hardware=a10 executor.cost_model=fitted_roofline
case " ${VICTIM_SETTINGS:-main a10 per_window} " in
*" per_window "*)
    "$py" -m experiments.capacity experiment=victim_choice "${extra[@]}" --realizations 0-9 \
        --per-window --out results/victim_choice/runs/per_window_capacity
    "$py" scripts/capacity_md.py results/victim_choice/runs/per_window_capacity/capacity.json \
        results/victim_choice/per_window_capacity.md \
        "Q3's main setting, per trace window (Azure conv, 1,000-request windows 0-9)" ;;
esac
wall_time victim_choice "$start" "tables and figures in results/victim_choice/<setting>"
