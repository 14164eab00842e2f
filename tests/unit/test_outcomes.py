"""The outcome stream as the scorer reads it (taskforge.repo.suite.parse_stream) and the verdict
of one run (taskforge.scoring.verdict.judge_run): what an honest run gives, and what cannot be
honest. The supervisor and plugin that write the stream run for real in
tests/integration/test_scorer_integrity.py and test_redteam.py."""

from __future__ import annotations

import json
from dataclasses import replace

from taskforge.repo.junit import TestResult
from taskforge.repo.suite import RunResult, parse_stream
from taskforge.scoring.verdict import judge_run


def _lines(*records: object) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def test_an_honest_stream() -> None:
    stream = parse_stream(_lines({"t": "a.py::t1", "o": "passed"}, {"t": "a.py::t2", "o": "failed"}, {"finish": 1}))
    assert stream.outcomes == {"a.py::t1": "passed", "a.py::t2": "failed"}
    assert stream.finish == 1 and stream.faults == ()


def test_what_no_honest_stream_holds() -> None:
    stream = parse_stream(_lines({"t": "a.py::t1", "o": "failed"}, {"t": "a.py::t1", "o": "passed"}, {"finish": 0},
                                 {"t": "a.py::t2", "o": "passed"}, {"finish": 0}, {"x": 1}) + "not json\n",
                          overflow=True, closed=False)
    assert stream.outcomes == {"a.py::t1": "failed"}  # the first line of a test counts
    assert len(stream.faults) == 7, stream.faults
    assert any("again" in f for f in stream.faults) and any("after the session ended" in f for f in stream.faults)


def _run(stream_text: str, report: dict[str, str], exit_code: int) -> RunResult:
    return RunResult(status="ok", exit_code=exit_code, duration_s=1.0,
                     results={k: TestResult(nodeid=k, outcome=v, duration_s=0.0, message="") for k, v in report.items()},  # type: ignore[arg-type]
                     collection_errors=(), output_tail="", truncated=False, has_report=True,
                     properties=(("taskforge.guard", "1"),), stream=parse_stream(stream_text))


def test_judge_takes_outcomes_from_the_stream_and_holds_the_report_to_it() -> None:
    honest = _run(_lines({"t": "t1", "o": "passed"}, {"t": "c1", "o": "failed"}, {"guard": []}, {"finish": 1}),
                  {"t1": "passed", "c1": "failed"}, 1)
    verdict = judge_run(honest, ["t1", "c1"], canaries=frozenset({"c1"}))
    assert (verdict.all_passed, verdict.exit_ok, verdict.tampering) == (True, True, [])

    rewritten = _run(_lines({"t": "t1", "o": "failed"}, {"finish": 1}), {"t1": "passed"}, 0)
    verdict = judge_run(rewritten, ["t1"])
    assert not verdict.all_passed and verdict.outcomes == {"t1": "failed"}
    assert any("passed in the report but was failed as it ran" in t for t in verdict.tampering)
    assert any("ended with status 1 but pytest exited 0" in t for t in verdict.tampering)

    canary = _run(_lines({"t": "t1", "o": "passed"}, {"t": "c1", "o": "passed"}, {"guard": []}, {"finish": 0}),
                  {"t1": "passed", "c1": "passed"}, 0)
    # A twin that passed is reported; whether it is tampering depends on its test in the other run
    # (Scorer._judge: the test passed as itself too).
    passed_twin = judge_run(canary, ["t1", "c1"], canaries=frozenset({"c1"}))
    assert passed_twin.canaries_passed == ["c1"] and passed_twin.tampering == []

    stray = _run(_lines({"t": "t1", "o": "passed"}, {"t": "zz", "o": "passed"}, {"guard": []}, {"finish": 0}),
                 {"t1": "passed"}, 0)
    assert any("zz ran but was not selected" in t for t in judge_run(stray, ["t1"]).tampering)

    unended = _run(_lines({"t": "t1", "o": "passed"}), {"t1": "passed"}, 0)
    assert any("session never ended" in t for t in judge_run(unended, ["t1"]).tampering)


def test_the_guards_record_and_the_report_must_arrive_when_the_session_ends() -> None:
    silent = _run(_lines({"t": "t1", "o": "passed"}, {"finish": 0}), {"t1": "passed"}, 0)
    assert any("guard: its record" in t for t in judge_run(silent, ["t1"]).tampering)
    found = _run(_lines({"t": "t1", "o": "passed"}, {"guard": ["hook x implemented in /w/m.py"]}, {"finish": 0}),
                 {"t1": "passed"}, 0)
    assert "guard: hook x implemented in /w/m.py" in judge_run(found, ["t1"]).tampering
    unreported = replace(_run(_lines({"t": "t1", "o": "passed"}, {"guard": []}, {"finish": 0}), {"t1": "passed"}, 0),
                         has_report=False, properties=())
    assert any("no report was written" in t for t in judge_run(unreported, ["t1"]).tampering)
    twice = parse_stream(_lines({"guard": []}, {"guard": []}))
    assert twice.faults == ("the guard reported twice",)


def test_only_a_clean_scoring_with_a_few_reported_failures_is_scored_again() -> None:
    """``_worth_scoring_again``: a scoring whose only failures are a few PASS_TO_PASS tests, each
    reported failed, in sessions that ended with the guard's record and a report, is scored once
    more in full; anything else is judged as it is (the independent red team's early exit, which
    leaves tests unrun and the guard's record unsent, among them)."""
    from taskforge.datasets.testing import task_rows
    from taskforge.scoring.scorer import _worth_scoring_again
    from taskforge.scoring.verdict import Part
    from taskforge.task import Task

    task = replace(Task.from_row(task_rows(1)[0]), FAIL_TO_PASS=("f1",), PASS_TO_PASS=("p1", "p2"))

    def scoring(outcomes: dict[str, str], *, finish: int | None = 1, guard: bool = True) -> list[tuple[Part, RunResult]]:
        records: list[object] = [{"t": t, "o": o} for t, o in outcomes.items() if o != "missing"]
        records += [{"guard": []}] if guard else []
        records += [{"finish": finish}] if finish is not None else []
        exit_code = 0 if all(o == "passed" for o in outcomes.values()) else 1
        run = _run(_lines(*records), {t: o for t, o in outcomes.items() if o != "missing"}, exit_code)
        return [(Part(changes={}, select=list(outcomes), canaries=frozenset()), run)]

    assert _worth_scoring_again(task, scoring({"f1": "passed", "p1": "failed", "p2": "passed"})) == ["p1"]
    assert _worth_scoring_again(task, scoring({"f1": "passed", "p1": "passed", "p2": "passed"})) == []
    assert _worth_scoring_again(task, scoring({"f1": "failed", "p1": "failed", "p2": "passed"})) == []
    # A session cut short: tests that never ran, no end, no guard record.
    assert _worth_scoring_again(task, scoring({"f1": "passed", "p1": "failed", "p2": "missing"}, finish=None,
                                              guard=False)) == []
    assert _worth_scoring_again(task, scoring({"f1": "passed", "p1": "failed", "p2": "missing"})) == []
    assert _worth_scoring_again(task, scoring({"f1": "passed", "p1": "failed", "p2": "passed"}, guard=False)) == []


def test_exit_zero_with_a_skip_is_no_forgery_but_with_a_failure_it_is() -> None:
    """pytest exits 0 when tests skip: a test the candidate's code makes skip is not passed (the
    reward counts it so), but it is no sign of a forged exit status (a false ``tampered`` on
    jsonpickle's held-out task, whose ecdsa test skips where ecdsa is not installed)."""
    skipped = _run(_lines({"t": "t1", "o": "passed"}, {"t": "t2", "o": "skipped"}, {"guard": []}, {"finish": 0}),
                   {"t1": "passed", "t2": "skipped"}, 0)
    verdict = judge_run(skipped, ["t1", "t2"])
    assert verdict.tampering == [] and verdict.exit_ok and not verdict.all_passed
    failed = _run(_lines({"t": "t1", "o": "passed"}, {"t": "t2", "o": "failed"}, {"guard": []}, {"finish": 0}),
                  {"t1": "passed", "t2": "failed"}, 0)
    assert any(t.startswith("exit: pytest exited 0 with 1 selected tests failed") for t in judge_run(failed, ["t1", "t2"]).tampering)


def test_a_finding_the_guard_sent_as_it_made_it_counts_whatever_its_last_record_says() -> None:
    """The guard sends each finding as it notes it: code that empties the guard's lists before the
    session ends (an eleventh red team cleared ``_early``) leaves the last record empty, and the
    finding stands all the same."""
    erased = _run(_lines({"noted": "a trace function set from /w/feature.py"}, {"t": "t1", "o": "passed"},
                         {"guard": []}, {"finish": 0}), {"t1": "passed"}, 0)
    assert erased.stream is not None and erased.stream.faults == ()
    assert "guard: a trace function set from /w/feature.py" in judge_run(erased, ["t1"]).tampering
    both = parse_stream(_lines({"noted": "x"}, {"guard": ["x", "y"]}, {"finish": 0}))
    assert both.guard == ("x", "y")
