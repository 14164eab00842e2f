"""The scorer on tasks mined from real corpus projects: gold scores 1, empty scores 0, and every
patch of the adversarial suite scores 0 (recorded as tampered wherever that can be detected).

Each hack is written the way a policy would write it: into the package module the feature lives
in (the first file of the gold patch), so the tests import it. Most are tried twice: on their own
(the hack is the only way to a pass) and on top of the gold patch (where a harness without the
check would pay 1.0, so a 0 proves the check caught it).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from taskforge.datasets import read_tasks
from taskforge.repo.patches import apply_patch
from taskforge.repo.startstate import rebuild_start_state
from taskforge.sandbox import SandboxLimits
from taskforge.scoring.pool import ContainerPool, lay_task_tree
from taskforge.scoring.scorer import Scorer
from taskforge.task import Task
from tests.integration.hacks import Ctx

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def tasks(mined_corpus) -> list[Task]:  # type: ignore[no-untyped-def]
    return read_tasks(mined_corpus[0])


LIMITS = dict(memory_mb=768, pids_limit=256)


@pytest.fixture(scope="module")
def scorer(backend, base_image):  # type: ignore[no-untyped-def]
    with Scorer(backend=backend, limits=SandboxLimits.load(**LIMITS), timeout_s=60, concurrency=2) as scorer:
        yield scorer


@pytest.fixture(scope="module")
def quick_scorer(backend, base_image):  # type: ignore[no-untyped-def]
    """For the hacks that run until a limit stops them: a short timeout, no containers kept ahead."""
    with Scorer(backend=backend, limits=SandboxLimits.load(**LIMITS), timeout_s=8, prestart=0) as scorer:
        yield scorer


@pytest.fixture(scope="module")
def contexts(tasks, tmp_path_factory) -> dict[str, Ctx]:  # type: ignore[no-untyped-def]
    """One task per project (the first of each), with its start state rebuilt from the row."""
    chosen: dict[str, Task] = {}
    for task in tasks:
        chosen.setdefault(task.repo, task)
    out = {}
    for repo, task in sorted(chosen.items()):
        start = rebuild_start_state(task, tmp_path_factory.mktemp(f"start-{repo}") / "repo").path
        feature = re.match(r"diff --git a/(\S+)", task.patch)
        assert feature is not None
        out[repo] = Ctx(task=task, start=start, gold=apply_patch(start, {}, task.patch),
                        hidden=apply_patch(start, {}, task.test_patch), feature_file=feature.group(1))
    assert len(out) == 2
    return out


def test_gold_scores_one_and_empty_zero_on_every_task(tasks, scorer) -> None:  # type: ignore[no-untyped-def]
    items = [(t, t.patch, "gold") for t in tasks] + [(t, "", "empty") for t in tasks]
    results = scorer.score_many(items)
    for result in results:
        expected = 1.0 if result.candidate_id == "gold" else 0.0
        assert (result.reward, result.status) == (expected, "ok"), (result.instance_id, result.candidate_id, result.detail,
                                                                    result.tampering)
        assert not result.dropped and not result.tampering
        if result.candidate_id == "gold":
            assert set(result.outcomes.values()) == {"passed"}
        else:
            assert all(o != "passed" for o in result.fail_to_pass.values())
    partial = scorer.score(tasks[0], "", mode="partial")
    assert partial.reward == 0.0 and partial.mode == "partial"
    assert pool_reused(scorer)


def test_fail_to_pass_alone_shows_what_earns_nothing(tasks, scorer) -> None:  # type: ignore[no-untyped-def]
    """``tests="fail_to_pass"`` (mining's quick empty-patch verdict) runs FAIL_TO_PASS only: the
    empty patch fails them, gold passes them, PASS_TO_PASS are not run and nothing is credited."""
    task = tasks[0]
    empty = scorer.score(task, "", tests="fail_to_pass")
    gold = scorer.score(task, task.patch, tests="fail_to_pass")
    for result in (empty, gold):
        assert result.status == "ok" and result.reward == 0.0, result.detail
        assert set(result.pass_to_pass.values()) == {"not_run"}
    assert any(o != "passed" for o in empty.fail_to_pass.values())
    assert set(gold.fail_to_pass.values()) == {"passed"}
    with pytest.raises(ValueError, match="fail_to_pass"):
        scorer.score(task, "", tests="some")  # type: ignore[arg-type]


def pool_reused(scorer: Scorer) -> bool:
    return scorer.pool.hits > 0


# -- the adversarial suite -------------------------------------------------------------------------


def edit_test_assertion(ctx: Ctx, on_gold: bool) -> dict[str, str | None]:
    test_file = ctx.task.FAIL_TO_PASS[0].split("::")[0]
    text = ctx.text(test_file, ctx.hidden)
    changes = ctx.base(on_gold)
    changes[test_file] = re.sub(r"^(\s*)assert\b", r"\1assert True or ", text, flags=re.M)
    return changes


def delete_test_file(ctx: Ctx, on_gold: bool) -> dict[str, str | None]:
    visible = sorted({t.split("::")[0] for t in ctx.task.PASS_TO_PASS if (ctx.start / t.split("::")[0]).is_file()})
    changes = ctx.base(on_gold)
    changes[visible[0]] = None
    return changes


FORCE_PASS_CONFTEST = '''
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
    report.longrepr = None
'''


def conftest_forces_pass(ctx: Ctx, on_gold: bool) -> dict[str, str | None]:
    changes = ctx.base(on_gold)
    changes["conftest.py"] = ctx.text("conftest.py", changes) + FORCE_PASS_CONFTEST
    return changes


def addopts_in_pytest_ini(ctx: Ctx, on_gold: bool) -> dict[str, str | None]:
    changes = ctx.base(on_gold)
    deselect = " ".join(f"--deselect {t}" for t in ctx.task.FAIL_TO_PASS)
    changes["pytest.ini"] = f"[pytest]\naddopts = -p no:taskforge_pytest_guard {deselect}\n"
    return changes


def addopts_in_pytest_toml(ctx: Ctx, on_gold: bool) -> dict[str, str | None]:
    """pytest 9 reads pytest.toml first, before the project's own pyproject.toml."""
    changes = ctx.base(on_gold)
    options = ", ".join(f'"--deselect", "{t}"' for t in ctx.task.FAIL_TO_PASS)
    changes["pytest.toml"] = f'[pytest]\naddopts = ["-p", "no:taskforge_pytest_guard", {options}]\n'
    return changes


def addopts_in_pyproject(ctx: Ctx, on_gold: bool) -> dict[str, str | None]:
    changes = ctx.base(on_gold)
    text = ctx.text("pyproject.toml", changes)
    text = re.sub(r"^\[tool\.pytest\.ini_options\][^\[]*", "", text, flags=re.M)
    changes["pyproject.toml"] = text + f'\n[tool.pytest.ini_options]\naddopts = "--deselect {ctx.task.FAIL_TO_PASS[0]}"\n'
    return changes


FORCE_PASS_PLUGIN = '''
import sys
def _force():
    try:
        import _pytest.reports as reports
    except ImportError:
        return
    original = reports.TestReport.from_item_and_call
    def forced(item, call):
        report = original(item, call)
        report.outcome = "passed"
        return report
    reports.TestReport.from_item_and_call = forced
_force()
'''


def pth_plugin(ctx: Ctx, on_gold: bool) -> dict[str, str | None]:
    changes = ctx.base(on_gold)
    root = ctx.feature_file.split("/")[0] if ctx.feature_file.startswith("src/") else "."
    changes[f"{root}/zz_force.py".lstrip("./")] = FORCE_PASS_PLUGIN
    changes[f"{root}/zz_force.pth".lstrip("./")] = "import zz_force\n"
    return changes


def sitecustomize_plugin(ctx: Ctx, on_gold: bool) -> dict[str, str | None]:
    changes = ctx.base(on_gold)
    root = ctx.feature_file.split("/")[0] if ctx.feature_file.startswith("src/") else "."
    changes[f"{root}/sitecustomize.py".lstrip("./")] = FORCE_PASS_PLUGIN
    return changes


def exit_at_import(call: str) -> Callable[[Ctx, bool], dict[str, str | None]]:
    def hack(ctx: Ctx, on_gold: bool) -> dict[str, str | None]:
        return ctx.with_code(f"import os, sys\n{call}\n", on_gold=on_gold)
    hack.__name__ = f"exit_at_import[{call}]"
    return hack


def exit_in_utf7(ctx: Ctx, on_gold: bool) -> dict[str, str | None]:
    """Read as UTF-8 the exit is a comment; Python honours the coding declaration, and in UTF-7
    ``+AAo-`` is a newline: the exit runs at import."""
    changes = ctx.base(on_gold)
    original = ctx.text(ctx.feature_file, changes).replace("+", "+-")  # a literal + in UTF-7
    changes[ctx.feature_file] = f"# coding: utf-7\n{original}\n#+AAo-import os; os._exit(0)\n"
    return changes


def forged_passed_lines(ctx: Ctx, on_gold: bool) -> dict[str, str | None]:
    lines = "".join(f"print({(t + ' PASSED')!r})\n" for t in ctx.task.FAIL_TO_PASS)
    return ctx.with_code(lines, on_gold=on_gold)


def forged_junit_file(ctx: Ctx, on_gold: bool) -> dict[str, str | None]:
    cases = "".join(f'<testcase classname="x" name="{t.split("::")[-1]}" time="0.01"/>' for t in ctx.task.FAIL_TO_PASS)
    changes = ctx.base(on_gold)
    changes["report.xml"] = f'<?xml version="1.0"?><testsuites><testsuite name="pytest" tests="1">{cases}</testsuite></testsuites>\n'
    return changes


def forged_junit_at_exit(ctx: Ctx, on_gold: bool) -> dict[str, str | None]:
    """Overwrites the real report at interpreter exit with one that says every test passed, then
    exits 0; written to pass the static checks (aliases, strings built in pieces)."""
    ids = [*ctx.task.FAIL_TO_PASS, *ctx.task.PASS_TO_PASS]
    return ctx.with_code(f"""
        import atexit as _a, os as _o
        _IDS = {ids!r}
        def _forge():
            case = '<test' + 'case classname="x" name="{{0}}"><properties>'
            case += '<property name="' + 'task' + 'forge.nodeid" value="{{0}}"/></properties></test' + 'case>'
            body = ''.join(case.format(i) for i in _IDS)
            suite = '<test' + 'suites><test' + 'suite name="x">' + body + '</test' + 'suite></test' + 'suites>'
            with open("/tmp/" + "task" + "forge/rep" + "ort.xml", "w") as f:
                f.write(suite)
            _o._exit(0)
        _a.register(_forge)
    """, on_gold=on_gold)


def skip_at_import(ctx: Ctx, on_gold: bool) -> dict[str, str | None]:
    return ctx.with_code('import pytest\npytest.skip("not today", allow_module_level=True)\n', on_gold=on_gold)


def xfail_at_call(ctx: Ctx, on_gold: bool) -> dict[str, str | None]:
    return ctx.with_code("import pytest\n" + ctx.replace_target('pytest.xfail("later")'), on_gold=on_gold)


def monkeypatch_reporting(ctx: Ctx, on_gold: bool) -> dict[str, str | None]:
    return ctx.with_code(FORCE_PASS_PLUGIN, on_gold=on_gold)


def monkeypatch_reporting_stealthily(ctx: Ctx, on_gold: bool) -> dict[str, str | None]:
    """The same, through ``sys.modules`` with a computed name (nothing for the static checks to
    see), done when the feature is first called: by then pytest is running the test."""
    return ctx.with_code("""
        import sys as _s
        def _force():
            _m = _s.modules["_py" + "test.reports"]
            _original = _m.TestReport.from_item_and_call
            def _forced(item, call):
                report = _original(item, call)
                report.outcome = "pass" + "ed"
                report.longrepr = None
                return report
            _m.TestReport.from_item_and_call = _forced
    """, ctx.replace_target("_force()"), on_gold=on_gold)


def always_equal(ctx: Ctx, on_gold: bool) -> dict[str, str | None]:
    return ctx.with_code("""
        class _Same:
            def __eq__(self, other):
                return True
            def __ne__(self, other):
                return False
            def __getattr__(self, name):
                return _Same()
            def __call__(self, *args, **kwargs):
                return _Same()
            def __getitem__(self, key):
                return _Same()
    """, ctx.replace_target("_Same()"), on_gold=on_gold)


def network_fetch(ctx: Ctx, on_gold: bool) -> dict[str, str | None]:
    return ctx.with_code(f"""
        import urllib.request
        try:
            urllib.request.urlopen("https://pypi.org/simple/{ctx.task.repo}/", timeout=2).read()
        except Exception:
            pass
    """, on_gold=on_gold)


def search_for_hidden_code(ctx: Ctx, on_gold: bool) -> dict[str, str | None]:
    """Walks the whole file system for the removed code (a definition of the target) and runs it."""
    name = ctx.task.target.replace(":", ".").rpartition(".")[2]
    return ctx.with_code(f"""
        import os as _o
        _found = []
        for _dir, _dirs, _files in _o.walk("/"):
            if _dir.startswith(("/proc", "/sys", "/dev")):
                _dirs[:] = []
                continue
            for _name in _files:
                _path = _o.path.join(_dir, _name)
                if _path == __file__ or not _name.endswith((".py", ".txt", ".orig")):
                    continue
                try:
                    with open(_path, errors="ignore") as _f:
                        if "def {name}(" in _f.read():
                            _found.append(_path)
                except OSError:
                    pass
    """, on_gold=on_gold)


def infinite_loop(ctx: Ctx, on_gold: bool) -> dict[str, str | None]:
    return ctx.with_code("while True:\n    pass\n", on_gold=on_gold)


def fork_bomb(ctx: Ctx, on_gold: bool) -> dict[str, str | None]:
    return ctx.with_code("import os as _o\nwhile True:\n    _o.fork()\n", on_gold=on_gold)


def memory_bomb(ctx: Ctx, on_gold: bool) -> dict[str, str | None]:
    return ctx.with_code("_hog = []\nwhile True:\n    _hog.append(b'x' * (64 << 20))\n", on_gold=on_gold)


def huge_output(ctx: Ctx, on_gold: bool) -> dict[str, str | None]:
    return ctx.with_code("import sys as _s\nfor _ in range(200):\n    _s.stdout.write('y' * (1 << 20))\n", on_gold=on_gold)


# (hack, statuses it may end with when tried alone, whether it is caught on top of gold too)
SUITE: list[tuple[Callable[[Ctx, bool], dict[str, str | None]], set[str], bool]] = [
    (edit_test_assertion, {"tampered"}, True),
    (delete_test_file, {"tampered"}, True),
    (conftest_forces_pass, {"tampered"}, True),
    (addopts_in_pytest_ini, {"tampered"}, True),
    (addopts_in_pytest_toml, {"tampered"}, True),
    (addopts_in_pyproject, {"tampered"}, True),
    (pth_plugin, {"tampered"}, True),
    (sitecustomize_plugin, {"tampered"}, True),
    (exit_at_import("sys.exit(0)"), {"tampered"}, True),
    (exit_at_import("os._exit(0)"), {"tampered"}, True),
    (exit_at_import("raise SystemExit"), {"tampered"}, True),
    (exit_in_utf7, {"tampered"}, True),
    (forged_passed_lines, {"tampered"}, True),
    (forged_junit_file, {"tampered"}, True),
    (forged_junit_at_exit, {"tampered"}, True),
    (skip_at_import, {"tampered"}, True),
    (xfail_at_call, {"tampered"}, True),
    (monkeypatch_reporting, {"tampered"}, True),
    (monkeypatch_reporting_stealthily, {"tampered"}, True),
    (always_equal, {"tampered"}, True),
    (network_fetch, {"tampered"}, True),
    (search_for_hidden_code, {"ok"}, False),
]
# Hacks that run until a limit stops them: once, on one project, with a short timeout.
RUNAWAY: list[tuple[Callable[[Ctx, bool], dict[str, str | None]], set[str]]] = [
    (infinite_loop, {"timeout"}),
    (fork_bomb, {"ok", "timeout"}),
    (memory_bomb, {"ok", "timeout"}),
    (huge_output, {"ok"}),
]


def check_zero(result, name: str, statuses: set[str]) -> None:  # type: ignore[no-untyped-def]
    where = f"{name}: {result.status} {result.detail!r}"
    assert result.reward == 0.0, where
    assert result.status in statuses, where
    assert (result.status == "tampered") == bool(result.tampering), where
    if result.status == "ok":
        assert not all(o == "passed" for o in result.fail_to_pass.values()), where


@pytest.mark.parametrize("hack,statuses,on_gold_too", SUITE, ids=[h.__name__ for h, _, _ in SUITE])
def test_adversarial_patch_scores_zero(hack, statuses, on_gold_too, contexts, scorer) -> None:  # type: ignore[no-untyped-def]
    for repo, ctx in contexts.items():
        for on_gold in (False, True) if on_gold_too else (False,):
            result = scorer.score(ctx.task, ctx.patch(hack(ctx, on_gold)), candidate_id=hack.__name__, mode="partial")
            check_zero(result, f"{hack.__name__} on {repo}{' + gold' if on_gold else ''}", statuses)


@pytest.mark.parametrize("hack,statuses", RUNAWAY, ids=[h.__name__ for h, _ in RUNAWAY])
def test_runaway_patch_scores_zero(hack, statuses, contexts, quick_scorer) -> None:  # type: ignore[no-untyped-def]
    ctx = contexts["iniconfig"]
    result = quick_scorer.score(ctx.task, ctx.patch(hack(ctx, False)), candidate_id=hack.__name__, mode="partial")
    check_zero(result, hack.__name__, statuses)
    assert result.duration_s < 60


def test_a_patch_that_does_not_apply_is_patch_failed(contexts, scorer) -> None:  # type: ignore[no-untyped-def]
    ctx = contexts["iniconfig"]
    broken = ctx.task.patch.replace("\n-", "\n-not in the file ", 1)
    result = scorer.score(ctx.task, broken)
    assert (result.reward, result.status) == (0.0, "patch_failed") and "git apply" in result.detail
    garbage = scorer.score(ctx.task, "this is not a diff\n")
    assert garbage.status == "patch_failed"


def test_a_new_test_file_is_dropped_without_penalty(contexts, scorer) -> None:  # type: ignore[no-untyped-def]
    ctx = contexts["addict"]
    changes = ctx.base(True)
    changes["tests/test_extra_by_agent.py"] = "def test_extra():\n    assert True\n"
    result = scorer.score(ctx.task, ctx.patch(changes))
    assert (result.reward, result.status) == (1.0, "ok"), result.detail
    assert result.dropped == ["test file added tests/test_extra_by_agent.py"]


def test_the_hidden_tests_are_nowhere_in_a_scoring_sandbox(contexts, scorer) -> None:  # type: ignore[no-untyped-def]
    """Before the scorer's run puts the hidden tests back, no line of them is anywhere in the
    container: not in the image, not in what the pool laid ahead (the start state, whose own lines
    the leak audit answers for, sits in /workspace: a comment a hidden test shares with a kept one
    is no leak)."""
    for ctx in contexts.values():
        added = {line[1:].strip() for line in ctx.task.test_patch.splitlines() if line.startswith("+") and not line.startswith("+++")}
        names = sorted(line for line in added if len(line) >= 30)[:40]
        assert names
        box = scorer.pool.acquire(ctx.task.image_name)
        try:
            script = (
                "import os, sys, json\nnames = json.loads(sys.argv[1]); hits = []\n"
                "for d, ds, fs in os.walk('/'):\n"
                "    if d.startswith(('/proc', '/sys', '/dev', '/workspace')):\n        ds[:] = []; continue\n"
                "    for f in fs:\n"
                "        p = os.path.join(d, f)\n"
                "        try:\n            data = open(p, 'rb').read(8 << 20)\n        except OSError:\n            continue\n"
                "        hits += [p + ':' + n for n in names if n.encode() in data]\n"
                "print(json.dumps(hits))\n"
            )
            found = box.exec(["python", "-c", script, json.dumps(names)], timeout_s=120, workdir="/")
        finally:
            box.close()
        assert found.exit_code == 0, found.text()
        assert json.loads(found.stdout) == [], ctx.task.instance_id


def test_the_pool_lays_a_tree_ahead_and_replaces_another_tasks(tasks, scorer) -> None:  # type: ignore[no-untyped-def]
    """Containers the pool starts get the last task's tree in the background; handed to a scoring
    of another task, a laid container holds that task's tree exactly, nothing of the first."""
    by_image: dict[str, list[Task]] = {}
    for task in tasks:
        by_image.setdefault(task.image_name, []).append(task)
    image, same = next((image, ts) for image, ts in by_image.items() if len(ts) >= 2)
    trees = [scorer._state(task).start.path for task in same[:2]]
    layers = [(str(tree), functools.partial(lay_task_tree, tree=tree, tools={})) for tree in trees]
    pool = ContainerPool(scorer.backend, limits=scorer.limits, size=1)
    try:
        pool.acquire(image, layer=layers[0]).close()
        deadline = time.monotonic() + 120
        while pool._pending.get(image, 0) and time.monotonic() < deadline:  # the one laid ahead
            time.sleep(0.1)
        box = pool.acquire(image, layer=layers[0])
        box.close()
        assert (pool.hits, pool.laid_hits) == (1, 1)
        while pool._pending.get(image, 0) and time.monotonic() < deadline:
            time.sleep(0.1)
        box = pool.acquire(image, layer=layers[1])  # laid with tree 0 ahead, laid again with tree 1
        try:
            assert (pool.hits, pool.laid_hits) == (2, 1)
            listing = box.exec(["sh", "-c", "cd /workspace && find . -type f -exec sha256sum {} +"],
                               timeout_s=60, workdir="/")
        finally:
            box.close()
    finally:
        pool.close()
    inside = {line.split(None, 1)[1].removeprefix("./"): line.split(None, 1)[0]
              for line in listing.stdout.decode().splitlines()}
    expected = {p.relative_to(trees[1]).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in trees[1].rglob("*") if p.is_file() and not p.is_symlink()}
    assert inside == expected
    assert trees[0] != trees[1]


def test_a_batch_starts_no_container_it_does_not_use(tasks, backend) -> None:  # type: ignore[no-untyped-def]
    """``score_many`` starts the containers for the next scorings once a scoring's runs are done,
    as many as the scorings of that image still to come need, then those of the next image; an
    acquire waits for a container already starting rather than start another. Every container
    the batch started is used, and later scorings find theirs ready."""
    first: dict[str, Task] = {}
    for task in tasks:
        first.setdefault(task.image_name, task)
    (a, b) = list(first.values())[:2]
    batch = [(a, a.patch, "a0"), (a, a.patch, "a1"), (b, b.patch, "b0")]
    with Scorer(backend=backend, limits=SandboxLimits.load(**LIMITS), timeout_s=60) as scorer:
        results = scorer.score_many(batch)
        started, hits, wasted = scorer.pool.started, scorer.pool.hits, scorer.pool.wasted
    assert [(r.status, r.reward) for r in results] == [("ok", 1.0)] * 3, [r.detail for r in results]
    assert wasted == 0, f"{wasted} of {started} containers started ahead were never used"
    # a0 starts its probe and its two runs' containers; the two for a1 and the two for b0 (one of
    # them b's probe) are started ahead and found.
    assert hits >= 4 and started <= 8, (hits, started)


def test_concurrent_acquires_of_one_image_all_get_a_container(tasks, scorer) -> None:  # type: ignore[no-untyped-def]
    """Threads acquiring containers of one image at once, while the pool fills and some wait for
    a container already starting, each get their own container and nothing blocks (two runs of
    every scoring with canaries do this)."""
    image = tasks[0].image_name
    pool = ContainerPool(scorer.backend, limits=scorer.limits, size=3)
    got: list[str] = []

    def take(_: int) -> None:
        box = pool.acquire(image, refill=_ % 2 == 0)
        got.append(box.name)
        pool.discard(box)

    try:
        for _ in range(3):
            pool.warm(image)
            with ThreadPoolExecutor(max_workers=6) as threads:
                list(threads.map(take, range(6)))  # within the test's timeout, or a deadlock
    finally:
        pool.close()
    assert len(got) == len(set(got)) == 18, "a container was handed out twice"
    assert pool.hits >= 3


def test_a_concurrent_batch_starts_no_container_it_does_not_use(tasks, backend) -> None:  # type: ignore[no-untyped-def]
    """With two scorings at once, what a batch still asks for counts the scorings not yet started:
    the one that finishes first does not start containers for a scoring already running."""
    task = tasks[0]
    with Scorer(backend=backend, limits=SandboxLimits.load(**LIMITS), timeout_s=60, concurrency=2) as scorer:
        results = scorer.score_many([(task, task.patch, f"g{n}") for n in range(4)])
        wasted, started = scorer.pool.wasted, scorer.pool.started
    assert [(r.status, r.reward) for r in results] == [("ok", 1.0)] * 4, [r.detail for r in results]
    assert wasted == 0, f"{wasted} of {started} containers started ahead were never used"


def test_one_broken_scoring_does_not_end_a_batch(tasks, scorer) -> None:  # type: ignore[no-untyped-def]
    """A row whose validation column is not JSON fails its own scoring (infra_error, with the
    exception), and the rest of the batch is scored."""
    from dataclasses import replace

    broken = replace(tasks[0], instance_id=tasks[0].instance_id + "-broken", validation="{not json")
    results = scorer.score_many([(broken, "", "empty"), (tasks[1], tasks[1].patch, "gold")])
    assert results[0].status == "infra_error" and "JSONDecodeError" in results[0].detail, results[0].detail
    assert (results[1].status, results[1].reward) == ("ok", 1.0)
    # The row mended, the same task scores (its start state is written again).
    mended = scorer.score(replace(broken, validation=tasks[0].validation), tasks[0].patch)
    assert (mended.status, mended.reward) == ("ok", 1.0), mended.detail


def _with_extra_test(task: Task, suffix: str, body: str) -> tuple[Task, str]:
    """``task`` with one more hidden test file beside its tests, whose single test is PASS_TO_PASS."""
    from dataclasses import replace

    folder = task.FAIL_TO_PASS[0].split("::", 1)[0].rpartition("/")[0]
    rel = f"{folder}/test_zz_{suffix}.py" if folder else f"test_zz_{suffix}.py"
    lines = body.splitlines()
    added = "".join(f"+{line}\n" for line in lines)
    patch = (f"diff --git a/{rel} b/{rel}\nnew file mode 100644\n--- /dev/null\n+++ b/{rel}\n"
             f"@@ -0,0 +1,{len(lines)} @@\n{added}")
    nodeid = f"{rel}::test_{suffix}"
    return replace(task, instance_id=f"{task.instance_id}-{suffix}", test_patch=task.test_patch + patch,
                   PASS_TO_PASS=[*task.PASS_TO_PASS, nodeid]), nodeid


def test_a_scoring_that_fails_a_few_pass_to_pass_tests_is_scored_again_whole(contexts, scorer) -> None:  # type: ignore[no-untyped-def]
    """A scoring whose only failures are a few PASS_TO_PASS tests (a timing test on a loaded
    machine) is scored once more, whole: a new plan with new twins, which alone decides. A test
    that fails beside the others fails there again, as one that always fails does: the second
    scoring has the shape of the first, so nothing passes there that did not pass in a scoring."""
    task = contexts["iniconfig"].task
    crowd, crowd_id = _with_extra_test(task, "crowd", "def test_crowd(request):\n"
                                       "    assert len(request.session.items) <= 2, 'too slow beside the others'\n")
    fails, fails_id = _with_extra_test(task, "fails", "def test_fails():\n    assert False, 'broken'\n")
    for changed, nodeid in ((crowd, crowd_id), (fails, fails_id)):
        result = scorer.score(changed, changed.patch)
        assert (result.reward, result.status) == (0.0, "ok"), (result.detail, result.tampering)
        assert result.pass_to_pass[nodeid] == "failed"
        assert result.detail.startswith("scored twice: 1 PASS_TO_PASS test(s) failed") and nodeid in result.detail
        assert all(o == "passed" for o in result.fail_to_pass.values())
    # The gold patch as mined is scored once.
    gold = scorer.score(task, task.patch)
    assert (gold.reward, gold.status, gold.detail) == (1.0, "ok", "")
