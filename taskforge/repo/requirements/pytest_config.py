"""The pytest configuration: plugins it declares (``required_plugins``) and plugins its options and keys need."""

from __future__ import annotations

import configparser
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taskforge.repo.requirements.distributions import distribution_for_import
from taskforge.repo.requirements.files import read_ini, strings, table
from taskforge.repo.requirements.found import Found

__all__ = [
    "PYTEST_BUILTIN_PLUGINS",
    "PytestConfig",
    "declared_required_plugins",
    "find_pytest_config",
    "inferred_from_pytest_config",
]


# pytest command-line options (the part before any "=") and ini keys that need a plugin.
_PLUGIN_FOR_OPTION_PREFIX: tuple[tuple[str, str], ...] = (
    ("--cov", "pytest-cov"),
    ("--no-cov", "pytest-cov"),
    ("--benchmark-", "pytest-benchmark"),
    ("--timeout", "pytest-timeout"),
    ("--asyncio-mode", "pytest-asyncio"),
    ("--numprocesses", "pytest-xdist"),
    ("--maxprocesses", "pytest-xdist"),
    ("--dist", "pytest-xdist"),
    ("--reruns", "pytest-rerunfailures"),
    ("--randomly-", "pytest-randomly"),
    ("--mypy", "pytest-mypy"),
    ("--flake8", "pytest-flake8"),
    ("--pycodestyle", "pytest-pycodestyle"),
    ("--black", "pytest-black"),
    ("--isort", "pytest-isort"),
    ("--pylint", "pytest-pylint"),
    ("--ruff", "pytest-ruff"),
    ("--html", "pytest-html"),
    ("--md-report", "pytest-md-report"),
    ("--ignore-flaky", "pytest-ignore-flaky"),
    ("--memray", "pytest-memray"),
    ("--hypothesis-", "hypothesis"),
    ("--doctest-plus", "pytest-doctestplus"),
    ("--doctest-rst", "pytest-doctestplus"),
    ("--nbval", "nbval"),
    ("--mpl", "pytest-mpl"),
    ("--disable-socket", "pytest-socket"),
    ("--allow-hosts", "pytest-socket"),
    ("--parallel-threads", "pytest-run-parallel"),
    ("--codspeed", "pytest-codspeed"),
    ("--forked", "pytest-forked"),
    ("--instafail", "pytest-instafail"),
)
_PLUGIN_FOR_INI_KEY: Mapping[str, str] = {
    "timeout": "pytest-timeout",
    "timeout_method": "pytest-timeout",
    "timeout_func_only": "pytest-timeout",
    "asyncio_mode": "pytest-asyncio",
    "asyncio_default_fixture_loop_scope": "pytest-asyncio",
    "asyncio_default_test_loop_scope": "pytest-asyncio",
    "mock_use_standalone_module": "pytest-mock",
    "mock_traceback_monkeypatch": "pytest-mock",
    "DJANGO_SETTINGS_MODULE": "pytest-django",
    "django_find_project": "pytest-django",
    "env": "pytest-env",
    "qt_api": "pytest-qt",
    "trio_mode": "pytest-trio",
    "flake8-ignore": "pytest-flake8",
    "flake8-max-line-length": "pytest-flake8",
    "doctest_plus": "pytest-doctestplus",
    "md_report": "pytest-md-report",
    "md_report_verbose": "pytest-md-report",
    "rsyncdirs": "pytest-xdist",
}
_PLUGIN_FOR_P_NAME: Mapping[str, str] = {"randomly": "pytest-randomly"}
"""``-p NAME`` takes a plugin's registered name, which for these is not its module's."""

_XDIST_SHORT_OPTION = re.compile(r"^-n(\d+|auto|logical)?$")
PYTEST_BUILTIN_PLUGINS = frozenset(
    {
        "assertion", "cacheprovider", "capture", "debugging", "doctest", "faulthandler", "fixtures",
        "freeze_support", "helpconfig", "junitxml", "legacypath", "logging", "main", "mark", "monkeypatch",
        "nose", "pastebin", "pytester", "pytester_assertions", "python", "python_path", "recwarn",
        "reports", "runner", "scope", "setuponly", "setupplan", "skipping", "stepwise", "subtests",
        "terminal", "threadexception", "tmpdir", "unittest", "unraisableexception", "warnings",
    }
)  # fmt: skip


@dataclass(frozen=True, kw_only=True, slots=True)
class PytestConfig:
    """The pytest configuration pytest itself would pick, as plain values."""

    origin: str
    """Which file and section it came from."""
    options: dict[str, Any]
    """Ini key -> string (ini files) or TOML value (pyproject.toml)."""

    def args(self, key: str) -> list[str]:
        """A setting of type ``args`` (addopts, required_plugins), split like a shell would."""
        value = self.options.get(key)
        items = strings(value)
        tokens: list[str] = []
        for item in items:
            try:
                tokens.extend(shlex.split(item))
            except ValueError:  # unbalanced quotes
                tokens.extend(item.split())
        return tokens


def find_pytest_config(
    repo: Path, pyproject: dict[str, Any], setup_cfg: configparser.ConfigParser | None
) -> PytestConfig | None:
    """pytest's own precedence: pytest.ini, .pytest.ini, pyproject.toml, tox.ini, setup.cfg."""
    for name in ("pytest.ini", ".pytest.ini"):
        if (repo / name).is_file():
            parsed = read_ini(repo / name)
            options = dict(parsed.items("pytest")) if parsed is not None and parsed.has_section("pytest") else {}
            return PytestConfig(origin=name, options=options)
    pytest_table = table(table(pyproject.get("tool")).get("pytest"))
    if "ini_options" in pytest_table:
        options = table(pytest_table["ini_options"])
        return PytestConfig(origin="pyproject.toml [tool.pytest.ini_options]", options=options)
    if pytest_table:
        return PytestConfig(origin="pyproject.toml [tool.pytest]", options=pytest_table)
    tox_ini = read_ini(repo / "tox.ini")
    if tox_ini is not None and tox_ini.has_section("pytest"):
        return PytestConfig(origin="tox.ini [pytest]", options=dict(tox_ini.items("pytest")))
    if setup_cfg is not None and setup_cfg.has_section("tool:pytest"):
        return PytestConfig(origin="setup.cfg [tool:pytest]", options=dict(setup_cfg.items("tool:pytest")))
    return None


def declared_required_plugins(found: Found, config: PytestConfig) -> None:
    for text in config.args("required_plugins"):
        found.add(text, f"pytest config: required_plugins ({config.origin})", declared=True)


def inferred_from_pytest_config(found: Found, config: PytestConfig) -> None:
    tokens = config.args("addopts")
    for index, token in enumerate(tokens):
        option = token.split("=", 1)[0]
        if _XDIST_SHORT_OPTION.match(option):
            found.add("pytest-xdist", f"pytest config: {option}", declared=False)
            continue
        plugin_module = _plugin_module_option(tokens, index)
        if plugin_module is not None:
            top = plugin_module.split(".")[0]
            local = any((found.repo / base / name).exists() for base in (".", "src") for name in (top, f"{top}.py"))
            distribution = _PLUGIN_FOR_P_NAME.get(plugin_module) or distribution_for_import(plugin_module)
            if distribution is not None and plugin_module not in PYTEST_BUILTIN_PLUGINS and not local:
                found.add(distribution, f"pytest config: -p {plugin_module}", declared=False)
            continue
        for prefix, plugin in _PLUGIN_FOR_OPTION_PREFIX:
            if option.startswith(prefix):
                found.add(plugin, f"pytest config: {option}", declared=False)
                break
    for key in config.options:
        if key in _PLUGIN_FOR_INI_KEY:
            found.add(_PLUGIN_FOR_INI_KEY[key], f"pytest config: {key}", declared=False)


def _plugin_module_option(tokens: list[str], index: int) -> str | None:
    """The module named by ``-p NAME`` / ``-pNAME`` at ``tokens[index]``, unless it disables one."""
    token = tokens[index]
    if token == "-p" and index + 1 < len(tokens):
        name = tokens[index + 1]
    elif token.startswith("-p") and len(token) > 2 and not token.startswith("--"):
        name = token[2:]
    else:
        return None
    return None if name.startswith("no:") else name
