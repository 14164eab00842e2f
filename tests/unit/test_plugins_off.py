"""An installed pytest plugin written for another pytest: which one pytest refused, read from a
real pytest's output, and the arguments that switch plugins off."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from taskforge.repo.suite import incompatible_plugin, plugins_off


def test_the_refused_plugin_is_named_from_pytests_own_output(tmp_path: Path) -> None:
    # A hook implementation with an argument this pytest's hookspec does not have, as
    # pytest-flake8 1.3 has (``path``, gone in pytest 9).
    (tmp_path / "oldplug.py").write_text("def pytest_collect_file(path, parent, some_old_argument):\n    return None\n")
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "oldplug", "-q", "--co"], cwd=tmp_path,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(tmp_path)}, check=False)
    assert proc.returncode != 0
    assert incompatible_plugin(proc.stdout + proc.stderr) == "oldplug"
    assert incompatible_plugin("ERROR: file or directory not found: tests\n") is None


def test_the_plugins_switched_off_are_read_from_the_arguments() -> None:
    assert plugins_off(("--no-cov", "-p", "no:randomly", "-p", "no:flake8", "-p", "xdist")) == {"randomly", "flake8"}
    assert plugins_off(()) == set()
