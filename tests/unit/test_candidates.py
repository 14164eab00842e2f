"""taskforge.mining.candidates: which symbols are worth a removal, from the coverage map."""

from __future__ import annotations

from pathlib import Path

from taskforge.mining.candidates import find_candidates
from taskforge.mining.config import CandidateConfig
from taskforge.repo.symbols import build_index

MODULE = '''\
def double(value):
    """Twice the value.

    >>> double(2)
    4
    """
    result = value * 2
    return result


def triple(value):
    """Three times the value."""
    result = value * 3
    return result
'''


def test_a_body_only_doctests_run_is_no_candidate(tmp_path: Path) -> None:
    """Doctests are never FAIL_TO_PASS, and an emptied body fails only what runs it, so a body
    that only its doctest runs (a held-out project's C extension ran in its Python functions'
    place in every other test) would make a task of no test. A symbol removed whole is still a
    candidate: a test module that imports it no longer imports."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "mod.py").write_text(MODULE)
    index = build_index(tmp_path, package_paths=["pkg"])
    coverage = {
        "pkg/mod.py::pkg.mod.double": {"pkg/mod.py": [7, 8]},
        "docs/usage.rst::usage.rst": {"pkg/mod.py": [7, 8]},
        "tests/test_mod.py::test_triple": {"pkg/mod.py": [13, 14]},
        "tests/test_mod.py::test_other": {},
    }
    config = CandidateConfig(strategies=("body",), max_test_fraction=1.0, min_body_lines=1)
    found = find_candidates(tmp_path, index, coverage, list(coverage), config=config, seed=0)
    assert [(c.target, c.tests) for c in found] == [("pkg.mod:triple", ("tests/test_mod.py::test_triple",))]
    whole = CandidateConfig(strategies=("symbol",), max_test_fraction=1.0, min_body_lines=1)
    assert {c.target for c in find_candidates(tmp_path, index, coverage, list(coverage), config=whole, seed=0)} == {
        "pkg.mod:double", "pkg.mod:triple"}
    # With a test function of its own, a symbol's doctests still run with its tests.
    coverage["tests/test_mod.py::test_other"] = {"pkg/mod.py": [7]}
    found = find_candidates(tmp_path, index, coverage, list(coverage), config=config, seed=0)
    assert {c.target: c.tests for c in found}["pkg.mod:double"] == (
        "docs/usage.rst::usage.rst", "pkg/mod.py::pkg.mod.double", "tests/test_mod.py::test_other")
