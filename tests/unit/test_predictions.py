"""Prediction files in every form the harnesses write: SWE-bench's JSONL, a JSON list,
mini-swe-agent's preds.json (an object keyed by instance id), one object."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from taskforge.scoring.rewards import PREDICTION_FORMS, load_predictions

A = {"instance_id": "a__x-1", "model_patch": "diff --git a/x b/x\n", "model_name_or_path": "m"}
B = {"instance_id": "b__y-2", "model_patch": "", "model_name_or_path": "m"}
EXPECTED = [A, B]


def _write(tmp_path: Path, text: str, name: str = "preds") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_jsonl(tmp_path: Path) -> None:
    assert load_predictions(_write(tmp_path, f"{json.dumps(A)}\n\n{json.dumps(B)}\n")) == EXPECTED


def test_json_list(tmp_path: Path) -> None:
    assert load_predictions(_write(tmp_path, json.dumps([A, B], indent=2))) == EXPECTED


def test_mini_swe_agent_preds_json(tmp_path: Path) -> None:
    # As mini-swe-agent 2.x writes it: {instance_id: {model_name_or_path, instance_id, model_patch}}.
    preds = {row["instance_id"]: dict(row) for row in EXPECTED}
    assert load_predictions(_write(tmp_path, json.dumps(preds, indent=4), "preds.json")) == EXPECTED


def test_keyed_value_without_instance_id_takes_its_key(tmp_path: Path) -> None:
    preds = {"a__x-1": {"model_patch": A["model_patch"], "model_name_or_path": "m"}}
    assert load_predictions(_write(tmp_path, json.dumps(preds))) == [A]


def test_keyed_value_naming_another_id_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"keyed 'a__x-1' but its instance_id is 'b__y-2'"):
        load_predictions(_write(tmp_path, json.dumps({"a__x-1": B})))


def test_single_object(tmp_path: Path) -> None:
    assert load_predictions(_write(tmp_path, json.dumps(A, indent=2))) == [A]


def test_missing_fields_default(tmp_path: Path) -> None:
    assert load_predictions(_write(tmp_path, json.dumps({"instance_id": "a__x-1"}))) == [
        {"instance_id": "a__x-1", "model_patch": "", "model_name_or_path": ""}]


@pytest.mark.parametrize(("text", "where"), [
    ("", "preds: empty"),
    ("{not json", "preds:1: not valid JSON"),
    ('[{"instance_id": "a"}', "preds:1: not valid JSON"),
    (f"{json.dumps(A)}\nnot json\n", "preds:2: not valid JSON"),
    ("42", "preds:1: not a prediction"),
    ('["just a string"]', r"preds\[0\]: not a prediction"),
    ('{"a__x-1": "a patch, not an object"}', r"preds\['a__x-1'\]: not a prediction"),
])
def test_malformed_names_place_and_forms(tmp_path: Path, text: str, where: str) -> None:
    with pytest.raises(ValueError, match=where) as err:
        load_predictions(_write(tmp_path, text))
    assert str(err.value).endswith(PREDICTION_FORMS)
    for form in ("JSONL", "JSON list", "keyed by instance_id", "one prediction object"):
        assert form in str(err.value)


def test_patch_must_be_a_string(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="model_patch is not a string"):
        load_predictions(_write(tmp_path, json.dumps([{**A, "model_patch": ["x"]}])))
