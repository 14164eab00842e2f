"""Rejection reasons are one fixed vocabulary (taskforge.task.RejectReason), and every reason a
check, a removal agent or a statement writer can give is in it."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import pytest

from taskforge.errors import TaskforgeError
from taskforge.mining.outcome import Rejected, RepoResult
from taskforge.repo.suite import RunStatus
from taskforge.scoring.rewards import RewardStatus
from taskforge.task import RejectReason, reject_reason

PACKAGE = Path(__file__).resolve().parents[2] / "taskforge"
# What a candidate's removal, hiding and statement can raise (caught and turned into a rejection).
RAISERS = ["mining/removal", "mining/hiding.py", "mining/statements", "llm", "errors.py"]


def _reason_literals(path: Path) -> set[str]:
    """Every ``reason=`` a file passes (a string, or a module constant holding one), and every
    ``reason = "..."`` of an error class."""
    tree = ast.parse(path.read_text())
    constants = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
                 for t in n.targets if isinstance(t, ast.Name)}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "reason":
            if isinstance(node.value, ast.Constant):
                found.add(node.value.value)
            elif isinstance(node.value, ast.Name) and node.value.id in constants:
                found.add(constants[node.value.id])
        if isinstance(node, ast.ClassDef):
            found |= {n.value.value for n in node.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
                      and any(isinstance(t, ast.Name) and t.id == "reason" for t in n.targets)}
    return found


def test_every_reason_an_agent_or_writer_raises_is_in_the_vocabulary() -> None:
    files = [p for rel in RAISERS for p in ([PACKAGE / rel] if rel.endswith(".py") else (PACKAGE / rel).rglob("*.py"))]
    reasons = set().union(*(_reason_literals(p) for p in files))
    # The repository-level errors of errors.py are never a candidate's; the rest must be members.
    repository_level = {"source_unavailable", "dependency_unresolvable", "environment_build_failed", "no_tests",
                        "sandbox_unavailable",
                        "config_error", "taskforge_error"}
    assert {"removal_not_applicable", "unhideable_test", "llm_timeout"} <= reasons
    assert sorted(r for r in reasons - repository_level if reject_reason(r) == RejectReason.AGENT_FAILED) == []


def test_every_status_a_check_turns_into_a_reason_is_a_member() -> None:
    for status in set(get_args(RunStatus)) - {"ok", "tests_failed"}:
        assert RejectReason(f"affected_{status}") and RejectReason(f"start_state_{status}")
    for status in set(get_args(RewardStatus)) - {"ok"}:
        assert RejectReason(f"scorer_{status}")


def test_every_rejection_a_check_writes_names_a_member() -> None:
    """The checks name members (RejectReason.X, or RejectReason(f"<stage>_{status}")), never bare strings."""
    checks = ast.parse((PACKAGE / "mining" / "checks.py").read_text())
    calls = [n for n in ast.walk(checks) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "Rejected"]
    assert len(calls) > 15
    assert [ast.unparse(c) for c in calls if c.args and isinstance(c.args[0], ast.Constant)] == []


def test_a_reason_outside_the_vocabulary_is_refused_and_an_unknown_error_keeps_its_own() -> None:
    with pytest.raises(ValueError):
        Rejected("not_a_reason")  # type: ignore[arg-type]
    known = Rejected.of_error(TaskforgeError("x is private", reason="removal_not_applicable"))
    assert (known.reason, known.detail) == (RejectReason.REMOVAL_NOT_APPLICABLE, "x is private")
    other = Rejected.of_error(TaskforgeError("disk full", reason="disk_full"))
    assert (other.reason, other.detail) == (RejectReason.AGENT_FAILED, "disk full [disk_full]")


def test_summaries_hold_the_plain_strings() -> None:
    import json

    result = RepoResult(source="local:x")
    result.reject("pkg.f", "body", Rejected(RejectReason.GOLD_FAILS, "t: failed"))
    assert json.loads(json.dumps({"rejections": result.rejections, "rejected": result.rejected})) == {
        "rejections": {"gold_fails": 1},
        "rejected": [{"target": "pkg.f", "strategy": "body", "reason": "gold_fails", "detail": "t: failed"}]}
    assert type(result.rejected[0]["reason"]) is str
