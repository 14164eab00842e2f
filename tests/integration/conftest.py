"""Integration fixtures shared across modules: tasks mined once per session from real corpus projects."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

MINED_SOURCES = ["pypi:iniconfig==2.3.1", "pypi:addict==2.4.0"]


@pytest.fixture(scope="session")
def mined_corpus(tmp_path_factory, session_cache, base_image) -> tuple[Path, str]:  # type: ignore[no-untyped-def]
    """Tasks mined with the CLI from two corpus projects (iniconfig, addict): the dataset folder
    and what the command printed. Shared by the mining, validation and scoring tests."""
    out = tmp_path_factory.mktemp("mined")
    proc = subprocess.run(
        [sys.executable, "-m", "taskforge.cli", "mine", *MINED_SOURCES, "--out", str(out), "--max-tasks", "4", "--seed", "1"],
        capture_output=True, text=True, timeout=1800, env={**os.environ, "TASKFORGE_CACHE": str(session_cache)},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc.stdout
