"""The runs of one scoring and what each says: the two-run plan with canary twins in place
(``plan_runs``), and the verdict of one run from its outcome stream, report and exit status
(``judge_run``)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from taskforge.errors import SandboxError
from taskforge.repo.canaries import TWIN_RANK, Twin, called_names, place_twins
from taskforge.repo.suite import RunResult
from taskforge.task import Task

__all__ = ["EVERY_TWIN", "PLACINGS", "every_twin_placed", "Part", "RunVerdict", "fails_as_twin", "judge_run", "one_twin_per_test", "plan_runs", "task_canaries"]

_NOT_FAILURES = frozenset({"passed", "skipped", "xfailed", "xpassed"})
"""Outcomes after which pytest still exits 0 (a strict xfail that passes is reported failed)."""
GUARD_PROPERTY = "taskforge.guard"
TAMPERED_PROPERTY = "taskforge.tampered"


@dataclass(frozen=True, slots=True)
class Part:
    """One run of a scoring: the state, the tests selected, which of them are twins (their ids,
    and the twins placed)."""

    changes: Mapping[str, bytes | None]
    select: list[str]
    canaries: frozenset[str]
    twins: tuple[Twin, ...] = ()


PLACINGS = 3
"""The ways a twinned test goes in a scoring (:func:`plan_runs`): twin in the first run, twin in
the second, or no twin (itself in both)."""
EVERY_TWIN: ContextVar[bool] = ContextVar("taskforge_every_twin", default=False)
"""Set by mining's gate (``Scorer.confirm``): every twin goes into one of the runs, so that the
gate's gold scoring meets each twin a later scoring may place (a random scoring leaves a third of
them out)."""


@contextmanager
def every_twin_placed() -> Iterator[None]:
    """Within it, :func:`plan_runs` places every chosen twin (:data:`EVERY_TWIN`)."""
    token = EVERY_TWIN.set(True)
    try:
        yield
    finally:
        EVERY_TWIN.reset(token)


def task_canaries(task: Task) -> list[Twin]:
    """The twins mining calibrated for ``task`` (none for a task mined before canaries)."""
    try:
        data = json.loads(task.validation or "{}")
    except ValueError:
        return []
    return [Twin.from_json(item) for item in data.get("canaries") or []] if isinstance(data, dict) else []


def plan_runs(task: Task, changes: Mapping[str, bytes | None], selected: list[str]) -> list[Part]:
    """The runs of one scoring. Without canaries, one. With them, two, alike in what they show:
    both run every FAIL_TO_PASS test, in one sorted selection, and PASS_TO_PASS is shared out
    between them *by file* (``_deal_files``). Each twinned test, on its own, goes one of three
    ways with equal chance (``PLACINGS``): its twin *in its place, under its name* in the first run
    and itself in the second, the other way round, or itself in both; drawn again when no test got
    a twin, so that a scoring always holds one. No run holds a test and its twin. The deal, the
    placings and the twin of each test are new every scoring.

    Why three ways and each test on its own: when every test's twin is in one run and the test in
    the other (two halves), the tests each run holds as themselves are the complement of the
    other's, so code that tells the runs apart (they run different files: an independent red
    team read it from the session's items, from library state, from a tmp_path left behind) can
    answer a chosen set in one run and the rest in the other, and wins when the deal matches: 1 in
    6 of the scorings of a task with 3 twinned tests, 1 in 20 with 5, and 1 in 12 with a coin and
    no label at all. Now a test's answer in a run is right only for the placing it bets on, and
    the placings are independent of the runs and of each other: no strategy wins more than 1 in
    3^k - 1 of the scorings of a task with k twinned tests (1 in 26 with 3, 1 in 8 with 2, 1 in 2
    with one, as before), whatever it can tell, and code that passes every test in both runs is
    caught every time."""
    chosen_set = set(selected)
    # Not a twin of a function other code of its file calls (:func:`called_names`): tasks mined
    # before that rule may hold one.
    twins = [t for t in task_canaries(task) if set(t.tests) <= chosen_set]
    texts = {t.file: changes.get(t.file) for t in twins}
    called = {file: called_names(text.decode(errors="replace")) for file, text in texts.items() if text is not None}
    twins = [t for t in twins if t.name not in called.get(t.file, ())]
    if not twins:
        return [Part(changes=changes, select=selected, canaries=frozenset())]
    rng = random.SystemRandom()
    # The twin that reads most like a test (``TWIN_RANK``), at random among equals.
    chosen = {twins[i].test: twins[i] for i in one_twin_per_test(twins, rng)}
    placed: tuple[list[Twin], list[Twin]] = ([], [])  # the twins each run holds in their tests' place
    ways = 2 if EVERY_TWIN.get() else PLACINGS
    while not placed[0] and not placed[1]:
        for test in sorted(chosen):
            placing = rng.randrange(ways)
            if placing < 2:
                placed[placing].append(chosen[test])
    shared, dealt = _deal_files(selected, set(task.FAIL_TO_PASS), rng)

    def with_twins(group: list[Twin]) -> dict[str, bytes | None]:
        placed = dict(changes)
        by_file: dict[str, list[Twin]] = {}
        for twin in group:
            by_file.setdefault(twin.file, []).append(twin)
        for file, twins in by_file.items():
            text = placed.get(file)
            if text is None:
                raise SandboxError(f"the canary of {twins[0].test} has no file {file} in the hidden tests",
                                   reason="canary_broken")
            placed[file] = place_twins(text.decode(), twins).encode()
        return placed

    def ids(group: list[Twin]) -> frozenset[str]:
        return frozenset(i for twin in group for i in twin.tests)

    return [Part(changes=with_twins(placed[side]), select=sorted([*shared, *dealt[side]]), canaries=ids(placed[side]),
                 twins=tuple(placed[side])) for side in (0, 1)]


def one_twin_per_test(twins: list[Twin], rng: random.Random) -> list[int]:
    """For each test, the index of one of its twins of the lowest rank (``TWIN_RANK``), the one
    :func:`plan_runs` places, chosen with ``rng`` among equals; in the order of ``twins``."""
    groups: dict[str, list[tuple[int, int]]] = {}
    for index, twin in enumerate(twins):
        groups.setdefault(twin.test, []).append((TWIN_RANK.get(twin.kind, len(TWIN_RANK)), index))
    chosen = []
    for group in groups.values():
        lowest = min(rank for rank, _ in group)
        chosen.append(rng.choice([index for rank, index in group if rank == lowest]))
    return sorted(chosen)

def _test_file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _deal_files(selected: list[str], fail_to_pass: set[str],
                rng: random.Random) -> tuple[list[str], tuple[list[str], list[str]]]:
    """The tests both runs select, and the two runs' shares of the rest.

    A file's selected tests stay together, as they ran in the baseline: tests of one file often
    share state in the order they run (pydash's ``test_unique_id_setup`` resets the counter that
    the next test's cases count on, after a doctest has moved it), and a test-by-test deal parts
    them, so that the gold patch fails a test that has nothing to do with the task. So every test
    of a file that holds a FAIL_TO_PASS test runs in both runs, beside it; the other files are
    dealt whole, at random, each to the run with fewer tests so far (the largest first)."""
    shared_files = {_test_file(t) for t in selected if t in fail_to_pass}
    shared = [t for t in selected if _test_file(t) in shared_files]
    by_file: dict[str, list[str]] = {}
    for test in selected:
        if _test_file(test) not in shared_files:
            by_file.setdefault(_test_file(test), []).append(test)
    files = list(by_file)
    rng.shuffle(files)
    files.sort(key=lambda f: len(by_file[f]), reverse=True)  # stable: equal sizes stay shuffled
    dealt: tuple[list[str], list[str]] = ([], [])
    for file in files:
        sizes = (len(dealt[0]), len(dealt[1]))
        side = 0 if sizes[0] < sizes[1] else 1 if sizes[1] < sizes[0] else rng.randrange(2)
        dealt[side].extend(by_file[file])
    return shared, dealt


@dataclass(frozen=True, slots=True)
class RunVerdict:
    outcomes: dict[str, str]
    """Each selected test's outcome: from the outcome stream when the run was supervised."""
    all_passed: bool
    """Whether every selected test but the canaries passed."""
    exit_ok: bool
    """Whether pytest exited as its outcomes say it should: 0 when no test failed, errored or went
    missing, else 1."""
    tampering: list[str]
    canaries_passed: list[str]
    """The tests whose twin passed in their place: tampering if the test passes as itself in the
    other run (``Scorer._judge``); a wrong implementation can pass a twin while failing its test
    (a negated check holds when the code is wrong), and that is no forgery."""


def judge_run(run: RunResult, selected: list[str], *, canaries: frozenset[str] = frozenset()) -> RunVerdict:
    """What one scoring run says of the ``selected`` tests, and what in it cannot be honest.

    A supervised run's outcomes come from the stream the supervisor read as each test finished;
    the JUnit report, written later and in reach of the candidate's code, must not say more: a
    test passed in the report but not as it ran, an exit status other than the session's, a test
    reported twice or one nobody selected are tampering. So are an exit status of 0 with an
    expected test not passed, and a report the guard did not see through."""
    stream = run.stream
    wanted = set(selected)

    def reported(nodeid: str) -> str:
        return run.results[nodeid].outcome if nodeid in run.results else "missing"

    if stream is not None:
        outcomes = {t: stream.outcomes.get(t, "missing") for t in selected}
    else:
        outcomes = {t: reported(t) for t in selected}
    all_passed = all(o == "passed" for t, o in outcomes.items() if t not in canaries)
    # pytest exits 0 when no test failed or errored: a skip or an expected failure is no failure to
    # it (a test the candidate's code makes skip is a test not passed, not a forged exit).
    clean_exit = all(o in _NOT_FAILURES for o in outcomes.values())
    canaries_passed = [t for t, o in outcomes.items() if t in canaries and o in ("passed", "xpassed")]
    tampering = [value for name, value in run.properties if name == TAMPERED_PROPERTY]
    if run.has_report and (GUARD_PROPERTY, "1") not in run.properties:
        tampering.append("report: the scoring guard did not see the session end")
    if stream is not None:
        tampering += [f"outcome stream: {fault}" for fault in stream.faults]
        tampering += [f"outcome stream: {t} ran but was not selected" for t in sorted(set(stream.outcomes) - wanted)][:5]
        tampering += [f"report: {t} passed in the report but was {o} as it ran"
                      for t, o in outcomes.items() if o != "passed" and reported(t) == "passed"
                      and t not in canaries][:5]
        if stream.finish is not None and run.exit_code is not None and stream.finish != run.exit_code:
            tampering.append(f"exit: the session ended with status {stream.finish} but pytest exited {run.exit_code}")
        if stream.finish is None and run.exit_code == 0:
            tampering.append("exit: pytest exited 0 but its session never ended")
        if stream.finish is not None:
            # The session ended: the guard's record and the report must both be there.
            if stream.guard is None:
                tampering.append("guard: its record of the session never reached the stream")
            else:
                tampering += [f"guard: {finding}" for finding in stream.guard]
            if not run.has_report:
                tampering.append("report: the session ended but no report was written")
    if run.exit_code == 0 and not clean_exit:
        what = "no report" if not run.has_report else f"{sum(o not in _NOT_FAILURES for o in outcomes.values())} selected tests failed or missing"
        tampering.append(f"exit: pytest exited 0 with {what}")
    return RunVerdict(outcomes=outcomes, all_passed=all_passed, canaries_passed=canaries_passed, exit_ok=run.exit_code == (0 if clean_exit else 1),
                      tampering=tampering)


def fails_as_twin(twin: Twin, run: RunResult, nodeid: str) -> bool:
    """Whether gold failed a twin's test ``nodeid`` in a calibration run, and failed it the way
    the twin fails a correct solution: a check that does not hold (an assertion), or for a
    raises twin, the expected exception not raised as the twin expects it. Anything else (an
    error of a state the test counts on that calibration did not give it: a global an earlier
    test sets, a data file named after the test) says nothing of what the twin does in its test's
    place, where a twin that alters nothing the test's outcome depends on passes."""
    streamed = run.stream.outcomes if run.stream is not None else {}
    if streamed.get(nodeid) != "failed":
        return False
    result = run.results.get(nodeid)
    message = result.message if result is not None else ""
    if twin.kind == "raises":
        return not message.startswith("Failed: DID NOT RAISE")
    return message.startswith(("assert ", "AssertionError"))
