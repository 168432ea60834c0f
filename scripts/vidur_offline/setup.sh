#!/usr/bin/env bash
# Vidur 0.0.26 offline, in $VIDUR_WORK (default /tmp/vidur_work): a venv with vidur from PyPI,
# its profiles from a git mirror of microsoft/vidur ($VIDUR_MIRROR, a bare repository), and a
# local Hugging Face cache of them. Then `run_vidur.sh OUT TRACE N` runs the bench workload.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
W="${VIDUR_WORK:-/tmp/vidur_work}"
GD="${VIDUR_MIRROR:?a git mirror of microsoft/vidur (git clone --mirror https://github.com/microsoft/vidur)}"
mkdir -p "$W/raw"
[ -x "$W/venv/bin/python" ] || python3 -m venv "$W/venv"
"$W/venv/bin/pip" install -q vidur==0.0.26
git --git-dir="$GD" show bee57dafa1eb2dc422dcaec46a66975599a6a242:data/profiling/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv > "$W/raw/mlp.csv"
for f in all_reduce send_recv; do
  git --git-dir="$GD" show "7d47513363ec447a741ac5e47241580b47724fbf:data/profiling/network/a100_pairwise_nvlink/$f.csv" > "$W/raw/$f.csv"
done
rm -rf "$W/hf_cache"  # also Vidur's cache: its trained models go here (the first run trains)
"$W/venv/bin/python" "$HERE/build_hf_cache.py" "$W/raw" "$HERE/attention_sample.txt" "$W/hf_cache"
