"""``taskforge inspect``: the numbers of a task folder, as tables and PNG histograms."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner

from taskforge.cli import main
from taskforge.datasets import REWARDS, TASKS, DatasetWriter, WriterConfig, run_versions
from taskforge.datasets.stats import REWARDS_DIR, Distribution, render, summarize
from taskforge.datasets.testing import reward_rows, task_rows

ROWS = task_rows(60)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tasks")
    rows = [dict(row) for row in ROWS]
    rows[0]["audit"] = ""  # never audited
    with DatasetWriter(out, kind=TASKS, recipe={}, versions=run_versions(), config=WriterConfig(rows_per_shard=25)) as w:
        w.write(rows, prefix="tasks")
    with DatasetWriter(out / REWARDS_DIR, kind=REWARDS, recipe={}, versions=run_versions()) as w:
        w.write(reward_rows(ROWS[:20], candidates=("gold", "empty", "model")), prefix="rewards")
        # Rows of another version of a task (mined again since), and of a task no longer here.
        w.write([{**row, "task_sha256": "0" * 64} for row in reward_rows(ROWS[:2], candidates=("older",))]
                + reward_rows([{**ROWS[0], "instance_id": "gone__body-f-0000000000"}], candidates=("gold",)),
                prefix="rewards")
    return out


def test_summary_counts_match_the_rows(folder: Path) -> None:
    summary = summarize(folder)
    assert summary.tasks == 60
    assert {repo: sum(c.values()) for repo, c in summary.per_repo.items()} == {"demo0": 20, "demo1": 20, "demo2": 20}
    assert dict(summary.per_strategy) == {"body": 20, "symbol": 20, "module": 20}
    assert sorted(summary.fail_to_pass.values) == sorted(len(r["FAIL_TO_PASS"]) for r in ROWS)
    assert summary.lines_removed.quantile(0.5) == sorted(r["lines_removed"] for r in ROWS)[30]
    first = json.loads(ROWS[0]["validation"])
    assert summary.validation_s.values[0] == pytest.approx(sum(first["affected_s"]) + sum(first["start_state_s"]))
    flagged = sum(not json.loads(r["audit"])["clean"] for r in ROWS[1:])
    assert summary.audit["findings"] == flagged and summary.audit["not audited"] == 1
    assert summary.audit["clean"] == 59 - flagged and summary.audit_s.count == 59
    rewards = summary.rewards
    assert rewards is not None and rewards.rows == 60 and rewards.tasks == 20 and rewards.other == 3
    assert "older" not in rewards.by_candidate
    assert rewards.by_candidate["gold"] == (20, 1.0, 1.0) and rewards.by_candidate["empty"] == (20, 0.0, 0.0)
    assert rewards.tampered == rewards.status["tampered"]


def test_render_prints_every_table(folder: Path) -> None:
    text = render(summarize(folder))
    for heading in ("tasks per repository", "tasks per strategy", "FAIL_TO_PASS tests", "lines removed",
                    "validation time (s)", "audit", "rewards: 60 rows for 20 tasks", "reward status",
                    "(3 more scored another version of their task, or a task no longer here: left out)"):
        assert heading in text
    mean = statistics.fmean(len(r["FAIL_TO_PASS"]) for r in ROWS)
    assert f"{mean:.3g}" in text.split("FAIL_TO_PASS tests", 1)[1].splitlines()[0]


def test_distribution_of_nothing() -> None:
    empty = Distribution(label="x", values=())
    assert empty.row() == ["x", "0", "-", "-", "-", "-", "-"]


def test_inspect_command_prints_tables_and_writes_png_histograms(folder: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    result = CliRunner().invoke(main, ["inspect", str(folder), "--plots", str(tmp_path / "plots")])
    assert result.exit_code == 0, result.output
    assert "tasks per repository" in result.output
    pngs = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert pngs == ["audit_time_s.png", "difficulty_estimate.png", "fail_to_pass_tests.png", "lines_removed.png",
                    "pass_to_pass_tests.png", "reward.png", "scoring_time_s.png", "validation_time_s.png"]
    assert "difficulty bands" in result.output and "difficulty estimate by strategy" in result.output
    assert all((tmp_path / "plots" / p).read_bytes().startswith(b"\x89PNG\r\n\x1a\n") for p in pngs)


def test_inspect_of_a_folder_that_is_not_a_dataset_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["inspect", str(tmp_path)])
    assert result.exit_code == 1
    assert result.output.strip().endswith("[no_manifest]") and result.output.count("\n") == 1


def test_rejections_are_read_from_the_mining_summary(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from taskforge.datasets.stats import read_rejections, render_rejections
    from taskforge.errors import TaskforgeError

    with pytest.raises(TaskforgeError, match="mine-summary.json"):
        read_rejections(tmp_path)
    (tmp_path / "mine-summary.json").write_text(json.dumps({
        "repositories": [{"source": "pypi:a==1", "rejected": [
            {"target": "a.m:f", "strategy": "body", "reason": "audit_findings",
             "detail": "/opt/venv/lib/a.py (python): def f(x, y)"},
            {"target": "a.m:g", "strategy": "symbol", "reason": "breaks_other_tests",
             "detail": "tests/test_a.py::test_h: failed: AssertionError: " + "x" * 300}]}],
        "failures": {"pypi:b==2": "no test of pypi:b==2 passes reliably [no_passing_tests]"},
    }))
    rows = read_rejections(tmp_path)
    assert [(r["source"], r["target"], r["reason"]) for r in rows] == [
        ("pypi:a==1", "a.m:f", "audit_findings"), ("pypi:a==1", "a.m:g", "breaks_other_tests"),
        ("pypi:b==2", "-", "no_passing_tests")]
    text = render_rejections(rows, width=60)
    assert "3 rejection(s)" in text and "/opt/venv/lib/a.py (python): def f(x, y)" in text
    assert "x" * 80 not in text and "…" in text  # long details are cut
    assert "breaks_other_tests" in text.split("by reason")[1]
