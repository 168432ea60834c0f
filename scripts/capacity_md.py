"""A capacity search's table as markdown: `python scripts/capacity_md.py CAPACITY_JSON OUT
TITLE` writes OUT with the title, `experiments.capacity.main.format_table` (the pooled
capacities and, for a `--per-window` search, each window's and their spread), the command,
the rule and the config digest; nothing else (no dates, no wall times), so a rerun of the
same search rewrites it byte for byte. scripts/_study.sh writes each setting's capacity.md
with it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from experiments.capacity.main import format_table  # noqa: E402


def capacity_markdown(data: dict[str, Any], title: str) -> str:
    """The markdown of one capacity.json (`data`) under `title`."""
    cmd = " ".join(data["command"][3:])
    return (f"# Capacity: {title}\n\n```\n{format_table(data)}\n```\n\n"
            f"Command: `python -m experiments.capacity {cmd}`. Rule: {data['rule']}. "
            f"Config digest `{data['config_digest'][:16]}`.\n")


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: capacity_md.py CAPACITY_JSON OUT TITLE", file=sys.stderr)
        return 2
    source, out, title = argv
    Path(out).write_text(capacity_markdown(json.loads(Path(source).read_text()), title))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
