"""Mining projects that trip a miner's shortcuts (tests/fixtures/projects), through the CLI in
fresh processes, then validating and scoring what it wrote, as a user's harness would.

``hazard``: test modules named by ``python_files`` inside the package, ``--doctest-modules`` with
doctests in the modules tasks remove code from, warnings as errors with a pytest plugin installed
(the fork server cannot serve it), tests parametrized over a set (seed-dependent ids) and one whose
outcome depends on a set's order, a test that depends on timing, ids with ``.py`` and spaces, hidden tests that implement a
pytest hook whose signature pytest's hookspec also has, and tests that share state in the order
they run, and tests that read data: a backup file the start state scrubs, a metadata folder it
keeps, and ids that hold the date of the run. ``aggregated``: one collected module that imports
every test class, from beside it and below it. ``onefile``: one top-level module, its tests in ``tests.py`` (not a name pytest looks
for by default), and a pytest plugin installed that does not fit the environment's pytest. ``lengths``: objects built
while the package is imported (read from the source, any of their dunders may run then; only
``__init__`` does), and docs that are doctests (``--doctest-glob=*.rst``). ``linted``: a lint item
for every Python file (``FILE::lint``, as pytest-ruff adds), source modules included.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from taskforge.datasets import (
    TASKS,
    DatasetWriter,
    read_manifest,
    read_rows,
    read_tasks,
    run_versions,
)
from taskforge.repo.symbols import build_index
from taskforge.sandbox import SandboxLimits
from taskforge.scoring.scorer import Scorer
from taskforge.scoring.verdict import task_canaries
from taskforge.task import Task, is_doctest_id

pytestmark = pytest.mark.docker

PROJECTS = Path(__file__).resolve().parents[1] / "fixtures" / "projects"


def _cli(*args: str, cache: Path, timeout: int = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "taskforge.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "TASKFORGE_CACHE": str(cache)}, check=False)


def _mine(name: str, tmp_path_factory: pytest.TempPathFactory, cache: Path, max_tasks: int = 10) -> tuple[Path, dict]:  # type: ignore[type-arg]
    project = tmp_path_factory.mktemp(name) / name
    shutil.copytree(PROJECTS / name, project)
    out = tmp_path_factory.mktemp(f"{name}-tasks")
    proc = _cli("mine", str(project), "--out", str(out), "--max-tasks", str(max_tasks), cache=cache)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    summary = json.loads((out / "mine-summary.json").read_text())
    assert not summary["failures"], summary["failures"]
    (repository,) = summary["repositories"]
    return out, repository


@pytest.fixture(scope="module")
def hazard(tmp_path_factory, session_cache, base_image):  # type: ignore[no-untyped-def]
    return _mine("hazard", tmp_path_factory, session_cache)


def test_seed_dependent_tests_are_left_out_and_counted(hazard) -> None:  # type: ignore[no-untyped-def]
    out, summary = hazard
    assert summary["seed_dependent"] >= 7  # the six set-ordered ids and the order-dependent test
    tasks = read_tasks(out)
    assert len(tasks) >= 5
    for task in tasks:
        for nodeid in (*task.FAIL_TO_PASS, *task.PASS_TO_PASS):
            assert "test_title_words_unordered" not in nodeid and "test_first_word_is_the_smallest" not in nodeid


def test_ids_that_hold_the_date_of_the_run_are_left_out_and_counted(hazard) -> None:  # type: ignore[no-untyped-def]
    out, summary = hazard
    assert summary["date_dependent"] == 2, summary  # both parametrizations of the function
    for task in read_tasks(out):
        assert not any("test_is_a_recent_day" in t for t in (*task.FAIL_TO_PASS, *task.PASS_TO_PASS))


def test_timing_tests_are_left_out_and_counted(hazard) -> None:  # type: ignore[no-untyped-def]
    """The baseline's run beside busy processes finds the test that depends on timing. (On a host
    already loaded by other jobs it fails in every baseline run: a baseline failure, not
    load-sensitive; either way it joins neither list.)"""
    out, summary = hazard
    assert summary["load_sensitive"] >= 1 or summary["passing"] < summary["tests"], summary
    # Validation runs are bounded by the baseline's duration, not by the 30-minute ceiling.
    assert 120.0 <= summary["run_timeout_s"] < 1800.0
    for task in read_tasks(out):
        assert not any("test_count_vowels_keeps_pace" in t for t in (*task.FAIL_TO_PASS, *task.PASS_TO_PASS))
    # A test the project marks flaky is left out by the project's word, whatever the baseline saw
    # (zipp's big-O checks passed every baseline run and were xfailed, by pytest-ignore-flaky, in
    # gold scorings on a loaded host).
    assert summary["marked_flaky"] == 1, summary
    for task in read_tasks(out):
        assert not any("test_count_vowels_scales" in t for t in (*task.FAIL_TO_PASS, *task.PASS_TO_PASS))


def test_the_baseline_runs_on_the_tree_the_start_states_start_from(hazard) -> None:  # type: ignore[no-untyped-def]
    """check_data.py reads a backup file every start state scrubs, and a sample distribution's
    metadata folder inside the package, which is the project's data and stays. The first test
    fails in the baseline (it runs without the scrubbed file) and is in neither list; before, it
    passed there and failed in every start state, and every candidate was ``breaks_other_tests``
    (a packaging library's held-out suite gave 0 tasks of 41 tried)."""
    out, summary = hazard
    tasks = read_tasks(out)
    assert len(tasks) >= 5, summary["rejections"]
    assert "breaks_other_tests" not in summary["rejections"], summary["rejections"]
    for task in tasks:
        assert not any("test_the_old_configuration_is_kept" in t for t in (*task.FAIL_TO_PASS, *task.PASS_TO_PASS))
        assert "hazard/check_data.py::test_the_sample_distribution_has_a_name" in task.PASS_TO_PASS


def test_a_test_module_broken_in_the_project_is_left_out(hazard) -> None:  # type: ignore[no-untyped-def]
    """check_settings.py does not import in the unmodified project: the baseline leaves it out of
    every run (``--ignore``, in the tasks' environment too) instead of failing the repository; the
    validation and scoring tests below run with it left out."""
    out, summary = hazard
    assert summary["ignored"] == ["hazard/check_settings.py"], summary
    for task in read_tasks(out):
        assert "--ignore=hazard/check_settings.py" in json.loads(task.environment)["pytest_args"]
        assert not any("check_settings" in t for t in (*task.FAIL_TO_PASS, *task.PASS_TO_PASS))


def test_the_fork_server_falls_back_when_it_breaks_the_suite(hazard) -> None:  # type: ignore[no-untyped-def]
    _, summary = hazard
    assert summary["fork_server"].startswith("fallback: "), summary["fork_server"]
    assert "PytestAssertRewriteWarning" in summary["fork_server"]


def test_tests_are_where_pytest_finds_them_and_doctests_are_never_fail_to_pass(hazard) -> None:  # type: ignore[no-untyped-def]
    out, _ = hazard
    tasks = read_tasks(out)
    targets = {(t.strategy, t.target) for t in tasks}
    # Hidden tests in hazard/tests.py (python_files), hazard/check_generated.py,
    # hazard/check_ids.py, hazard/check_draws.py and hazard/check_names.py: test code, so they are
    # in test_patch, never in the gold patch.
    assert ("symbol", "hazard.words:reverse_words") in targets
    # check_optional.py skips itself after importing reverse_words: the symbol's removal breaks
    # its import, and it goes from the start state whole (rejected
    # ``start_state_collection_errors`` before).
    symbol = next(t for t in tasks if (t.strategy, t.target) == ("symbol", "hazard.words:reverse_words"))
    assert "hazard/check_optional.py" in symbol.test_patch
    for task in tasks:
        assert not any(is_doctest_id(t) for t in task.FAIL_TO_PASS), task.instance_id
        hidden = ("hazard/tests.py", "check_generated", "check_ids", "check_draws", "check_names")
        assert not any(name in task.patch for name in hidden)
        assert any(name in task.test_patch for name in hidden)
    # Doctests of the modules the gold patch restores are PASS_TO_PASS; ids hold ".py" and spaces.
    body = next(t for t in tasks if t.target == "hazard.words:title_words" and t.strategy == "body")
    assert "hazard/words.py::hazard.words.count_vowels" in body.PASS_TO_PASS
    # pad's doctest expects its source assert's own message; the scoring runs above (gold 1.0 on
    # every task) run it from a selection that names words.py, which pytest would assert-rewrite.
    assert "hazard/words.py::hazard.words.pad" in body.PASS_TO_PASS
    assert "hazard/words.py" in body.patch
    assert any("[a b.py]" in t for t in body.PASS_TO_PASS)
    # A test module's doctest that fails with the feature is in neither list (the guard cannot
    # hold a doctest's examples to its file); the tasks of that feature are written.
    loud = "hazard/check_names.py::hazard.check_names.Shouts.loud"
    shouting = [t for t in tasks if t.target.startswith("hazard.names")]
    assert shouting, sorted((t.strategy, t.target) for t in tasks)
    for task in shouting:
        assert loud not in task.FAIL_TO_PASS and loud not in task.PASS_TO_PASS, task.instance_id
    assert any(loud in t.PASS_TO_PASS for t in tasks if not t.target.startswith("hazard.names"))


def test_tests_that_share_state_in_order_are_never_parted(hazard) -> None:  # type: ignore[no-untyped-def]
    """Each case of check_ids.py counts on the ones before it in the file. Scoring deals
    PASS_TO_PASS to its two runs by file (``verdict.plan_runs``), so the gate rejects no task
    over them, and they are PASS_TO_PASS of every task that leaves hazard/ids.py alone."""
    out, summary = hazard
    assert not any("check_ids" in r["detail"] for r in summary["rejected"]), summary["rejected"]
    tasks = [t for t in read_tasks(out) if not t.target.startswith("hazard.ids")]
    assert tasks
    for task in tasks:
        assert {"hazard/check_ids.py::test_ids_reset", "hazard/check_ids.py::test_next_id[b-b3]"} <= set(task.PASS_TO_PASS)


def test_a_pytest_hook_in_the_hidden_tests_is_no_leak(hazard) -> None:  # type: ignore[no-untyped-def]
    out, summary = hazard
    assert "audit_findings" not in summary["rejections"], summary["rejected"]
    hook = next(t for t in read_tasks(out) if t.target == "hazard.words:reverse_words" and t.strategy == "symbol")
    assert "def pytest_generate_tests(metafunc)" in hook.test_patch  # the hidden module went as a whole
    assert json.loads(hook.audit)["clean"] and json.loads(hook.audit)["image_scanned"]


def test_every_task_holds_under_validate_and_two_scoring_runs(hazard, session_cache) -> None:  # type: ignore[no-untyped-def]
    out, _ = hazard
    _holds_under_validate_and_scoring(out, session_cache, ("first", "second"))


def _holds_under_validate_and_scoring(out: Path, cache: Path, attempts: tuple[str, ...]) -> None:
    """Every task of ``out`` holds under ``taskforge validate`` and, in each scoring run, gold
    scores 1.0 with every expected test passed and the empty patch 0.0."""
    validated = _cli("validate", str(out), cache=cache)
    assert validated.returncode == 0 and "BROKEN" not in validated.stdout, validated.stdout[-3000:]
    tasks = {t.instance_id: t for t in read_tasks(out)}
    for attempt in attempts:
        rewards = out.parent / f"{out.name}-rewards-{attempt}"
        scored = _cli("score", "--tasks", str(out), "--gold", "--empty", "--out", str(rewards), cache=cache)
        assert scored.returncode == 0, scored.stderr[-3000:]
        rows = read_rows(rewards)
        assert len(rows) == 2 * len(tasks)
        for row in rows:
            wanted = 1.0 if row["candidate_id"] == "gold" else 0.0
            assert (row["status"], row["reward"]) == ("ok", wanted), (attempt, row["instance_id"], row["detail"])
            if row["candidate_id"] == "gold":  # no expected test is missing, or anything but passed
                assert set(json.loads(row["outcomes"]).values()) == {"passed"}, (attempt, row["instance_id"])


def test_a_random_feature_keeps_no_canary_a_correct_draw_may_pass(hazard) -> None:  # type: ignore[no-untyped-def]
    """draws.py returns a random pair, and its tests accept every pair it may give. Its tasks
    keep no twin that alters one of those answers (gold would pass it whenever it drew another,
    and score ``tampered``); the scoring runs above hold them to gold 1.0 twice."""
    out, _ = hazard
    drawn = [t for t in read_tasks(out) if "draws" in t.instance_id]
    assert drawn
    for task in drawn:
        twins = task_canaries(task)
        assert twins
        for twin in twins:
            if twin.name == "test_draw_pair_is_one_of_the_pairs" and twin.kind in ("value", "input"):
                assert "[[1, 2], [1, 3], [2, 1], [2, 3], [3, 1], [3, 2]]" in twin.source, twin.source
            if twin.name == "test_draw_pair_from_named_pairs" and twin.kind in ("value", "input"):
                assert 'pairs = [["a", "b"], ["b", "a"]]' in twin.source, twin.source


def test_a_twin_that_fails_only_under_another_name_is_dropped_at_the_gate(hazard) -> None:  # type: ignore[no-untyped-def]
    """check_names.py's first test looks its expected value up by its own name. Calibration runs
    twins under other names, where that test fails whatever its twin alters; in the test's own
    place gold passes the twin that alters the fallback, and the gate's gold scoring was
    ``tampered`` by it (the tasks were rejected as ``scorer_tampered``). The gate drops it and
    scores again: the tasks are written, hold (the scoring runs above), and keep no such twin."""
    out, summary = hazard
    named = [t for t in read_tasks(out) if any("check_names.py" in i for i in t.FAIL_TO_PASS)]
    assert named, [r for r in summary["rejected"] if "names" in r["target"]]
    for task in named:
        assert json.loads(task.validation)["canaries_dropped"] >= 1, task.instance_id
        by_name = [tw for tw in task_canaries(task) if tw.name == "test_shout_by_name"]
        assert by_name and all(tw.kind != "input" for tw in by_name), [tw.kind for tw in by_name]


def test_lint_checks_of_files_are_no_tests(tmp_path_factory, session_cache, backend, base_image) -> None:  # type: ignore[no-untyped-def]
    """linted's conftest.py adds a lint item to every Python file, its package's modules included,
    as pytest-ruff does (``linted/text.py::lint``). A whole run leaves them out, so no task counts
    on one: before, every candidate was rejected (a test file's lint item failed with its hidden
    tests: ``unhideable_test``), and a source module holding one was a test file to the scorer.
    A selection that names one, as a task mined before may, still runs it."""
    out, summary = _mine("linted", tmp_path_factory, session_cache)
    assert summary["tests"] == 8 and summary["tasks"] >= 4, summary
    tasks = read_tasks(out)
    assert not any(i.endswith("::lint") for t in tasks for i in (*t.FAIL_TO_PASS, *t.PASS_TO_PASS))
    _holds_under_validate_and_scoring(out, session_cache, ("only",))
    task = next(t for t in tasks if t.target.startswith("linted.wrap"))
    older = replace(task, PASS_TO_PASS=(*task.PASS_TO_PASS, "linted/text.py::lint"))
    with Scorer(backend=backend, limits=SandboxLimits.load(), timeout_s=120) as scorer:
        result = scorer.score(older, task.patch)
    assert (result.status, result.reward) == ("ok", 1.0), result.detail
    assert result.pass_to_pass["linted/text.py::lint"] == "passed"


def test_a_top_level_module_is_indexed_like_a_package(tmp_path_factory, session_cache, base_image) -> None:  # type: ignore[no-untyped-def]
    """onefile is one module, and its tests are in tests.py, which pytest finds only when told
    (mining said ``no_tests`` before): every run of its tasks adds the name to python_files."""
    out, summary = _mine("onefile", tmp_path_factory, session_cache)
    assert summary["candidates"] >= 3 and summary["tasks"] >= 3, summary
    assert {t.target.split(":")[0] for t in read_tasks(out)} == {"onefile"}
    for task in read_tasks(out):
        assert task.FAIL_TO_PASS and all(t.startswith("tests.py::") for t in task.FAIL_TO_PASS), task.FAIL_TO_PASS
        assert "python_files=test_*.py *_test.py tests.py" in json.loads(task.environment)["pytest_args"]
    # pytest-flake8 does not fit pytest 9: it is off in mining, and (below) in validation and scoring.
    assert summary["plugins_off"] == ["flake8"], summary
    validation = out.parent / f"{out.name}-validate.json"
    validated = _cli("validate", str(out), "--report", str(validation), cache=session_cache)
    assert validated.returncode == 0, validated.stdout[-3000:]
    rewards = out.parent / f"{out.name}-rewards"
    assert _cli("score", "--tasks", str(out), "--gold", "--empty", "--out", str(rewards), cache=session_cache).returncode == 0
    report = out.parent / "report.md"
    made = _cli("report", str(out), "--validation", str(validation), "--rewards", str(rewards), "--out", str(report),
                cache=session_cache)
    assert made.returncode == 0, made.stderr
    text = report.read_text()
    tasks = summary["tasks"]
    assert f"hold under `taskforge validate`: {tasks} of {tasks}" in text
    assert f"gold 1.0 on {tasks} of {tasks}, empty 0.0 on {tasks} of {tasks}" in text
    assert "`missing` in gold runs: 0" in text
    row = next(line for line in text.splitlines() if line.startswith("| ") and "onefile" in line)
    assert f"| {summary['candidates']} | {summary['attempted']} | {tasks} | {tasks} |" in row
    assert "candidates ran out" in row  # below the target of 10: the cause is given

    # A task changes under its instance_id, as when its source is mined again with --replace:
    # resumed runs check it again instead of reusing the verdicts on the version before.
    [shard] = read_manifest(out).shards
    rows = read_rows(out)
    changed = rows[0]["instance_id"]
    rows[0] = {**rows[0], "PASS_TO_PASS": rows[0]["PASS_TO_PASS"][1:]}
    with DatasetWriter(out, kind=TASKS, recipe=read_manifest(out).recipe, versions=run_versions()) as writer:
        writer.rewrite(shard.name, rows)
    again = _cli("validate", str(out), "--report", str(validation), cache=session_cache)
    assert again.returncode == 0, again.stdout[-3000:]
    assert f"{tasks - 1} task(s) already in" in again.stderr and "1 task(s) in" in again.stderr
    assert json.loads(validation.read_text())[changed]["task_sha256"] == Task.from_row(rows[0]).grading_sha256
    rescored = _cli("score", "--tasks", str(out), "--gold", "--empty", "--out", str(rewards), cache=session_cache)
    assert rescored.returncode == 0, rescored.stderr[-3000:]
    assert "2 candidate(s) in" in rescored.stderr and "scored again (task changed): 2" in rescored.stdout
    assert f"{rewards}: {2 * tasks} reward rows" in rescored.stdout
    stored = {(r["instance_id"], r["candidate_id"]): r for r in read_rows(rewards)}
    assert {stored[(changed, c)]["task_sha256"] for c in ("gold", "empty")} == {Task.from_row(rows[0]).grading_sha256}
    retracted = read_manifest(rewards).retracted
    assert retracted and all("scored again against another version of their task" in r.reason for r in retracted)
    made = _cli("report", str(out), "--validation", str(validation), "--rewards", str(rewards), "--out", str(report),
                cache=session_cache)
    assert made.returncode == 0 and f"gold 1.0 on {tasks} of {tasks}, empty 0.0 on {tasks} of {tasks}" in report.read_text()


@pytest.mark.slow  # a few minutes: a mining of every candidate, a validation and a scoring of its own
def test_test_classes_imported_into_the_collected_module(tmp_path_factory, session_cache, base_image) -> None:  # type: ignore[no-untyped-def]
    """aggregated collects only tests/__main__.py, which imports its test classes from a module
    beside it and, by ``*``, from one below it (tests/unit/). Their tests are hidden where the
    classes are defined (every one was ``unhideable_test`` before), their twins placed there, the
    guard holds the collected tests to those files, and every task holds under validate and
    scoring, gold 1.0 and the empty patch 0.0. A symbol or module removal that breaks a class
    module's import breaks the collected module's too: that class module goes whole and the
    collected module loses its import of it (every such candidate was ``start_state_no_tests``
    before); the tests it gave are FAIL_TO_PASS and the others run. So does a body removal of a
    function a class module calls in a class body (a NotImplementedError, not an ImportError, so a
    traceback of absolute paths through tests/__main__.py). The classes of
    tests/test_padding.py are made by a factory function, one per fill character: their tests
    are hidden in the factory (every one was ``unhideable_test`` before), so in both classes."""
    out, summary = _mine("aggregated", tmp_path_factory, session_cache, max_tasks=30)
    assert summary["tasks"] >= 12 and not summary["rejections"], summary
    tasks = read_tasks(out)
    defined = {"tests/test_words.py", "tests/unit/test_numbers.py", "tests/test_padding.py"}
    for task in tasks:
        assert all(t.startswith("tests/__main__.py::") for t in task.FAIL_TO_PASS), task.FAIL_TO_PASS
        restored = {path for path in task.test_patch.split() if path.startswith("b/")}
        if "b/tests/__main__.py" not in restored:
            assert task.strategy == "body" and restored <= {f"b/{p}" for p in defined}, task.test_patch
        else:  # the class module goes whole, and the collected module's import of it
            (module,) = restored - {"b/tests/__main__.py"}
            assert restored == {"b/tests/__main__.py", module} and module.removeprefix("b/") in defined, task.test_patch
            path = module.removeprefix("b/")
            assert f"diff --git a/{path} b/{path}\nnew file mode" in task.test_patch  # gone from the start state
            classes = {t.split("::")[1] for t in task.FAIL_TO_PASS}
            assert classes and not {t for t in task.PASS_TO_PASS if t.split("::")[1] in classes}, task.instance_id
        canaries = task_canaries(task)
        assert canaries and {twin.file for twin in canaries} <= defined, task.instance_id
    assert {task.strategy for task in tasks} == {"body", "symbol", "module"}
    # shout runs in TestWords' class body: its body removal breaks the import of tests/test_words.py
    # with a NotImplementedError, whose traceback pytest prints with absolute paths.
    (greeting,) = [task for task in tasks if (task.strategy, task.target) == ("body", "aggregated.words:shout")]
    assert "tests/__main__.py::TestWords::test_initials" in greeting.FAIL_TO_PASS, greeting.FAIL_TO_PASS
    padding = [task for task in tasks if "padding" in task.instance_id]
    assert padding, [task.instance_id for task in tasks]
    for task in padding:  # hidden in the factory, so in both of the classes it makes
        functions = {t.rpartition("::")[2] for t in task.FAIL_TO_PASS}
        assert {t for t in task.FAIL_TO_PASS if "TestPadding" in t} == {
            f"tests/__main__.py::TestPadding{kind}::{name}" for kind in ("Space", "Dot") for name in functions}
    assert {twin.file for task in tasks for twin in task_canaries(task)} == defined
    validated = _cli("validate", str(out), cache=session_cache)
    assert validated.returncode == 0 and "BROKEN" not in validated.stdout, validated.stdout[-3000:]
    rewards = out.parent / f"{out.name}-rewards"
    scored = _cli("score", "--tasks", str(out), "--gold", "--empty", "--out", str(rewards), cache=session_cache)
    assert scored.returncode == 0, scored.stderr[-3000:]
    for row in read_rows(rewards):
        wanted = 1.0 if row["candidate_id"] == "gold" else 0.0
        assert (row["status"], row["reward"]) == ("ok", wanted), (row["instance_id"], row["detail"])


def test_a_source_module_selected_for_its_doctests_is_no_test_module(hazard, backend) -> None:  # type: ignore[no-untyped-def]
    """pytest collects every file named on its command line as a test module, whatever
    python_files says; the scorer names hazard/paths.py for its PASS_TO_PASS doctests. A candidate
    that adds a module-level pytest hook and a test function there must not get them run: the
    file is collected for its doctests alone, as in the baseline."""
    from taskforge.scoring.scorer import Scorer

    out, _ = hazard
    task = next(t for t in read_tasks(out) if t.strategy == "body" and t.target == "hazard.words:title_words")
    assert any(t.startswith("hazard/paths.py::") for t in task.PASS_TO_PASS)
    probe = ("\n\ndef pytest_generate_tests(metafunc):\n    raise RuntimeError('collected as a test module')\n\n\n"
             "def test_probe(anything):\n    pass\n")
    lines = (PROJECTS / "hazard" / "hazard" / "paths.py").read_text().splitlines()
    hunk = "".join(f"+{line}\n" for line in probe.splitlines())
    addition = (f"diff --git a/hazard/paths.py b/hazard/paths.py\n--- a/hazard/paths.py\n+++ b/hazard/paths.py\n"
                f"@@ -{len(lines)},1 +{len(lines)},{1 + len(probe.splitlines())} @@\n {lines[-1]}\n{hunk}")
    with Scorer(backend=backend) as scorer:
        result = scorer.score(task, task.patch + addition)
    assert (result.status, result.reward) == ("ok", 1.0), (result.detail, result.tampering)


def test_what_runs_at_import_is_measured_and_a_doctest_file_is_hidden_whole(tmp_path_factory, session_cache,  # type: ignore[no-untyped-def]
                                                                           base_image) -> None:
    out, summary = _mine("lengths", tmp_path_factory, session_cache)
    # From the source alone every dunder of Unit may run at import (UNITS calls Unit(...)), and
    # would be refused as "runs while the package is imported"; the baseline measured that only
    # __init__ runs.
    static = build_index(PROJECTS / "lengths", package_paths=["lengths"]).import_time
    dunders = {f"lengths.units:Unit.{name}" for name in ("__repr__", "__eq__", "__hash__", "__lt__")}
    assert dunders <= static
    refused = [r for r in summary["rejected"] if "runs while the package is imported" in r["detail"]]
    assert [r["target"] for r in refused if r["target"] != "lengths.units:Unit.__init__"] == [], refused
    tasks = read_tasks(out)
    assert {t.target for t in tasks} & dunders, sorted(t.target for t in tasks)
    # docs/describe.rst reads UNITS from the doctest namespace that an autouse fixture of tests/
    # fills: it passes only after a test of tests/ ran, and scoring may deal it to a run without
    # one. Its files dealt apart, or run in reverse order, it fails: in neither list.
    assert summary["selection_sensitive"] == 1, summary
    assert not any("describe.rst" in t for task in tasks for t in (*task.FAIL_TO_PASS, *task.PASS_TO_PASS))
    # A task whose docs' doctests fail: the file is gone from the start state and back in
    # test_patch, but not graded (the doctest machinery runs in the candidate's process, where an
    # independent red team rigged it 18 ways the guard did not see): in neither list.
    documented = [t for t in tasks if any(i.startswith("docs/") for i in t.hidden_tests)]
    assert documented, [(t.target, t.hidden_tests) for t in tasks]
    for task in documented:
        assert not any(i.startswith("docs/") for i in task.FAIL_TO_PASS), task.instance_id
        for nodeid in (i for i in task.hidden_tests if i.startswith("docs/")):
            path = nodeid.split("::")[0]
            assert nodeid == f"{path}::{path.rsplit('/', 1)[1]}" and f"+++ b/{path}" in task.test_patch, nodeid
            assert nodeid not in task.PASS_TO_PASS  # the docs that still pass are PASS_TO_PASS
    validated = _cli("validate", str(out), cache=session_cache)
    assert validated.returncode == 0 and "BROKEN" not in validated.stdout, validated.stdout[-3000:]
    rewards = out.parent / f"{out.name}-rewards"
    assert _cli("score", "--tasks", str(out), "--gold", "--empty", "--out", str(rewards), cache=session_cache).returncode == 0
    rows = read_rows(rewards)
    assert len(rows) == 2 * len(tasks)
    for row in rows:
        wanted = 1.0 if row["candidate_id"] == "gold" else 0.0
        assert (row["status"], row["reward"]) == ("ok", wanted), (row["instance_id"], row["detail"])


def test_a_round_of_the_start_state_keeps_the_files_the_round_before_found_broken(  # type: ignore[no-untyped-def]
        tmp_path_factory, session_cache, base_image, backend) -> None:
    """relay.overlay only re-exports, so the first round runs its doctest alone and, its file being
    gone, collects the whole suite: test_shapes.py and test_paths.py no longer import. test_paths.py
    is hidden test by test (make_fixture.py imports it) and still fails at the start state, so a
    second round takes it whole; that round collects only the files of the tests it knows of, and
    lost test_shapes.py, which stayed in the start state uncollectable
    (``start_state_collection_errors``, as zipp's ``compat.overlay`` did)."""
    out, summary = _mine("relay", tmp_path_factory, session_cache)
    assert "start_state_collection_errors" not in summary.get("rejections", {}), summary
    # A test that times what it tests but passes beside busy processes is found in its source.
    assert summary["load_sensitive"] == 1, summary
    # A test that passes only when the package's doctests are collected beside it (they import
    # the module that registers what it reads) fails when selected by id, as scoring selects it.
    assert summary["selection_sensitive"] == 1, summary
    for each in read_tasks(out):
        listed = (*each.FAIL_TO_PASS, *each.PASS_TO_PASS)
        assert not any("test_squeeze_is_quick" in t or "test_the_shout_style_is_registered" in t for t in listed)
    task = next(t for t in read_tasks(out) if t.strategy == "module")
    assert task.target == "relay.overlay"
    assert {t.split("::")[0] for t in task.FAIL_TO_PASS} == {"tests/test_paths.py", "tests/test_shapes.py"}
    restored = {line.split(" b/")[-1] for line in task.test_patch.splitlines() if line.startswith("diff --git")}
    assert restored == {"tests/make_fixture.py", "tests/test_paths.py", "tests/test_shapes.py"}
    with Scorer(backend=backend, limits=SandboxLimits.load(), timeout_s=120) as scorer:
        gold, empty = scorer.score(task, task.patch), scorer.score(task, "")
    assert (gold.status, gold.reward) == ("ok", 1.0), gold.detail
    assert (empty.status, empty.reward) == ("ok", 0.0), empty.detail
