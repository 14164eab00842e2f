"""The inspection notebook runs top to bottom on datasets/sample/ with nbclient, as CI runs it,
and produces its plots and the side-by-side table."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "datasets" / "notebooks" / "inspect_tasks.ipynb"


def test_inspect_notebook_runs_on_the_sample_and_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("matplotlib")
    monkeypatch.delenv("TASKFORGE_DATASET", raising=False)  # the notebook's default: ../sample
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")  # jupyter_core warns about its old paths otherwise
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    started = time.monotonic()
    nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    elapsed = time.monotonic() - started
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "sample: " in text and "tasks per repository" in text and "FAIL_TO_PASS tests" in text
    pngs = [o for o in outputs if o.output_type == "display_data" and "image/png" in o.data]
    assert len(pngs) >= 5  # repository/strategy bars and one histogram per distribution
    tables = [o.data["text/html"] for o in outputs if o.output_type == "display_data" and "text/html" in o.data]
    assert len(tables) == 1 and "problem statement" in tables[0] and "diff --git" in tables[0]
    assert elapsed < 120, elapsed
