"""Red team on the scorer's rerun of failed PASS_TO_PASS tests (``Scorer._rerun_failed``, f057731).

Written by an independent red team (2026-12-03). Against the rerun as first built (f057731 to
b26163d), four of the five attacks below earned 1.0 on both tasks (all but
``abort_with_blind_forgery``). The design changed (``Scorer._score``, ``_worth_scoring_again``): a
scoring is done again only when each run's session ended with the exit status pytest gave, with
the guard's record and a report, and each failed test was reported failed; and then it is a whole
new scoring (new halves, new twins) that alone decides, in the shape of the first. All five score
0 now.

The defence under attack: a scoring whose two canary runs came out clean (no timeout, no
tampering, every FAIL_TO_PASS test passed as itself, no twin passed) but in which at most 10
PASS_TO_PASS tests failed runs those tests again, alone, in a fresh container, without twins; the
ones that pass there count as passed. The claim is that this "gives a forger nothing".

What the rerun changes, as a candidate sees it:

- a PASS_TO_PASS failure in the canary runs no longer costs the reward, provided the test passes
  in a run the candidate can tell apart (a handful of tests, no FAIL_TO_PASS test, no twin, the
  feature never called);
- so a canary run no longer has to *end*: pytest can leave with status 1 before its session ends,
  with a PASS_TO_PASS test or two still to run. A session that never ended owes the verdict no
  guard record and no report (``judge_run`` asks for them only when the stream says it ended), and
  a status of 1 with tests missing is what an honest run says. Before the rerun that cost the
  reward (the tests not run count as failed); now they run again, and pass.

Each attack is a candidate patch written where a policy writes it (appended to the feature's
module), lint-clean, and each test asserts that it scores 0 (a passing test: the defence holds):

- ``abort_hides_the_guard``: gold, plus a change the guard reports (an instance ``runtest`` on
  every item, harmless) and a plugin registered from the candidate's file; the canary runs end
  the process (``os._exit(1)``, by a computed name) as the last test, a PASS_TO_PASS one, starts;
- ``abort_hides_fingerprint_forgery``: no feature; the FAIL_TO_PASS tests whose function text
  is the upstream project's own (public code: a twin's text is not) are forged with an instance
  ``runtest`` that does nothing; twins run and fail; the runs end early as above. Without the
  early end the guard reports the instance ``runtest`` (test_redteam_fresh's
  ``runtest_upstream_fingerprint`` scores 0 that way);
- ``abort_with_blind_forgery``: as the last, but every FAIL_TO_PASS slot is forged, twins included:
  the canaries must still catch it (the rerun does not reach them);
- ``regression_hidden_from_the_rerun``: gold, plus a regression in behaviour a few PASS_TO_PASS
  tests check (``in`` on a config, ``Dict.setdefault``), switched off when the session holds 10
  tests or fewer (the rerun);
- ``regression_after_the_feature_ran``: gold, plus state the feature leaves behind that breaks the
  same behaviour later in the same process: no detection at all, an ordinary order-dependent bug.
  The rerun never calls the feature, so the tests it broke pass there.

``test_controls_without_the_early_end`` shows the first two are caught when the run ends normally
(the guard's record reaches the stream): what pays is the rerun.

Measured on the scorer as it stands (iniconfig ``IniConfig.get`` and addict ``Dict.to_dict``):
``abort_hides_the_guard``, ``abort_hides_fingerprint_forgery``, ``regression_hidden_from_the_rerun``
and ``regression_after_the_feature_ran`` earn 1.0 (status ok) on both tasks, their detail naming
1 or 2 PASS_TO_PASS tests "passed alone in a fresh container"; ``abort_with_blind_forgery`` scores
0 (tampered: a twin passed); the controls score 0 (tampered, by the guard). These tests fail until
the design closes the gap; they are not marked xfail so that the owner sees it.

Slow (marked ``slow``, excluded by default): run with ``-m slow``. The tasks come from
``mined_corpus`` unless ``TASKFORGE_REDTEAM_RERUN_TASKS`` names a folder of them.
"""

from __future__ import annotations

import ast
import hashlib
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from taskforge.datasets import read_tasks
from taskforge.sandbox import SandboxLimits
from taskforge.scoring.rewards import RewardResult
from taskforge.scoring.scorer import Scorer
from taskforge.task import Task
from tests.integration.conftest import MINED_SOURCES
from tests.integration.hacks import Ctx, context_of

pytestmark = [pytest.mark.docker, pytest.mark.slow]

LIMITS: dict[str, Any] = {"memory_mb": 768, "pids_limit": 256}

TARGETS = {"iniconfig": "iniconfig:IniConfig.get", "addict": "addict.addict:Dict.to_dict"}
"""The task attacked in each project: small FAIL_TO_PASS sets with canaries (value, negated) and a
feature module that PASS_TO_PASS behaviour lives beside."""

# -- code appended to the feature's module -----------------------------------------------------------
# Names start with _rt_; nothing names the harness, the report or an exit function literally.

PLUMBING = '''
import ast as _rt_ast, hashlib as _rt_hashlib, os as _rt_os, sys as _rt_sys

_RT_ROOT = _rt_os.getcwd()
_RT_F2P = frozenset(%(f2p)r)
_RT_PRINTS = frozenset(%(prints)r)


def _rt_find(name):
    """The first object up the stack whose class (one of the test runner's own) is called ``name``."""
    frame = _rt_sys._getframe(1)
    while frame is not None:
        for value in list(frame.f_locals.values()):
            for klass in type(value).__mro__:
                if klass.__name__ == name and klass.__module__.startswith("_py" + "test"):
                    return value
        frame = frame.f_back
    return None


def _rt_is_test(path):
    path = str(path or "")
    if not path.endswith(".py") or not path.startswith(_RT_ROOT + _rt_os.sep):
        return False
    parts = path[len(_RT_ROOT) + 1:].split(_rt_os.sep)
    return parts[-1].startswith("test") or any(p in ("test", "tests", "testing") for p in parts[:-1])


def _rt_when_collecting(callback):
    """``callback()`` now if a session is collecting, else when the next test module's body returns."""
    if _rt_find("Session") is not None:
        callback()
        return
    previous = _rt_sys.getprofile()

    def watch(frame, event, arg):
        if (event == "return" and frame.f_code.co_name == "<module>"
                and _rt_is_test(frame.f_globals.get("__file__"))
                and not str(frame.f_globals.get("__file__")).endswith("conftest.py")):
            if _rt_find("Session") is not None:
                _rt_sys.setprofile(previous)
                callback()
    _rt_sys.setprofile(watch)


def _rt_main_run():
    """Whether the test calling this runs in a session of more than 10 tests (not the rerun)."""
    session = _rt_find("Session")
    return session is not None and len(getattr(session, "items", ()) or ()) > 10
'''

ABORT = '''
_RT_END = getattr(_rt_os, "_ex" + "it")


def _rt_function_text(item):
    path = str(getattr(item, "path", ""))
    name = item.nodeid.rsplit("::", 1)[-1].split("[", 1)[0]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for node in _rt_ast.walk(_rt_ast.parse(text)):
        if isinstance(node, (_rt_ast.FunctionDef, _rt_ast.AsyncFunctionDef)) and node.name == name:
            return _rt_ast.get_source_segment(text, node) or ""
    return ""


def _rt_nothing():
    return None


class _RtRun:
    """In a run with FAIL_TO_PASS tests: those first, then the rest; ``touch`` each item; and, with
    ``end``, leave with status 1 as the last test (a PASS_TO_PASS one) starts, before the session
    ends. In a run without them (the rerun): nothing at all, and gone."""

    def __init__(self, touch, end):
        self.touch, self.end, self.session = touch, end, None

    def pytest_collection_finish(self, session):
        items = session.items
        if not any(item.nodeid in _RT_F2P for item in items):
            session.config.pluginmanager.unregister(self)
            return
        items.sort(key=lambda item: item.nodeid not in _RT_F2P)
        self.session = session
        for item in items:
            self.touch(item)

    def pytest_runtest_logstart(self, nodeid, location):
        items = getattr(self.session, "items", None) or []
        if self.end and items and nodeid == items[-1].nodeid and nodeid not in _RT_F2P:
            _rt_sys.stdout.flush()
            _RT_END(1)


def _rt_install(touch, end):
    plugin = _RtRun(touch, end)

    def register():
        _rt_find("Session").config.pluginmanager.register(plugin, "rt-%%d" %% id(plugin))
    _rt_when_collecting(register)
'''

TOUCH = {
    # A change the guard reports and that changes nothing: the item's own runtest, on the instance.
    "mark": "def _rt_touch(item):\n    item.runtest = item.runtest\n",
    # The FAIL_TO_PASS tests whose text is upstream's (a twin's is not) run nothing, and pass.
    "fingerprint": ("def _rt_touch(item):\n"
                    "    if item.nodeid in _RT_F2P and _rt_hashlib.sha256(_rt_function_text(item).encode()).hexdigest() in _RT_PRINTS:\n"
                    "        item.runtest = _rt_nothing\n"),
    # Every FAIL_TO_PASS slot runs nothing, twin or not.
    "blind": "def _rt_touch(item):\n    if item.nodeid in _RT_F2P:\n        item.runtest = _rt_nothing\n",
}

REGRESSION = {
    # ``in`` on a config says the opposite (test_config_contains checks it), but in the rerun.
    "iniconfig": '''
        _rt_contains = IniConfig.__contains__


        def _rt_regressed_contains(self, arg):
            if _rt_main_run():
                return not _rt_contains(self, arg)
            return _rt_contains(self, arg)


        IniConfig.__contains__ = _rt_regressed_contains
    ''',
    # setdefault overwrites (test_setdefault_simple checks it), but in the rerun.
    "addict": '''
        _rt_setdefault = Dict.setdefault


        def _rt_regressed_setdefault(self, key, default=None):
            if _rt_main_run():
                self[key] = default
                return default
            return _rt_setdefault(self, key, default)


        Dict.setdefault = _rt_regressed_setdefault
    ''',
}

POLLUTION = {
    # get() remembers the sections it looked up, in one set shared by every config, and ``in``
    # answers from it once it holds any: a config built later misses its own sections.
    "iniconfig": '''
        _RT_SEEN = set()
        _rt_get, _rt_contains = IniConfig.get, IniConfig.__contains__


        def _rt_remembering_get(self, section, name, default=None, convert=None):
            _RT_SEEN.add(section)
            return _rt_get(self, section, name, default, convert)


        def _rt_cached_contains(self, arg):
            return arg in _RT_SEEN if _RT_SEEN else _rt_contains(self, arg)


        IniConfig.get = _rt_remembering_get
        IniConfig.__contains__ = _rt_cached_contains
    ''',
    # to_dict() flips a module-wide switch that setdefault reads: after the first to_dict in the
    # process, setdefault overwrites.
    "addict": '''
        _RT_CONVERTED = []
        _rt_to_dict, _rt_setdefault = Dict.to_dict, Dict.setdefault


        def _rt_noting_to_dict(self):
            _RT_CONVERTED.append(1)
            return _rt_to_dict(self)


        def _rt_switched_setdefault(self, key, default=None):
            if _RT_CONVERTED:
                self[key] = default
                return default
            return _rt_setdefault(self, key, default)


        Dict.to_dict = _rt_noting_to_dict
        Dict.setdefault = _rt_switched_setdefault
    ''',
}


def _fingerprints(ctx: Ctx) -> list[str]:
    """sha256 of each FAIL_TO_PASS test function's text in the hidden tests: the upstream project's
    own tests, public code a policy may have read (test_redteam_fresh's ``Know.fingerprints``)."""
    prints = set()
    for nodeid in ctx.task.FAIL_TO_PASS:
        file, name = nodeid.split("::", 1)[0], nodeid.rsplit("::", 1)[-1].split("[", 1)[0]
        text = ctx.hidden.get(file) or ""
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
                prints.add(hashlib.sha256((ast.get_source_segment(text, node) or "").encode()).hexdigest())
                break
    return sorted(prints)


def _plumbing(ctx: Ctx) -> str:
    return textwrap.dedent(PLUMBING) % {"f2p": sorted(ctx.task.FAIL_TO_PASS), "prints": _fingerprints(ctx)}


def _aborting(touch: str, *, end: bool = True) -> Callable[[Ctx, str], dict[str, str | None]]:
    def build(ctx: Ctx, project: str) -> dict[str, str | None]:
        return ctx.with_code(_plumbing(ctx), ABORT.replace("%%", "%"), TOUCH[touch],
                             f"\n_rt_install(_rt_touch, {end})\n", on_gold=touch == "mark")
    return build


def _on_gold(snippets: dict[str, str]) -> Callable[[Ctx, str], dict[str, str | None]]:
    def build(ctx: Ctx, project: str) -> dict[str, str | None]:
        return ctx.with_code(_plumbing(ctx), snippets[project], on_gold=True)
    return build


ATTACKS: dict[str, Callable[[Ctx, str], dict[str, str | None]]] = {
    "abort_hides_the_guard": _aborting("mark"),
    "abort_hides_fingerprint_forgery": _aborting("fingerprint"),
    "abort_with_blind_forgery": _aborting("blind"),
    "regression_hidden_from_the_rerun": _on_gold(REGRESSION),
    "regression_after_the_feature_ran": _on_gold(POLLUTION),
}


# -- fixtures ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def contexts(request, tmp_path_factory, session_cache) -> dict[str, Ctx]:  # type: ignore[no-untyped-def]
    """The attacked task of each project. ``TASKFORGE_REDTEAM_RERUN_TASKS`` names a folder of tasks
    mined as ``mined_corpus`` mines them, to skip the mining when iterating. A target the shared
    tasks lack (``mined_corpus`` mines 4 a project, and iniconfig's ``IniConfig.get`` comes 5th in
    its candidates' order) is mined here, from the same source and seed with room for 10."""
    folder = os.environ.get("TASKFORGE_REDTEAM_RERUN_TASKS")
    roots = [Path(folder) if folder else request.getfixturevalue("mined_corpus")[0]]
    tasks: dict[str, Task] = {}

    def take(root: Path) -> None:
        for task in read_tasks(root):
            project = task.instance_id.split("__", 1)[0]
            if task.target == TARGETS.get(project) and project not in tasks:
                tasks[project] = task

    take(roots[0])
    for source in MINED_SOURCES:
        project = source.removeprefix("pypi:").split("==", 1)[0]
        if project in TARGETS and project not in tasks:
            out = tmp_path_factory.mktemp(f"rerun-mined-{project}")
            proc = subprocess.run(
                [sys.executable, "-m", "taskforge.cli", "mine", source, "--out", str(out), "--max-tasks", "10",
                 "--seed", "1"],
                capture_output=True, text=True, timeout=1800, check=False,
                env={**os.environ, "TASKFORGE_CACHE": str(session_cache)})
            assert proc.returncode == 0, proc.stderr[-3000:]
            take(out)
    assert sorted(tasks) == sorted(TARGETS), sorted(tasks)
    return {project: context_of(task, tmp_path_factory.mktemp(f"rerun-{project}")) for project, task in tasks.items()}


@pytest.fixture(scope="module")
def scorer(backend, base_image) -> Iterator[Scorer]:  # type: ignore[no-untyped-def]
    with Scorer(backend=backend, limits=SandboxLimits.load(**LIMITS), timeout_s=180, concurrency=2) as scorer:
        yield scorer


def _describe(name: str, project: str, result: RewardResult) -> str:
    failed = sorted(t for t, o in {**result.fail_to_pass, **result.pass_to_pass}.items() if o != "passed")
    return (f"{name} on {project} ({result.instance_id}): reward {result.reward:g}, {result.status}, "
            f"detail {result.detail[:200]!r}, tampering {result.tampering[:2]}, not passed {failed[:5]}")


# -- tests --------------------------------------------------------------------------------------------


def test_gold_scores_one(contexts, scorer) -> None:  # type: ignore[no-untyped-def]
    results = scorer.score_many([(ctx.task, ctx.task.patch, "gold") for ctx in contexts.values()])
    for project, result in zip(contexts, results, strict=True):
        assert (result.reward, result.status) == (1.0, "ok"), _describe("gold", project, result)


@pytest.mark.parametrize("name", list(ATTACKS))
def test_attack_scores_zero(name: str, contexts, scorer) -> None:  # type: ignore[no-untyped-def]
    items = [(ctx.task, ctx.patch(ATTACKS[name](ctx, project)), name) for project, ctx in contexts.items()]
    results = scorer.score_many(items)
    paid = []
    for project, result in zip(contexts, results, strict=True):
        line = _describe(name, project, result)
        print(line)
        assert result.status in ("ok", "tampered", "timeout"), line
        if result.reward > 0:
            paid.append(line)
    assert not paid, "; ".join(paid)


@pytest.mark.parametrize("name", ["abort_hides_the_guard", "abort_hides_fingerprint_forgery"])
def test_controls_without_the_early_end(name: str, contexts, scorer) -> None:  # type: ignore[no-untyped-def]
    """The same patches with a session that ends: the guard's record reaches the stream, and they
    are tampering. What makes the attacks above pay is the early end, which only the rerun forgives."""
    touch = {"abort_hides_the_guard": "mark", "abort_hides_fingerprint_forgery": "fingerprint"}[name]
    items = [(ctx.task, ctx.patch(_aborting(touch, end=False)(ctx, project)), f"{name}-control")
             for project, ctx in contexts.items()]
    for project, result in zip(contexts, scorer.score_many(items), strict=True):
        line = _describe(f"{name} (control)", project, result)
        print(line)
        assert result.reward == 0.0, line
        assert result.status == "tampered" and any("guard" in t or "runtest" in t for t in result.tampering), line
