#!/usr/bin/env bash
# Held-out windows of the studies' headline points (issue 30: every claim "holds when rerun
# with other realisations and trace windows"). The studies use realisations 0-4, the first
# five disjoint blocks of each trace; this reruns their headline loads on later blocks, at
# the committed capacity (scripts/holdout_check.py pins it from the setting's capacity.md
# after checking the config digest), one joblib worker, logger=none, and writes
# results/<study>/<setting>/holdout.md: the committed value [CI] beside the held-out one.
# Blocks a trace holds (blocks are cut before the prompt-length filter):
#   Azure conv, 19,366 records: 9 blocks of 2,000 (held out: 5-8), 19 of 1,000 (5-9 used),
#   38 of 500 (5-9 used); Azure code, 8,819 records: 5 blocks of 1,700, none held out;
#   Mooncake, 3,993 records: 13 blocks of 300 (5-9 used).
# Raw runs: results/<study>/runs/holdout_<setting>/ (git-ignored). Extra arguments: none.
# HOLDOUT_CAPACITY=per-window puts each held-out load at that fraction of the held-out window's
# own capacity, searched on it (scripts/holdout_check.py --capacity per-window); by default the
# committed capacity. STUDIES (as scripts/reproduce_all.sh reads it, which runs this script last) limits the
# checks to those studies' settings.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
export CI=${CI:-true}
read -r -a studies <<< "${STUDIES:-preemption prefix_recovery victim_choice}"
"$py" scripts/check_traces.py
check() {  # STUDY SETTING "NOTE" [run arguments...]
    local study=$1 setting=$2 note=$3
    shift 3
    [[ " ${studies[*]} " == *" $study "* ]] || return 0
    "$py" scripts/holdout_check.py run "$study" "$setting" "$@" \
        ${HOLDOUT_CAPACITY:+--capacity "$HOLDOUT_CAPACITY"}
    local report=()
    for a in "$@"; do [[ $a == --report=* ]] && report=("$a"); done
    "$py" scripts/holdout_check.py compare "$study" "$setting" "${report[@]}" --note "$note"
}
check preemption conv "Q1, main setting (Azure conv, 2,000-request windows, pipelined loops)." \
    --loads 1,1.25,1.5 --realizations 5-8
check preemption conv_sync "Q1, synchronous loops (Azure conv, 2,000-request windows)." \
    --loads 1.25,1.5 --realizations 5-8 scheduler=vllm_sync,sglang_sync
check victim_choice main "Q3, main setting (Azure conv, 1,000-request windows, trace_eos)." \
    --loads 1,1.25,2 --realizations 5-9 --report=victim
check prefix_recovery mooncake "Q2, Mooncake (300-request windows, prompts clipped to 3,584)." \
    --loads 1.5,2,3 --realizations 5-9 --report=recovery
check prefix_recovery azure_conv "Q2, Azure conv (500-request windows)." \
    --loads 1.5,2,3 --realizations 5-9 --report=recovery workload=azure_conv \
    workload.max_requests=500 workload.max_input_len=4096 workload.long_inputs=drop
# Q1's loops on the held-out windows: sync against pipelined, ratio CIs paired by window
# (the report's own comparison; raw, not committed: quoted in results/preemption/README.md)
[[ " ${studies[*]} " == *" preemption "* ]] || exit 0
"$py" -m experiments.report results/preemption/runs/holdout_conv/sweep \
    results/preemption/runs/holdout_conv_sync/sweep --out results/preemption/runs/holdout_loops \
    --labels pipelined,sync
