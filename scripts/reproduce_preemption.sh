#!/usr/bin/env bash
# Question 1: under high concurrency and widely varying output lengths, how many preemptions
# (vLLM) and retractions (SGLang) happen, how much prefill is recomputed, and what do victims
# pay in end-to-end latency? (conf/experiment/preemption.yaml; results/preemption/README.md)
# Three settings of the preset, each a capacity search and a sweep of loads (fractions of
# each window's own capacity, per scheduler) over 5 disjoint trace windows spread over the
# trace (scripts/_study.sh; the preset's `realizations`):
#   conv       the main setting: upstream's defaults (Llama-2-7B, A100-80GB, measured step
#              times, vLLM async scheduling, SGLang's overlap loop), Azure 2023 conv, at
#              0.75x-1.5x (0.5x, the slowest to simulate, left out for time);
#   conv_sync  the same with the synchronous loops (vLLM's Scheduler, SGLang's
#              event_loop_normal), against their own capacity, at the two loads past
#              capacity (1.25, 1.5: where the main setting evicts most; fewer for time);
#   code       the Azure 2023 code trace (short outputs: the contrast), 0.5x-1.5x, blocks of 1,700
#              requests (the trace's 8,819 hold five: windows 0-4, all used, none held out);
# then loops/: conv against conv_sync (python -m experiments.report A B, ratio CIs).
# Results: results/preemption/<setting>/ and results/preemption/loops/; raw runs under
# results/preemption/runs/ (git ignores them). Extra arguments are Hydra overrides given to
# every setting. Traces come from $SCHEDBENCH_TRACE_DIR, else data/traces
# (scripts/fetch_traces.sh).
set -euo pipefail
start=$SECONDS
cd "$(dirname "$0")/.."
source scripts/_wall_time.sh
py=${PYTHON:-.venv/bin/python}
columns=num_preemptions,num_victims,preempted_request_share,max_restarts_per_request,recomputed_token_share,prefix_recovery_on_resume,median_e2el_victim_ms,median_e2el_nonvictim_ms,victim_e2el_median_ratio,p99_e2el_ms
out=results/preemption
# the single-setting layout this study had before (its files at the folder's top)
find "$out" -maxdepth 1 -type f ! -name README.md -delete
SWEEP_LOADS=0.75,1.0,1.25,1.5 scripts/_study.sh preemption conv \
    "Q1 main: Azure conv, Llama-2-7B on A100-80GB, pipelined loops" "$columns" "$@"
SWEEP_LOADS=1.25,1.5 scripts/_study.sh preemption conv_sync \
    "Q1 main, synchronous loops: Azure conv, Llama-2-7B on A100-80GB" \
    "$columns" scheduler=vllm_sync,sglang_sync "$@"
scripts/_study.sh preemption code "Q1 contrast: Azure code (short outputs), Llama-2-7B on A100-80GB" \
    "$columns" workload=azure_code workload.max_requests=1700 'realizations=[0,1,2,3,4]' \
    'holdout_realizations=[]' "$@"
rm -rf "$out/loops"
"$py" -m experiments.report "$out/runs/conv/sweep" "$out/runs/conv_sync/sweep" \
    --out "$out/loops" --labels pipelined,sync
wall_time preemption "$start" "tables and figures in $out/{conv,conv_sync,code,loops}, raw runs in $out/runs"
