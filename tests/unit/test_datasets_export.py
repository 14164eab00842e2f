"""``taskforge export``: SWE-bench instances and a Hugging Face dataset folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from taskforge.cli import main
from taskforge.datasets import (
    REWARDS,
    TASKS,
    DatasetWriter,
    read_manifest,
    run_versions,
)
from taskforge.datasets.export import SWEBENCH_FIELDS, export_hf, export_swebench
from taskforge.datasets.stats import REWARDS_DIR
from taskforge.datasets.testing import reward_rows, task_rows
from taskforge.errors import TaskforgeError

# SWE-bench's instance fields and their types, as recorded from the dataset card of
# princeton-nlp/SWE-bench (https://huggingface.co/datasets/princeton-nlp/SWE-bench, README.md at
# revision 7a48a136817b1c5e1cdf46413546b74f79906995, `dataset_info.features`): twelve fields, every
# one `dtype: string`; FAIL_TO_PASS and PASS_TO_PASS hold JSON lists inside those strings.
SWEBENCH_INSTANCE_FEATURES = {
    "repo": "string",
    "instance_id": "string",
    "base_commit": "string",
    "patch": "string",
    "test_patch": "string",
    "problem_statement": "string",
    "hints_text": "string",
    "created_at": "string",
    "version": "string",
    "FAIL_TO_PASS": "string",
    "PASS_TO_PASS": "string",
    "environment_setup_commit": "string",
}
EXTRA_FIELDS = {
    "image_name": "string",  # not SWE-bench's; SWE-smith, SWE-Gym and mini-swe-agent name the image this way
    # What swebench 5's harness builds a test spec from (swebench.harness.utils.make_test_spec).
    "image": "string", "eval_script": "string", "log_parser": "string", "eval_type": "string",
}
ROWS = task_rows(12)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tasks")
    with DatasetWriter(out, kind=TASKS, recipe={"command": "mine", "config": {"seed": 0}},
                       versions=run_versions(base_image="taskforge-base:test")) as writer:
        writer.write(ROWS[:7], prefix="tasks-a", done={"pypi:a==1": {"tasks": 7}})
        writer.write(ROWS[7:], prefix="tasks-b", done={"pypi:b==1": {"tasks": 5}})
    with DatasetWriter(out / REWARDS_DIR, kind=REWARDS, recipe={}, versions=run_versions()) as writer:
        writer.write(reward_rows(ROWS), prefix="rewards")
    return out


def test_swebench_fields_are_swebench_instance_fields_with_their_types(folder: Path, tmp_path: Path) -> None:
    assert set(SWEBENCH_FIELDS) == set(SWEBENCH_INSTANCE_FEATURES)
    out = tmp_path / "instances.jsonl"
    assert export_swebench(folder, out) == 12
    instances = [json.loads(line) for line in out.read_text().splitlines()]
    type_names = {str: "string"}
    for instance in instances:
        assert {k: type_names[type(v)] for k, v in instance.items()} == {**SWEBENCH_INSTANCE_FEATURES, **EXTRA_FIELDS}
    created = {s.name: s.written_at for s in read_manifest(folder).shards}
    for row, instance in zip(ROWS, instances, strict=True):
        assert json.loads(instance["FAIL_TO_PASS"]) == row["FAIL_TO_PASS"]
        assert json.loads(instance["PASS_TO_PASS"]) == row["PASS_TO_PASS"]
        assert instance["environment_setup_commit"] == instance["base_commit"] == row["base_commit"]
        assert instance["patch"] == row["patch"] and instance["test_patch"] == row["test_patch"]
        assert instance["hints_text"] == "" and instance["image_name"] == row["image_name"]
        assert instance["created_at"] in created.values()


def test_swebench_export_can_name_per_task_images(folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "instances.jsonl"
    export_swebench(folder, out, images={ROWS[3]["instance_id"]: "taskforge-task-demo0:abc"})
    names = [json.loads(line)["image_name"] for line in out.read_text().splitlines()]
    assert names[3] == "taskforge-task-demo0:abc" and names[4] == ROWS[4]["image_name"]


def test_hf_export_loads_with_datasets_and_has_a_card(folder: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    hf = pytest.importorskip("datasets")
    if not hasattr(hf, "load_dataset"):
        pytest.skip("Hugging Face datasets is not installed")
    out = tmp_path / "hf"
    export_hf(folder, out)
    tasks = hf.load_dataset(str(out), split="train", cache_dir=str(tmp_path / "cache"))
    assert tasks.to_list() == ROWS
    rewards = hf.load_dataset(str(out), "rewards", split="train", cache_dir=str(tmp_path / "cache"))
    assert len(rewards) == 24 and set(rewards["candidate_id"]) == {"gold", "empty"}
    card = (out / "README.md").read_text()
    assert card.startswith("---\n") and "config_name: rewards" in card
    assert "12 verifiable coding tasks from 3 repositories" in card
    assert all(f"| `{name}` | {code} |" in card for name, code, _ in TASKS.columns)
    manifest = read_manifest(folder)
    assert all(s.sha256 in card for s in manifest.shards) and "taskforge-base:test" in card
    assert "`pypi:a==1`: 7 tasks" in card
    assert json.loads((out / "taskforge-manifest.json").read_text())["shards"][0]["sha256"] == manifest.shards[0].sha256
    with pytest.raises(TaskforgeError) as err:
        export_hf(folder, out)
    assert err.value.reason == "output_exists"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "hf"]  # no staging folder left


def test_export_command(folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "swe.jsonl"
    result = CliRunner().invoke(main, ["export", str(folder), "--format", "swebench", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.endswith(f"wrote 12 SWE-bench instances to {out}\n")
    assert "the harnesses need --images" in result.output  # the rows name environment images
    assert len(out.read_text().splitlines()) == 12
