"""A plain wheel works: built from the checkout, installed (not editable) into a new venv, and run
from a folder outside the checkout, it finds its sandbox templates, has Ray, runs a project's
suite and mines the quickstart recipe to the same rows as the checkout.

The venv sees this machine's site-packages (``--system-site-packages``) so that the test need not
download the dependencies again; the wheel's own copy of taskforge must win over the checkout's.
A fully fresh venv (no system packages) was checked by hand, see the README's design section.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800, check=False)
    assert proc.returncode == 0, f"{cmd}: {proc.stderr[-3000:]}"
    return proc


def test_a_plain_wheel_runs_the_suite_and_the_quickstart(tmp_path, session_cache, base_image) -> None:  # type: ignore[no-untyped-def]
    env = {**os.environ, "TASKFORGE_CACHE": str(session_cache)}
    env.pop("PYTHONPATH", None)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(ROOT),
          "-w", str(tmp_path / "dist")], cwd=tmp_path, env=env)
    (wheel,) = (tmp_path / "dist").glob("taskforge-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert {"taskforge/sandboxes/security.toml", "taskforge/sandboxes/templates/env.Dockerfile",
            "taskforge/sandboxes/base/build-rootfs.sh", "taskforge/guest/driver.py"} <= names
    assert any(line.startswith("Requires-Dist: ray") for line in metadata.splitlines())

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], cwd=tmp_path, env=env)
    python, taskforge = str(venv / "bin" / "python"), str(venv / "bin" / "taskforge")
    _run([python, "-m", "pip", "install", "-q", "--no-deps", str(wheel)], cwd=tmp_path, env=env)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    where = _run([python, "-c", "import taskforge, ray; from taskforge.paths import sandboxes_dir; "
                  "print(taskforge.__file__); print(sandboxes_dir())"], cwd=outside, env=env).stdout.split()
    assert all(Path(p).is_relative_to(venv) for p in where), where  # the wheel's copy, not the checkout's

    suite = _run([taskforge, "test", "pypi:iniconfig==2.3.1"], cwd=outside, env=env)
    assert "54 tests (54 passed)" in suite.stdout

    recipe = outside / "quickstart.toml"
    recipe.write_text((ROOT / "recipes" / "quickstart.toml").read_text())
    _run([taskforge, "mine", "--recipe", str(recipe)], cwd=outside, env=env)
    summary = json.loads((outside / "tasks" / "mine-summary.json").read_text())
    assert summary["totals"]["tasks"] == 3 and not summary["failures"], summary["totals"]
    ids = sorted(row["instance_id"] for row in _rows(outside / "tasks"))
    assert ids == ["iniconfig__body-iniconfig-IniConfig-get-9b17388e68",
                   "iniconfig__body-iniconfig-IniConfig-parse-57a482778f",
                   "iniconfig__symbol-iniconfig-IniConfig-parse-4a83fcac29"]


def _rows(folder: Path) -> list[dict[str, object]]:
    import pyarrow.parquet as pq

    return [row for shard in sorted(folder.glob("*.parquet")) for row in pq.read_table(shard).to_pylist()]
