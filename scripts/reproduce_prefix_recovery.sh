#!/usr/bin/env bash
# Question 2: when a preempted vLLM request returns, what share of the tokens it had computed
# does the prefix cache still hold (SGLang: its radix tree, for a retracted request)? Two
# settings of conf/experiment/prefix_recovery.yaml on the main setting (the project's
# defaults), each a capacity search and a load sweep (scripts/_study.sh):
#   mooncake   the Mooncake synthetic trace (shared prefixes), blocks of 300 requests
#              (windows 0,3,6,9,12 of its 13: the preset), prompts clipped to 3,584 tokens;
#   mooncake_noshare the same with every prompt its own tokens (workload.share_prefixes=false),
#              vLLM only (SGLang retracts nothing on Mooncake: see the README);
#   azure_conv the decode-heavy Azure 2023 conv trace, blocks of 500 requests (windows
#              0,9,18,27,36 of its 38; 4,13,22,31 held out), prompts of 4,090 tokens
#              or more dropped (SGLang refuses them under the 4,096-token context: the
#              same requests for both schedulers).
# Each window runs at its own capacity (per-window search: scripts/_study.sh).
# Then scripts/prefix_recovery_report.py writes the per-readmission recovery (distribution,
# CDF figure) and the recompute share's spread across windows. Results: results/prefix_recovery/.
set -euo pipefail
start=$SECONDS
cd "$(dirname "$0")/.."
source scripts/_wall_time.sh
py=${PYTHON:-.venv/bin/python}
columns=num_preemptions,num_victims,preempted_request_share,prefix_recovery_on_resume,recomputed_token_share,prefix_cache_hit_rate,slo_attainment
scripts/_study.sh prefix_recovery mooncake "Q2: prefix recovery on resume, Mooncake" "$columns"
scripts/_study.sh prefix_recovery mooncake_noshare \
    "Q2: prefix recovery on resume, Mooncake without shared prefixes" "$columns" \
    workload.share_prefixes=false scheduler=vllm
scripts/_study.sh prefix_recovery azure_conv "Q2: prefix recovery on resume, Azure conv" \
    "$columns" workload=azure_conv workload.max_requests=500 workload.max_input_len=4089 \
    workload.long_inputs=drop 'realizations=[0,9,18,27,36]' 'holdout_realizations=[4,13,22,31]'
"$py" scripts/prefix_recovery_report.py results/prefix_recovery \
    mooncake=results/prefix_recovery/runs/mooncake/sweep \
    mooncake_noshare=results/prefix_recovery/runs/mooncake_noshare/sweep \
    azure_conv=results/prefix_recovery/runs/azure_conv/sweep
wall_time prefix_recovery "$start" "tables and figures in results/prefix_recovery/{mooncake,mooncake_noshare,azure_conv}"
