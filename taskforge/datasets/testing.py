"""Test helpers that ship with the library: deterministic rows of realistic shape.

They are *synthetic* rows (no repository behind them), for exercising writers and readers at
volume: a crash test needs thousands of rows, and mining them would take hours. The values have
the shapes of mined rows: diffs of tens of lines, hundreds of PASS_TO_PASS ids, JSON columns.
Tests that need real rows use ``datasets/sample/`` instead.
"""

from __future__ import annotations

import hashlib
import json
import random
from datetime import UTC, datetime, timedelta
from typing import Any

from taskforge.difficulty import difficulty_of
from taskforge.task import Task

__all__ = ["reward_rows", "task_rows"]

_STRATEGIES = ("body", "symbol", "module")


def _diff(rng: random.Random, path: str, lines: int, sign: str) -> str:
    body = "".join(f"{sign}    value_{rng.randrange(10**6)} = compute_{rng.randrange(10**6)}(arg)\n" for _ in range(lines))
    return (f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1,{lines} +1,{lines} @@\n" + body)


def task_rows(n: int, *, seed: int = 0, repos: int = 3, start: int = 0) -> list[dict[str, Any]]:
    """``n`` task rows (rows ``start`` .. ``start + n - 1`` of the seed's sequence: the same index
    always gives the same row)."""
    rows = []
    for index in range(start, start + n):
        rng = random.Random(f"{seed}:{index}")
        repo = f"demo{index % repos}"
        strategy = _STRATEGIES[index % len(_STRATEGIES)]
        target = f"{repo}.mod{rng.randrange(20)}:feature_{index}"
        lines = rng.randrange(3, 60)
        fail = [f"tests/test_mod.py::test_feature_{index}_{k}" for k in range(rng.randrange(1, 12))]
        passing = [f"tests/test_other{k % 7}.py::test_case_{k}" for k in range(rng.randrange(20, 300))]
        digest = hashlib.sha256(f"{seed}:{index}".encode()).hexdigest()
        rows.append({
            "instance_id": f"{repo}__{strategy}-feature-{index}-{digest[:10]}",
            "repo": repo,
            "source": f"pypi:{repo}==1.{index % repos}",
            "base_commit": hashlib.sha1(f"start:{seed}:{index}".encode()).hexdigest(),
            "source_commit": hashlib.sha1(f"source:{seed}:{index % repos}".encode()).hexdigest(),
            "version": f"1.{index % repos}",
            "strategy": strategy,
            "target": target,
            "removed": [target],
            "patch": _diff(rng, f"{repo}/mod.py", lines, "+"),
            "test_patch": _diff(rng, "tests/test_mod.py", len(fail) * 4, "+"),
            "removal_patch": _diff(rng, f"{repo}/mod.py", lines, "-"),
            "problem_statement": f"`{target}` is not implemented.\n\n" + "Describe it. " * rng.randrange(5, 40),
            "FAIL_TO_PASS": fail,
            "PASS_TO_PASS": passing,
            "hidden_tests": fail,
            "image_name": f"taskforge-env-{repo}:{digest[10:26]}",
            "environment": json.dumps({"image": f"taskforge-env-{repo}:{digest[10:26]}", "import_roots": ["."]}),
            "lines_removed": lines,
            "validation": json.dumps({"affected_s": [round(rng.uniform(0.2, 3), 3) for _ in range(2)],
                                      "start_state_s": [round(rng.uniform(0.5, 9), 3)], "repeats": 2}),
            "audit": json.dumps({"clean": index % 11 != 5, "findings": [] if index % 11 != 5 else [{"kind": "ngram"}],
                                 "files": rng.randrange(50, 900), "seconds": round(rng.uniform(0.05, 2), 3),
                                 "image_scanned": True}),
            "seed": seed,
            "taskforge_version": "0.1.0",
            "solve_rate": None,
            "solve_attempts": 0,
        })
        rows[-1].update(difficulty_of(rows[-1]).columns())
    return rows


def reward_rows(tasks: list[dict[str, Any]], *, candidates: tuple[str, ...] = ("gold", "empty")) -> list[dict[str, Any]]:
    """One reward row per task and candidate: ``gold`` scores 1, ``empty`` 0, others at random."""
    rows: list[dict[str, Any]] = []
    when = datetime(2026, 1, 1, tzinfo=UTC)
    for task in tasks:
        for candidate in candidates:
            rng = random.Random(f"{task['instance_id']}:{candidate}")
            patch = task["patch"] if candidate == "gold" else "" if candidate == "empty" else _diff(rng, "x.py", 3, "+")
            fail_passed = {"gold": len(task["FAIL_TO_PASS"]), "empty": 0}.get(candidate,
                                                                               rng.randrange(len(task["FAIL_TO_PASS"]) + 1))
            tampered = candidate not in ("gold", "empty") and rng.random() < 0.1
            all_pass = fail_passed == len(task["FAIL_TO_PASS"]) and not tampered
            rows.append({
                "instance_id": task["instance_id"],
                "candidate_id": candidate,
                "patch_sha256": hashlib.sha256(patch.encode()).hexdigest(),
                "patch": patch,
                "reward": 1.0 if all_pass else 0.0,
                "mode": "binary",
                "status": "tampered" if tampered else "ok",
                "FAIL_TO_PASS_passed": task["FAIL_TO_PASS"][:fail_passed],
                "FAIL_TO_PASS_failed": task["FAIL_TO_PASS"][fail_passed:],
                "PASS_TO_PASS_passed": task["PASS_TO_PASS"],
                "PASS_TO_PASS_failed": [],
                "outcomes": json.dumps({**dict.fromkeys(task["FAIL_TO_PASS"][:fail_passed], "passed"),
                                        **dict.fromkeys(task["FAIL_TO_PASS"][fail_passed:], "failed"),
                                        **dict.fromkeys(task["PASS_TO_PASS"], "passed")}),
                "tampered": tampered,
                "tampering": ["test file modified tests/test_mod.py"] if tampered else [],
                "dropped": ["test file modified tests/test_mod.py"] if tampered else [],
                "detail": "test file modified tests/test_mod.py" if tampered else "",
                "apply_s": round(rng.uniform(0.01, 0.2), 3),
                "test_s": round(rng.uniform(0.5, 9), 3),
                "total_s": round(rng.uniform(1, 12), 3),
                "image_name": task["image_name"],
                "task_sha256": Task.from_row(task).grading_sha256,
                "scorer_version": "1",
                "taskforge_version": "0.1.0",
                "scored_at": when + timedelta(seconds=len(rows)),
            })
    return rows
