"""Mining real corpus projects end to end, then checking every task from its shard alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from taskforge.datasets import read_tasks
from taskforge.mining.revalidate import check_task
from taskforge.mining.statements.template import leaked_lines
from taskforge.repo.sources import fetch
from taskforge.repo.symbols import build_index

pytestmark = pytest.mark.docker

@pytest.fixture(scope="module")
def mined(mined_corpus):  # type: ignore[no-untyped-def]
    return mined_corpus


def test_mine_writes_valid_tasks_with_a_summary(mined) -> None:  # type: ignore[no-untyped-def]
    out, stdout = mined
    tasks = read_tasks(out)
    summary = json.loads((out / "mine-summary.json").read_text())
    assert "valid tasks" in stdout and "time per stage" in stdout
    assert len(tasks) == summary["totals"]["tasks"] >= 6
    assert {t.repo for t in tasks} == {"iniconfig", "addict"}
    assert len({t.instance_id for t in tasks}) == len(tasks)
    assert len({t.strategy for t in tasks}) >= 2
    for task in tasks:
        assert task.FAIL_TO_PASS and task.PASS_TO_PASS
        assert not set(task.FAIL_TO_PASS) & set(task.PASS_TO_PASS)
        assert task.patch.startswith("diff --git") and task.test_patch.startswith("diff --git")
        assert "/test" not in task.patch.split("\n", 1)[0]


def test_every_rejection_is_explained(mined, session_cache) -> None:  # type: ignore[no-untyped-def]
    out, _ = mined
    summary = json.loads((out / "mine-summary.json").read_text())
    rejected = [r for repo in summary["repositories"] for r in repo["rejected"]]
    for repo in summary["repositories"]:
        assert len(repo["rejected"]) == sum(repo["rejections"].values()) == repo["attempted"] + repo["refused"] - repo["tasks"]
        # A refusal before any run is listed among the rejections and costs no attempt.
        assert repo["refused"] == repo["rejections"].get("removal_not_applicable", 0)
        assert repo["attempted"] <= 60
        assert repo["tests"] >= repo["passing"] > 0 and repo["fork_server"]
    for row in rejected:
        assert row["target"] and row["strategy"] in ("body", "symbol", "module") and row["reason"] and row["detail"]
    proc = subprocess.run([sys.executable, "-m", "taskforge.cli", "inspect", str(out), "--rejections"],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "TASKFORGE_CACHE": str(session_cache)})
    assert proc.returncode == 0, proc.stderr
    assert f"{len(rejected)} rejection(s)" in proc.stdout
    for row in rejected:
        assert row["target"] in proc.stdout and row["reason"] in proc.stdout


@pytest.mark.slow  # the same check as test_validate_cli_confirms_every_task, in this process
def test_every_task_holds_when_rebuilt_from_its_row(mined, backend, base_image) -> None:  # type: ignore[no-untyped-def]
    out, _ = mined
    for task in read_tasks(out):
        check = check_task(task, backend=backend, base=base_image)
        assert check.ok, (task.instance_id, check.problems)


def test_no_statement_quotes_removed_code(mined, session_cache) -> None:  # type: ignore[no-untyped-def]
    """The removed code is rebuilt from the original snapshot, independently of the miner."""
    out, _ = mined
    checked = 0
    for task in read_tasks(out):
        snapshot = fetch(task.source)
        env = json.loads(task.environment)
        index = build_index(snapshot.path, package_paths=env["package_paths"])
        removed_code = {}
        for qualname in task.removed:
            if qualname in index.symbols:
                symbol = index.symbols[qualname]
                lines = (snapshot.path / symbol.path).read_text().splitlines()
                removed_code[qualname] = "\n".join(lines[symbol.start_line - 1 : symbol.end_line])
            else:  # a module
                removed_code[qualname] = (snapshot.path / index.modules[qualname]).read_text()
        assert removed_code, task.instance_id
        assert leaked_lines(task.problem_statement, removed_code) == [], task.instance_id
        checked += 1
    assert checked >= 6


def test_validate_cli_confirms_every_task(mined, session_cache) -> None:  # type: ignore[no-untyped-def]
    out, _ = mined
    proc = subprocess.run(
        [sys.executable, "-m", "taskforge.cli", "validate", str(out)],
        capture_output=True, text=True, timeout=1800, env={**os.environ, "TASKFORGE_CACHE": str(session_cache)},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "BROKEN" not in proc.stdout


def test_every_task_was_scrubbed_and_audited_clean(mined) -> None:  # type: ignore[no-untyped-def]
    out, _ = mined
    for task in read_tasks(out):
        audit = json.loads(task.audit)
        assert audit["clean"] and audit["findings"] == [], (task.instance_id, audit["findings"])
        assert audit["image_scanned"] and audit["files"] > 1000  # the image's site-packages were read
        assert sum(audit["fingerprint"].values()) > 0
        assert len(task.base_commit) == 40 and task.base_commit != task.source_commit


def test_audit_cli_stores_results_and_checkout_writes_the_agent_view(mined, session_cache, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out, _ = mined
    env = {**os.environ, "TASKFORGE_CACHE": str(session_cache)}
    before = {t.instance_id: t for t in read_tasks(out)}
    proc = subprocess.run([sys.executable, "-m", "taskforge.cli", "audit", str(out)],
                          capture_output=True, text=True, timeout=1800, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert f"{len(before)} of {len(before)} tasks clean" in proc.stdout
    after = {t.instance_id: t for t in read_tasks(out)}
    assert after.keys() == before.keys()
    for instance_id, task in after.items():
        assert json.loads(task.audit)["clean"] and task.base_commit == before[instance_id].base_commit

    task = next(iter(after.values()))
    dest = tmp_path / "agent-view"
    proc = subprocess.run([sys.executable, "-m", "taskforge.cli", "checkout", str(out), task.instance_id, str(dest)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    git = lambda *args: subprocess.run(["git", *args], cwd=dest, capture_output=True, text=True, check=True).stdout  # noqa: E731
    assert git("rev-list", "--all").split() == [task.base_commit]
    assert git("status", "--porcelain") == ""
    assert not (dest / ".git" / "logs").exists()
    assert subprocess.run(["git", "apply", "--check", "-"], cwd=dest, input=task.test_patch + task.patch,
                          text=True, capture_output=True).returncode == 0


def test_a_failing_repository_is_recorded_and_the_run_goes_on(tmp_path, session_cache, base_image) -> None:  # type: ignore[no-untyped-def]
    env = {**os.environ, "TASKFORGE_CACHE": str(session_cache)}
    bad = "pypi:taskforge-no-such-project-x7q==1.0"
    proc = subprocess.run(
        [sys.executable, "-m", "taskforge.cli", "mine", bad, "pypi:iniconfig==2.3.1", "--out", str(tmp_path / "a"), "--max-tasks", "1"],
        capture_output=True, text=True, timeout=900, env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((tmp_path / "a" / "mine-summary.json").read_text())
    assert summary["failures"][bad].endswith("[source_not_found]")
    assert summary["totals"]["tasks"] == 1
    shown = subprocess.run([sys.executable, "-m", "taskforge.cli", "inspect", str(tmp_path / "a"), "--rejections"],
                           capture_output=True, text=True, timeout=120, env=env)
    assert shown.returncode == 0 and bad in shown.stdout and "source_not_found" in shown.stdout, shown.stdout
    assert len(read_tasks(tmp_path / "a")) == 1
    # Resuming retries the failed source; its failure stays on record (until an outcome replaces
    # it), and the finished one is skipped.
    again = subprocess.run(
        [sys.executable, "-m", "taskforge.cli", "mine", bad, "pypi:iniconfig==2.3.1", "--out", str(tmp_path / "a"), "--max-tasks", "1"],
        capture_output=True, text=True, timeout=900, env=env,
    )
    assert again.returncode == 1 and "already mined" in again.stderr, again.stderr[-2000:]
    resumed = json.loads((tmp_path / "a" / "mine-summary.json").read_text())
    assert resumed["failures"] == summary["failures"] and resumed["totals"]["failed"] == 1
    only_bad = subprocess.run(
        [sys.executable, "-m", "taskforge.cli", "mine", bad, "--out", str(tmp_path / "b")],
        capture_output=True, text=True, timeout=900, env=env,
    )
    assert only_bad.returncode == 1


@pytest.mark.slow
def test_one_line_tracebacks_validate_the_same_tasks(backend, base_image) -> None:  # type: ignore[no-untyped-def]
    """``tracebacks = "line"`` only shortens what pytest prints about the failing tests: the same
    candidates become the same tasks, with the same tests, as with the project's own style."""
    from taskforge.mining.pipeline import MineConfig, mine_repository
    from taskforge.scoring.scorer import Scorer

    with Scorer(backend=backend) as scorer:
        results = [
            mine_repository("pypi:addict==2.4.0", config=MineConfig(max_tasks=2, max_attempts=8, seed=0, tracebacks=style),
                            backend=backend, base=base_image, scorer=scorer)
            for style in (None, "line")
        ]
    tasks = [[(t.instance_id, t.FAIL_TO_PASS, t.PASS_TO_PASS, t.patch, t.test_patch) for t in r.tasks] for r in results]
    assert len(tasks[0]) == 2 and tasks[0] == tasks[1]
    assert results[0].rejections == results[1].rejections


def test_a_suite_that_outgrows_the_sandbox_memory_is_recorded_with_what_to_change(tmp_path, session_cache, base_image) -> None:  # type: ignore[no-untyped-def]
    """The baseline's OOM names the limit and the recipe setting to raise."""
    project = tmp_path / "hungry"
    (project / "hungry").mkdir(parents=True)
    (project / "tests").mkdir()
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "hungry"\nversion = "0.1"\n[project.optional-dependencies]\ntest = ["pytest"]\n'
        '[tool.setuptools]\npackages = ["hungry"]\n')
    (project / "hungry" / "__init__.py").write_text("def grow(mb):\n    return bytearray(mb << 20)\n")
    (project / "tests" / "test_small.py").write_text(
        "".join(f"def test_small_{i}():\n    assert True\n" for i in range(9)))
    (project / "tests" / "test_zbig.py").write_text(
        "from hungry import grow\n\ndef test_big():\n    assert len(grow(2048)) > 0\n")
    recipe = tmp_path / "hungry.toml"
    recipe.write_text(f'name = "hungry"\nout = "{tmp_path / "out"}"\nsources = ["{project}"]\n'
                      '[sandbox]\nmemory_mb = 384\n[ray]\naddress = "inline"\n')
    proc = subprocess.run([sys.executable, "-m", "taskforge.cli", "mine", "--recipe", str(recipe)],
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "TASKFORGE_CACHE": str(session_cache)})
    assert proc.returncode == 1, proc.stderr[-2000:]
    (failure,) = json.loads((tmp_path / "out" / "mine-summary.json").read_text())["failures"].values()
    assert failure.endswith("[baseline_oom]"), failure
    assert "did not run (oom): the suite needed more than the sandbox's 384 MB" in failure, failure
    assert "raise [sandbox] memory_mb in the recipe" in failure
