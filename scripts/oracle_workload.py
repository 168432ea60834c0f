"""What the project's oracle recording drivers (scripts/vllm_oracle_loops.py,
scripts/sglang_oracle_loops.py) share of the conformance format (docs/CONFORMANCE.md): the
fake model's token and the workload file's lines. Plain Python, so that the oracles'
environments, which do not install the project, import it beside the driver."""

from __future__ import annotations

import json


def fake_token(request_id: str, seq_len: int) -> int:
    """docs/CONFORMANCE.md: the token of request `r<i>` whose sequence holds `seq_len`."""
    return 3 + (int(request_id[1:]) * 7919 + seq_len * 104729) % 31000


def read_records(path: str) -> tuple[dict | None, list[dict]]:
    """A workload file's config line (None when it has none) and its request lines, in file
    order."""
    cfg: dict | None = None
    reqs: list[dict] = []
    with open(path) as f:
        for line in f:
            if line.strip():
                rec = json.loads(line)
                if rec["type"] == "config":
                    cfg = rec
                elif rec["type"] == "request":
                    reqs.append(rec)
    return cfg, reqs
