"""`taskforge test` in the sandbox agrees with a plain host pytest run of the same sdist.

Both runs use the same snapshot, the same resolved wheels and the same pytest command; only the
isolation differs. Agreement is the share of test ids (union of both runs) with equal outcomes.
"""

from __future__ import annotations

import pytest

from taskforge.repo.environment import build_environment
from taskforge.repo.sources import fetch
from taskforge.repo.suite import check_run, compare_runs, run_suite, run_suite_on_host
from taskforge.sandbox.base_image import BaseImage
from tests.corpus import corpus

pytestmark = pytest.mark.docker

# A small suite that needs little more than pytest: this runs in CI.
CI_PROJECTS = ["iniconfig"]
# The rest of the acceptance set (8+ projects in all): `pytest -m slow`.
MORE_PROJECTS = ["addict", "inflection", "six", "ordered-set", "termcolor", "uritemplate", "pyhumps", "toolz",
                 "cachetools", "funcy", "glom"]

MIN_AGREEMENT = 0.99


def _check_agreement(name: str, backend, base_image: BaseImage) -> None:  # type: ignore[no-untyped-def]
    project = corpus()[name]
    snapshot = fetch(project.source)
    env = build_environment(snapshot, backend=backend, base=base_image)
    sandboxed = run_suite(snapshot, env, backend=backend)
    check_run(sandboxed)
    host = run_suite_on_host(snapshot, env)
    agreement = compare_runs(sandboxed.runs[0], host)
    assert agreement.rate >= MIN_AGREEMENT, agreement.differences
    passed = sum(1 for o in sandboxed.outcomes.values() if o == "passed")
    # The corpus records what a careful person got by hand; dependency detection must get close.
    assert passed >= 0.95 * project.pass_count, (passed, project.pass_count, env.dropped)


@pytest.mark.parametrize("name", CI_PROJECTS)
def test_sandbox_agrees_with_host(name: str, backend, base_image, session_cache) -> None:  # type: ignore[no-untyped-def]
    _check_agreement(name, backend, base_image)


@pytest.mark.slow
@pytest.mark.parametrize("name", MORE_PROJECTS)
def test_sandbox_agrees_with_host_more(name: str, backend, base_image, session_cache) -> None:  # type: ignore[no-untyped-def]
    _check_agreement(name, backend, base_image)
