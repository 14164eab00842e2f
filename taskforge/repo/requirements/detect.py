"""The entry point: every source, declared then inferred, read in order into one result."""

from __future__ import annotations

from pathlib import Path

from packaging.utils import canonicalize_name

from taskforge.repo.requirements.declared import (
    collect_known_extras,
    declared_in_pkg_info,
    declared_in_pyproject,
    declared_in_requirements_files,
    declared_in_setup_cfg,
    declared_in_setup_py,
    find_project_name,
    runtime_dependencies,
)
from taskforge.repo.requirements.files import read_ini, read_pkg_info, read_setup_py, read_toml
from taskforge.repo.requirements.found import Found, TestRequirements
from taskforge.repo.requirements.inferred import inferred_from_test_imports
from taskforge.repo.requirements.pytest_config import (
    declared_required_plugins,
    find_pytest_config,
    inferred_from_pytest_config,
)
from taskforge.repo.requirements.tox import declared_in_tox

__all__ = ["detect_test_requirements"]


def detect_test_requirements(repo: Path) -> TestRequirements:
    """Read ``repo``'s own files and return what its pytest suite needs installed."""
    if not repo.is_dir():
        raise NotADirectoryError(f"not a directory: {repo}")
    pyproject = read_toml(repo / "pyproject.toml")
    setup_cfg = read_ini(repo / "setup.cfg")
    setup_py = read_setup_py(repo / "setup.py")
    pkg_info = read_pkg_info(repo / "PKG-INFO")
    project_name = find_project_name(pyproject, setup_cfg, setup_py, pkg_info)

    found = Found(repo=repo, project=canonicalize_name(project_name) if project_name else None)
    collect_known_extras(found, pyproject, setup_cfg, setup_py, pkg_info)

    declared_in_pyproject(found, pyproject)
    declared_in_setup_cfg(found, setup_cfg)
    declared_in_setup_py(found, setup_py)
    declared_in_pkg_info(found, pkg_info)
    declared_in_tox(found, pyproject, setup_cfg)
    declared_in_requirements_files(found)
    pytest_config = find_pytest_config(repo, pyproject, setup_cfg)
    if pytest_config is not None:
        declared_required_plugins(found, pytest_config)
        inferred_from_pytest_config(found, pytest_config)
    inferred_from_test_imports(found, pytest_config, runtime_dependencies(pyproject, setup_cfg, setup_py, pkg_info))
    found.add("pytest", "always: the suite runs under pytest", declared=False)

    return TestRequirements(
        project_name=project_name,
        extras=tuple(found.extras),
        requirements=tuple(found.requirements.values()),
    )
