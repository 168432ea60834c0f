#!/usr/bin/env bash
# Sensitivity of Q1 (issue 30 item 5): do the answers of results/preemption/ (evictions per
# request, recomputed share of prefill, victims' against the others' E2E latency, SLO capacity)
# hold across two models x two GPUs and across KV block (vLLM) / page (SGLang) size 16 vs 1?
# Preset: conf/experiment/sensitivity.yaml (Azure 2023 conv, windows of 300 requests, loads
# 0.75-1.5 x each scheduler's own capacity per window, 5 realisations: windows 0,15,30,45,60
# of the trace's 64). One capacity search and load sweep per setting (scripts/_study.sh):
#   a100_llama2_7b         the main setting: Llama-2-7B, A100-80GB, cost_model=measured
#   a100_llama2_7b_fitted  the same with the roofline fitted to the A100 measurements
#   a100_llama3_8b, h100_llama2_7b, h100_llama3_8b
#                          fitted roofline (cost_model=measured refuses these pairs: their
#                          profiles have no attention measurements)
#   vllm_block1            the main setting, vLLM only, block_size=1 (default 16)
#   sglang_page16          the main setting, SGLang only, page_size=16 (default 1)
# Then scripts/sensitivity_report.py writes the cross-setting summary (summary.md/.csv, the
# figure). Results: results/sensitivity/; raw runs: results/sensitivity/runs/ (git-ignored).
set -euo pipefail
start=$SECONDS
cd "$(dirname "$0")/.."
source scripts/_wall_time.sh
py=${PYTHON:-.venv/bin/python}
export PYTHON=$py
"$py" scripts/check_traces.py azure_conv  # a missing trace stops it before any job
columns=preemptions_per_1k_requests,preempted_request_share,recomputed_token_share,num_victims,victim_e2el_median_ratio,slo_attainment,median_e2el_ms
study() { scripts/_study.sh sensitivity "$@"; }
study a100_llama2_7b "Llama-2-7B, A100, measured (main)" "$columns"
study a100_llama2_7b_fitted "Llama-2-7B, A100, fitted roofline" "$columns" \
    executor.cost_model=fitted_roofline
study a100_llama3_8b "Llama-3-8B, A100, fitted roofline" "$columns" \
    model=llama3_8b executor.cost_model=fitted_roofline
study h100_llama2_7b "Llama-2-7B, H100, fitted roofline" "$columns" \
    hardware=h100 executor.cost_model=fitted_roofline
study h100_llama3_8b "Llama-3-8B, H100, fitted roofline" "$columns" \
    model=llama3_8b hardware=h100 executor.cost_model=fitted_roofline
study vllm_block1 "Main setting, vLLM block_size 1" "$columns" \
    scheduler=vllm scheduler.block_size=1
study sglang_page16 "Main setting, SGLang page_size 16" "$columns" \
    scheduler=sglang scheduler.page_size=16
"$py" scripts/sensitivity_report.py results/sensitivity
wall_time sensitivity "$start" "tables and figures in results/sensitivity, raw runs in results/sensitivity/runs"
