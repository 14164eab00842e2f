"""Do two task folders hold the same rows? Behaviour checks across refactors and machines.

    python3 -m tests.benchmarks.same_rows BEFORE_DIR AFTER_DIR

Compares every column of every row, by instance_id, leaving out what is wall-clock: ``created_at``
and, inside the JSON columns, keys ending in ``_s`` and ``seconds``. Exit status 1 when they differ.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from taskforge.datasets import read_rows


def _steady(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in "{[":
        try:
            value = json.loads(value)
        except ValueError:
            return value
    if isinstance(value, dict):
        return {k: _steady(v) for k, v in value.items() if not (k.endswith("_s") or k == "seconds")}
    if isinstance(value, list):
        return [_steady(v) for v in value]
    return value


def differences(before: Path, after: Path) -> list[str]:
    rows = [{r["instance_id"]: r for r in read_rows(folder)} for folder in (before, after)]
    found = [f"only in {folder}: {i}" for folder, mine, other in ((before, rows[0], rows[1]), (after, rows[1], rows[0]))
             for i in sorted(mine.keys() - other.keys())]
    for instance_id in sorted(rows[0].keys() & rows[1].keys()):
        a, b = rows[0][instance_id], rows[1][instance_id]
        found += [f"{instance_id}: {column} differs" for column in sorted(a.keys() | b.keys())
                  if column != "created_at" and _steady(a.get(column)) != _steady(b.get(column))]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    args = parser.parse_args()
    found = differences(args.before, args.after)
    ids = sorted(r["instance_id"] for r in read_rows(args.before))
    print("\n".join(found) if found else f"same rows: {len(ids)} ({', '.join(ids)})")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
