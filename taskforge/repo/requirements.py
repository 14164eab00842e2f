"""Find what a repository's own test suite needs installed, from the repository's own files.

``detect_test_requirements(repo)`` reads a checkout (or an unpacked sdist) and returns the
third-party requirements its pytest suite needs, each with where it was found, plus the project's
own extras to install with it (``pip install '.[test]'``). Nothing is configured per project and
no project code runs: ``setup.py`` is read with :mod:`ast`, literals only.

Declared sources, read in this order (the first origin of a name wins):

1. ``pyproject.toml``: ``[project.optional-dependencies]`` and ``[dependency-groups]`` (PEP 735,
   ``{include-group = ...}`` resolved), Poetry groups and ``dev-dependencies`` (``^``/``~``
   constraints turned into PEP 440), Hatch envs (``default``, ``hatch-test`` and test groups:
   ``dependencies``, ``extra-dependencies``, ``features``), PDM and uv ``dev-dependencies``, flit
   ``requires-extra``, setuptools ``dynamic`` optional-dependencies read from files;
2. ``setup.cfg``: ``[options] tests_require`` and ``[options.extras_require]``;
3. ``setup.py``: ``tests_require=`` and ``extras_require=``;
4. ``PKG-INFO`` (sdists): ``Requires-Dist`` of test extras the sources do not show (``setup.py``
   code that adds them at run time);
5. tox: the first of ``tox.ini``, ``setup.cfg [tox:tox]``, ``pyproject.toml [tool.tox]`` and
   ``tox.toml``, as tox itself picks; ``deps`` (``-r`` followed, ``.[test]`` made an extra,
   ``{[section]key}`` resolved), ``extras`` and ``dependency_groups`` of the base env and of envs
   whose name is made only of test factors (``py311``, ``py3``, ``tests``...);
6. requirements files for tests (``requirements*test*.txt``, ``requirements/*test*.txt``...), and
   for development only where there is no test file (dev files are often whole lock files);
7. ``required_plugins`` in the pytest configuration.

Then inferred ones (``declared=False``):

* plugins the pytest configuration needs (``--cov`` means pytest-cov, ``timeout`` pytest-timeout,
  ``-n`` pytest-xdist...) and plugin fixtures test functions request (``benchmark``, ``mocker``);
* third-party modules imported by test files (``test_*.py``, ``*_test.py``, ``conftest.py``, the
  configuration's ``python_files``), by the helpers under test folders those import, and at module
  level by the project's own modules they import by name (``from cattrs.preconf.orjson import``
  needs orjson). Distributions the project depends on at run time are left out.

``pytest`` itself comes last unless something declared it.

Decisions worth knowing:

* A *test group* (optional-dependencies, dependency groups, Poetry/PDM groups, Hatch envs, extras)
  is named ``test``, ``tests``, ``testing`` or ``dev`` (``devel``, ``develop``, ``development``),
  optionally followed by words such as ``extras``, ``deps`` or ``requirements`` (``test-extras``,
  ``tests_require``). ``tests-random`` or ``dev-docs`` are not: they name a purpose of their own.
  A group may still bring in others (``{include-group}``, ``NAME[extra]``); documentation extras
  (``doc``, ``docs``) are never added.
* Tox lines and envs are evaluated for one imagined env, CPython 3.11 running the tests:
  ``py38: foo`` and ``tf: tensorflow`` are dropped, ``!py27: foo`` and ``py3: foo`` kept.
* Environment markers are evaluated for CPython 3.11 on x86-64 Linux; false ones are dropped.
* Tools that never help run a test suite are dropped from declared groups even when a dev group
  lists them (:data:`NEVER_NEEDED_FOR_TESTS`). Linters and type checkers stay: some suites run
  them. A test file that imports one of these tools still brings it in, as inferred.
* Inferred names can be wrong (a test may import a module it generated, or a module name may
  not be its distribution's name beyond :data:`IMPORT_TO_DISTRIBUTION`): install them one by one
  and tolerate failures, unlike declared ones.
* Nothing here is fatal: unreadable files, invalid TOML/INI, Python 2 syntax and unparseable
  requirement lines are skipped.
"""

from __future__ import annotations

import ast
import configparser
import email.message
import email.parser
import fnmatch
import os
import re
import shlex
import sys
import tomllib
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.markers import (
    InvalidMarker,
    Marker,
    UndefinedComparison,
    UndefinedEnvironmentName,
)
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name

__all__ = [
    "IMPORT_TO_DISTRIBUTION",
    "NEVER_NEEDED_FOR_TESTS",
    "TARGET_ENVIRONMENT",
    "DetectedRequirement",
    "TestRequirements",
    "detect_test_requirements",
    "distribution_for_import",
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
# Tables
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

_TARGET_VERSION_INFO = (3, 11, 0, "final", 0)

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

IMPORT_TO_DISTRIBUTION: Mapping[str, str] = {
    "attr": "attrs",
    "bs4": "beautifulsoup4",
    "bson": "pymongo",
    "big_o": "big-O",
    "cv2": "opencv-python",
    "Crypto": "pycryptodome",
    "Cryptodome": "pycryptodomex",
    "dateutil": "python-dateutil",
    "delegator": "delegator.py",
    "dns": "dnspython",
    "dotenv": "python-dotenv",
    "git": "GitPython",
    "google.protobuf": "protobuf",
    "gi": "PyGObject",
    "grpc": "grpcio",
    "hamcrest": "PyHamcrest",
    "icu": "PyICU",
    "jose": "python-jose",
    "jwt": "PyJWT",
    "magic": "python-magic",
    "markdown_it": "markdown-it-py",
    "mpl_toolkits": "matplotlib",
    "multipart": "python-multipart",
    "MySQLdb": "mysqlclient",
    "nacl": "PyNaCl",
    "OpenSSL": "pyOpenSSL",
    "PIL": "Pillow",
    "pkg_resources": "setuptools",
    "_pytest": "pytest",
    "pythonjsonlogger": "python-json-logger",
    "railroad": "railroad-diagrams",
    "re2": "google-re2",
    "rpds": "rpds-py",
    "serial": "pyserial",
    "skimage": "scikit-image",
    "sklearn": "scikit-learn",
    "slugify": "python-slugify",
    "socks": "PySocks",
    "tidylib": "pytidylib",
    "websocket": "websocket-client",
    "win32api": "pywin32",
    "win32con": "pywin32",
    "xdist": "pytest-xdist",
    "yaml": "PyYAML",
    "zmq": "pyzmq",
}
"""Imported module -> PyPI distribution, where they differ by more than ``_`` versus ``-``."""

_NAMESPACE_PACKAGES = frozenset({"azure", "backports", "google", "jaraco", "repoze", "ruamel", "sphinxcontrib", "zope"})
"""Top-level names shared by many distributions: the distribution is named by two components."""

_PYTHON2_STDLIB = frozenset(
    {
        "__builtin__", "anydbm", "BaseHTTPServer", "commands", "ConfigParser", "Cookie", "cookielib",
        "copy_reg", "cPickle", "cStringIO", "dummy_thread", "exceptions", "htmlentitydefs", "HTMLParser",
        "httplib", "md5", "Queue", "repr", "robotparser", "sets", "sha", "SimpleHTTPServer",
        "SocketServer", "StringIO", "thread", "Tkinter", "urllib2", "urlparse", "UserDict", "xmlrpclib", "gdbm",
    }
)  # fmt: skip
"""Python 2 standard-library modules: old suites import them behind version checks or fallbacks."""

_ALSO_STANDARD_LIBRARY = frozenset({"test", "annotationlib", "compression"})
"""Not in ``sys.stdlib_module_names`` of 3.11 yet never on PyPI: CPython's own ``test`` package,
and modules newer Pythons added (suites import them under a version skip)."""

_TEST_WORDS = frozenset({"test", "tests", "testing"})
_DEV_WORDS = frozenset({"dev", "devel", "develop", "development"})
_GROUP_SUFFIX_WORDS = frozenset(
    {"extra", "extras", "dep", "deps", "dependencies", "requirements", "require", "requires", "reqs"}
)

# The one tox env we imagine running: CPython 3.11, tests.
_TOX_ENV_FACTORS = frozenset({"py", "py3", "py311", "py3.11", "3.11", "python", "cpython"}) | _TEST_WORDS | {"unit"}
_TOX_FACTOR_LINE = re.compile(r"^([\w{}.!,-]+):\s+(.+)$")
_TOX_SECTION_REFERENCE = re.compile(r"\{\[([^\]]+)\]([^{}]+)\}")

_REQUIREMENTS_TEST_GLOBS = (
    "requirements*test*.txt",
    "test*requirements*.txt",
    "requirements/*test*.txt",
    "tests/requirements*.txt",
    "test/requirements*.txt",
)
_REQUIREMENTS_DEV_GLOBS = ("requirements*dev*.txt", "dev*requirements*.txt", "requirements/*dev*.txt")

_LARGEST_PARSED_FILE = 1_000_000
"""Bytes; larger ``.py`` files under tests are data dumps (intervaltree has a 5 MB one)."""
_SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", "build", "dist", "site-packages", "venv"})
_TEST_DIRS = frozenset({"test", "tests", "testing"})
_TEST_FILE_PATTERNS = ("test_*.py", "*_test.py", "tests.py", "test.py", "conftest.py")

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
_PLUGIN_FOR_FIXTURE: Mapping[str, str] = {
    "benchmark": "pytest-benchmark",
    "mocker": "pytest-mock",
    "class_mocker": "pytest-mock",
    "module_mocker": "pytest-mock",
    "session_mocker": "pytest-mock",
    "httpserver": "pytest-httpserver",
    "httpx_mock": "pytest-httpx",
    "requests_mock": "requests-mock",
    "freezer": "pytest-freezer",
}
"""Fixtures that plugins provide, requested by name in test functions (no import says so)."""
_XDIST_SHORT_OPTION = re.compile(r"^-n(\d+|auto|logical)?$")
_PYTEST_BUILTIN_PLUGINS = frozenset(
    {
        "assertion", "cacheprovider", "capture", "debugging", "doctest", "faulthandler", "fixtures",
        "freeze_support", "helpconfig", "junitxml", "legacypath", "logging", "main", "mark", "monkeypatch",
        "nose", "pastebin", "pytester", "pytester_assertions", "python", "python_path", "recwarn",
        "reports", "runner", "scope", "setuponly", "setupplan", "skipping", "stepwise", "subtests",
        "terminal", "threadexception", "tmpdir", "unittest", "unraisableexception", "warnings",
    }
)  # fmt: skip


# --------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------


def detect_test_requirements(repo: Path) -> TestRequirements:
    """Read ``repo``'s own files and return what its pytest suite needs installed."""
    if not repo.is_dir():
        raise NotADirectoryError(f"not a directory: {repo}")
    pyproject = _read_toml(repo / "pyproject.toml")
    setup_cfg = _read_ini(repo / "setup.cfg")
    setup_py = _read_setup_py(repo / "setup.py")
    pkg_info = _read_pkg_info(repo / "PKG-INFO")
    project_name = _project_name(pyproject, setup_cfg, setup_py, pkg_info)

    found = _Found(repo=repo, project=canonicalize_name(project_name) if project_name else None)
    _collect_known_extras(found, pyproject, setup_cfg, setup_py, pkg_info)

    _declared_in_pyproject(found, pyproject)
    _declared_in_setup_cfg(found, setup_cfg)
    _declared_in_setup_py(found, setup_py)
    _declared_in_pkg_info(found, pkg_info)
    _declared_in_tox(found, pyproject, setup_cfg)
    _declared_in_requirements_files(found)
    pytest_config = _pytest_config(repo, pyproject, setup_cfg)
    if pytest_config is not None:
        _declared_required_plugins(found, pytest_config)
        _inferred_from_pytest_config(found, pytest_config)
    _inferred_from_test_imports(found, pytest_config, _runtime_dependencies(pyproject, setup_cfg, setup_py, pkg_info))
    found.add("pytest", "always: the suite runs under pytest", declared=False)

    return TestRequirements(
        project_name=project_name,
        extras=tuple(found.extras),
        requirements=tuple(found.requirements.values()),
    )


def distribution_for_import(module: str) -> str | None:
    """The PyPI distribution that provides ``module`` (dotted), or None for stdlib modules.

    Uses :data:`IMPORT_TO_DISTRIBUTION` for the usual mismatches; otherwise the distribution is
    the top-level module name with ``_`` turned into ``-``. Namespace packages (``jaraco``,
    ``zope``...) are named by their first two components (``jaraco.itertools``).
    """
    parts = module.split(".")
    top = parts[0]
    if top == "__future__" or top in sys.stdlib_module_names or top in _PYTHON2_STDLIB or top in _ALSO_STANDARD_LIBRARY:
        return None
    if top in _NAMESPACE_PACKAGES:
        if len(parts) < 2:
            return None
        key = f"{top}.{parts[1]}"
        return IMPORT_TO_DISTRIBUTION.get(key, key)
    if top in IMPORT_TO_DISTRIBUTION:
        return IMPORT_TO_DISTRIBUTION[top]
    return top.replace("_", "-")


# --------------------------------------------------------------------------------------------
# Accumulating what was found
# --------------------------------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class _Found:
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
        if not _marker_holds(requirement.marker):
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
        line = _strip_comment(line).strip()
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
        for line in _logical_lines(_read_text(resolved)):
            self.add_pip_line(line, relative.as_posix(), resolved.parent)


def _marker_holds(marker: Marker | None, extra: str = "") -> bool:
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


def _is_test_group(name: str) -> bool:
    words = re.split(r"[-_.]+", name.lower())
    return words[0] in _TEST_WORDS | _DEV_WORDS and all(word in _GROUP_SUFFIX_WORDS for word in words[1:])


# --------------------------------------------------------------------------------------------
# Reading files (never fatal: an unreadable or malformed file counts as absent)
# --------------------------------------------------------------------------------------------


def _read_text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def _read_toml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return tomllib.loads(_read_text(path))
    except tomllib.TOMLDecodeError:
        return {}


def _read_ini(path: Path) -> configparser.ConfigParser | None:
    if not path.is_file():
        return None
    return _parse_ini(_read_text(path))


def _parse_ini(text: str) -> configparser.ConfigParser | None:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keep key case (DJANGO_SETTINGS_MODULE)
    try:
        parser.read_string(text)
    except configparser.Error:
        return None
    return parser


def _read_pkg_info(path: Path) -> email.message.Message | None:
    if not path.is_file():
        return None
    return email.parser.Parser().parsestr(_read_text(path), headersonly=True)


def _strip_comment(line: str) -> str:
    if line.lstrip().startswith("#"):
        return ""
    return re.split(r"\s+#", line, maxsplit=1)[0]


def _logical_lines(text: str) -> Iterator[str]:
    """Lines of a requirements file, with backslash continuations joined."""
    pending = ""
    for raw in text.splitlines():
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        yield pending + raw
        pending = ""
    if pending:
        yield pending


def _ini_lines(value: str) -> list[str]:
    return [line.strip() for line in value.splitlines() if _strip_comment(line).strip()]


def _strings(value: Any) -> list[str]:
    """The strings of a TOML array (other items, such as tables, are skipped)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [item for item in value if isinstance(item, str)]
    return []


def _table(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# --------------------------------------------------------------------------------------------
# The project's name and extras
# --------------------------------------------------------------------------------------------


def _project_name(
    pyproject: dict[str, Any],
    setup_cfg: configparser.ConfigParser | None,
    setup_py: dict[str, Any],
    pkg_info: email.message.Message | None,
) -> str | None:
    tool = _table(pyproject.get("tool"))
    flit_metadata = _table(_table(tool.get("flit")).get("metadata"))
    candidates: list[Any] = [
        _table(pyproject.get("project")).get("name"),
        _table(tool.get("poetry")).get("name"),
        flit_metadata.get("dist-name") or flit_metadata.get("module"),
        setup_cfg.get("metadata", "name", fallback=None) if setup_cfg is not None else None,
        setup_py.get("name"),
        pkg_info.get("Name") if pkg_info is not None else None,
    ]
    for candidate in candidates:
        if isinstance(candidate, str) and candidate.strip() and "%" not in candidate and "{" not in candidate:
            return candidate.strip()
    return None


def _runtime_dependencies(
    pyproject: dict[str, Any],
    setup_cfg: configparser.ConfigParser | None,
    setup_py: dict[str, Any],
    pkg_info: email.message.Message | None,
) -> frozenset[str]:
    """Normalized names the project depends on at run time (they come with the project)."""
    texts = _strings(_table(pyproject.get("project")).get("dependencies"))
    texts += [name for name in _table(_table(_table(pyproject.get("tool")).get("poetry")).get("dependencies"))]
    if setup_cfg is not None:
        texts += _ini_lines(setup_cfg.get("options", "install_requires", fallback=""))
    texts += _setup_py_list(setup_py.get("install_requires"))
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


def _collect_known_extras(
    found: _Found,
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

    for extra, requirements in _table(_table(pyproject.get("project")).get("optional-dependencies")).items():
        record(extra, _strings(requirements), f"pyproject.toml [project.optional-dependencies] {extra}")
    tool = _table(pyproject.get("tool"))
    flit_extras = _table(_table(_table(tool.get("flit")).get("metadata")).get("requires-extra"))
    for extra, requirements in flit_extras.items():
        record(extra, _strings(requirements), f"pyproject.toml [tool.flit.metadata.requires-extra] {extra}")
    dynamic = _table(_table(_table(tool.get("setuptools")).get("dynamic")).get("optional-dependencies"))
    for extra, spec in dynamic.items():
        for name in _strings(_table(spec).get("file")):
            path = found.repo / name
            if path.is_file():
                lines = [_strip_comment(line).strip() for line in _logical_lines(_read_text(path))]
                record(extra, [line for line in lines if line and not line.startswith("-")], name)
    if setup_cfg is not None and setup_cfg.has_section("options.extras_require"):
        for extra, value in setup_cfg.items("options.extras_require"):
            record(extra, _ini_lines(value), f"setup.cfg [options.extras_require] {extra}")
    extras_require = setup_py.get("extras_require")
    if isinstance(extras_require, dict):
        for extra, requirements in extras_require.items():
            if isinstance(extra, str):
                record(extra, _setup_py_list(requirements), f"setup.py extras_require {extra.split(':', 1)[0]}")
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
        only_with_extra = not _marker_holds(requirement.marker) and _marker_holds(requirement.marker, extra)
        if requirement.marker is None or not only_with_extra:
            continue
        requirement.marker = None
        requirements.append(str(requirement))
    return requirements


# --------------------------------------------------------------------------------------------
# pyproject.toml
# --------------------------------------------------------------------------------------------


def _declared_in_pyproject(found: _Found, pyproject: dict[str, Any]) -> None:
    for extra in _table(_table(pyproject.get("project")).get("optional-dependencies")):
        if _is_test_group(extra):
            found.add_extra(extra)
    tool = _table(pyproject.get("tool"))
    for extra in _table(_table(_table(tool.get("flit")).get("metadata")).get("requires-extra")):
        if _is_test_group(extra):
            found.add_extra(extra)
    for extra in _table(_table(_table(tool.get("setuptools")).get("dynamic")).get("optional-dependencies")):
        if _is_test_group(extra):
            found.add_extra(extra)

    groups = _table(pyproject.get("dependency-groups"))
    for group in groups:
        if _is_test_group(group):
            _add_dependency_group(found, groups, group)

    poetry = _table(tool.get("poetry"))
    for group, spec in _table(poetry.get("group")).items():
        if _is_test_group(group):
            dependencies = _table(_table(spec).get("dependencies"))
            _add_poetry_dependencies(found, dependencies, f"pyproject.toml [tool.poetry.group.{group}.dependencies]")
    dev_dependencies = _table(poetry.get("dev-dependencies"))
    _add_poetry_dependencies(found, dev_dependencies, "pyproject.toml [tool.poetry.dev-dependencies]")

    for env, spec in _table(_table(tool.get("hatch")).get("envs")).items():
        if env in ("default", "hatch-test") or _is_test_group(env):
            spec = _table(spec)
            for key in ("dependencies", "extra-dependencies"):
                for text in _strings(spec.get(key)):
                    found.add(text, f"pyproject.toml [tool.hatch.envs.{env}] {key}", declared=True)
            for extra in _strings(spec.get("features")):
                found.add_extra(extra)

    for group, requirements in _table(_table(tool.get("pdm")).get("dev-dependencies")).items():
        if _is_test_group(group):
            for text in _strings(requirements):
                if not text.startswith("-"):
                    found.add(text, f"pyproject.toml [tool.pdm.dev-dependencies] {group}", declared=True)

    for text in _strings(_table(tool.get("uv")).get("dev-dependencies")):
        found.add(text, "pyproject.toml [tool.uv] dev-dependencies", declared=True)


def _add_dependency_group(
    found: _Found, groups: dict[str, Any], group: str, seen: frozenset[str] = frozenset()
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
            _add_dependency_group(found, groups, entry["include-group"], seen | {key})


def _add_poetry_dependencies(found: _Found, dependencies: dict[str, Any], origin: str) -> None:
    for name, spec in dependencies.items():
        if name.lower() == "python":
            continue
        if isinstance(spec, dict) and str(spec.get("path", "")).strip() in (".", "./"):
            for extra in _strings(spec.get("extras")):  # the project itself
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
    extras = _strings(spec.get("extras"))
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
            return _marker_holds(Marker(markers))
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


def _declared_in_setup_cfg(found: _Found, setup_cfg: configparser.ConfigParser | None) -> None:
    if setup_cfg is None:
        return
    for line in _ini_lines(setup_cfg.get("options", "tests_require", fallback="")):
        for text in _split_requirement_line(line):
            found.add(text, "setup.cfg [options] tests_require", declared=True)
    if setup_cfg.has_section("options.extras_require"):
        for extra in setup_cfg.options("options.extras_require"):
            if _is_test_group(extra):
                found.add_extra(extra)


def _split_requirement_line(line: str) -> list[str]:
    """A line holding one requirement, or several separated by ``;`` (old setuptools style)."""
    try:
        Requirement(line)
    except InvalidRequirement:
        return [part for part in line.split(";") if part.strip()]
    return [line]


def _declared_in_setup_py(found: _Found, setup_py: dict[str, Any]) -> None:
    for text in _setup_py_list(setup_py.get("tests_require")):
        found.add(text, "setup.py tests_require", declared=True)
    extras_require = setup_py.get("extras_require")
    if isinstance(extras_require, dict):
        for extra in extras_require:
            if isinstance(extra, str) and _is_test_group(extra.split(":", 1)[0].strip()):
                found.add_extra(extra.split(":", 1)[0].strip())


def _declared_in_pkg_info(found: _Found, pkg_info: email.message.Message | None) -> None:
    if pkg_info is None:
        return
    for extra in pkg_info.get_all("Provides-Extra") or []:
        if _is_test_group(extra):
            found.add_extra(extra)


def _setup_py_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [line.strip() for line in value.splitlines() if line.strip()]
    if isinstance(value, (list, tuple)):
        return [item for item in value if isinstance(item, str)]
    return []


class _NotLiteral(Exception):
    """An expression in setup.py that is not built from literals."""


def _read_setup_py(path: Path) -> dict[str, Any]:
    """The literal keyword arguments of the ``setup(...)`` call in setup.py, without running it.

    Names bound at module level to literals (``tests_require = ["pytest"]``) are resolved, and so
    are ``+`` of lists and ``dict(key=...)``; anything else is left out.
    """
    if not path.is_file():
        return {}
    tree = _parse_python(_read_text(path))
    if tree is None:
        return {}
    names: dict[str, Any] = {}
    for statement in tree.body:
        target, value = None, None
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target, value = statement.targets[0], statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            target, value = statement.target, statement.value
        if isinstance(target, ast.Name) and value is not None:
            try:
                names[target.id] = _literal(value, names)
            except _NotLiteral:
                names.pop(target.id, None)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _called_name(node.func) == "setup":
            keywords: dict[str, Any] = {}
            for keyword in node.keywords:
                if keyword.arg in ("name", "install_requires", "tests_require", "extras_require"):
                    try:
                        keywords[keyword.arg] = _literal(keyword.value, names)
                    except _NotLiteral:
                        continue
            return keywords
    return {}


def _called_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _literal(node: ast.expr, names: Mapping[str, Any]) -> Any:
    match node:
        case ast.Constant(value=value):
            return value
        case ast.List(elts=elements) | ast.Tuple(elts=elements) | ast.Set(elts=elements):
            return [_literal(element, names) for element in elements]
        case ast.Dict(keys=keys, values=values):
            if any(key is None for key in keys):
                raise _NotLiteral
            return {_literal(key, names): _literal(value, names) for key, value in zip(keys, values) if key is not None}
        case ast.Name(id=name) if name in names:
            return names[name]
        case ast.BinOp(left=left, op=ast.Add(), right=right):
            left_value, right_value = _literal(left, names), _literal(right, names)
            if type(left_value) is not type(right_value) or not isinstance(left_value, (list, str)):
                raise _NotLiteral
            return left_value + right_value
        case ast.Call(func=ast.Name(id="dict"), args=[], keywords=keywords) if all(k.arg for k in keywords):
            return {keyword.arg: _literal(keyword.value, names) for keyword in keywords}
    raise _NotLiteral


def _parse_python(source: str) -> ast.Module | None:
    """Parse without running; old syntax (Python 2) gives None. Warnings (bad escapes) are muted."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return ast.parse(source)
        except (SyntaxError, ValueError):  # ValueError: source with NUL bytes
            return None


# --------------------------------------------------------------------------------------------
# tox
# --------------------------------------------------------------------------------------------


def _declared_in_tox(found: _Found, pyproject: dict[str, Any], setup_cfg: configparser.ConfigParser | None) -> None:
    """Read the tox configuration tox itself would use: the first of its four homes that has one."""
    tox_ini = _read_ini(found.repo / "tox.ini")
    if tox_ini is not None:
        _declared_in_tox_ini(found, tox_ini, "tox.ini", pyproject)
        return
    if setup_cfg is not None and setup_cfg.has_section("tox:tox"):
        _declared_in_tox_ini(found, setup_cfg, "setup.cfg", pyproject)
        return
    tox_table = _table(_table(pyproject.get("tool")).get("tox"))
    legacy = tox_table.get("legacy_tox_ini")
    if isinstance(legacy, str):
        parsed = _parse_ini(legacy)
        if parsed is not None:
            _declared_in_tox_ini(found, parsed, "pyproject.toml [tool.tox] legacy_tox_ini", pyproject)
        return
    if tox_table:
        _declared_in_tox_toml(found, tox_table, "pyproject.toml [tool.tox.", pyproject)
        return
    tox_toml = _read_toml(found.repo / "tox.toml")
    if tox_toml:
        _declared_in_tox_toml(found, tox_toml, "tox.toml [", pyproject)


def _declared_in_tox_ini(
    found: _Found, config: configparser.ConfigParser, label: str, pyproject: dict[str, Any]
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
                _add_dependency_group(found, _table(pyproject.get("dependency-groups")), group.strip())


def _declared_in_tox_toml(found: _Found, tox: dict[str, Any], label: str, pyproject: dict[str, Any]) -> None:
    envs = [("env_run_base", _table(tox.get("env_run_base")))]
    envs += [(f"env.{n}", _table(spec)) for n, spec in _table(tox.get("env")).items() if _tox_env_runs_tests(n)]
    for name, spec in envs:
        origin = f"{label}{name}]"
        for line in _strings(spec.get("deps")):
            found.add_pip_line(line.replace("{toxinidir}", "."), f"{origin} deps", found.repo)
        for extra in _strings(spec.get("extras")):
            found.add_extra(extra)
        for group in _strings(spec.get("dependency_groups")):
            _add_dependency_group(found, _table(pyproject.get("dependency-groups")), group)


def _tox_lines(config: configparser.ConfigParser, section: str, key: str) -> list[str]:
    """The lines of a tox setting that apply to our env, with factor prefixes and references resolved."""
    value = _tox_resolve(config, config.get(section, key, fallback=""), depth=0)
    lines = []
    for line in value.splitlines():
        line = _strip_comment(line).strip()
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


# --------------------------------------------------------------------------------------------
# requirements files
# --------------------------------------------------------------------------------------------


def _declared_in_requirements_files(found: _Found) -> None:
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


# --------------------------------------------------------------------------------------------
# pytest configuration
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class _PytestConfig:
    """The pytest configuration pytest itself would pick, as plain values."""

    origin: str
    """Which file and section it came from."""
    options: dict[str, Any]
    """Ini key -> string (ini files) or TOML value (pyproject.toml)."""

    def args(self, key: str) -> list[str]:
        """A setting of type ``args`` (addopts, required_plugins), split like a shell would."""
        value = self.options.get(key)
        items = _strings(value)
        tokens: list[str] = []
        for item in items:
            try:
                tokens.extend(shlex.split(item))
            except ValueError:  # unbalanced quotes
                tokens.extend(item.split())
        return tokens


def _pytest_config(
    repo: Path, pyproject: dict[str, Any], setup_cfg: configparser.ConfigParser | None
) -> _PytestConfig | None:
    """pytest's own precedence: pytest.ini, .pytest.ini, pyproject.toml, tox.ini, setup.cfg."""
    for name in ("pytest.ini", ".pytest.ini"):
        if (repo / name).is_file():
            parsed = _read_ini(repo / name)
            options = dict(parsed.items("pytest")) if parsed is not None and parsed.has_section("pytest") else {}
            return _PytestConfig(origin=name, options=options)
    pytest_table = _table(_table(pyproject.get("tool")).get("pytest"))
    if "ini_options" in pytest_table:
        options = _table(pytest_table["ini_options"])
        return _PytestConfig(origin="pyproject.toml [tool.pytest.ini_options]", options=options)
    if pytest_table:
        return _PytestConfig(origin="pyproject.toml [tool.pytest]", options=pytest_table)
    tox_ini = _read_ini(repo / "tox.ini")
    if tox_ini is not None and tox_ini.has_section("pytest"):
        return _PytestConfig(origin="tox.ini [pytest]", options=dict(tox_ini.items("pytest")))
    if setup_cfg is not None and setup_cfg.has_section("tool:pytest"):
        return _PytestConfig(origin="setup.cfg [tool:pytest]", options=dict(setup_cfg.items("tool:pytest")))
    return None


def _declared_required_plugins(found: _Found, config: _PytestConfig) -> None:
    for text in config.args("required_plugins"):
        found.add(text, f"pytest config: required_plugins ({config.origin})", declared=True)


def _inferred_from_pytest_config(found: _Found, config: _PytestConfig) -> None:
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
            if distribution is not None and plugin_module not in _PYTEST_BUILTIN_PLUGINS and not local:
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


# --------------------------------------------------------------------------------------------
# imports in test files
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class _Import:
    """One import statement (or ``importorskip`` / ``pytest_plugins`` entry) in a file."""

    module: str
    """The dotted module; "" for ``from . import x``."""
    names: tuple[str, ...]
    """What ``from module import ...`` takes (modules or attributes: unknown without running)."""
    level: int
    """0 for absolute imports, the number of leading dots otherwise."""
    how: str
    """``import``, ``pytest.importorskip`` or ``pytest_plugins``: says how in the origin."""


@dataclass(frozen=True, kw_only=True, slots=True)
class _Layout:
    """Where a repository's Python files are, as the import inference needs them."""

    local_modules: frozenset[str]
    """Every module or package name present anywhere: imports of these are not third-party."""
    test_files: tuple[PurePosixPath, ...]
    """Files pytest collects (``test_*.py``, ``conftest.py``, ``python_files`` patterns...)."""
    test_helpers: Mapping[str, tuple[PurePosixPath, ...]]
    """Other files under test folders, by module name: read only if a test file imports them."""
    project_modules: Mapping[str, PurePosixPath]
    """The project's own (non-test, non-package) modules by dotted name, ``src/`` stripped."""


def _inferred_from_test_imports(found: _Found, pytest_config: _PytestConfig | None, runtime: frozenset[str]) -> None:
    """Third-party modules imported by test files, by the helpers they import, and by the project
    modules they import by name (``from cattrs.preconf.orjson import ...`` needs orjson).

    Distributions the project itself depends on are left out: they come with the project.
    """
    patterns = list(_TEST_FILE_PATTERNS)
    if pytest_config is not None:
        patterns += [p for p in pytest_config.args("python_files") if p.endswith(".py")]
    extra_paths = pytest_config.args("pythonpath") if pytest_config is not None else []
    layout = _scan_layout(found.repo, patterns, extra_paths)
    queue = list(layout.test_files)
    queued = set(queue)
    followed: set[PurePosixPath] = set()

    def add(module: str, origin: str) -> None:
        distribution = distribution_for_import(module)
        if distribution is not None and canonicalize_name(distribution) not in runtime:
            found.add(distribution, origin, declared=False)

    requested_fixtures: dict[str, PurePosixPath] = {}
    defined_fixtures: set[str] = set()
    while queue:
        relative = queue.pop(0)
        tree = _parse_file(found.repo / relative)
        if tree is None:
            continue
        for name in _requested_fixtures(tree):
            requested_fixtures.setdefault(name, relative)
        defined_fixtures.update(_defined_fixtures(tree))
        for imported in _imports_in_tree(tree):
            if imported.how == "pytest_plugins" and imported.module in _PYTEST_BUILTIN_PLUGINS:
                continue
            top = imported.module.split(".")[0]
            if imported.level == 0 and top not in layout.local_modules:
                add(imported.module, f"{imported.how} in {relative}")
                continue
            for name in [*imported.module.split("."), *imported.names]:
                for helper in layout.test_helpers.get(name, ()):
                    if helper not in queued:
                        queued.add(helper)
                        queue.append(helper)
            if imported.level > 0:
                continue
            for dotted in [imported.module, *(f"{imported.module}.{name}" for name in imported.names)]:
                module_file = layout.project_modules.get(dotted)
                if module_file is None or module_file in followed:
                    continue
                followed.add(module_file)
                module_tree = _parse_file(found.repo / module_file)
                for inner in _imports_in_tree(module_tree, module_level_only=True) if module_tree else []:
                    if inner.level == 0 and inner.module.split(".")[0] not in layout.local_modules:
                        add(inner.module, f"import in {module_file} (imported by {relative})")
    for name, relative in requested_fixtures.items():
        if name in _PLUGIN_FOR_FIXTURE and name not in defined_fixtures:
            found.add(_PLUGIN_FOR_FIXTURE[name], f"fixture {name} in {relative}", declared=False)


def _scan_layout(repo: Path, test_patterns: Iterable[str], extra_paths: Iterable[str]) -> _Layout:
    """Sort the Python files, and find what test code can import without installing anything.

    That is what lies on ``sys.path`` under pytest: the root and ``src/``, the folders of
    ``pythonpath`` in the pytest configuration, and each test file's *basedir* (the first folder
    up from it without ``__init__.py``, which pytest's default import mode inserts); and, since
    suites put their own test data on ``sys.path``, any module or folder inside a test folder.
    """
    files = [(relative, is_package) for relative, is_package in _python_files(repo)]
    packages = {relative.parent for relative, is_package in files if is_package}
    test_files: list[PurePosixPath] = []
    test_helpers: dict[str, list[PurePosixPath]] = {}
    project_modules: dict[str, PurePosixPath] = {}
    for relative, _ in files:
        in_test_folder = any(part in _TEST_DIRS for part in relative.parts[:-1])
        if relative.name != "__init__.py" and any(fnmatch.fnmatch(relative.name, p) for p in test_patterns):
            test_files.append(relative)
        elif in_test_folder:
            name = relative.parent.name if relative.name == "__init__.py" else relative.stem
            test_helpers.setdefault(name, []).append(relative)
        elif relative.name != "__init__.py" and relative.suffix == ".py":
            parts = relative.with_suffix("").parts
            project_modules[".".join(parts[1:] if parts[0] == "src" else parts)] = relative

    search_path = {PurePosixPath("."), PurePosixPath("src")} | {PurePosixPath(p) for p in extra_paths}
    for relative in test_files:
        basedir = relative.parent
        while basedir in packages and basedir != PurePosixPath("."):
            basedir = basedir.parent
        search_path.add(basedir)
    local_modules: set[str] = set()
    for relative, _ in files:
        test_folder = next((i for i, part in enumerate(relative.parts[:-1]) if part in _TEST_DIRS), None)
        if test_folder is not None:  # test data that a conftest puts on sys.path itself
            local_modules.update(relative.parts[test_folder + 1 : -1])
            local_modules.add(relative.stem)
        for folder in [relative.parent, *relative.parent.parents]:
            if folder in search_path:
                inside = relative.relative_to(folder).parts
                local_modules.add(inside[0] if len(inside) > 1 else relative.stem)
    return _Layout(
        local_modules=frozenset(local_modules),
        test_files=tuple(test_files),
        test_helpers={name: tuple(paths) for name, paths in test_helpers.items()},
        project_modules=project_modules,
    )


def _python_files(repo: Path) -> Iterator[tuple[PurePosixPath, bool]]:
    """Python files under ``repo`` (relative, sorted), each with whether its folder is a package."""
    for folder, dirnames, filenames in os.walk(repo):
        dirnames[:] = sorted(
            d for d in dirnames if not d.startswith(".") and d not in _SKIPPED_DIRS and not d.endswith(".egg-info")
        )
        is_package = "__init__.py" in filenames
        relative_folder = PurePosixPath(Path(folder).relative_to(repo).as_posix())
        for filename in sorted(filenames):
            if filename.endswith((".py", ".pyi", ".pyx")):
                yield relative_folder / filename, is_package


def _parse_file(path: Path) -> ast.Module | None:
    """A ``.py`` file's syntax tree; None for other files, unparseable ones and data dumps."""
    if path.suffix != ".py" or path.stat().st_size > _LARGEST_PARSED_FILE:
        return None
    return _parse_python(_read_text(path))


def _function_definitions(statements: Iterable[ast.AST]) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Functions defined at any depth, found through statements only (data literals are skipped)."""
    for node in statements:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node
        yield from _function_definitions(child for child in _children(node) if isinstance(child, ast.stmt))


def _requested_fixtures(tree: ast.Module) -> Iterator[str]:
    """Argument names of test functions and fixtures: the fixtures they request."""
    for function in _function_definitions(tree.body):
        if function.name.startswith("test") or _is_fixture(function):
            for argument in [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]:
                yield argument.arg


def _defined_fixtures(tree: ast.Module) -> Iterator[str]:
    """Names of the fixtures a file defines (a suite may define its own ``benchmark``)."""
    for function in _function_definitions(tree.body):
        if _is_fixture(function):
            yield function.name


def _is_fixture(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(
        _called_name(decorator.func if isinstance(decorator, ast.Call) else decorator) in ("fixture", "yield_fixture")
        for decorator in function.decorator_list
    )


def _imports_in_tree(tree: ast.Module, *, module_level_only: bool = False) -> list[_Import]:
    """What a Python file imports (or asks ``pytest.importorskip`` for).

    With ``module_level_only``, imports inside functions (run only if called) are left out.

    Skipped: ``if TYPE_CHECKING:`` and ``if __name__ == "__main__":`` blocks, branches of version
    or platform checks that are false on CPython 3.11/Linux, and ``except ImportError:``
    fallbacks after a standard-library import (``try: from unittest import mock`` /
    ``except ImportError: import mock``).
    """
    imports: list[_Import] = []
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "pytest_plugins" for target in statement.targets
        ):
            try:
                plugins = _literal(statement.value, {})
            except _NotLiteral:
                continue
            imports += [_Import(module=p, names=(), level=0, how="pytest_plugins") for p in _setup_py_list(plugins)]
    imports += _imports_below(tree.body, into_functions=not module_level_only)
    return imports


def _imports_below(statements: Iterable[ast.AST], *, into_functions: bool) -> Iterator[_Import]:
    """Statements are followed recursively (they nest shallowly), expressions walked iteratively."""
    for node in statements:
        if not into_functions and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.If):
            verdict = _static_truth(node.test)
            if verdict is not None:
                yield from _imports_below(node.body if verdict else node.orelse, into_functions=into_functions)
                continue
        if isinstance(node, (ast.Try, ast.TryStar)) and _catches_import_error(node.handlers):
            tried = [imported for imported in _imports_below(node.body, into_functions=False) if imported.level == 0]
            if tried and all(distribution_for_import(imported.module) is None for imported in tried):
                yield from _imports_below([*node.body, *node.orelse, *node.finalbody], into_functions=into_functions)
                continue
        if isinstance(node, (ast.With, ast.AsyncWith)) and any(
            isinstance(item.context_expr, ast.Call) and _called_name(item.context_expr.func) == "raises"
            for item in node.items
        ):
            continue  # `with pytest.raises(ImportError): import nonexistent` tests a failing import
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield _Import(module=alias.name, names=(), level=0, how="import")
        elif isinstance(node, ast.ImportFrom):
            names = tuple(alias.name for alias in node.names if alias.name != "*")
            if node.level == 0 and node.module in _NAMESPACE_PACKAGES:
                for name in names:
                    yield _Import(module=f"{node.module}.{name}", names=(), level=0, how="import")
            else:
                yield _Import(module=node.module or "", names=names, level=node.level, how="import")
        elif isinstance(node, ast.expr):
            if not into_functions:
                continue
            for call in ast.walk(node):
                if (
                    isinstance(call, ast.Call)
                    and _called_name(call.func) == "importorskip"
                    and call.args
                    and isinstance(call.args[0], ast.Constant)
                    and isinstance(call.args[0].value, str)
                ):
                    yield _Import(module=call.args[0].value, names=(), level=0, how="pytest.importorskip")
        else:
            yield from _imports_below(_children(node), into_functions=into_functions)


def _children(node: ast.AST) -> Iterator[ast.AST]:
    """A statement's nested statements and expressions (handler and match-case bodies included)."""
    for _, value in ast.iter_fields(node):
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, (ast.stmt, ast.expr)):
                yield item
            elif isinstance(item, (ast.ExceptHandler, ast.match_case)):
                yield from item.body


def _catches_import_error(handlers: list[ast.ExceptHandler]) -> bool:
    caught = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
    for handler in handlers:
        if handler.type is None:
            return True
        types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if any(_called_name(t) in caught for t in types):
            return True
    return False


def _static_truth(test: ast.expr) -> bool | None:
    """The value of a condition on CPython 3.11/Linux if it only reads the version or platform."""
    match test:
        case ast.Name(id="TYPE_CHECKING") | ast.Attribute(attr="TYPE_CHECKING"):
            return False
        case ast.Name(id="PY2") | ast.Attribute(value=ast.Name(id="six"), attr="PY2"):
            return False
        case ast.Name(id="PY3") | ast.Attribute(value=ast.Name(id="six"), attr="PY3"):
            return True
        case ast.UnaryOp(op=ast.Not(), operand=operand):
            verdict = _static_truth(operand)
            return None if verdict is None else not verdict
        case ast.BoolOp(op=ast.And(), values=values):
            verdicts = [_static_truth(value) for value in values]
            return False if False in verdicts else (True if all(v is True for v in verdicts) else None)
        case ast.BoolOp(op=ast.Or(), values=values):
            verdicts = [_static_truth(value) for value in values]
            return True if True in verdicts else (False if all(v is False for v in verdicts) else None)
        case ast.Compare(left=left, ops=[op], comparators=[right]):
            actual = _static_value(left)
            if actual is None:
                return None
            try:
                return _compare(actual, op, ast.literal_eval(right))
            except (ValueError, TypeError, SyntaxError):
                return None
        case ast.Call(
            func=ast.Attribute(value=ast.Attribute(value=ast.Name(id="sys"), attr="platform"), attr="startswith"),
            args=[ast.Constant(value=str() as prefix)],
        ):
            return TARGET_ENVIRONMENT["sys_platform"].startswith(prefix)
    return None


def _static_value(node: ast.expr) -> Any:
    """``sys.version_info`` (and its parts), ``sys.platform``, ``os.name`` and ``__name__`` under pytest."""
    match node:
        case ast.Attribute(value=ast.Name(id="sys"), attr="version_info"):
            return _TARGET_VERSION_INFO
        case ast.Attribute(value=ast.Attribute(value=ast.Name(id="sys"), attr="version_info"), attr="major"):
            return _TARGET_VERSION_INFO[0]
        case ast.Attribute(value=ast.Attribute(value=ast.Name(id="sys"), attr="version_info"), attr="minor"):
            return _TARGET_VERSION_INFO[1]
        case ast.Subscript(value=ast.Attribute(value=ast.Name(id="sys"), attr="version_info"), slice=index):
            try:
                if isinstance(index, ast.Slice):
                    parts = (index.lower, index.upper, index.step)
                    bounds = [None if part is None else ast.literal_eval(part) for part in parts]
                    return _TARGET_VERSION_INFO[slice(*bounds)]
                return _TARGET_VERSION_INFO[ast.literal_eval(index)]
            except (ValueError, TypeError, IndexError, SyntaxError):
                return None
        case ast.Attribute(value=ast.Name(id="sys"), attr="platform"):
            return TARGET_ENVIRONMENT["sys_platform"]
        case ast.Attribute(value=ast.Name(id="os"), attr="name"):
            return TARGET_ENVIRONMENT["os_name"]
        case ast.Name(id="__name__"):
            return "__test_module__"  # never "__main__" under pytest
    return None


def _compare(actual: Any, op: ast.cmpop, expected: Any) -> bool | None:
    match op:
        case ast.Eq():
            return bool(actual == expected)
        case ast.NotEq():
            return bool(actual != expected)
        case ast.Lt():
            return bool(actual < expected)
        case ast.LtE():
            return bool(actual <= expected)
        case ast.Gt():
            return bool(actual > expected)
        case ast.GtE():
            return bool(actual >= expected)
    return None
