"""The scorer's integrity defences of issue 18, end to end on tasks mined from corpus projects:

- canaries: every mined task carries twins its gold patch fails; gold scores 1.0 whatever the
  deal of tests into the two runs; a twin that passes makes the scoring ``tampered``;
- the outcome stream: the supervisor runs as root, out of the sandbox user's reach (no signal,
  no file descriptor through /proc), and reads outcomes the candidate cannot take back.

The attacks themselves are in test_redteam.py (and test_scorer.py's hacks).
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from taskforge.datasets import read_tasks
from taskforge.repo.canaries import Twin
from taskforge.sandbox import SandboxLimits
from taskforge.scoring.scorer import Scorer
from taskforge.scoring.verdict import every_twin_placed, task_canaries
from taskforge.task import Task

pytestmark = pytest.mark.docker

LIMITS = {"memory_mb": 768, "pids_limit": 256}


@pytest.fixture(scope="module")
def tasks(mined_corpus) -> list[Task]:  # type: ignore[no-untyped-def]
    return read_tasks(mined_corpus[0])


@pytest.fixture(scope="module")
def scorer(backend, base_image):  # type: ignore[no-untyped-def]
    with Scorer(backend=backend, limits=SandboxLimits.load(**LIMITS), timeout_s=120, concurrency=2) as scorer:
        yield scorer


def test_every_mined_task_has_canaries_and_gold_holds_under_any_deal(tasks, scorer) -> None:  # type: ignore[no-untyped-def]
    """Calibration kept at least one twin for every task; each names one of its FAIL_TO_PASS
    tests; gold scores 1.0 three times over (three random deals), with no tampering."""
    assert len({t.repo for t in tasks}) == 2
    kinds: dict[str, int] = {}
    for task in tasks:
        twins = task_canaries(task)
        assert twins, task.instance_id
        assert {t.test for t in twins} <= set(task.FAIL_TO_PASS)
        for twin in twins:
            kinds[twin.kind] = kinds.get(twin.kind, 0) + 1
    assert kinds.get("value", 0) > 0, kinds
    results = scorer.score_many([(t, t.patch, f"gold-{n}") for t in tasks for n in range(3)])
    for result in results:
        assert (result.reward, result.status, result.tampering) == (1.0, "ok", []), (result.instance_id, result.detail)


def test_a_canary_that_passes_is_tampering(tasks, scorer) -> None:  # type: ignore[no-untyped-def]
    """A twin the candidate passes: here a twin changed back into its test, so even gold passes
    it, as every forged pass would. The scoring is ``tampered`` and names the canary."""
    task = next(t for t in tasks if any(tw.kind == "value" for tw in task_canaries(t)))
    twins = task_canaries(task)
    honest = [replace(t, source=_original_function(task, t)) for t in twins]
    validation = {**json.loads(task.validation), "canaries": [t.to_json() for t in honest]}
    forged = replace(task, validation=json.dumps(validation))
    result = scorer.score(forged, task.patch)
    assert (result.status, result.reward) == ("tampered", 0.0), result.detail
    assert result.detail.startswith("canary:"), result.detail
    assert result.canaries_passed, result.tampering  # which twins, by their place in the task's list
    assert set(result.canaries_passed) <= set(range(len(honest)))


def test_confirm_drops_a_twin_gold_passes_in_place_and_scores_again(tasks, scorer) -> None:  # type: ignore[no-untyped-def]
    """Mining's gate scores gold through ``Scorer.confirm``. Here one test's only value twin is its
    test as written (gold passes it in the test's place, as it would a twin that failed beside its
    test in calibration only on another twin's state): scoring is ``tampered`` by that twin alone;
    ``confirm`` drops it, scores again, and gives 1.0, keeping one twin per test, each one that
    scoring placed (a sibling no scoring placed could be such a twin too)."""
    task = next(t for t in tasks if len({tw.test for tw in task_canaries(t)}) >= 2
                and any(tw.kind != "value" for tw in task_canaries(t) if tw.test == task_canaries(t)[0].test))
    twins = task_canaries(task)
    test = twins[0].test
    honest = replace(twins[0], kind="value", source=_original_function(task, twins[0]))
    others = [t for t in twins if t.test != test or t.kind != "value"]
    planted = json.dumps({**json.loads(task.validation), "canaries": [t.to_json() for t in [*others, honest]]})
    with every_twin_placed():  # as confirm's scoring does (a random one may leave the twin out)
        first = scorer.score(replace(task, validation=planted), task.patch)
    assert (first.status, first.canaries_passed) == ("tampered", [len(others)]), (first.detail, first.canaries_passed)
    confirmed, gold = scorer.confirm(replace(task, validation=planted))
    assert (gold.status, gold.reward, gold.tampering) == ("ok", 1.0, []), gold.detail
    kept = task_canaries(confirmed)
    assert honest not in kept and set(kept) <= set(others)
    assert sorted(t.test for t in kept) == sorted({t.test for t in twins})  # one per test, every test still covered
    assert json.loads(confirmed.validation)["canaries_dropped"] == 1
    again = scorer.score(confirmed, task.patch)  # what `taskforge score` gives the task as written
    assert (again.status, again.reward) == ("ok", 1.0), again.detail


def _original_function(task: Task, twin: Twin) -> str:
    """The lines of ``twin``'s test as the hidden tests have them (what a twin replaces)."""
    import ast
    import tempfile
    from pathlib import Path

    from taskforge.repo.patches import apply_patch
    from taskforge.repo.startstate import rebuild_start_state

    with tempfile.TemporaryDirectory() as tmp:
        start = rebuild_start_state(task, Path(tmp) / "start")
        text = apply_patch(start.path, {}, task.test_patch)[twin.file]
    assert text is not None
    tree = ast.parse(text)
    body = tree.body
    for cls in twin.classes:
        body = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == cls).body
    function = next(n for n in body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == twin.name)
    first = min([function.lineno, *(d.lineno for d in function.decorator_list)])
    return "\n".join(text.splitlines()[first - 1: function.end_lineno])


def test_the_sandbox_user_cannot_reach_the_supervisor(backend, base_image) -> None:  # type: ignore[no-untyped-def]
    """In a supervisor container, a root process is out of the sandbox user's reach: no signal,
    no file descriptor through /proc, no capability; the sandbox user's own execs hold none."""
    limits = SandboxLimits.load(**LIMITS, supervisor=True)
    with backend.start(base_image.tag, limits=limits) as box:
        root = box.exec(["sh", "-c", "grep CapEff /proc/self/status; sleep 30 & echo $!"], timeout_s=30,
                        user="0:0", reap=False)
        lines = root.stdout.decode().split()
        assert lines[:2] == ["CapEff:", "00000000000000c0"], lines  # SETUID and SETGID alone
        pid = lines[-1]
        probe = box.exec(["sh", "-c", f"grep CapEff /proc/self/status; kill -9 {pid} 2>&1; echo kill=$?; "
                          f"ls /proc/{pid}/fd 2>&1; echo ls=$?; cat /proc/{pid}/environ 2>&1; echo cat=$?"],
                         timeout_s=30, reap=False)
        out = probe.stdout.decode()
        assert "CapEff:\t0000000000000000" in out, out
        assert "kill=1" in out and "ls=2" in out and "cat=1" in out, out
        assert box.exec(["sh", "-c", f"kill -0 {pid}"], timeout_s=30, user="0:0", reap=False).exit_code == 0  # alive


def test_exec_as_root_needs_a_supervisor_container(backend, base_image) -> None:  # type: ignore[no-untyped-def]
    from taskforge.errors import SandboxError

    with backend.start(base_image.tag, limits=SandboxLimits.load(**LIMITS)) as box:
        with pytest.raises(SandboxError):
            box.exec(["id"], timeout_s=30, user="0:0")
