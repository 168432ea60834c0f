#!/usr/bin/env bash
# Question 2: when a preempted vLLM request returns, what share of its computed tokens does the
# prefix cache still hold? Mooncake synthetic trace with and without shared prefixes, KV pool
# and load swept (conf/experiment/prefix_recovery.yaml). Results: results/prefix_recovery/.
exec "$(dirname "$0")/_reproduce.sh" prefix_recovery "Q2: vLLM prefix-cache recovery on resume" \
    num_preemptions,preempted_request_share,prefix_recovery_on_resume,recomputed_token_share,prefix_cache_hit_rate,median_e2el_victim_ms,median_e2el_nonvictim_ms "$@"
