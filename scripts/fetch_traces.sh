#!/usr/bin/env bash
# Download the public traces the workloads read into data/traces (or $SCHEDBENCH_TRACE_DIR).
# The files are copied byte for byte from their upstream repositories and never committed here.
#   Azure LLM inference 2023 (CC-BY-4.0; cite Splitwise, ISCA 2024)
#   Mooncake FAST'25 traces (Apache-2.0)
set -euo pipefail
dest=${1:-${SCHEDBENCH_TRACE_DIR:-data/traces}}
azure=https://raw.githubusercontent.com/Azure/AzurePublicDataset/master
mooncake=https://raw.githubusercontent.com/kvcache-ai/Mooncake/main/FAST25-release
mkdir -p "$dest/azure2023" "$dest/mooncake"
get() {  # url file: download to a temporary name, then rename, so a broken transfer leaves nothing
    local tmp="$2.part"
    curl -fL --retry 3 -o "$tmp" "$1" && mv "$tmp" "$2"
}
for kind in conv code; do
    get "$azure/data/AzureLLMInferenceTrace_$kind.csv" "$dest/azure2023/AzureLLMInferenceTrace_$kind.csv"
done
get "$mooncake/traces/synthetic_trace.jsonl" "$dest/mooncake/synthetic_trace.jsonl"
get "$mooncake/traces/conversation_trace.jsonl" "$dest/mooncake/conversation_trace.jsonl"
head -n 1000 "$dest/mooncake/conversation_trace.jsonl" > "$dest/mooncake/conversation_trace_first1000.jsonl"
echo "traces in $dest"
