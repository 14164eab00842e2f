"""taskforge's pytest plugin: makes pytest's JUnit XML report say exactly what happened.

Standalone on purpose (stdlib and pytest only, pytest >= 7): it is copied into the sandbox as
``taskforge_pytest_plugin.py`` and loaded with ``-p taskforge_pytest_plugin``, which works even
with ``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``. It adds JUnit properties that ``taskforge.junit`` reads:

- ``taskforge.nodeid`` on every testcase: the exact node id, which pytest's ``classname``/``name``
  mangle beyond exact recovery;
- ``taskforge.outcome`` ("xfailed" or "xpassed") on tests marked xfail, since pytest writes a
  non-strict XPASS as a plain pass;
- ``taskforge.nonce`` once, on the ``<testsuite>``: the value of ``$TASKFORGE_NONCE``. The variable
  is removed from the environment before any ``conftest.py`` is imported, so test code cannot read
  it and forge a report that passes the scorer's check.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

NODEID_PROPERTY = "taskforge.nodeid"
OUTCOME_PROPERTY = "taskforge.outcome"
NONCE_PROPERTY = "taskforge.nonce"
NONCE_ENV = "TASKFORGE_NONCE"

_nonce_key = pytest.StashKey[str]()


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    # Runs after -p plugins are imported and before the initial conftest.py files are.
    nonce = os.environ.pop(NONCE_ENV, None)
    if nonce is not None:
        early_config.stash[_nonce_key] = nonce


@pytest.hookimpl(trylast=True)  # after junitxml's own pytest_configure has set up its writer
def pytest_configure(config: pytest.Config) -> None:
    from _pytest.junitxml import xml_key  # the writer's stash key; private, but stable since pytest 7.0

    writer = config.stash.get(xml_key, None)
    nonce = config.stash.get(_nonce_key, None)
    if writer is not None and nonce is not None:
        writer.add_global_property(NONCE_PROPERTY, nonce)


@pytest.hookimpl(hookwrapper=True)  # old-style wrapper: works with every pytest >= 7
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    # Reports copy item.user_properties when they are made, and junitxml writes the teardown
    # report's copy (plus the call report's when a failed call is followed by a teardown error).
    if call.when == "setup":
        item.user_properties.append((NODEID_PROPERTY, item.nodeid))
    outcome = yield
    report = outcome.get_result()
    if hasattr(report, "wasxfail"):  # set by pytest's skipping plugin on xfailed and non-strict xpassed reports
        item.user_properties.append((OUTCOME_PROPERTY, "xpassed" if report.passed else "xfailed"))
