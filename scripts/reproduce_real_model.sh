#!/usr/bin/env bash
# The three questions on a real trained model (issue 14): SmolLM2-135M-Instruct on this CPU,
# real text prompts that end at the model's own EOS (workload=smollm2_prompts), a KV pool small
# enough that vLLM preempts and SGLang retracts; each scheduler on the real executor and on the
# simulator, side by side. The simulator's profile is the executor measured alone over a grid
# of step shapes that includes ragged decode batches (the torch kernel pads a batch whose
# contexts differ to the longest and masks it: the cost model's padded-keys term), beside the
# first version's grid profile (no ragged shapes, five terms) as the baseline.
# Results: results/real_model/ or $OUT (raw runs in its */runs/, ignored by git).
#   scripts/reproduce_real_model.sh [--reprofile] [--recalibrate] [--repeats N]
#       [--timer min_of_k|cpu] [--load N] [real_vs_sim.py options, e.g. --num-requests 64]
#   --reprofile    re-measure the grid profile (scripts/profile_executor.py --grid small)
#   --recalibrate  also run the calibration workload (seed 1) on the real executor, fit the
#                  in-situ profile to its steps (profile_executor.py --from-run, padded-keys
#                  term included) and validate with it, the grid profile as the baseline
#   --repeats N    real runs of the study's workload (default 4; the first in results/real_model,
#                  the others in results/real_model/repeatK), summarized by real_repeats.py
#   --timer T      the step clock of the grid profile and of the real runs alike (default
#                  reference: each step's fastest of k CPU-time passes in the unit of a
#                  reference step timed beside each pass, k = 2, the unit the grid profile
#                  records; min_of_k: the fastest of k = 3 passes, no unit; cpu: one pass, the
#                  clock of the first versions, whose grid is smollm2_135m_cpu_padded.json)
#   --timer-repeats K  the passes per step (k above); real_vs_sim.py's --timer-prefill-repeats K
#                  (after these options) gives a step with a prefill chunk K passes instead
#   --load N       N processes spinning on a core for the whole script (the "loaded" condition
#                  of issue 29), on top of whatever else the machine runs
# Builds the checkpoint first when models/ lacks it (`make model`). One torch thread, and step
# times measured in the process's CPU time: on a CPU shared with other work, wall-clock steps
# include waiting for a core, unevenly over time (DESIGN.md, "The real executor's step clock").
set -euo pipefail
start=$SECONDS
cd "$(dirname "$0")/.."
source scripts/_wall_time.sh
py=${PYTHON:-.venv/bin/python}
export OMP_NUM_THREADS=1 CI=${CI:-true}
first_grid=conf/profiles/smollm2_135m_cpu.json
insitu=conf/profiles/smollm2_135m_cpu_insitu.json
out=${OUT:-results/real_model}  # OUT=<folder>: results elsewhere
reprofile=0 recalibrate=0 repeats=4 timer=reference k=2 load=0
while [ $# -gt 0 ]; do
    case "$1" in
        --reprofile) reprofile=1; shift ;;
        --recalibrate) recalibrate=1; shift ;;
        --repeats) repeats=$2; shift 2 ;;
        --timer) timer=$2; k=$([ "$2" = min_of_k ] && echo 3 || echo 2); shift 2 ;;
        --timer-repeats) k=$2; shift 2 ;;
        --load) load=$2; shift 2 ;;
        *) break ;;
    esac
done
case "$timer" in
    # min_of_k: the cpu-clock grid becomes the baseline the new one is compared with
    min_of_k) grid=conf/profiles/smollm2_135m_cpu_min3.json
              first_grid=conf/profiles/smollm2_135m_cpu_padded.json ;;
    reference) grid=conf/profiles/smollm2_135m_cpu_ref.json
               first_grid=conf/profiles/smollm2_135m_cpu_min3.json ;;
    cpu) grid=conf/profiles/smollm2_135m_cpu_padded.json ;;
    *) echo "reproduce_real_model.sh: --timer $timer: valid: reference, min_of_k, cpu" >&2
       exit 2 ;;
esac
spinners=()
for _ in $(seq 1 "$load"); do
    "$py" -c "while True: pass" & spinners+=($!)
done
trap '[ ${#spinners[@]} -eq 0 ] || kill "${spinners[@]}" 2>/dev/null || true' EXIT
[ -f models/smollm2-135m-instruct/build_info.json ] || make model
if [ $reprofile = 1 ] || [ ! -f "$grid" ]; then
    "$py" scripts/profile_executor.py --model-path models/smollm2-135m-instruct \
        --out "$grid" --threads 1 --repeats 5 --validate-requests 8 --grid small \
        --timer "$timer" --timer-repeats "$k"
fi
profile=$grid baseline=$first_grid
if [ $recalibrate = 1 ]; then
    # Calibration workload: seed 1. Its tables (the grid profile against it) in $out/calibration.
    "$py" scripts/real_vs_sim.py --seed 1 --profile "$grid" --timer "$timer" --timer-repeats "$k" \
        --out "$out/calibration" "$@"
    "$py" scripts/profile_executor.py --from-run "$out/calibration/runs/vllm_real" \
        "$out/calibration/runs/sglang_real" --base-profile "$grid" --out "$insitu"
    profile=$insitu baseline=$grid
fi
folders=()
for i in $(seq 1 "$repeats"); do
    dir=$out; [ "$i" -gt 1 ] && dir=$out/repeat$((i - 1))
    "$py" scripts/real_vs_sim.py --profile "$profile" --baseline-profile "$baseline" \
        --timer "$timer" --timer-repeats "$k" --out "$dir" "$@"
    folders+=("$dir")
done
"$py" scripts/real_repeats.py "${folders[@]}" --out "$out/repeats.md" \
    --figure "$out/figures/repeats_cdf.png"
wall_time real_model "$start" "tables and figures in $out"
