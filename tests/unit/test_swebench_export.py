"""The SWE-bench export's harness fields: ids its log parser can read, the refusal when two
collide, the eval script, and the folder form that load_dataset and mini-swe-agent read."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from taskforge.datasets import TASKS, DatasetWriter, run_versions
from taskforge.datasets.export import export_swebench
from taskforge.datasets.swebench import EVAL_TYPE, LOG_PARSER, eval_config, eval_script, harness_id, harness_ids
from taskforge.datasets.testing import task_rows
from taskforge.errors import TaskforgeError


def test_harness_ids_have_no_whitespace_and_leave_other_ids_alone() -> None:
    assert harness_id("tests/test_x.py::test_a[1-2]") == "tests/test_x.py::test_a[1-2]"
    assert harness_id("t.py::test_tokenize[blank line]") == "t.py::test_tokenize[blank\\x20line]"
    assert harness_id("t.py::test[a\tb\u00a0c\u2003d]") == "t.py::test[a\\x09b\\xa0c\\u2003d]"
    for nodeid in ("t.py::test[a b]", "t.py::test[\n]", "t.py::test[\x1c]", "t.py::test[ \u3000 ]"):
        assert len(harness_id(nodeid).split()) == 1  # what the harness's parser takes as the id


def test_two_ids_that_collide_are_refused_naming_both() -> None:
    assert harness_ids("x", ["t.py::a[b c]", "t.py::a[b_c]"]) == {"t.py::a[b c]": "t.py::a[b\\x20c]",
                                                                 "t.py::a[b_c]": "t.py::a[b_c]"}
    with pytest.raises(TaskforgeError, match=r"'t.py::a\[b c\]' and 't.py::a\[b\\\\x20c\]' have the same") as err:
        harness_ids("x", ["t.py::a[b c]", "t.py::a[b\\x20c]"])
    assert err.value.reason == "harness_id_collision"


def _folder(tmp_path: Path, rows: list[dict]) -> Path:  # type: ignore[type-arg]
    out = tmp_path / "tasks"
    with DatasetWriter(out, kind=TASKS, recipe={}, versions=run_versions()) as writer:
        writer.write(rows, prefix="tasks-a")
    return out


def test_instances_carry_harness_fields_and_harness_ids(tmp_path: Path) -> None:
    rows = task_rows(2)
    rows[0] = {**rows[0], "FAIL_TO_PASS": ["tests/test_a.py::test_tokenize[blank line]"]}
    out = tmp_path / "instances.jsonl"
    export_swebench(_folder(tmp_path, rows), out)
    first = json.loads(out.read_text().splitlines()[0])
    assert json.loads(first["FAIL_TO_PASS"]) == ["tests/test_a.py::test_tokenize[blank\\x20line]"]
    assert (first["log_parser"], first["eval_type"], first["image"]) == (LOG_PARSER, EVAL_TYPE, rows[0]["image_name"])
    assert first["eval_script"] == eval_script(rows[0])


def test_a_task_whose_ids_collide_fails_the_export_and_writes_nothing(tmp_path: Path) -> None:
    rows = task_rows(2)
    rows[1] = {**rows[1], "FAIL_TO_PASS": ["t.py::a[b c]"], "PASS_TO_PASS": ["t.py::a[b\\x20c]"]}
    out = tmp_path / "instances.jsonl"
    with pytest.raises(TaskforgeError, match="same SWE-bench id"):
        export_swebench(_folder(tmp_path, rows), out)
    assert not out.exists()


def test_the_eval_script_runs_the_runner_between_swebench_markers(tmp_path: Path) -> None:
    row = task_rows(1)[0]
    script = eval_script(row)
    lines = script.splitlines()
    # swebench 5 records the exit status of the line before its end marker: the test run's.
    end = lines.index("echo '>>>>> End Test Output'")
    assert lines[end - 1].endswith(" run") and lines[end - 2] == "echo '>>>>> Start Test Output'"
    config = eval_config(row)
    assert config["select"] == [*row["FAIL_TO_PASS"], *row["PASS_TO_PASS"]]
    assert {f.split("::")[0] for f in config["select"]} <= set(config["reset"])
    assert json.dumps(config) in script  # the config is written verbatim, as is the runner


def test_a_folder_export_is_a_dataset_with_a_test_split(tmp_path: Path) -> None:
    hf = pytest.importorskip("datasets")
    if not hasattr(hf, "load_dataset"):
        pytest.skip("Hugging Face datasets is not installed")
    out = tmp_path / "swebench"
    assert export_swebench(_folder(tmp_path, task_rows(3)), out) == 3
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "test.jsonl"]
    loaded = hf.load_dataset(str(out), split="test", cache_dir=str(tmp_path / "cache"))
    assert [r["instance_id"] for r in loaded] == [json.loads(l)["instance_id"] for l in (out / "test.jsonl").read_text().splitlines()]
    with pytest.raises(TaskforgeError, match="already exists"):
        export_swebench(_folder(tmp_path / "again", task_rows(1)), out)
