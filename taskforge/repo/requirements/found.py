"""What was found: the result types, and the accumulator that builds them (what it keeps, what it drops)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.markers import Marker, UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from taskforge.repo.requirements.files import logical_lines, read_text, strip_comment

__all__ = [
    "NEVER_NEEDED_FOR_TESTS",
    "TARGET_ENVIRONMENT",
    "TEST_WORDS",
    "DetectedRequirement",
    "Found",
    "TestRequirements",
    "is_test_group",
    "marker_holds",
]


# --------------------------------------------------------------------------------------------
# The result
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class DetectedRequirement:
    """One third-party requirement of a test suite, and where it was found."""

    requirement: str
    """A PEP 508 string, normalized by ``packaging`` (``pytest-cov>=5``)."""
    origin: str
    """Where it was found: ``"tox.ini [testenv] deps"``, ``"import in tests/test_x.py"``..."""
    declared: bool
    """True if the project declared it; False if inferred (test imports, pytest configuration)."""

    @property
    def name(self) -> str:
        """The normalized distribution name (``pytest-cov``)."""
        return canonicalize_name(Requirement(self.requirement).name)


@dataclass(frozen=True, kw_only=True, slots=True)
class TestRequirements:
    """What a repository's own test suite needs installed besides the project itself."""

    __test__ = False  # not a pytest test class, despite the name

    project_name: str | None
    """The distribution name from pyproject, setup.cfg, setup.py or PKG-INFO, if found."""
    extras: tuple[str, ...]
    """The project's own extras to install with it, e.g. ``("test",)``."""
    requirements: tuple[DetectedRequirement, ...]
    """Third-party requirements, one per distribution name, declared ones first; has pytest."""

    def to_json(self) -> dict[str, Any]:
        return {
            "project_name": self.project_name,
            "extras": list(self.extras),
            "requirements": [
                {"requirement": r.requirement, "origin": r.origin, "declared": r.declared} for r in self.requirements
            ],
        }


# --------------------------------------------------------------------------------------------
# What is kept: the target environment, and tools never needed for tests
# --------------------------------------------------------------------------------------------

TARGET_ENVIRONMENT: Mapping[str, str] = {
    "implementation_name": "cpython",
    "implementation_version": "3.11.0",
    "os_name": "posix",
    "platform_machine": "x86_64",
    "platform_python_implementation": "CPython",
    "platform_release": "",
    "platform_system": "Linux",
    "platform_version": "",
    "python_full_version": "3.11.0",
    "python_version": "3.11",
    "sys_platform": "linux",
}
"""The environment markers are evaluated in: the sandbox runs CPython 3.11 on Linux."""

NEVER_NEEDED_FOR_TESTS: frozenset[str] = frozenset(
    {
        # documentation builders and themes
        "alabaster", "furo", "mike", "mkdocs", "myst-nb", "myst-parser", "pdoc", "pdoc3",
        "recommonmark", "sphinx", "zensical",
        # release and changelog tooling
        "build", "bump-my-version", "bump2version", "bumpversion", "check-manifest",
        "readme-renderer", "reno", "scriv", "towncrier", "twine", "zest-releaser",
        # hook runners, env managers and task runners
        "hatch", "nox", "pdm", "poethepoet", "poetry", "pre-commit", "prek", "tox", "uv",
        # coverage upload services
        "codecov", "coveralls", "python-coveralls",
    }
)  # fmt: skip
"""Distribution names dropped from declared test/dev groups: they never help run a suite.

So are names starting with ``pre-commit-`` or ``tox-`` and names containing ``sphinx`` or
``mkdocs`` (themes and extensions)."""

_NEVER_NEEDED_PREFIXES = ("pre-commit-", "tox-")
_DOCUMENTATION_EXTRAS = frozenset({"doc", "docs", "documentation"})
"""The project's own extras that only build documentation: a dev group may name them."""

TEST_WORDS = frozenset({"test", "tests", "testing"})
_DEV_WORDS = frozenset({"dev", "devel", "develop", "development"})
_GROUP_SUFFIX_WORDS = frozenset(
    {"extra", "extras", "dep", "deps", "dependencies", "requirements", "require", "requires", "reqs"}
)


# --------------------------------------------------------------------------------------------
# Accumulating what was found
# --------------------------------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class Found:
    """Requirements and extras in the order found, deduplicated, with the project's extras."""

    repo: Path
    """The repository root; requirement files are only followed inside it."""
    project: str | None
    """The project's normalized distribution name: references to it are extras, not requirements."""
    known_extras: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    """Every extra the project defines (normalized name) -> its (requirement, origin) pairs."""
    extras: list[str] = field(default_factory=list)
    requirements: dict[str, DetectedRequirement] = field(default_factory=dict)
    expanded_extras: set[str] = field(default_factory=set, init=False)
    """Extras whose requirements were added already."""
    followed_files: set[Path] = field(default_factory=set, init=False)
    """Requirements files read already (``-r`` loops end here)."""

    def add(self, text: str, origin: str, *, declared: bool) -> None:
        """Add one PEP 508 requirement; skip it if unparseable, not for Python 3.11 or never needed."""
        try:
            requirement = Requirement(text.strip())
        except InvalidRequirement:
            return
        if not marker_holds(requirement.marker):
            return
        name = canonicalize_name(requirement.name)
        if self.project is not None and name == self.project:
            for extra in sorted(requirement.extras):
                self.add_extra(extra)
            return
        if declared and _never_needed(name):
            return
        if name not in self.requirements:
            self.requirements[name] = DetectedRequirement(
                requirement=str(requirement), origin=origin, declared=declared
            )

    def add_extra(self, extra: str) -> None:
        """Install the project with ``extra``; its requirements are added where the project lists them."""
        key = canonicalize_name(extra)
        if key in _DOCUMENTATION_EXTRAS:
            return
        if key not in {canonicalize_name(e) for e in self.extras}:
            self.extras.append(extra)
        if key in self.expanded_extras:
            return
        self.expanded_extras.add(key)
        for text, origin in self.known_extras.get(key, []):
            self.add(text, origin, declared=True)

    def add_pip_line(self, line: str, origin: str, base: Path) -> None:
        """Add one line in pip's requirements-file syntax, following ``-r`` relative to ``base``."""
        line = strip_comment(line).strip()
        if not line:
            return
        include = re.match(r"^(?:-r|--requirement)(?:\s*=\s*|\s*)(\S+)$", line)
        if include:
            self.add_pip_file(base / include.group(1))
            return
        self_reference = re.match(r"^(?:(?:-e|--editable)(?:\s*=\s*|\s*))?(?:\.|\./|file:\.)(?:\[([^\]]*)\])?$", line)
        if self_reference:
            for extra in (self_reference.group(1) or "").split(","):
                if extra.strip():
                    self.add_extra(extra.strip())
            return
        if line.startswith("-"):  # -c constraints, -e of other paths, --index-url and other options
            return
        self.add(line.split(" --", 1)[0], origin, declared=True)

    def add_pip_file(self, path: Path) -> None:
        """Add every requirement of a requirements file inside the repository, once."""
        try:
            resolved = path.resolve()
            relative = resolved.relative_to(self.repo.resolve())
        except (OSError, ValueError):  # a broken path, or one outside the repository
            return
        if resolved in self.followed_files or not resolved.is_file():
            return
        self.followed_files.add(resolved)
        for line in logical_lines(read_text(resolved)):
            self.add_pip_line(line, relative.as_posix(), resolved.parent)


def marker_holds(marker: Marker | None, extra: str = "") -> bool:
    if marker is None:
        return True
    try:
        return marker.evaluate({**TARGET_ENVIRONMENT, "extra": extra})
    except (UndefinedComparison, UndefinedEnvironmentName):
        return True


def _never_needed(name: str) -> bool:
    return (
        name in NEVER_NEEDED_FOR_TESTS
        or name.startswith(_NEVER_NEEDED_PREFIXES)
        or "sphinx" in name  # themes and extensions: pallets-sphinx-themes, sphinxext-opengraph
        or "mkdocs" in name
    )


def is_test_group(name: str) -> bool:
    words = re.split(r"[-_.]+", name.lower())
    return words[0] in TEST_WORDS | _DEV_WORDS and all(word in _GROUP_SUFFIX_WORDS for word in words[1:])
