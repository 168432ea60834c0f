#!/usr/bin/env bash
# Question 3: victim choice, vLLM's latest-arrived against SGLang's fewest-outputs-longest-input:
# under which loads do they differ most in evictions, recomputed tokens and victims' latency?
# Azure 2023 conv trace, eight loads, matched KV pool (conf/experiment/victim_choice.yaml).
# Results: results/victim_choice/.
exec "$(dirname "$0")/_reproduce.sh" victim_choice "Q3: victim choice vs load" \
    num_preemptions,preempted_request_share,recomputed_tokens,recomputed_token_share,median_e2el_victim_ms,p99_e2el_victim_ms,median_e2el_ms,p99_e2el_ms "$@"
