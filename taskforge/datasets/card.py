"""The dataset card every dataset folder carries, so the Hugging Face ``datasets`` library reads it.

``datasets.load_dataset(DIR)`` picks the format by the most common file extension in the folder
when the folder says nothing, and a mined folder's JSON files (``manifest.json``,
``mine-summary.json``, ``validate.json``) can outnumber its Parquet shards. So the
:class:`~taskforge.datasets.writer.DatasetWriter` writes ``README.md`` with a YAML ``configs``
header naming the shards: the top-level ``*.parquet`` files (a writer's temporaries are dot files,
which the library skips; ``rewards/`` has its own card). The card depends only on the folder's kind
and schema version, so it is written when the folder is opened for writing, and rewritten only
when it is one of ours that is out of date; a card someone else wrote is left alone.
"""

from __future__ import annotations

from pathlib import Path

from taskforge.datasets.manifest import write_atomic
from taskforge.datasets.schema import DatasetKind

__all__ = ["CARD", "card_text", "write_card"]

CARD = "README.md"
"""The card's file name, as the Hub and ``load_dataset`` look for it."""
_MARK = "taskforge_dataset_card: true"


def card_text(kind: DatasetKind) -> str:
    """The card of a folder of ``kind``: the ``configs`` header, then the columns."""
    columns = "\n".join(f"| `{name}` | {code} | {doc} |" for name, code, doc in kind.columns)
    return f"""---
{_MARK}
tags:
- taskforge
configs:
- config_name: default
  data_files:
  - split: train
    path: "*.parquet"
---

# taskforge {kind.name}

A taskforge dataset folder of {kind.name} rows (schema version {kind.version}): zstd Parquet
shards, and `manifest.json`, which lists each shard with its rows and sha256 and is written last.
Read it with any Parquet reader, or:

```python
import datasets
rows = datasets.load_dataset("PATH/TO/THIS/FOLDER", split="train")
```

`taskforge.datasets.open(PATH)` reads it checked against the manifest. The columns:

| column | type | description |
|---|---|---|
{columns}
"""


def write_card(directory: Path, kind: DatasetKind) -> bool:
    """Write the card into ``directory`` unless it is there already or someone else's card is;
    returns whether it wrote."""
    path = directory / CARD
    text = card_text(kind)
    if path.exists():
        current = path.read_text(encoding="utf-8", errors="replace")
        if current == text or _MARK not in current.split("\n---", 1)[0]:
            return False
    write_atomic(path, text.encode())
    return True
