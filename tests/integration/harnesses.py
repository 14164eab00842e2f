"""The harnesses people already use, installed for real from the package index, and corpus tasks to
run them on (shared by tests/integration/test_harnesses.py).

Each tool gets its own virtual environment under ``$TASKFORGE_HARNESS_CACHE`` (default
``~/.cache/taskforge-harnesses``), ``NAME-VERSION``, made once and reused; a tool that cannot be
installed (no package index) skips its test. The versions are the ones the README's compatibility
table names.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = {
    "swebench": "swebench==5.0.2",
    "mini-swe-agent": "mini-swe-agent==2.4.6",
    # harbor declares Python >= 3.12; its task models and loader run on 3.11, which is what we have.
    "harbor": "harbor==0.26.0",
}
"""Tool → the requirement installed for it."""
_IGNORE_PYTHON = {"harbor"}

CORPUS = {
    # project → (dataset folder, instance ids): tasks of three corpus projects, one each. iniconfig's
    # tests have ids with spaces in them (test_tokenize[blank line]).
    "iniconfig": (ROOT / "datasets" / "sample", ["iniconfig__body-iniconfig-IniConfig-parse-57a482778f"]),
    "portion": (ROOT / "datasets" / "heldout", ["portion__body-portion-func-iterate-076b70b300"]),
    "configobj": (ROOT / "datasets" / "heldout", ["configobj__symbol-configobj-ConfigObj-validate-ee85068eba"]),
}


def tool_venv(name: str) -> Path:
    """The virtual environment holding ``name`` (made on first use); skips if it cannot be made."""
    requirement = TOOLS[name]
    root = Path(os.environ.get("TASKFORGE_HARNESS_CACHE") or Path.home() / ".cache" / "taskforge-harnesses")
    venv = root / requirement.replace("==", "-")
    if (venv / ".installed").is_file():
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    extra = ["--ignore-requires-python"] if name in _IGNORE_PYTHON else []
    proc = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *extra, requirement],
                          capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        shutil.rmtree(venv, ignore_errors=True)
        pytest.skip(f"could not install {requirement}: {proc.stderr.strip()[-400:]}")
    (venv / ".installed").write_text(requirement + "\n")
    return venv


def tool_env(venv: Path, **extra: str) -> dict[str, str]:
    """An environment that runs the tool's venv, offline for the Hugging Face libraries."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "PATH": f"{venv / 'bin'}:{env.get('PATH', '')}", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
            **extra}


def corpus_tasks(out: Path, *, backend, base_image, projects: Sequence[str] = tuple(CORPUS)) -> Path:  # type: ignore[no-untyped-def]
    """A task folder at ``out`` with the CORPUS tasks of ``projects``, each naming its environment
    image as this machine builds it."""
    from taskforge.datasets import TASKS, DatasetWriter, read_tasks, run_versions
    from taskforge.repo.environment import build_environment
    from taskforge.repo.sources import fetch

    tasks = []
    for project in projects:
        folder, ids = CORPUS[project]
        chosen = [t for t in read_tasks(folder) if t.instance_id in ids]
        assert len(chosen) == len(ids), f"{project}: {ids} not all in {folder}"
        env = build_environment(fetch(chosen[0].source), backend=backend, base=base_image)
        tasks += [replace(t, image_name=env.image) for t in chosen]
    with DatasetWriter(out, kind=TASKS, recipe={"harness-test": list(projects)}, versions=run_versions()) as writer:
        writer.write((t.to_row() for t in tasks), prefix="tasks-corpus")
    return out


def broken_patch(gold: str) -> str:
    """The gold patch with every added line of code (not a definition line, a decorator or a
    comment) replaced by a ``raise`` at its indent: it applies, and the restored code raises (or no
    longer compiles)."""
    lines = gold.splitlines(keepends=True)
    broken = 0
    for i, line in enumerate(lines):
        body = line[1:].rstrip("\n")
        if line.startswith("+") and not line.startswith("+++") and body.strip() and not body.lstrip().startswith(
                ("#", "def ", "async def ", "class ", "@")):
            indent = body[: len(body) - len(body.lstrip())]
            lines[i] = f"+{indent}raise RuntimeError('broken')\n"
            broken += 1
    assert broken, "no line of code to break in the gold patch"
    return "".join(lines)
