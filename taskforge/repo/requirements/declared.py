"""Requirements the project declares in its metadata files: pyproject.toml, setup.cfg, setup.py, PKG-INFO
and requirements files; and the project's name, extras and run-time dependencies."""

from __future__ import annotations

import configparser
import email.message
import email.parser
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from packaging.markers import InvalidMarker, Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name

from taskforge.repo.requirements.files import (
    ini_lines,
    logical_lines,
    read_text,
    setup_py_list,
    strings,
    strip_comment,
    table,
)
from taskforge.repo.requirements.found import Found, is_test_group, marker_holds

__all__ = [
    "add_dependency_group",
    "collect_known_extras",
    "declared_in_pkg_info",
    "declared_in_pyproject",
    "declared_in_requirements_files",
    "declared_in_setup_cfg",
    "declared_in_setup_py",
    "find_project_name",
    "runtime_dependencies",
]


# --------------------------------------------------------------------------------------------
# The project's name and extras
# --------------------------------------------------------------------------------------------


def find_project_name(
    pyproject: dict[str, Any],
    setup_cfg: configparser.ConfigParser | None,
    setup_py: dict[str, Any],
    pkg_info: email.message.Message | None,
) -> str | None:
    tool = table(pyproject.get("tool"))
    flit_metadata = table(table(tool.get("flit")).get("metadata"))
    candidates: list[Any] = [
        table(pyproject.get("project")).get("name"),
        table(tool.get("poetry")).get("name"),
        flit_metadata.get("dist-name") or flit_metadata.get("module"),
        setup_cfg.get("metadata", "name", fallback=None) if setup_cfg is not None else None,
        setup_py.get("name"),
        pkg_info.get("Name") if pkg_info is not None else None,
    ]
    for candidate in candidates:
        if isinstance(candidate, str) and candidate.strip() and "%" not in candidate and "{" not in candidate:
            return candidate.strip()
    return None


def runtime_dependencies(
    pyproject: dict[str, Any],
    setup_cfg: configparser.ConfigParser | None,
    setup_py: dict[str, Any],
    pkg_info: email.message.Message | None,
) -> frozenset[str]:
    """Normalized names the project depends on at run time (they come with the project)."""
    texts = strings(table(pyproject.get("project")).get("dependencies"))
    texts += [name for name in table(table(table(pyproject.get("tool")).get("poetry")).get("dependencies"))]
    if setup_cfg is not None:
        texts += ini_lines(setup_cfg.get("options", "install_requires", fallback=""))
    texts += setup_py_list(setup_py.get("install_requires"))
    if pkg_info is not None:
        texts += pkg_info.get_all("Requires-Dist") or []
    names = set()
    for text in texts:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if requirement.marker is None or not re.search(r"\bextra\b", str(requirement.marker)):  # any platform
            names.add(canonicalize_name(requirement.name))
    return frozenset(names)


def collect_known_extras(
    found: Found,
    pyproject: dict[str, Any],
    setup_cfg: configparser.ConfigParser | None,
    setup_py: dict[str, Any],
    pkg_info: email.message.Message | None,
) -> None:
    """Record every extra the project defines, so that a reference like ``.[all]`` can be expanded."""

    def record(extra: str, requirements: Iterable[str], origin: str) -> None:
        entries = found.known_extras.setdefault(canonicalize_name(extra.split(":", 1)[0]), [])
        marker = extra.split(":", 1)[1].strip() if ":" in extra else ""
        for text in requirements:
            entries.append((f"{text} ; {marker}" if marker and ";" not in text else text, origin))

    for extra, requirements in table(table(pyproject.get("project")).get("optional-dependencies")).items():
        record(extra, strings(requirements), f"pyproject.toml [project.optional-dependencies] {extra}")
    tool = table(pyproject.get("tool"))
    flit_extras = table(table(table(tool.get("flit")).get("metadata")).get("requires-extra"))
    for extra, requirements in flit_extras.items():
        record(extra, strings(requirements), f"pyproject.toml [tool.flit.metadata.requires-extra] {extra}")
    dynamic = table(table(table(tool.get("setuptools")).get("dynamic")).get("optional-dependencies"))
    for extra, spec in dynamic.items():
        for name in strings(table(spec).get("file")):
            path = found.repo / name
            if path.is_file():
                lines = [strip_comment(line).strip() for line in logical_lines(read_text(path))]
                record(extra, [line for line in lines if line and not line.startswith("-")], name)
    if setup_cfg is not None and setup_cfg.has_section("options.extras_require"):
        for extra, value in setup_cfg.items("options.extras_require"):
            record(extra, ini_lines(value), f"setup.cfg [options.extras_require] {extra}")
    extras_require = setup_py.get("extras_require")
    if isinstance(extras_require, dict):
        for extra, requirements in extras_require.items():
            if isinstance(extra, str):
                record(extra, setup_py_list(requirements), f"setup.py extras_require {extra.split(':', 1)[0]}")
    if pkg_info is not None:  # built metadata: only for extras the sources do not show (setup.py code)
        for extra in pkg_info.get_all("Provides-Extra") or []:
            if canonicalize_name(extra) not in found.known_extras:
                record(extra, _pkg_info_extra(pkg_info, extra), f"PKG-INFO Requires-Dist extra == {extra!r}")


def _pkg_info_extra(pkg_info: email.message.Message, extra: str) -> list[str]:
    """The Requires-Dist lines that only the given extra brings in, without their markers."""
    requirements = []
    for text in pkg_info.get_all("Requires-Dist") or []:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        only_with_extra = not marker_holds(requirement.marker) and marker_holds(requirement.marker, extra)
        if requirement.marker is None or not only_with_extra:
            continue
        requirement.marker = None
        requirements.append(str(requirement))
    return requirements


# --------------------------------------------------------------------------------------------
# pyproject.toml
# --------------------------------------------------------------------------------------------


def declared_in_pyproject(found: Found, pyproject: dict[str, Any]) -> None:
    for extra in table(table(pyproject.get("project")).get("optional-dependencies")):
        if is_test_group(extra):
            found.add_extra(extra)
    tool = table(pyproject.get("tool"))
    for extra in table(table(table(tool.get("flit")).get("metadata")).get("requires-extra")):
        if is_test_group(extra):
            found.add_extra(extra)
    for extra in table(table(table(tool.get("setuptools")).get("dynamic")).get("optional-dependencies")):
        if is_test_group(extra):
            found.add_extra(extra)

    groups = table(pyproject.get("dependency-groups"))
    for group in groups:
        if is_test_group(group):
            add_dependency_group(found, groups, group)

    poetry = table(tool.get("poetry"))
    for group, spec in table(poetry.get("group")).items():
        if is_test_group(group):
            dependencies = table(table(spec).get("dependencies"))
            _add_poetry_dependencies(found, dependencies, f"pyproject.toml [tool.poetry.group.{group}.dependencies]")
    dev_dependencies = table(poetry.get("dev-dependencies"))
    _add_poetry_dependencies(found, dev_dependencies, "pyproject.toml [tool.poetry.dev-dependencies]")

    for env, spec in table(table(tool.get("hatch")).get("envs")).items():
        if env in ("default", "hatch-test") or is_test_group(env):
            spec = table(spec)
            for key in ("dependencies", "extra-dependencies"):
                for text in strings(spec.get(key)):
                    found.add(text, f"pyproject.toml [tool.hatch.envs.{env}] {key}", declared=True)
            for extra in strings(spec.get("features")):
                found.add_extra(extra)

    for group, requirements in table(table(tool.get("pdm")).get("dev-dependencies")).items():
        if is_test_group(group):
            for text in strings(requirements):
                if not text.startswith("-"):
                    found.add(text, f"pyproject.toml [tool.pdm.dev-dependencies] {group}", declared=True)

    for text in strings(table(tool.get("uv")).get("dev-dependencies")):
        found.add(text, "pyproject.toml [tool.uv] dev-dependencies", declared=True)


def add_dependency_group(
    found: Found, groups: dict[str, Any], group: str, seen: frozenset[str] = frozenset()
) -> None:
    """Add a PEP 735 group, following ``{include-group = ...}`` (names compared normalized)."""
    by_name = {canonicalize_name(name): name for name in groups}
    key = canonicalize_name(group)
    if key in seen or key not in by_name:
        return
    name = by_name[key]
    entries = groups[name] if isinstance(groups[name], list) else []
    for entry in entries:
        if isinstance(entry, str):
            found.add(entry, f"pyproject.toml [dependency-groups] {name}", declared=True)
        elif isinstance(entry, dict) and isinstance(entry.get("include-group"), str):
            add_dependency_group(found, groups, entry["include-group"], seen | {key})


def _add_poetry_dependencies(found: Found, dependencies: dict[str, Any], origin: str) -> None:
    for name, spec in dependencies.items():
        if name.lower() == "python":
            continue
        if isinstance(spec, dict) and str(spec.get("path", "")).strip() in (".", "./"):
            for extra in strings(spec.get("extras")):  # the project itself
                found.add_extra(extra)
            continue
        text = _poetry_requirement(name, spec)
        if text is not None:
            found.add(text, origin, declared=True)


def _poetry_requirement(name: str, spec: Any) -> str | None:
    """A Poetry dependency as PEP 508: ``pytest = "^7.1"`` is ``pytest>=7.1,<8.0``.

    For a list of alternatives, the first one whose ``python``/``markers`` hold for 3.11 is used.
    Constraints PEP 440 cannot say (``||``) lose their version; git, url and path sources keep
    only the name.
    """
    if isinstance(spec, list):
        for alternative in spec:
            if isinstance(alternative, dict) and _poetry_alternative_holds(alternative):
                return _poetry_requirement(name, alternative)
        return None
    if isinstance(spec, str):
        return name + _poetry_constraint(spec)
    if not isinstance(spec, dict) or not _poetry_alternative_holds(spec):
        return None
    extras = strings(spec.get("extras"))
    head = f"{name}[{','.join(extras)}]" if extras else name
    if any(key in spec for key in ("git", "url", "path")):
        return head
    version = spec.get("version")
    return head + (_poetry_constraint(version) if isinstance(version, str) else "")


def _poetry_alternative_holds(spec: dict[str, Any]) -> bool:
    python = spec.get("python")
    if isinstance(python, str):
        constraint = _poetry_constraint(python)
        if constraint and not SpecifierSet(constraint).contains("3.11", prereleases=True):
            return False
    markers = spec.get("markers")
    if isinstance(markers, str):
        try:
            return marker_holds(Marker(markers))
        except InvalidMarker:
            return True
    return True


def _poetry_constraint(text: str) -> str:
    """Poetry's version constraint as a PEP 440 specifier, or "" where it has no equivalent."""
    text = text.strip()
    if text in ("", "*") or "||" in text or "|" in text:
        return ""
    specifiers = []
    for part in re.split(r"\s*,\s*|\s+(?=[<>=!~^])", text):
        part = part.strip()
        if not part or part == "*":
            continue
        if part.startswith("^") or (part.startswith("~") and not part.startswith("~=")):
            bounds = _bounded(part[1:], caret=part.startswith("^"))
            if bounds is None:
                return ""
            specifiers.extend(bounds)
        elif part[0] in "<>!~":
            specifiers.append(part)
        elif part.startswith("=="):
            specifiers.append(part)
        elif part.startswith("="):
            specifiers.append("=" + part)
        else:
            specifiers.append("==" + part)
    result = ",".join(specifiers)
    try:
        SpecifierSet(result)
    except InvalidSpecifier:
        return ""
    return result


def _bounded(version: str, *, caret: bool) -> list[str] | None:
    """``^1.2.3`` is ``>=1.2.3,<2.0.0``, ``^0.2.3`` is ``<0.3.0``; ``~1.2.3`` is ``>=1.2.3,<1.3.0``."""
    numbers = re.match(r"^\d+(?:\.\d+)*", version.strip())
    if numbers is None:
        return None
    parts = [int(number) for number in numbers.group(0).split(".")]
    if len(parts) == 1:
        bump = 0
    elif caret:
        bump = next((i for i, number in enumerate(parts) if number != 0), len(parts) - 1)
    else:
        bump = 1
    upper = parts[:bump] + [parts[bump] + 1] + [0] * (len(parts) - bump - 1)
    return [f">={version.strip()}", "<" + ".".join(str(number) for number in upper)]


# --------------------------------------------------------------------------------------------
# setup.cfg, setup.py, PKG-INFO
# --------------------------------------------------------------------------------------------


def declared_in_setup_cfg(found: Found, setup_cfg: configparser.ConfigParser | None) -> None:
    if setup_cfg is None:
        return
    for line in ini_lines(setup_cfg.get("options", "tests_require", fallback="")):
        for text in _split_requirement_line(line):
            found.add(text, "setup.cfg [options] tests_require", declared=True)
    if setup_cfg.has_section("options.extras_require"):
        for extra in setup_cfg.options("options.extras_require"):
            if is_test_group(extra):
                found.add_extra(extra)


def _split_requirement_line(line: str) -> list[str]:
    """A line holding one requirement, or several separated by ``;`` (old setuptools style)."""
    try:
        Requirement(line)
    except InvalidRequirement:
        return [part for part in line.split(";") if part.strip()]
    return [line]


def declared_in_setup_py(found: Found, setup_py: dict[str, Any]) -> None:
    for text in setup_py_list(setup_py.get("tests_require")):
        found.add(text, "setup.py tests_require", declared=True)
    extras_require = setup_py.get("extras_require")
    if isinstance(extras_require, dict):
        for extra in extras_require:
            if isinstance(extra, str) and is_test_group(extra.split(":", 1)[0].strip()):
                found.add_extra(extra.split(":", 1)[0].strip())


def declared_in_pkg_info(found: Found, pkg_info: email.message.Message | None) -> None:
    if pkg_info is None:
        return
    for extra in pkg_info.get_all("Provides-Extra") or []:
        if is_test_group(extra):
            found.add_extra(extra)


# --------------------------------------------------------------------------------------------
# requirements files
# --------------------------------------------------------------------------------------------

_REQUIREMENTS_TEST_GLOBS = (
    "requirements*test*.txt",
    "test*requirements*.txt",
    "requirements/*test*.txt",
    "tests/requirements*.txt",
    "test/requirements*.txt",
)
_REQUIREMENTS_DEV_GLOBS = ("requirements*dev*.txt", "dev*requirements*.txt", "requirements/*dev*.txt")


def declared_in_requirements_files(found: Found) -> None:
    test_files = _glob_all(found.repo, _REQUIREMENTS_TEST_GLOBS)
    for path in test_files or _glob_all(found.repo, _REQUIREMENTS_DEV_GLOBS):
        found.add_pip_file(path)


def _glob_all(repo: Path, patterns: Iterable[str]) -> list[Path]:
    paths: list[Path] = []
    for pattern in patterns:
        for path in sorted(repo.glob(pattern)):
            if path.is_file() and path not in paths:
                paths.append(path)
    return paths
