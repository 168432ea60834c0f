#!/usr/bin/env bash
# The study (issue 8): every victim policy x both preemption modes (recompute, swap to a host
# pool as large as the device pool) x both schedulers, at three loads where evictions are
# common, on two traces (conf/experiment/victim_policies.yaml):
#   azure_code: Azure 2023 code trace, first 6,000 requests (prompts <= 512 tokens: 1,394),
#               outputs clipped at 512 tokens, 1,024-token KV pool, 8x / 16x / 32x the recorded load;
#   mooncake:   Mooncake synthetic trace, first 3,000 requests (prompts <= 4,096 tokens: 1,383),
#               8,192-token KV pool, 4x / 5x / 6x the recorded load.
# 2 traces x 3 loads x 7 policies x 2 modes x 2 schedulers = 168 runs (joblib, 2 workers).
# Results: results/victim_policies/<trace>/ (tables per trace), results/victim_policies/
# (summary tables and figures, scripts/policy_report.py). Raw runs: <trace>/runs/ (git-ignored).
set -euo pipefail
start=$SECONDS
cd "$(dirname "$0")/.."
source scripts/_wall_time.sh
py=${PYTHON:-.venv/bin/python}
out=results/victim_policies
columns=num_preemptions,preempted_request_share,recomputed_token_share,p99_e2el_victim_ms,p99_e2el_nonvictim_ms,p99_e2el_ms,request_goodput,slo_attainment,num_swap_out,num_swap_fallbacks,swap_time_share
export CI=${CI:-true}  # no progress bars in the workers
"$py" - <<'PY'
from experiments.inputs.workloads.replay import trace_path
for f in ("azure2023/AzureLLMInferenceTrace_code.csv", "mooncake/synthetic_trace.jsonl"):
    trace_path(None, f)  # fails with the folder to fix when a trace is missing
PY
sweep() {  # sweep TRACE TITLE [overrides...]
    local trace=$1 title=$2
    shift 2
    rm -rf "$out/$trace/runs"
    "$py" -m experiments.run -m experiment=victim_policies \
        "hydra.sweep.dir=$out/$trace/runs" hydra.callbacks.comparison.print_table=false \
        hydra.callbacks.comparison.figures=false "$@"
    "$py" -m experiments.report "$out/$trace/runs" --out "$out/$trace" --no-figures \
        --title "$title" --columns "$columns" > /dev/null
}
sweep azure_code "Victim policies: Azure 2023 code"
sweep mooncake "Victim policies: Mooncake synthetic" workload=mooncake \
    kv_capacity_tokens=8192 max_model_len=8192 workload.max_requests=3000 \
    workload.max_input_len=4096 workload.max_tokens=null workload.rate_scale=4,5,6
"$py" scripts/policy_report.py "$out" azure_code mooncake
wall_time victim_policies "$start" "tables and figures in $out, raw runs in $out/*/runs"
