"""The schemas: documented column by column, in step with the Task row, and cheap to import."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from taskforge.datasets.schema import KINDS, REWARDS, TASKS, get_kind
from taskforge.errors import TaskforgeError

SCHEMA_MD = Path(__file__).resolve().parents[2] / "datasets" / "SCHEMA.md"


def _documented(section: str) -> dict[str, str]:
    """column → type, from the table under the heading that starts with ``section``."""
    text = SCHEMA_MD.read_text()
    start = text.index(f"## {section}")
    end = text.find("\n## ", start + 1)
    rows = re.findall(r"^\| `([A-Za-z0-9_]+)` \| ([^|]+) \|", text[start:end], flags=re.MULTILINE)
    return {name: kind.strip().replace("&lt;", "<").replace("&gt;", ">") for name, kind in rows}


@pytest.mark.parametrize(("kind", "section"), [(TASKS, "Task rows"), (REWARDS, "Reward rows")])
def test_every_column_is_documented_with_its_type_and_version(kind, section: str) -> None:  # type: ignore[no-untyped-def]
    documented = _documented(section)
    assert documented == {name: code for name, code, _ in kind.columns}
    assert f"## {section} (schema version {kind.version})" in SCHEMA_MD.read_text()


@pytest.mark.parametrize("kind", list(KINDS.values()))
def test_the_arrow_schema_carries_kind_version_and_descriptions(kind) -> None:  # type: ignore[no-untyped-def]
    schema = kind.schema()
    assert schema.names == [c[0] for c in kind.columns]
    assert schema.metadata[b"taskforge.schema_version"] == str(kind.version).encode()
    assert all(field.metadata[b"description"] for field in schema)
    for name in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        if name in schema.names:
            assert schema.field(name).type == pa.list_(pa.string())


def test_task_rows_are_what_the_miner_writes() -> None:
    """taskforge.task.Task.to_row gives exactly the task columns, with types the schema takes."""
    from dataclasses import fields

    from taskforge.datasets.testing import task_rows
    from taskforge.task import Task

    assert [f.name for f in fields(Task)] == TASKS.schema().names
    task = Task.from_row(task_rows(1)[0])
    table = pa.Table.from_pylist([task.to_row()], schema=TASKS.schema())
    assert Task.from_row(table.to_pylist()[0]) == task


def test_unknown_kind_lists_the_known_ones() -> None:
    with pytest.raises(TaskforgeError, match="known: rewards, tasks"):
        get_kind("trajectories")


def test_importing_the_package_imports_no_heavy_module() -> None:
    code = ("import sys, taskforge.datasets, taskforge.datasets.stats, taskforge.datasets.export, "
            "taskforge.mining.images, taskforge.datasets.reader; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pyarrow', 'duckdb', 'datasets', 'ray', 'matplotlib', 'docker', 'pandas')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
