#!/usr/bin/env bash
# Question 3: victim choice, vLLM's latest arrival against SGLang's fewest outputs, then
# longest prompt: under which loads do they differ most in evictions, recomputed tokens and
# what the victims pay? One setting, the main one (conf/experiment/victim_choice.yaml: the
# project's defaults, Azure 2023 conv trace in 1,000-request windows, real output lengths
# with EOS not ignored): scripts/_study.sh finds each scheduler's capacity (5 realisations)
# and sweeps loads 0.5-3 x capacity over 5 realisations into results/victim_choice/main/;
# scripts/victim_report.py adds recompute per eviction and the E2E parts of victims and
# others. Extra arguments are Hydra overrides of the setting. Raw runs:
# results/victim_choice/runs/ (git-ignored).
set -euo pipefail
start=$SECONDS
cd "$(dirname "$0")/.."
source scripts/_wall_time.sh
py=${PYTHON:-.venv/bin/python}
"$py" - <<'PY'
from experiments.inputs.workloads.replay import trace_path
trace_path(None, "azure2023/AzureLLMInferenceTrace_conv.csv")  # fails with the folder to fix
PY
scripts/_study.sh victim_choice main "Q3: victim choice, main setting" \
    num_preemptions,num_victims,recomputed_tokens,recomputed_token_share,median_e2el_victim_ms,median_e2el_nonvictim_ms,p99_e2el_ms,slo_attainment "$@"
"$py" scripts/victim_report.py results/victim_choice/runs/main/sweep results/victim_choice/main
wall_time victim_choice "$start" "tables and figures in results/victim_choice/main"
