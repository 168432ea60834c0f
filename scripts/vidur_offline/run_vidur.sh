#!/usr/bin/env bash
# run_vidur.sh OUT TRACE N: Vidur 0.0.26 (set up by setup.sh) on scripts/bench_vs_vidur.py's
# workload: the flags of its vidur_command, then the offline dataset, cache and training flags;
# any further arguments are passed on to vidur.main (e.g. --metrics_config_keep_individual_batch_metrics).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
W="${VIDUR_WORK:-/tmp/vidur_work}"
OUT="${1:?output folder}"; TRACE="${2:?Vidur-format trace file}"; N="${3:?number of requests}"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled WANDB_DISABLED=true
P=random_forrest_execution_time_predictor_config
exec "$W/venv/bin/python" "$HERE/restart_fix.py" \
  --replica_config_model_name meta-llama/Llama-2-7b-hf --replica_config_device a100 \
  --cluster_config_num_replicas 1 --replica_config_tensor_parallel_size 1 \
  --replica_config_num_pipeline_stages 1 \
  --request_generator_config_type synthetic --synthetic_request_generator_config_num_requests "$N" \
  --length_generator_config_type trace --trace_request_length_generator_config_max_tokens 4096 \
  --trace_request_length_generator_config_trace_file "$TRACE" \
  --interval_generator_config_type poisson --poisson_request_interval_generator_config_qps 5.5 \
  --replica_scheduler_config_type vllm --vllm_scheduler_config_batch_size_cap 128 \
  --cache_config_block_size 16 --cache_config_num_blocks 1024 \
  --metrics_config_output_dir "$OUT" \
  --replica_config_network_device a100_pairwise_nvlink \
  --execution_time_predictor_config_type random_forrest \
  --${P}_model_profiling_dataset local/llama-2-7b-hf-a100 \
  --${P}_network_profiling_dataset local/a100-pairwise-nvlink \
  --${P}_cache_dir "$W/hf_cache" \
  --${P}_prediction_max_tokens_per_request 4096 \
  --${P}_num_estimators 250 --${P}_k_fold_cv_splits 5 \
  --no-metrics_config_enable_chrome_trace --no-metrics_config_store_plots \
  --no-metrics_config_write_json_trace "${@:4}"
