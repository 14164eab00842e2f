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

The modules, in the order the work runs:

* :mod:`~taskforge.repo.requirements.detect`: :func:`detect_test_requirements`, every source in order;
* :mod:`~taskforge.repo.requirements.files`: reading files (never fatal), ``setup.py`` literals;
* :mod:`~taskforge.repo.requirements.found`: the result types and the accumulator (what is kept);
* :mod:`~taskforge.repo.requirements.declared`: pyproject.toml, setup.cfg, setup.py, PKG-INFO,
  requirements files;
* :mod:`~taskforge.repo.requirements.tox`: the tox configuration;
* :mod:`~taskforge.repo.requirements.pytest_config`: the pytest configuration and its plugins;
* :mod:`~taskforge.repo.requirements.imports`: what a Python file imports, read statically;
* :mod:`~taskforge.repo.requirements.inferred`: the test suite's imports and fixtures, followed;
* :mod:`~taskforge.repo.requirements.distributions`: module name -> PyPI distribution.
"""

from taskforge.repo.requirements.detect import detect_test_requirements
from taskforge.repo.requirements.distributions import IMPORT_TO_DISTRIBUTION, distribution_for_import
from taskforge.repo.requirements.found import (
    NEVER_NEEDED_FOR_TESTS,
    TARGET_ENVIRONMENT,
    DetectedRequirement,
    TestRequirements,
)

__all__ = [
    "IMPORT_TO_DISTRIBUTION",
    "NEVER_NEEDED_FOR_TESTS",
    "TARGET_ENVIRONMENT",
    "DetectedRequirement",
    "TestRequirements",
    "detect_test_requirements",
    "distribution_for_import",
]
