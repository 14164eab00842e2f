"""Reward results, the reward arithmetic and SWE-bench prediction files: what a trainer or a
rollout worker needs without the scorer (``taskforge.scoring.client`` imports only this).

Reward (../shared/ARCHITECTURE.md): ``binary`` is 1.0 when every FAIL_TO_PASS and PASS_TO_PASS test
passes, else 0.0; ``partial`` is the passing fraction of FAIL_TO_PASS while every PASS_TO_PASS
test passes, else 0.0. Only ``passed`` counts as passing. Any status but ``ok`` scores 0.0.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "MODES",
    "PREDICTION_FORMS",
    "SCORER_VERSION",
    "RewardMode",
    "RewardResult",
    "RewardStatus",
    "compute_reward",
    "load_predictions",
]

SCORER_VERSION = "2"
"""Version of the scoring rules; bumped whenever a rule changes what a candidate scores."""

RewardStatus = Literal["ok", "timeout", "patch_failed", "tampered", "infra_error"]
RewardMode = Literal["binary", "partial"]
MODES: tuple[RewardMode, ...] = ("binary", "partial")



def compute_reward(fail_to_pass: Mapping[str, str], pass_to_pass: Mapping[str, str], mode: RewardMode) -> float:
    """The reward from each expected test's outcome; only ``passed`` counts as passing."""
    if mode not in MODES:
        raise ValueError(f"unknown reward mode {mode!r}; known: {', '.join(MODES)}")
    if any(outcome != "passed" for outcome in pass_to_pass.values()):
        return 0.0
    passed = sum(outcome == "passed" for outcome in fail_to_pass.values())
    if mode == "binary":
        return 1.0 if passed == len(fail_to_pass) else 0.0
    return passed / len(fail_to_pass) if fail_to_pass else 1.0


@dataclass(kw_only=True, slots=True)
class RewardResult:
    """What scoring one candidate gave."""

    instance_id: str
    candidate_id: str
    reward: float
    mode: RewardMode
    status: RewardStatus
    fail_to_pass: dict[str, str] = field(default_factory=dict)
    """FAIL_TO_PASS id → outcome: passed, failed, error, skipped, xfailed, xpassed, missing,
    timeout, or not_run (the tests did not run: a failed patch, tampering found before the run)."""
    pass_to_pass: dict[str, str] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    """The candidate's changes the scorer did not take, each with why."""
    tampering: list[str] = field(default_factory=list)
    """What the tamper checks found; not empty exactly when the status is ``tampered``."""
    detail: str = ""
    """One line on a status other than ok, or on a contradiction in the run."""
    canaries_passed: list[int] = field(default_factory=list)
    """The task's canaries (their indices) that passed in their test's place while that test
    passed as itself in the other run: what made the scoring ``tampered`` by canary."""
    apply_s: float = 0.0
    test_s: float = 0.0
    duration_s: float = 0.0
    image_name: str = ""
    patch: str = ""
    task_sha256: str = ""
    """The scored task's :attr:`~taskforge.task.Task.grading_sha256`: the version of the task the
    verdict is about, which a resumed ``taskforge score`` compares before reusing it."""
    scored_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def outcomes(self) -> dict[str, str]:
        return {**self.fail_to_pass, **self.pass_to_pass}

    @property
    def tampered(self) -> bool:
        return self.status == "tampered"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["scored_at"] = self.scored_at.isoformat()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RewardResult:
        """A result from :meth:`to_json` (or a service's answer); fields this version does not know,
        a later version's, are left out."""
        known = {f.name for f in fields(cls)}
        values = {key: value for key, value in data.items() if key in known}
        values["scored_at"] = datetime.fromisoformat(values["scored_at"])
        return cls(**values)

    def to_row(self) -> dict[str, Any]:
        """A row of the reward schema (``taskforge.datasets.REWARDS``)."""
        from taskforge import __version__

        return {
            "instance_id": self.instance_id,
            "candidate_id": self.candidate_id,
            "patch_sha256": hashlib.sha256(self.patch.encode()).hexdigest(),
            "patch": self.patch,
            "reward": self.reward,
            "mode": self.mode,
            "status": self.status,
            "FAIL_TO_PASS_passed": [t for t, o in self.fail_to_pass.items() if o == "passed"],
            "FAIL_TO_PASS_failed": [t for t, o in self.fail_to_pass.items() if o != "passed"],
            "PASS_TO_PASS_passed": [t for t, o in self.pass_to_pass.items() if o == "passed"],
            "PASS_TO_PASS_failed": [t for t, o in self.pass_to_pass.items() if o != "passed"],
            "outcomes": json.dumps(self.outcomes),
            "tampered": self.tampered,
            "tampering": list(self.tampering),
            "dropped": list(self.dropped),
            "detail": self.detail,
            "apply_s": round(self.apply_s, 4),
            "test_s": round(self.test_s, 4),
            "total_s": round(self.duration_s, 4),
            "image_name": self.image_name,
            "task_sha256": self.task_sha256,
            "scorer_version": SCORER_VERSION,
            "taskforge_version": __version__,
            "scored_at": self.scored_at,
        }


PREDICTION_FORMS = (
    "JSONL (one prediction object a line), a JSON list of prediction objects, a JSON object keyed by "
    "instance_id (mini-swe-agent's preds.json), or one prediction object; a prediction object has "
    "instance_id and model_patch, and optionally model_name_or_path"
)
"""The forms :func:`load_predictions` reads, as its errors name them."""


def load_predictions(path: Path) -> list[dict[str, str]]:
    """SWE-bench predictions (``instance_id``, ``model_patch``, ``model_name_or_path``) in every
    form the harnesses write (:data:`PREDICTION_FORMS`):

    - JSONL, one object a line (SWE-bench's ``predictions.jsonl``);
    - a JSON list of objects;
    - a JSON object keyed by instance id, each value a prediction (mini-swe-agent's ``preds.json``;
      a value without ``instance_id`` takes its key, one with a different one is refused);
    - one prediction object.

    Anything else raises ``ValueError`` naming the place (``path:line`` or ``path[key]``) and the
    forms expected."""
    text = path.read_text(encoding="utf-8")
    stripped = text.strip()
    numbered: list[tuple[str, Any]]
    if not stripped:
        raise ValueError(f"{path}: empty; expected {PREDICTION_FORMS}")
    if stripped[0] in "[{":
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as err:
            data = None
            if stripped[0] == "[" or "\n" not in stripped:
                raise ValueError(f"{path}:{err.lineno}: not valid JSON ({err.msg}); expected {PREDICTION_FORMS}") from None
        if isinstance(data, list):
            numbered = [(f"{path}[{i}]", row) for i, row in enumerate(data)]
        elif isinstance(data, dict) and "instance_id" in data:
            numbered = [(str(path), data)]
        elif isinstance(data, dict):
            numbered = [(f"{path}[{key!r}]", _keyed(path, key, row)) for key, row in data.items()]
        else:
            numbered = _jsonl(path, text)  # several objects, one a line
    else:
        numbered = _jsonl(path, text)
    predictions = []
    for where, row in numbered:
        if not isinstance(row, dict) or not isinstance(row.get("instance_id"), str):
            raise ValueError(f"{where}: not a prediction; expected {PREDICTION_FORMS}")
        patch = row.get("model_patch") or ""
        if not isinstance(patch, str):
            raise ValueError(f"{where}: model_patch is not a string")
        predictions.append({"instance_id": row["instance_id"], "model_patch": patch,
                            "model_name_or_path": str(row.get("model_name_or_path") or "")})
    return predictions


def _keyed(path: Path, key: str, row: Any) -> Any:
    """One value of a dict keyed by instance id: its key is its id, and an id it names must agree."""
    if not isinstance(row, dict):
        return row
    named = row.get("instance_id", key)
    if named != key:
        raise ValueError(f"{path}[{key!r}]: keyed {key!r} but its instance_id is {named!r}")
    return {**row, "instance_id": key}


def _jsonl(path: Path, text: str) -> list[tuple[str, Any]]:
    numbered = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            numbered.append((f"{path}:{number}", json.loads(line)))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{number}: not valid JSON ({err.msg}); expected {PREDICTION_FORMS}") from None
    return numbered
