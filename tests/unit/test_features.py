"""The ``feature`` strategy: features found from a real per-test coverage map, removed across files
by the libcst agent (and by the LLM agent through the same target description), the package still
importing and only the feature's tests failing; the statement it gets.

Coverage comes from running each project's own suite under coverage.py on the host, one context
per test, as the baseline does in its container.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from taskforge.difficulty import chain_depth as call_depth
from taskforge.errors import TaskforgeError
from taskforge.llm.client import LLMConfig
from taskforge.llm.scripted import Script, ScriptedChatServer
from taskforge.mining import candidates as candidates_module
from taskforge.mining.candidates import CandidateConfig, body_lines, find_candidates
from taskforge.mining.features import Feature, find_features
from taskforge.mining.removal.cst import LibcstRemovalAgent
from taskforge.mining.removal.llm_agent import LLMRemovalAgent
from taskforge.mining.statements.template import (
    StatementContext,
    TemplateStatementWriter,
    leaked_lines,
)
from taskforge.repo.sources import fetch
from taskforge.repo.symbols import SymbolIndex, build_index

COVERAGE_PLUGIN = r'''
import json, os
import coverage, pytest

_cov = coverage.Coverage(source=os.environ["TF_COV_SOURCE"].split(os.pathsep), data_file=None)


def pytest_configure(config):
    _cov.start()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _cov.switch_context(item.nodeid)
    yield
    _cov.switch_context("")


def pytest_sessionfinish(session):
    _cov.stop()
    data, root, out = _cov.get_data(), os.getcwd(), {}
    for path in data.measured_files():
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        for line, contexts in (data.contexts_by_lineno(path) or {}).items():
            for context in contexts:
                if context:
                    out.setdefault(context, {}).setdefault(rel, []).append(line)
    with open(os.environ["TF_COV_OUT"], "w") as f:
        json.dump(out, f)
'''


def per_test_coverage(repo: Path, *, sources: list[str], tests: str, pythonpath: str, scratch: Path) -> dict[str, Any]:
    """Node id -> file -> executed lines, from one run of the project's suite (passing tests only)."""
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / "tf_cov_plugin.py").write_text(COVERAGE_PLUGIN)
    out = scratch / "coverage.json"
    report = scratch / "report.json"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tf_cov_plugin", "-p", "no:cacheprovider", "-o", "addopts=",
         "-W", "ignore", "-rA", tests],
        cwd=repo, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(repo / pythonpath), str(scratch)]),
             "PYTHONDONTWRITEBYTECODE": "1", "TF_COV_SOURCE": os.pathsep.join(str(repo / s) for s in sources),
             "TF_COV_OUT": str(out)},
    )
    assert out.exists(), result.stdout[-2000:] + result.stderr[-2000:]
    coverage = json.loads(out.read_text())
    passed = {line.split(" ", 1)[1] for line in result.stdout.splitlines() if line.startswith("PASSED ")}
    report.write_text(json.dumps(sorted(passed)))
    return {t: files for t, files in coverage.items() if t in passed}


def run_suite(repo: Path, tests: str, pythonpath: str) -> dict[str, str]:
    """Node id -> PASSED/FAILED/ERROR from one run (collection errors under the file's name)."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "-W", "ignore", "-rA",
         "--continue-on-collection-errors", tests],
        cwd=repo, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(repo / pythonpath), "PYTHONDONTWRITEBYTECODE": "1"},
    )
    outcomes = {}
    for line in result.stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED", "ERROR"):
            outcomes[rest.split(" - ")[0].strip()] = word
    return outcomes


def apply(repo: Path, files: dict[str, str | None]) -> None:
    for rel, text in files.items():
        if text is None:
            (repo / rel).unlink()
        else:
            (repo / rel).write_text(text)


def imports_cleanly(repo: Path, modules: list[str], pythonpath: str) -> str:
    code = "import importlib, sys\nfor m in sys.argv[1:]: importlib.import_module(m)"
    result = subprocess.run([sys.executable, "-B", "-c", code, *modules], cwd=repo, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(repo / pythonpath)}, timeout=120)
    return result.stderr[-1500:] if result.returncode else ""


# --- a small package with a feature spread over four files ---------------------------------------

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "projects" / "fmt"
"""A package whose YAML support is one feature over four files (its pyproject.toml says how)."""


@pytest.fixture
def fmt(tmp_path: Path) -> tuple[Path, SymbolIndex, dict[str, Any]]:
    repo = tmp_path / "fmt"
    shutil.copytree(FIXTURE, repo)
    coverage = per_test_coverage(repo, sources=["pkg"], tests="tests", pythonpath=".", scratch=tmp_path / "cov")
    assert len(coverage) == 5
    return repo, build_index(repo, package_paths=["pkg"]), coverage


def features_of(repo: Path, index: SymbolIndex, coverage: dict[str, Any], **kwargs: Any) -> list[Feature]:
    passing = sorted(coverage)
    exercised = candidates_module.tests_by_symbol(body_lines(repo, index), index, coverage, passing)
    return find_features(index, exercised, passing, max_tests=len(passing), **kwargs)


def test_a_feature_spread_over_files_is_found_and_removed_whole(fmt: tuple[Path, SymbolIndex, dict[str, Any]]) -> None:
    repo, index, coverage = fmt
    features = features_of(repo, index, coverage)
    yaml = next(f for f in features if "pkg.yaml_out:to_yaml" in f.members)
    # What only the YAML tests reach, with the constant only it reads; not dump, which JSON needs too.
    assert set(yaml.members) == {"pkg.yaml_out:INDENT", "pkg.yaml_out:_scalar", "pkg.yaml_out:to_yaml",
                                 "pkg.yaml_out:_lines", "pkg.yaml_in:read_yaml", "pkg.yaml_in:_value"}
    assert yaml.anchor == "pkg.yaml_out:to_yaml" and yaml.symbols == 5
    assert yaml.tests == {"tests/test_yaml.py::test_to_yaml_nested", "tests/test_yaml.py::test_dump_yaml",
                          "tests/test_yaml.py::test_round_trip"}
    assert yaml.files == ("pkg/__init__.py", "pkg/core.py", "pkg/yaml_in.py", "pkg/yaml_out.py")
    assert yaml.depth == 3  # to_yaml -> _lines -> _scalar
    assert not any("pkg.core:dump" in f.members for f in features)

    removal = LibcstRemovalAgent().remove(repo, index, target=yaml.anchor, strategy="feature", members=yaml.members)
    assert removal.strategy == "feature" and removal.removed[0] == "pkg.yaml_out:to_yaml"
    # Both modules are left with nothing: deleted whole, with every import of them.
    assert removal.files["pkg/yaml_out.py"] is None and removal.files["pkg/yaml_in.py"] is None
    assert {"pkg.yaml_out", "pkg.yaml_in"} <= set(removal.removed)
    core = removal.files["pkg/core.py"]
    assert core is not None and "yaml" not in core and '"json": to_json,\n}' in core  # the dispatch entry went
    init = removal.files["pkg/__init__.py"]
    assert init == '"""Serialise records."""\nfrom .core import dump, to_json\n\n__all__ = ["dump", "to_json"]\n'
    assert set(removal.removed_code) == set(yaml.members)
    assert removal.removed_code["pkg.yaml_out:INDENT"] == 'INDENT = "  "\n'
    assert removal.removed_code["pkg.yaml_in:_value"].startswith("def _value(text):")

    apply(repo, removal.files)
    assert imports_cleanly(repo, ["pkg", "pkg.core"], ".") == ""
    outcomes = run_suite(repo, "tests", ".")
    assert outcomes["tests/test_json.py::test_to_json"] == outcomes["tests/test_json.py::test_dump_json"] == "PASSED"
    assert outcomes.get("tests/test_yaml.py") == "ERROR"  # the test module no longer imports: hidden whole


def test_a_feature_the_rest_still_needs_is_cut_down_or_refused(fmt: tuple[Path, SymbolIndex, dict[str, Any]]) -> None:
    repo, index, coverage = fmt
    agent = LibcstRemovalAgent()
    # _scalar is used by _lines, which stays: the rest of the package needs it.
    with pytest.raises(TaskforgeError, match="still used by") as info:
        agent.remove(repo, index, target="pkg.yaml_out:_scalar", strategy="feature", members=["pkg.yaml_out:_scalar"])
    assert info.value.reason == "removal_not_applicable"
    # dump reads HANDLERS at call time; HANDLERS itself is read by dump: not a registration of it.
    with pytest.raises(TaskforgeError, match="still used by"):
        agent.remove(repo, index, target="pkg.core:to_json", strategy="feature",
                     members=["pkg.core:to_json", "pkg.core:HANDLERS"])
    with pytest.raises(TaskforgeError, match="not among the feature's members"):
        agent.remove(repo, index, target="pkg.core:dump", strategy="feature", members=["pkg.core:to_json"])
    with pytest.raises(TaskforgeError, match="neither a symbol nor a module-level variable"):
        agent.remove(repo, index, target="pkg.core:dump", strategy="feature", members=["pkg.core:dump", "pkg.core:nope"])


def test_feature_candidates_rank_wider_features_first(fmt: tuple[Path, SymbolIndex, dict[str, Any]]) -> None:
    repo, index, coverage = fmt
    config = CandidateConfig(strategies=("feature",), max_test_fraction=1.0)
    candidates = find_candidates(repo, index, coverage, sorted(coverage), config=config, seed=0)
    assert candidates and all(c.strategy == "feature" for c in candidates)
    first = candidates[0]
    assert first.target == "pkg.yaml_out:to_yaml" and first.files == 4 and len(first.members) == 6
    assert first.score == max(c.score for c in candidates)
    again = find_candidates(repo, index, coverage, sorted(coverage), config=config, seed=0)
    assert again == candidates  # deterministic


def test_the_statement_describes_the_feature_without_its_code(fmt: tuple[Path, SymbolIndex, dict[str, Any]]) -> None:
    repo, index, coverage = fmt
    yaml = next(f for f in features_of(repo, index, coverage) if "pkg.yaml_out:to_yaml" in f.members)
    removal = LibcstRemovalAgent().remove(repo, index, target=yaml.anchor, strategy="feature", members=yaml.members)
    from taskforge.mining.statements.template import removed_symbols

    context = StatementContext(
        repo="fmt", strategy="feature", target=yaml.anchor, module_path="pkg/yaml_out.py",
        symbols=removed_symbols([index.symbols[q] for q in removal.removed if q in index.symbols], removal.removed),
        hidden_tests=tuple(sorted(yaml.tests)), removed_code=removal.removed_code,
        files=("pkg/__init__.py", "pkg/core.py", "pkg/yaml_in.py", "pkg/yaml_out.py"),
        remaining={"pkg/core.py": ("to_json", "dump"), "pkg/__init__.py": ()},
    )
    statement = TemplateStatementWriter().write(context)
    assert "A feature of this package is missing: `pkg.yaml_out.to_yaml`" in statement
    assert "`pkg/yaml_in.py`" in statement and "`pkg/core.py` still has `to_json`, `dump`." in statement
    assert "def to_yaml(record)" in statement and "def read_yaml(text)" in statement
    assert "def _scalar" not in statement  # private helpers are the solver's business
    assert "- round trip" in statement and "- dump yaml" in statement
    assert leaked_lines(statement, removal.removed_code) == []


def test_the_audit_knows_every_strategy() -> None:
    from taskforge.mining.audit.fingerprint import STRATEGIES as AUDITED
    from taskforge.mining.removal.edits import STRATEGIES

    assert AUDITED == STRATEGIES


def test_call_depth_counts_the_longest_chain_once_per_cycle() -> None:
    uses = {"a": ["b"], "b": ["c", "a"], "c": [], "d": ["d"], "e": ["a", "f"], "f": []}
    assert call_depth(["a", "b", "c", "d"], uses) == 2  # {a, b} is one link, then c
    assert call_depth(["a", "b", "c", "d", "e"], uses) == 3
    assert call_depth(["c", "e", "f"], uses) == 2  # what is not a member is not followed
    assert call_depth(["d"], uses) == 1
    assert call_depth([], uses) == 0


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def test_the_llm_agent_gets_the_same_target_and_is_held_to_it(fmt: tuple[Path, SymbolIndex, dict[str, Any]]) -> None:
    repo, index, coverage = fmt
    members = ["pkg.yaml_in:read_yaml", "pkg.yaml_in:_value"]
    turns = [
        call("finish", summary="too early"),
        call("delete_file", path="pkg/yaml_in.py"),
        call("edit", path="pkg/__init__.py", old_str="from .yaml_in import read_yaml\n", new_str=""),
        call("edit", path="pkg/__init__.py", old_str=', "read_yaml"]', new_str="]"),
        call("finish", summary="deleted"),
    ]
    script = Script.from_json({"conversations": [{"name": "t", "turns": turns}]})
    with ScriptedChatServer(script) as server:
        agent = LLMRemovalAgent(llm=LLMConfig(base_url=server.base_url, model="scripted", backoff_s=0.01))
        removal = agent.remove(repo, index, target="pkg.yaml_in:read_yaml", strategy="feature", members=members)
    prompt = server.requests[0]["messages"][1]["content"]
    assert prompt.startswith("Remove `pkg.yaml_in:read_yaml` (strategy: feature).")
    assert "- the function `read_yaml` in `pkg/yaml_in.py` (lines 4-10)" in prompt
    assert "- the function `_value` in `pkg/yaml_in.py`" in prompt
    assert "delete_file" in [t["function"]["name"] for t in server.requests[0]["tools"]]
    refused = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "tool"][0]
    assert refused.startswith("cannot finish yet:\n- nothing was changed")
    reference = LibcstRemovalAgent().remove(repo, index, target="pkg.yaml_in:read_yaml", strategy="feature",
                                            members=members)
    assert removal.files == reference.files
    assert set(removal.removed) == {"pkg.yaml_in:read_yaml", "pkg.yaml_in:_value"}


# --- a real package ------------------------------------------------------------------------------


def test_features_of_a_real_package_break_only_their_tests(session_cache: Path, tmp_path: Path) -> None:
    snapshot = fetch("pypi:cachetools==8.0.2", cache_dir=session_cache / "sources")
    repo = tmp_path / "cachetools"
    shutil.copytree(snapshot.path, repo, ignore=shutil.ignore_patterns(".git"))
    coverage = per_test_coverage(repo, sources=["src/cachetools"], tests="tests", pythonpath="src", scratch=tmp_path / "c")
    index = build_index(repo, package_paths=["src/cachetools"])
    passing = sorted(coverage)
    config = CandidateConfig(strategies=("feature",))
    candidates = find_candidates(repo, index, coverage, passing, config=config, seed=0)
    assert len(candidates) >= 5
    multi = [c for c in candidates if c.files >= 2 and len(c.members) >= 3]
    assert multi, [(c.target, c.files, len(c.members)) for c in candidates]
    agent = LibcstRemovalAgent()
    checked = 0
    for candidate in multi[:3]:
        try:
            removal = agent.remove(repo, index, target=candidate.target, strategy="feature", members=candidate.members)
        except TaskforgeError as err:
            assert err.reason == "removal_not_applicable"
            continue
        work = tmp_path / f"work{checked}"
        shutil.copytree(repo, work)
        apply(work, removal.files)
        assert imports_cleanly(work, ["cachetools", "cachetools.keys"], "src") == ""
        outcomes = run_suite(work, "tests", "src")
        broken = {t for t, o in outcomes.items() if o != "PASSED"}
        # Only the feature's tests fail, or whole test modules that import a removed name.
        assert broken, candidate.target
        for test in broken:
            assert test in candidate.tests or "::" not in test, (candidate.target, test)
        still = {t for t, o in outcomes.items() if o == "PASSED"}
        erroring_files = {t for t in broken if "::" not in t}
        assert {t for t in passing if t not in candidate.tests and t.split("::")[0] not in erroring_files} <= still
        checked += 1
    assert checked >= 2


def test_functions_attached_to_a_class_at_module_level_are_registrations(tmp_path: Path) -> None:
    """munch's pattern: optional-dependency support defined at module level, inside ``try``, and
    attached to the class (``Munch.toJSON = toJSON``, ``classmethod(fromJSON)``). The attachments
    go with the functions; the emptied ``try`` keeps a ``pass``; the rest still works."""
    repo = tmp_path / "bag"
    (repo / "bag").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "bag" / "__init__.py").write_text(
        'import json\n\n\nclass Bag(dict):\n    def keys_sorted(self):\n        return sorted(self)\n\n\n'
        'try:\n    import json as _json\n\n    def toJSON(self):\n        return _json.dumps(self, sort_keys=True)\n\n'
        '    def fromJSON(cls, text):\n        return cls(_json.loads(text))\n\n'
        '    Bag.toJSON = toJSON\n    Bag.fromJSON = classmethod(fromJSON)\nexcept ImportError:\n    pass\n')
    (repo / "tests" / "test_bag.py").write_text(
        'from bag import Bag\n\n\ndef test_keys():\n    assert Bag(b=1, a=2).keys_sorted() == ["a", "b"]\n\n\n'
        'def test_json():\n    assert Bag(a=1).toJSON() == \'{"a": 1}\'\n    assert Bag.fromJSON(\'{"a": 1}\') == {"a": 1}\n')
    index = build_index(repo, package_paths=["bag"])
    removal = LibcstRemovalAgent().remove(repo, index, target="bag:toJSON", strategy="feature",
                                          members=["bag:toJSON", "bag:fromJSON"])
    text = removal.files["bag/__init__.py"]
    assert text is not None and "toJSON" not in text and "fromJSON" not in text and "classmethod" not in text
    assert "try:\n    import json as _json\nexcept ImportError:" in text
    apply(repo, removal.files)
    assert imports_cleanly(repo, ["bag"], ".") == ""
    outcomes = run_suite(repo, "tests", ".")
    assert outcomes == {"tests/test_bag.py::test_keys": "PASSED", "tests/test_bag.py::test_json": "FAILED"}
    # Attached to what the module does not define (a library's class), it is no registration.
    other = tmp_path / "other"
    (other / "bag").mkdir(parents=True)
    (other / "bag" / "__init__.py").write_text(
        "import json\n\n\ndef default(self, o):\n    return str(o)\n\n\njson.JSONEncoder.default = default\n")
    with pytest.raises(TaskforgeError, match="module-level code of bag still uses default"):
        LibcstRemovalAgent().remove(other, build_index(other, package_paths=["bag"]), target="bag:default",
                                    strategy="feature", members=["bag:default"])
