"""An offline Hugging Face dataset cache that vidur 0.0.26's `snapshot_download` resolves
with HF_HUB_OFFLINE=1 (scripts/vidur_offline/README.md).

    python build_hf_cache.py RAW_DIR ATTENTION_SAMPLE CACHE_DIR

RAW_DIR holds Vidur's own profiles from its GitHub history: mlp.csv
(microsoft/vidur@bee57da: data/profiling/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv, used
as is), all_reduce.csv and send_recv.csv (@7d47513: data/profiling/network/
a100_pairwise_nvlink/, never read at TP=1, PP=1 but required). ATTENTION_SAMPLE is the
transcribed subset of the Llama-2-7b A100 attention.csv (its header says which rows);
its values go into the original columns, the constant columns are the model's.
"""

import json
import sys
from pathlib import Path

import pandas as pd

COMPUTE_REPO = "local/llama-2-7b-hf-a100"
NETWORK_REPO = "local/a100-pairwise-nvlink"
REV = "0" * 40  # the local snapshot's (made-up) commit
ATTENTION_CONSTANTS = {"n_embd": 4096, "n_q_head": 32, "n_kv_head": 32, "block_size": 16,
                       "num_tensor_parallel_workers": 1, "max_model_len": 4096,
                       "attention_backend": "AttentionBackend.FLASH_ATTENTION"}


def snapshot_dir(cache: Path, kind: str, repo: str) -> Path:
    """The snapshot folder of dataset `repo` in the hub cache layout, with refs/main."""
    org, name = repo.split("/")
    base = cache / "profiling_data" / kind / f"datasets--{org}--{name}"
    (base / "refs").mkdir(parents=True, exist_ok=True)
    (base / "refs" / "main").write_text(REV)
    snap = base / "snapshots" / REV
    snap.mkdir(parents=True, exist_ok=True)
    return snap


def attention_rows(sample: Path) -> pd.DataFrame:
    """`D kv : batch=ms ...` (decode) and `P chunk : kv=ms ...` (prefill) lines as rows."""
    rows = []
    for line in sample.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        kind, key, _, *pairs = line.split()
        for pair in pairs:
            a, v = pair.split("=")
            decode = kind == "D"
            rows.append({
                "time_stats.attn_decode.median": float(v) if decode else float("nan"),
                "time_stats.attn_prefill.median": float("nan") if decode else float(v),
                **ATTENTION_CONSTANTS,
                "batch_size": int(a) if decode else 1,
                "prefill_chunk_size": 0 if decode else int(key),
                "kv_cache_size": int(key) if decode else int(a),
                "is_prefill": not decode,
            })
    return pd.DataFrame(rows)


def main(raw: Path, sample: Path, cache: Path) -> None:
    snap = snapshot_dir(cache, "compute", COMPUTE_REPO)
    mlp = pd.read_csv(raw / "mlp.csv")
    mlp.to_csv(snap / "mlp.csv.xz", index=False, compression="xz")
    att = attention_rows(sample)
    att.to_csv(snap / "attention.csv.xz", index=False, compression="xz")
    (snap / "config.json").write_text(json.dumps({
        "schema_version": "1.0", "model": "meta-llama/Llama-2-7b-hf", "device_sku": "a100",
        "source": "microsoft/vidur mlp.csv @bee57da; attention.csv, transcribed subset"}))
    snap = snapshot_dir(cache, "network", NETWORK_REPO)
    for name in ("all_reduce.csv", "send_recv.csv"):
        pd.read_csv(raw / name).to_csv(snap / f"{name}.xz", index=False, compression="xz")
    (snap / "config.json").write_text(json.dumps({
        "schema_version": "1.0", "sku": "a100_pairwise_nvlink",
        "source": "microsoft/vidur @7d47513 data/profiling/network/a100_pairwise_nvlink"}))
    print(f"mlp rows {len(mlp)}; attention rows {len(att)} "
          f"(decode {int((att.prefill_chunk_size == 0).sum())}, "
          f"prefill {int((att.prefill_chunk_size > 0).sum())})")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
