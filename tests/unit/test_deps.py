"""taskforge.repo.requirements: golden files from real sdists, then each source on small inline repositories."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from taskforge.repo.requirements import (
    DetectedRequirement,
    TestRequirements,
    detect_test_requirements,
    distribution_for_import,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "deps"
EXPECTED: dict[str, dict[str, Any]] = json.loads((FIXTURES / "expected.json").read_text(encoding="utf-8"))


def write(repo: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = repo / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return repo


def by_name(found: TestRequirements) -> dict[str, DetectedRequirement]:
    return {canonicalize_name(Requirement(r.requirement).name): r for r in found.requirements}


def names(found: TestRequirements, *, declared: bool | None = None) -> list[str]:
    return [
        canonicalize_name(Requirement(r.requirement).name)
        for r in found.requirements
        if declared is None or r.declared == declared
    ]


# --------------------------------------------------------------------------------------------
# Golden files: real sdists of corpus projects
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("project", sorted(EXPECTED))
def test_golden_fixture(project: str) -> None:
    found = detect_test_requirements(FIXTURES / project)
    detected = {
        "project_name": found.project_name,
        "extras": list(found.extras),
        "declared": [Requirement(r.requirement).name for r in found.requirements if r.declared],
        "inferred": [Requirement(r.requirement).name for r in found.requirements if not r.declared],
    }
    assert detected == EXPECTED[project]["detected"]


def hand_found(test_deps: str) -> tuple[set[str], set[str]]:
    """Names and own extras in the corpus's ``test_deps`` column (commas also split specifiers)."""
    items: list[str] = []
    for part in test_deps.split(","):
        part = part.strip()
        if items and re.match(r"^[<>=!~]", part):
            items[-1] += "," + part
        elif part:
            items.append(part)
    extras = {item[2:-1] for item in items if item.startswith(".[")}
    requirements: set[str] = {
        canonicalize_name(Requirement(re.sub(r"\((.*)\)", r"\1", item)).name)
        for item in items
        if not item.startswith(".[")
    }
    return requirements, extras


def test_recall_of_hand_found_test_deps_over_the_golden_fixtures() -> None:
    total, misses = 0, {}
    for project, expected in sorted(EXPECTED.items()):
        found = detect_test_requirements(FIXTURES / project)
        wanted, wanted_extras = hand_found(expected["hand_found_test_deps"])
        wanted.discard(canonicalize_name(found.project_name or ""))  # "docstring_parser[test]" style
        missed = sorted(wanted - set(names(found)))
        missed += sorted(f".[{extra}]" for extra in wanted_extras - set(found.extras))
        total += len(wanted) + len(wanted_extras)
        if missed:
            misses[project] = missed
    known = {project: sorted(e["known_misses"]) for project, e in EXPECTED.items() if e["known_misses"]}
    recall = 1 - sum(map(len, misses.values())) / total
    assert misses == known, f"recall {recall:.3f} over {len(EXPECTED)} projects"
    assert recall >= 0.9  # 87/92 on these files; every miss is a documented, deliberate one


def test_every_known_miss_says_why() -> None:
    for expected in EXPECTED.values():
        assert all(reason.strip() for reason in expected["known_misses"].values())


def test_golden_fixtures_are_never_collected_as_tests() -> None:
    conftest = (FIXTURES / "conftest.py").read_text(encoding="utf-8")
    assert 'collect_ignore_glob = ["*"]' in conftest


# --------------------------------------------------------------------------------------------
# The result
# --------------------------------------------------------------------------------------------


def test_pytest_is_always_there_and_last_unless_declared(tmp_path: Path) -> None:
    found = detect_test_requirements(tmp_path)
    assert found == TestRequirements(
        project_name=None,
        extras=(),
        requirements=(
            DetectedRequirement(requirement="pytest", origin="always: the suite runs under pytest", declared=False),
        ),
    )
    write(tmp_path, {"requirements-test.txt": "pytest>=8\n"})
    assert by_name(detect_test_requirements(tmp_path))["pytest"] == DetectedRequirement(
        requirement="pytest>=8", origin="requirements-test.txt", declared=True
    )


def test_to_json(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "pyproject.toml": """
                [project]
                name = "demo"
                [project.optional-dependencies]
                test = ["pytest-cov >= 5"]
            """
        },
    )
    assert detect_test_requirements(tmp_path).to_json() == {
        "project_name": "demo",
        "extras": ["test"],
        "requirements": [
            {
                "requirement": "pytest-cov>=5",
                "origin": "pyproject.toml [project.optional-dependencies] test",
                "declared": True,
            },
            {"requirement": "pytest", "origin": "always: the suite runs under pytest", "declared": False},
        ],
    }


def test_a_file_is_not_a_repository(tmp_path: Path) -> None:
    with pytest.raises(NotADirectoryError):
        detect_test_requirements(write(tmp_path, {"setup.py": ""}) / "setup.py")


def test_first_origin_wins_and_declared_come_before_inferred(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "pyproject.toml": """
                [project]
                name = "demo"
                [project.optional-dependencies]
                test = ["hypothesis>=6"]
                [tool.pytest.ini_options]
                addopts = "--cov=demo"
            """,
            "requirements-test.txt": "Hypothesis==6.1\npytest-cov\n",
            "tests/test_a.py": "import yaml\nimport hypothesis\n",
        },
    )
    found = detect_test_requirements(tmp_path)
    assert [(r.requirement, r.origin, r.declared) for r in found.requirements] == [
        ("hypothesis>=6", "pyproject.toml [project.optional-dependencies] test", True),
        ("pytest-cov", "requirements-test.txt", True),
        ("PyYAML", "import in tests/test_a.py", False),
        ("pytest", "always: the suite runs under pytest", False),
    ]


# --------------------------------------------------------------------------------------------
# pyproject.toml
# --------------------------------------------------------------------------------------------


def test_dependency_groups_follow_include_group(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "pyproject.toml": """
                [project]
                name = "demo"
                [dependency-groups]
                Test = ["pytest", {include-group = "coverage"}, "demo[speedups]"]
                coverage = ["pytest-cov", {include-group = "TEST"}]
                lint = ["ruff"]
                docs = ["sphinx"]
                tests-random = ["pytest-randomly"]
            """
        },
    )
    found = detect_test_requirements(tmp_path)
    assert names(found, declared=True) == ["pytest", "pytest-cov"]
    assert by_name(found)["pytest-cov"].origin == "pyproject.toml [dependency-groups] coverage"
    assert found.extras == ("speedups",)


def test_test_group_names(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "pyproject.toml": """
                [project]
                name = "demo"
                [project.optional-dependencies]
                test-extras = ["a"]
                testing = ["b"]
                dev = ["c"]
                tests_require = ["d"]
                dev-docs = ["e"]
                all = ["f"]
                typing = ["g"]
            """
        },
    )
    found = detect_test_requirements(tmp_path)
    assert found.extras == ("test-extras", "testing", "dev", "tests_require")
    assert names(found, declared=True) == ["a", "b", "c", "d"]


def test_self_references_become_extras_and_expand(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "pyproject.toml": """
                [project]
                name = "Demo_Pkg"
                [project.optional-dependencies]
                dev = ["demo-pkg[test,docs]", "black"]
                test = ["pytest-mock"]
                docs = ["pydoctor"]
                yaml = ["pyyaml"]
            """,
            "tox.ini": """
                [testenv]
                deps = .[yaml]
            """,
        },
    )
    found = detect_test_requirements(tmp_path)
    assert found.project_name == "Demo_Pkg"
    assert found.extras == ("dev", "test", "yaml")  # docs: never needed to run tests
    assert names(found, declared=True) == ["pytest-mock", "black", "pyyaml"]
    assert "demo-pkg" not in names(found)


def test_tools_that_never_run_tests_are_dropped_but_linters_stay(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "pyproject.toml": """
                [dependency-groups]
                dev = ["sphinx", "sphinx-rtd-theme", "pallets-sphinx-themes", "furo", "mkdocs-material",
                       "myst-parser", "twine", "build", "towncrier", "check-manifest", "pre-commit",
                       "prek", "tox", "tox-uv", "nox", "uv", "hatch", "coveralls",
                       "mypy", "pycodestyle", "flake8", "ruff", "coverage", "wheel"]
            """,
            "tests/test_docs.py": "import sphinx\n",
        },
    )
    found = detect_test_requirements(tmp_path)
    assert names(found, declared=True) == ["mypy", "pycodestyle", "flake8", "ruff", "coverage", "wheel"]
    assert by_name(found)["sphinx"].origin == "import in tests/test_docs.py"  # a test needs it after all


def test_markers_false_on_python_311_linux_are_dropped(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "pyproject.toml": """
                [dependency-groups]
                test = [
                    "tomli; python_version < '3.11'",
                    "pywin32; sys_platform == 'win32'",
                    "exceptiongroup; python_version >= '3.8'",
                    "uvloop; platform_system != 'Windows' and implementation_name == 'cpython'",
                    "not a requirement !!",
                ]
            """
        },
    )
    found = detect_test_requirements(tmp_path)
    assert names(found, declared=True) == ["exceptiongroup", "uvloop"]
    assert by_name(found)["exceptiongroup"].requirement == 'exceptiongroup; python_version >= "3.8"'


def test_poetry_constraints_become_pep_440(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "pyproject.toml": """
                [tool.poetry]
                name = "demo"
                [tool.poetry.dependencies]
                python = "^3.8"
                [tool.poetry.group.test.dependencies]
                pytest = "^7.1.3"
                hypothesis = "~6.5"
                zero = "^0.2.3"
                tiny = "^0.0.3"
                major = "^2"
                tilde-major = "~1"
                pinned = "1.2.3"
                wildcard = "1.2.*"
                ranged = ">=1.0,<2.0"
                spaced = ">= 1.0 < 2.0"
                either = "^1.0 || ^2.0"
                anything = "*"
                extra = {version = "^1.0", extras = ["speed"]}
                old-python = {version = "^1.0", python = "<3.8"}
                windows = {version = "^1.0", markers = "sys_platform == 'win32'"}
                from-git = {git = "https://example.org/x.git"}
                myself = {path = ".", extras = ["all"]}
                alternatives = [
                    {version = "^1.0", python = "<3.10"},
                    {version = "^2.0", python = ">=3.10"},
                ]
                [tool.poetry.group.docs.dependencies]
                furo = "*"
                [tool.poetry.dev-dependencies]
                mock = "^4"
            """
        },
    )
    found = detect_test_requirements(tmp_path)
    assert [r.requirement for r in found.requirements if r.declared] == [
        "pytest<8.0.0,>=7.1.3",
        "hypothesis<6.6,>=6.5",
        "zero<0.3.0,>=0.2.3",
        "tiny<0.0.4,>=0.0.3",
        "major<3,>=2",
        "tilde-major<2,>=1",
        "pinned==1.2.3",
        "wildcard==1.2.*",
        "ranged<2.0,>=1.0",
        "spaced<2.0,>=1.0",
        "either",
        "anything",
        "extra[speed]<2.0,>=1.0",
        "from-git",
        "alternatives<3.0,>=2.0",
        "mock<5,>=4",
    ]
    assert found.extras == ("all",)
    assert by_name(found)["mock"].origin == "pyproject.toml [tool.poetry.dev-dependencies]"


def test_hatch_pdm_uv_and_flit(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "pyproject.toml": """
                [project]
                name = "demo"
                [tool.hatch.envs.default]
                dependencies = ["a"]
                [tool.hatch.envs.hatch-test]
                extra-dependencies = ["b"]
                features = ["speed"]
                [tool.hatch.envs.docs]
                dependencies = ["c"]
                [tool.pdm.dev-dependencies]
                test = ["d", "-e file:///${PROJECT_ROOT}/#egg=demo"]
                lint = ["e"]
                [tool.uv]
                dev-dependencies = ["f"]
                [tool.flit.metadata.requires-extra]
                test = ["g"]
            """
        },
    )
    found = detect_test_requirements(tmp_path)
    assert names(found, declared=True) == ["g", "a", "b", "d", "f"]
    assert found.extras == ("test", "speed")
    assert by_name(found)["b"].origin == "pyproject.toml [tool.hatch.envs.hatch-test] extra-dependencies"


def test_setuptools_dynamic_optional_dependencies_from_a_file(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "pyproject.toml": """
                [project]
                name = "demo"
                dynamic = ["optional-dependencies"]
                [tool.setuptools.dynamic.optional-dependencies]
                test = {file = ["ci/test.in"]}
            """,
            "ci/test.in": "# pinned elsewhere\npytest-xdist  # parallel\n",
        },
    )
    found = detect_test_requirements(tmp_path)
    assert by_name(found)["pytest-xdist"].origin == "ci/test.in"
    assert found.extras == ("test",)


def test_unreadable_files_are_skipped(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "pyproject.toml": "[project\nname = ",
            "setup.cfg": "no section header\n",
            "setup.py": "print 'python 2'\n",
            "tox.ini": "[testenv\n",
            "tests/test_old.py": "print 'python 2'\nimport yaml\n",
        },
    )
    assert names(detect_test_requirements(tmp_path)) == ["pytest"]


# --------------------------------------------------------------------------------------------
# setup.cfg and setup.py
# --------------------------------------------------------------------------------------------


def test_setup_cfg_extras_and_tests_require(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "setup.cfg": """
                [metadata]
                name = demo
                [options]
                tests_require =
                    mock
                    nose; python_version < "3"
                [options.extras_require]
                testing =
                    pytest>=6
                    demo[yaml]
                    importlib-metadata; python_version < "3.8"
                yaml = pyyaml
                docs = sphinx
            """
        },
    )
    found = detect_test_requirements(tmp_path)
    assert found.project_name == "demo"
    assert found.extras == ("testing", "yaml")
    assert names(found, declared=True) == ["mock", "pytest", "pyyaml"]
    assert by_name(found)["pytest"].origin == "setup.cfg [options.extras_require] testing"


def test_setup_py_is_read_not_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    write(
        tmp_path,
        {
            "setup.py": f"""
                from setuptools import setup
                open({str(marker)!r}, "w").close()
                base = ["pytest>=7"]
                TESTS: list = base + ["hypothesis"]
                extras = dict(test=TESTS, yaml=["pyyaml"])
                extras["computed"] = ["not-seen"]
                setup(
                    name="demo",
                    version=open("VERSION").read(),
                    tests_require=TESTS + ["mock"],
                    extras_require={{**extras}},
                )
            """
        },
    )
    found = detect_test_requirements(tmp_path)
    assert not marker.exists()
    assert found.project_name == "demo"
    assert names(found, declared=True) == ["pytest", "hypothesis", "mock"]
    assert by_name(found)["mock"].origin == "setup.py tests_require"
    assert found.extras == ()  # extras_require={**extras} is not a literal


def test_setup_py_extras_require(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "setup.py": """
                import setuptools
                setuptools.setup(
                    name="demo",
                    extras_require={
                        "tests": ["freezegun"],
                        "tests:python_version < '3.8'": ["importlib-metadata"],
                        "tests:sys_platform == 'linux'": ["pyinotify"],
                        "cli": ["click"],
                    },
                )
            """
        },
    )
    found = detect_test_requirements(tmp_path)
    assert found.extras == ("tests",)
    assert [r.requirement for r in found.requirements if r.declared] == [
        "freezegun",
        'pyinotify; sys_platform == "linux"',
    ]
    assert by_name(found)["freezegun"].origin == "setup.py extras_require tests"


def test_pkg_info_shows_extras_added_by_setup_py_code(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "PKG-INFO": """
                Metadata-Version: 2.1
                Name: demo
                Requires-Dist: six
                Provides-Extra: test
                Requires-Dist: pytest; extra == "test"
                Requires-Dist: trio; python_version >= "3.8" and extra == "test"
                Requires-Dist: typed-ast; python_version < "3.8" and extra == "test"
                Provides-Extra: docs
                Requires-Dist: sphinx; extra == "docs"
            """
        },
    )
    found = detect_test_requirements(tmp_path)
    assert found.project_name == "demo"
    assert found.extras == ("test",)
    assert [r.requirement for r in found.requirements] == ["pytest", "trio"]
    assert by_name(found)["trio"].origin == "PKG-INFO Requires-Dist extra == 'test'"


# --------------------------------------------------------------------------------------------
# tox
# --------------------------------------------------------------------------------------------


def test_tox_factor_prefixes_references_and_includes(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "tox.ini": """
                [tox]
                envlist = py{38,311}, lint
                [base]
                deps =
                    attrs
                    py27: mock
                [testenv]
                deps =
                    {[base]deps}
                    pytest  # the runner
                    py27: enum34
                    !py27: six
                    py3{9,10,11}: idna
                    py38,py311: certifi
                    py38: pytest<7
                    tf: tensorflow
                    py311-!tf: wrapt
                    -r{toxinidir}/requirements/test.txt
                    -c constraints.txt
                    --index-url https://example.org/simple
                    git+https://github.com/casperdcl/nbval
                    {posargs}
                    {env:EXTRA_DEP:}
                extras =
                    testing
                    docs: docs
                [testenv:py311]
                deps = hypothesis
                [testenv:py{39,310}-django]
                deps = django
                [testenv:lint]
                deps = flake8
                [pytest]
                addopts = --strict-markers
            """,
            "requirements/test.txt": "-r base.txt\nfreezegun\n",
            "requirements/base.txt": "-r test.txt\n-e .\npython-dateutil\n",
        },
    )
    found = detect_test_requirements(tmp_path)
    assert names(found, declared=True) == [
        "attrs",
        "pytest",
        "six",
        "idna",
        "certifi",
        "wrapt",
        "python-dateutil",
        "freezegun",
        "hypothesis",
    ]
    assert found.extras == ("testing",)
    origins = {name: r.origin for name, r in by_name(found).items()}
    assert origins["attrs"] == "tox.ini [testenv] deps"
    assert origins["python-dateutil"] == "requirements/base.txt"
    assert origins["hypothesis"] == "tox.ini [testenv:py311] deps"


def test_tox_only_the_first_configuration_counts(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "tox.ini": "[testenv]\ndeps = a\n",
            "setup.cfg": "[tox:tox]\n[testenv]\ndeps = b\n",
            "pyproject.toml": '[tool.tox]\nlegacy_tox_ini = """\n[testenv]\ndeps = c\n"""\n',
        },
    )
    assert names(detect_test_requirements(tmp_path), declared=True) == ["a"]
    (tmp_path / "tox.ini").unlink()
    assert names(detect_test_requirements(tmp_path), declared=True) == ["b"]
    (tmp_path / "setup.cfg").unlink()
    found = detect_test_requirements(tmp_path)
    assert by_name(found)["c"].origin == "pyproject.toml [tool.tox] legacy_tox_ini [testenv] deps"


def test_tox_native_toml(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "tox.toml": """
                [env_run_base]
                deps = ["pytest-timeout", {replace = "ref", of = ["env", "x", "deps"]}]
                extras = ["speed"]
                dependency_groups = ["ci"]
                [env.py311]
                deps = ["-r requirements-ci.txt"]
                [env.docs]
                deps = ["furo-extra"]
            """,
            "requirements-ci.txt": "pytest-sugar\n",
            "pyproject.toml": '[dependency-groups]\nci = ["pytest"]\n',
        },
    )
    found = detect_test_requirements(tmp_path)
    assert names(found, declared=True) == ["pytest-timeout", "pytest", "pytest-sugar"]
    assert found.extras == ("speed",)
    assert by_name(found)["pytest-timeout"].origin == "tox.toml [env_run_base] deps"


# --------------------------------------------------------------------------------------------
# requirements files
# --------------------------------------------------------------------------------------------


def test_requirements_files(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "requirements-test.txt": """
                # comment
                -r requirements.txt
                -r ../outside.txt
                --requirement=nested/more.txt
                -e .[test]
                -e ./vendored/thing
                -c constraints.txt
                --hash-free-option
                pytest-mock==3.14 --hash=sha256:abc
                requests[socks] >= 2 ; python_version >= "3.8"
                long-line \\
                    >= 1.0
                ./local/path
                name @ https://example.org/name-1.0.tar.gz
            """,
            "requirements.txt": "-r requirements-test.txt\nattrs\n",
            "nested/more.txt": "freezegun\n",
            "requirements-dev.txt": "never-read\n",
            "../outside.txt": "outside\n",
        },
    )
    found = detect_test_requirements(tmp_path)
    assert [r.requirement for r in found.requirements if r.declared] == [
        "attrs",
        "freezegun",
        "pytest-mock==3.14",
        'requests[socks]>=2; python_version >= "3.8"',
        "long-line>=1.0",
        "name @ https://example.org/name-1.0.tar.gz",
    ]
    assert found.extras == ("test",)
    assert by_name(found)["freezegun"].origin == "nested/more.txt"


def test_dev_requirements_only_without_test_requirements(tmp_path: Path) -> None:
    write(tmp_path, {"requirements-dev.txt": "tox\ncoverage\n", "requirements/dev.txt": "mock\n"})
    assert names(detect_test_requirements(tmp_path), declared=True) == ["coverage", "mock"]
    write(tmp_path, {"tests/requirements.txt": "hypothesis\n"})
    assert names(detect_test_requirements(tmp_path), declared=True) == ["hypothesis"]


# --------------------------------------------------------------------------------------------
# pytest configuration
# --------------------------------------------------------------------------------------------


def test_plugins_the_pytest_configuration_needs(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "pytest.ini": """
                [pytest]
                addopts = --cov=demo --cov-report=term -n auto --benchmark-skip -p no:cacheprovider
                          -p pytester -ppytest_randomly -p tests.plugin --doctest-glob="*.rst" --reruns 2
                timeout = 30
                faulthandler_timeout = 60
                asyncio_mode = auto
                DJANGO_SETTINGS_MODULE = demo.settings
                required_plugins = pytest-html>=4 pytest-env
            """,
            "pyproject.toml": '[tool.pytest.ini_options]\naddopts = "--mypy"\n',
            "tests/plugin.py": "",
        },
    )
    found = detect_test_requirements(tmp_path)
    assert [(r.requirement, r.origin, r.declared) for r in found.requirements] == [
        ("pytest-html>=4", "pytest config: required_plugins (pytest.ini)", True),
        ("pytest-env", "pytest config: required_plugins (pytest.ini)", True),
        ("pytest-cov", "pytest config: --cov", False),
        ("pytest-xdist", "pytest config: -n", False),
        ("pytest-benchmark", "pytest config: --benchmark-skip", False),
        ("pytest-randomly", "pytest config: -p pytest_randomly", False),
        ("pytest-rerunfailures", "pytest config: --reruns", False),
        ("pytest-timeout", "pytest config: timeout", False),
        ("pytest-asyncio", "pytest config: asyncio_mode", False),
        ("pytest-django", "pytest config: DJANGO_SETTINGS_MODULE", False),
        ("pytest", "always: the suite runs under pytest", False),
    ]


def test_tqdm_pytest_configuration_needs_asyncio_and_timeout(tmp_path: Path) -> None:
    pyproject = (FIXTURES / "tqdm" / "pyproject.toml").read_text(encoding="utf-8")
    pytest_section = pyproject[pyproject.index("[tool.pytest.ini_options]") :]
    write(tmp_path, {"pyproject.toml": pytest_section.split("\n[tool.coverage", 1)[0]})
    found = detect_test_requirements(tmp_path)
    assert {name: r.origin for name, r in by_name(found).items()} == {
        "pytest-asyncio": "pytest config: --asyncio-mode",
        "pytest-timeout": "pytest config: timeout",
        "pytest": "always: the suite runs under pytest",
    }


def test_pytest_configuration_precedence(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "pyproject.toml": '[tool.pytest.ini_options]\naddopts = ["--cov"]\n',
            "tox.ini": "[pytest]\ntimeout = 5\n",
            "setup.cfg": "[tool:pytest]\nasyncio_mode = auto\n",
        },
    )
    assert names(detect_test_requirements(tmp_path), declared=False) == ["pytest-cov", "pytest"]
    (tmp_path / "pyproject.toml").unlink()
    assert names(detect_test_requirements(tmp_path), declared=False) == ["pytest-timeout", "pytest"]
    (tmp_path / "tox.ini").unlink()
    assert names(detect_test_requirements(tmp_path), declared=False) == ["pytest-asyncio", "pytest"]


# --------------------------------------------------------------------------------------------
# Imports in tests
# --------------------------------------------------------------------------------------------


def test_imports_in_test_files(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "setup.cfg": "[metadata]\nname = demo\n[options]\ninstall_requires = requests\n",
            "src/demo/__init__.py": "",
            "src/demo/yamlio.py": "import yaml\n\ndef later():\n    import toml\n",
            "src/demo/fast.py": "import numpy\n",
            "tests/helpers.py": "import responses\n",
            "tests/unused_sample.py": "import never_imported\n",
            "tests/conftest.py": 'pytest_plugins = ["pytester", "pytest_asyncio.plugin", "tests.plugin"]\n',
            "tests/plugin.py": "",
            "tests/test_a.py": """
                from __future__ import annotations
                import os, sys
                import typing
                from typing import TYPE_CHECKING
                import pytest
                import demo
                from demo import yamlio
                from . import helpers
                import requests
                from jaraco import functools
                import zope.interface
                from dateutil import tz
                import bs4.element
                np = pytest.importorskip("numpy")

                try:
                    from unittest import mock
                except ImportError:
                    import mock

                try:
                    import ujson as json
                except ImportError:
                    import json

                try:
                    import StringIO
                except ImportError:
                    import io

                if TYPE_CHECKING:
                    import mypy_extensions
                if sys.version_info >= (3, 11):
                    import tomllib
                else:
                    import tomli as tomllib
                if sys.version_info[:2] < (3, 8) or sys.platform == "win32":
                    import importlib_metadata
                if __name__ == "__main__":
                    import unittest2

                def test_lazy():
                    import simplejson
                    with pytest.raises(ImportError):
                        import this_does_not_exist
            """,
        },
    )
    found = detect_test_requirements(tmp_path)
    assert {name: r.origin for name, r in by_name(found).items() if not r.declared} == {
        "pytest-asyncio": "pytest_plugins in tests/conftest.py",
        "pytest": "import in tests/test_a.py",
        "pyyaml": "import in src/demo/yamlio.py (imported by tests/test_a.py)",
        "jaraco-functools": "import in tests/test_a.py",
        "zope-interface": "import in tests/test_a.py",
        "python-dateutil": "import in tests/test_a.py",
        "beautifulsoup4": "import in tests/test_a.py",
        "numpy": "pytest.importorskip in tests/test_a.py",
        "ujson": "import in tests/test_a.py",
        "simplejson": "import in tests/test_a.py",
        "responses": "import in tests/helpers.py",
    }


def test_local_modules_are_not_third_party(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "pyproject.toml": '[tool.pytest.ini_options]\npythonpath = ["tools"]\n',
            "single.py": "",
            "nspkg/sub/__init__.py": "",
            "tools/helper_tool.py": "",
            "tests/legacy/test_old.py": "import test_appliance\nimport canonical\n",
            "tests/legacy/test_appliance.py": "",
            "tests/legacy/canonical.py": "",
            "tests/data/sample/__init__.py": "",
            "tests/test_b.py": "import single, nspkg.sub, helper_tool, sample, test.support\n",
            "test_root.py": "import docs_helper\n",
            "docs/deep/docs_helper.py": "",
        },
    )
    assert names(detect_test_requirements(tmp_path)) == ["docs-helper", "pytest"]


def test_plugin_fixtures_requested_by_tests(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "tests/test_speed.py": """
                def test_fast(benchmark, mocker):
                    pass

                class TestHttp:
                    def test_get(self, httpserver):
                        pass
            """,
            "tests/conftest.py": """
                import pytest

                @pytest.fixture
                def httpserver():
                    yield None
            """,
        },
    )
    found = detect_test_requirements(tmp_path)
    assert {name: r.origin for name, r in by_name(found).items()} == {
        "pytest": "import in tests/conftest.py",
        "pytest-benchmark": "fixture benchmark in tests/test_speed.py",
        "pytest-mock": "fixture mocker in tests/test_speed.py",
    }


def test_python_files_from_the_pytest_configuration(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "setup.cfg": "[tool:pytest]\npython_files = check_*.py\n",
            "check_things.py": "import attr\n",
        },
    )
    assert by_name(detect_test_requirements(tmp_path))["attrs"].origin == "import in check_things.py"


def test_large_python_files_are_data_and_not_parsed(tmp_path: Path) -> None:
    write(tmp_path, {"tests/test_data.py": "import numpy\nDATA = " + repr(list(range(200_000))) + "\n"})
    assert names(detect_test_requirements(tmp_path)) == ["pytest"]


@pytest.mark.parametrize(
    ("module", "distribution"),
    [
        ("yaml", "PyYAML"),
        ("dateutil.tz", "python-dateutil"),
        ("attr", "attrs"),
        ("bs4", "beautifulsoup4"),
        ("PIL.Image", "Pillow"),
        ("typing_extensions", "typing-extensions"),
        ("jaraco.itertools", "jaraco.itertools"),
        ("google.protobuf.message", "protobuf"),
        ("_pytest.monkeypatch", "pytest"),
        ("os.path", None),
        ("__future__", None),
        ("cPickle", None),
        ("annotationlib", None),
        ("jaraco", None),
    ],
)
def test_distribution_for_import(module: str, distribution: str | None) -> None:
    assert distribution_for_import(module) == distribution
