#!/usr/bin/env bash
# The three questions on a real trained model (issue 14): SmolLM2-135M-Instruct on this CPU,
# real text prompts that end at the model's own EOS (workload=smollm2_prompts), a KV pool small
# enough that vLLM preempts and SGLang retracts; each scheduler on the real executor and on the
# simulator whose cost model was profiled for this model on this machine, side by side.
# Results: results/real_model/ (raw runs in results/real_model/runs/, ignored by git).
#   scripts/reproduce_real_model.sh [--reprofile] [real_vs_sim.py options, e.g. --kv 384]
# Builds the checkpoint first when models/ lacks it (`make model`). One torch thread, and step
# times measured as the process's CPU time (executor.timer=cpu, profile --timer cpu): on a CPU
# shared with other work, wall-clock steps include waiting for a core, unevenly over time.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
export OMP_NUM_THREADS=1 CI=${CI:-true}
profile=conf/profiles/smollm2_135m_cpu.json
[ -f models/smollm2-135m-instruct/build_info.json ] || make model
if [ "${1:-}" = "--reprofile" ] || [ ! -f "$profile" ]; then
    [ "${1:-}" = "--reprofile" ] && shift
    "$py" scripts/profile_executor.py --model-path models/smollm2-135m-instruct \
        --out "$profile" --threads 1 --repeats 5 --validate-requests 8 --grid small \
        --timer cpu
fi
start=$SECONDS
"$py" scripts/real_vs_sim.py --profile "$profile" "$@"
echo "real_model: $((SECONDS - start)) s wall; tables and figures in results/real_model"
