#!/usr/bin/env bash
# The study of issue 8: every victim policy x both preemption modes (recompute, swap to a host
# pool as large as the device pool) x the schedulers of SCHEDULERS, at loads relative to each
# scheduler's capacity, over 5 realisations (conf/experiment/victim_policies.yaml: Q3's main
# setting, the Azure 2023 conv trace in 1,000-request windows, Q3's windows 0,4,8,12,16).
#   1. the capacity of each scheduler under its default policy in recompute mode, per window:
#      Q3's search of the same config (results/victim_choice/runs/<setting>/capacity/
#      capacity.json, written by scripts/reproduce_victim_choice.sh) when it is there and
#      made for this config and these windows, else the same search run here
#      (python -m experiments.capacity experiment=victim_policies --per-window); either way
#      copied to runs/.../capacity/capacity.json marked free of the victim policy, the mode
#      and the host pool (`scheduler_free`: experiments/run/load.py), so that every policy
#      and mode runs against it;
#   2. per scheduler of SCHEDULERS, a multirun at workload.load = LOADS (fractions of that
#      capacity: realisation k at load x window k's own capacity; every policy and mode of a
#      scheduler sees the same arrivals), 7 policies x 2 modes x 5 realisations per load;
#   3. per scheduler, python -m experiments.report (tables only) into results/victim_policies/
#      <scheduler>/, then scripts/policy_report.py for the summary tables and figures
#      (capacity.md: the capacity and rate of every window and load).
# LOADS (default "1.25", just past the knee: one load keeps the runs within the time budget):
# the loads, fractions of capacity, space-separated. SCHEDULERS (default "vllm"): SGLang
# retracts at most once per 1,000-request window in this setting (results/victim_choice/),
# too few for its policies to differ, so its 70 runs are left out unless asked for
# (SCHEDULERS="vllm sglang"). CAPACITY_PER_WINDOW=0: the pooled capacity for every window.
# Two settings of Q3 (POLICY_SETTINGS, default "main a10", picks some), each with its own
# default schedulers and loads (SCHEDULERS and LOADS, when set, apply to every setting):
#   main  the above; vLLM at 1.25: results/victim_policies/ (raw runs/vllm, runs/capacity);
#   a10   Llama-2-7B on an A10 24GB (fitted_roofline from the A40, 16,320 KV slots and a host
#         pool as large), where SGLang retracts 2-16 times per window past capacity: vLLM and
#         SGLang at 1.25 and 1.5: results/victim_policies/a10/ (raw runs/a10/, git-ignored).
set -euo pipefail
start=$SECONDS
cd "$(dirname "$0")/.."
source scripts/_wall_time.sh
py=${PYTHON:-.venv/bin/python}
columns=num_preemptions,preempted_request_share,recomputed_token_share,p99_e2el_victim_ms,p99_e2el_nonvictim_ms,p99_e2el_ms,request_goodput,slo_attainment,num_swap_out,num_swap_fallbacks,swap_time_share
export CI=${CI:-true}  # no progress bars in the workers

run_setting() {  # run_setting SETTING: its capacities, multiruns and reports
    local setting=$1 out runs label capacity sched loads_arg
    local -a overrides loads schedulers one_load per_window
    case $setting in
        main) out=results/victim_policies; runs=$out/runs; overrides=(); label=""
              read -r -a loads <<< "${LOADS:-1.25}"
              read -r -a schedulers <<< "${SCHEDULERS:-vllm}" ;;
        # the host pool as large as the A10's device pool (summary.json kv_capacity_tokens)
        a10) out=results/victim_policies/a10; runs=results/victim_policies/runs/a10
             overrides=(hardware=a10 executor.cost_model=fitted_roofline
                        scheduler.host_kv_capacity_tokens=16320); label=", A10 setting"
             read -r -a loads <<< "${LOADS:-1.25 1.5}"
             read -r -a schedulers <<< "${SCHEDULERS:-vllm sglang}" ;;
        *) echo "POLICY_SETTINGS: setting $setting unknown; valid: main, a10" >&2; exit 2 ;;
    esac
    rm -rf "$runs/capacity" "${schedulers[@]/#/$runs/}"  # this setting's own (a10's are under main's)
    mkdir -p "$runs/capacity"
    capacity=$runs/capacity/capacity.json
    per_window=()
    [ "${CAPACITY_PER_WINDOW:-1}" = 0 ] || per_window=(--per-window)
    # Q3's capacity file of the default policy in recompute mode, when it was made for this
    # config and these windows, marked free of the policy, the mode and the host pool
    if ! "$py" - "results/victim_choice/runs/$setting/capacity/capacity.json" "$capacity" \
            "${per_window[@]}" "${overrides[@]}" <<'PY'
import json, sys
from pathlib import Path
from experiments.run.config import compose_run_config
from experiments.run.load import capacity_config, scheduler_config
from experiments.run.realizations import realization_ids
FREE = ["host_kv_capacity_tokens", "preemption_mode", "victim_policy"]
source, target = Path(sys.argv[1]), Path(sys.argv[2])
per_window = "--per-window" in sys.argv[3:]
overrides = [a for a in sys.argv[3:] if a != "--per-window"]
if not source.is_file():
    sys.exit(1)
data = json.loads(source.read_text())
for name, entry in data["schedulers"].items():
    cfg = compose_run_config(["experiment=victim_policies", f"scheduler={name}", *overrides,
                              "scheduler.victim_policy=default",
                              "scheduler.preemption_mode=recompute"])
    mine = {k: v for k, v in scheduler_config(cfg).items() if k not in FREE}
    theirs = {k: v for k, v in entry["scheduler_config"].items() if k not in FREE}
    if capacity_config(cfg) != data["config"] or mine != theirs \
            or data.get("realization_ids") != realization_ids(cfg) \
            or bool(data.get("per_window")) != per_window:
        sys.exit(1)
    entry["scheduler_free"] = FREE
data["note"] = (f"{source}, the capacity of the default policy in recompute mode, marked "
                "free of the victim policy, the preemption mode and the host pool")
target.write_text(json.dumps(data, indent=1) + "\n")
PY
    then
        "$py" -m experiments.capacity experiment=victim_policies "${overrides[@]}" \
            "scheduler=$(IFS=,; echo "${schedulers[*]}")" scheduler.victim_policy=default scheduler.preemption_mode=recompute \
            --scheduler-free host_kv_capacity_tokens,preemption_mode,victim_policy \
            "${per_window[@]}" --out "$runs/capacity"
    fi
    echo "victim_policies ($setting): capacities in $capacity"
    loads_arg=$(IFS=,; echo "${loads[*]}")
    for sched in "${schedulers[@]}"; do
        "$py" -m experiments.run -m experiment=victim_policies "scheduler=$sched" \
            "${overrides[@]}" "workload.load=$loads_arg" "workload.capacity_file=$capacity" \
            "hydra.sweep.dir=$runs/$sched" \
            hydra.callbacks.comparison.print_table=false hydra.callbacks.comparison.figures=false
        "$py" -m experiments.report "$runs/$sched" --out "$out/$sched" --no-figures \
            --title "Victim policies${label}: ${sched}" --columns "$columns" > /dev/null
    done
    one_load=()
    [ "${#loads[@]}" -eq 1 ] && one_load=(--load "${loads[0]}")
    "$py" scripts/policy_report.py "$out" "${schedulers[@]}" --capacity "$capacity" \
        "${one_load[@]}"
}

read -r -a settings <<< "${POLICY_SETTINGS:-main a10}"
for setting in "${settings[@]}"; do
    run_setting "$setting"
done
wall_time victim_policies "$start" "tables and figures in results/victim_policies, raw runs in results/victim_policies/runs"
