#!/usr/bin/env bash
# Question 1: under high concurrency and widely varying output lengths, how many preemptions
# (vLLM) and retractions (SGLang) happen, how much prefill is recomputed, and what do victims
# pay in end-to-end latency? Azure 2023 conv and code traces, load 1x-4x, matched KV pool
# (conf/experiment/preemption.yaml). Results: results/preemption/. Extra arguments are Hydra
# overrides, e.g. hydra.launcher.n_jobs=8.
exec "$(dirname "$0")/_reproduce.sh" preemption "Q1: preemptions and retractions vs load" \
    num_preemptions,preempted_request_share,max_restarts_per_request,recomputed_token_share,median_e2el_victim_ms,median_e2el_nonvictim_ms,victim_e2el_median_ratio,p99_e2el_ms "$@"
