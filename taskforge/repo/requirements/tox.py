"""Requirements declared in the tox configuration, for the one env we imagine: CPython 3.11 running the tests."""

from __future__ import annotations

import configparser
import re
from typing import Any

from taskforge.repo.requirements.declared import add_dependency_group
from taskforge.repo.requirements.files import parse_ini, read_ini, read_toml, strings, strip_comment, table
from taskforge.repo.requirements.found import TEST_WORDS, Found

__all__ = ["declared_in_tox"]


# The one tox env we imagine running: CPython 3.11, tests.
_TOX_ENV_FACTORS = frozenset({"py", "py3", "py311", "py3.11", "3.11", "python", "cpython"}) | TEST_WORDS | {"unit"}
_TOX_FACTOR_LINE = re.compile(r"^([\w{}.!,-]+):\s+(.+)$")
_TOX_SECTION_REFERENCE = re.compile(r"\{\[([^\]]+)\]([^{}]+)\}")


def declared_in_tox(found: Found, pyproject: dict[str, Any], setup_cfg: configparser.ConfigParser | None) -> None:
    """Read the tox configuration tox itself would use: the first of its four homes that has one."""
    tox_ini = read_ini(found.repo / "tox.ini")
    if tox_ini is not None:
        _declared_in_tox_ini(found, tox_ini, "tox.ini", pyproject)
        return
    if setup_cfg is not None and setup_cfg.has_section("tox:tox"):
        _declared_in_tox_ini(found, setup_cfg, "setup.cfg", pyproject)
        return
    tox_table = table(table(pyproject.get("tool")).get("tox"))
    legacy = tox_table.get("legacy_tox_ini")
    if isinstance(legacy, str):
        parsed = parse_ini(legacy)
        if parsed is not None:
            _declared_in_tox_ini(found, parsed, "pyproject.toml [tool.tox] legacy_tox_ini", pyproject)
        return
    if tox_table:
        _declared_in_tox_toml(found, tox_table, "pyproject.toml [tool.tox.", pyproject)
        return
    tox_toml = read_toml(found.repo / "tox.toml")
    if tox_toml:
        _declared_in_tox_toml(found, tox_toml, "tox.toml [", pyproject)


def _declared_in_tox_ini(
    found: Found, config: configparser.ConfigParser, label: str, pyproject: dict[str, Any]
) -> None:
    sections = [section for section in config.sections() if section == "testenv"]
    sections += [s for s in config.sections() if s.startswith("testenv:") and _tox_env_runs_tests(s[len("testenv:") :])]
    for section in sections:
        origin = f"{label} [{section}]"
        for line in _tox_lines(config, section, "deps"):
            found.add_pip_line(line, f"{origin} deps", found.repo)
        for line in _tox_lines(config, section, "extras"):
            for extra in line.split(","):
                found.add_extra(extra.strip())
        for line in _tox_lines(config, section, "dependency_groups"):
            for group in line.split(","):
                add_dependency_group(found, table(pyproject.get("dependency-groups")), group.strip())


def _declared_in_tox_toml(found: Found, tox: dict[str, Any], label: str, pyproject: dict[str, Any]) -> None:
    envs = [("env_run_base", table(tox.get("env_run_base")))]
    envs += [(f"env.{n}", table(spec)) for n, spec in table(tox.get("env")).items() if _tox_env_runs_tests(n)]
    for name, spec in envs:
        origin = f"{label}{name}]"
        for line in strings(spec.get("deps")):
            found.add_pip_line(line.replace("{toxinidir}", "."), f"{origin} deps", found.repo)
        for extra in strings(spec.get("extras")):
            found.add_extra(extra)
        for group in strings(spec.get("dependency_groups")):
            add_dependency_group(found, table(pyproject.get("dependency-groups")), group)


def _tox_lines(config: configparser.ConfigParser, section: str, key: str) -> list[str]:
    """The lines of a tox setting that apply to our env, with factor prefixes and references resolved."""
    value = _tox_resolve(config, config.get(section, key, fallback=""), depth=0)
    lines = []
    for line in value.splitlines():
        line = strip_comment(line).strip()
        condition = _TOX_FACTOR_LINE.match(line)
        if condition:
            if not _tox_condition_holds(condition.group(1)):
                continue
            line = condition.group(2).strip()
        line = line.replace("{toxinidir}", ".")
        if line and "{" not in line:  # {posargs}, {env:...}: nothing we can resolve
            lines.append(line)
    return lines


def _tox_resolve(config: configparser.ConfigParser, value: str, *, depth: int) -> str:
    """Replace ``{[section]key}`` references by that setting's value (five levels deep at most)."""
    if depth > 5:
        return _TOX_SECTION_REFERENCE.sub("", value)

    def replace(match: re.Match[str]) -> str:
        section, key = match.group(1).strip(), match.group(2).strip()
        return _tox_resolve(config, config.get(section, key, fallback=""), depth=depth + 1)

    return _TOX_SECTION_REFERENCE.sub(replace, value)


def _tox_condition_holds(expression: str) -> bool:
    """Whether a factor condition (``py38,py39``, ``!py27``, ``py3{8,9}-django``) holds for our env."""
    for alternative in _expand_braces(expression):
        factors = [factor for factor in alternative.split("-") if factor]
        if all(
            (factor[1:] not in _TOX_ENV_FACTORS) if factor.startswith("!") else (factor in _TOX_ENV_FACTORS)
            for factor in factors
        ):
            return True
    return False


def _tox_env_runs_tests(name: str) -> bool:
    """Whether an env name is made only of our factors (``py311``, ``py3-tests``, ``py{310,311}``)."""
    return any(all(factor in _TOX_ENV_FACTORS for factor in alt.split("-")) for alt in _expand_braces(name))


def _expand_braces(text: str) -> list[str]:
    """Tox's generative names: ``py{38,39}-a,b`` is ``["py38-a", "py39-a", "b"]``."""
    alternatives, depth, start = [], 0, 0
    for index, char in enumerate(text):
        depth += char == "{"
        depth -= char == "}"
        if char == "," and depth == 0:
            alternatives.append(text[start:index])
            start = index + 1
    alternatives.append(text[start:])
    if len(alternatives) > 1:
        return [expanded for alternative in alternatives for expanded in _expand_braces(alternative)]
    group = re.search(r"\{([^{}]*)\}", text)
    if group is None:
        return [text.strip()]
    return [
        expanded
        for option in group.group(1).split(",")
        for expanded in _expand_braces(text[: group.start()] + option.strip() + text[group.end() :])
    ]
