"""The two row kinds a dataset folder holds: task rows and reward rows, each with a versioned schema.

A kind names its pyarrow schema, its version and its key: the columns that identify a row, so a
resumed write skips rows it already has. Every column carries a one-line description in its
field metadata (``description``); ``datasets/SCHEMA.md`` documents each one at length, and a test
keeps the two in step.

Bump a kind's version whenever a column is added, removed, renamed or changes type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "KINDS",
    "REWARDS",
    "REWARD_SCHEMA_VERSION",
    "TASKS",
    "TASK_SCHEMA_VERSION",
    "DatasetKind",
    "get_kind",
    "reward_schema",
    "task_schema",
]

TASK_SCHEMA_VERSION = 3
"""v1: first shards; v2: ``source_commit`` and ``audit`` added, ``base_commit`` is the start state's commit;
v3: the difficulty record (:mod:`taskforge.difficulty`) and measured solve rates (``taskforge migrate``
brings a v2 folder to v3)."""
REWARD_SCHEMA_VERSION = 3
"""v1: first reward rows; v2: the scorer's statuses (ok, timeout, patch_failed, tampered, infra_error),
``outcomes``, ``dropped`` and ``detail`` added; v3: ``task_sha256``, the version of the task scored
(``taskforge migrate`` brings a v2 folder to v3, with it empty: unknown)."""

# (name, type, description); the type is a short code turned into a pyarrow type by _arrow_type.
_TASK_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("instance_id", "string", "Stable task id, derived from the content: repo, strategy, target and a digest."),
    ("repo", "string", "Repository (project) name."),
    ("source", "string", "Where the snapshot came from: pypi:NAME==VERSION, a git URL@REV, or a path."),
    ("base_commit", "string", "The start state's commit: a fresh repository with this one commit."),
    ("source_commit", "string", "The commit of the source snapshot the task was cut from."),
    ("version", "string", "The project's version (or the source commit's prefix)."),
    ("strategy", "string", "Removal strategy: body, symbol, module or feature."),
    ("target", "string", "The removed feature, as module or module:qualname."),
    ("removed", "list<string>", "Every symbol the removal took out (the target and its exclusive helpers)."),
    ("patch", "string", "Gold patch: start state -> original code. Touches no test file."),
    ("test_patch", "string", "Puts the hidden tests back."),
    ("removal_patch", "string", "Original -> start state (reproduction only; never shown to an agent)."),
    ("problem_statement", "string", "What to implement, with no line of the removed code."),
    ("FAIL_TO_PASS", "list<string>", "Test ids that fail at the start state (+ test_patch) and pass with gold."),
    ("PASS_TO_PASS", "list<string>", "Test ids that pass at the start state and with gold."),
    ("hidden_tests", "list<string>", "Test ids taken out of the start state (put back by test_patch)."),
    ("image_name", "string", "Docker image to run the task in (the environment image, or a per-task image)."),
    ("environment", "string", "JSON: the environment record (image id, import roots, wheels, dropped requirements)."),
    ("lines_removed", "int64", "Lines of code the gold patch puts back."),
    ("validation", "string", "JSON: validation details (repeats, agent, writer, per-run durations in seconds)."),
    ("audit", "string", "JSON: the leak audit (clean, findings, fingerprint counts, files, bytes, seconds)."),
    ("seed", "int64", "Seed of the candidate ranking."),
    ("taskforge_version", "string", "taskforge version that mined the task."),
    ("removed_symbols", "int64", "Difficulty: functions, methods and classes removed (a hollowed body: 1)."),
    ("removed_files", "int64", "Difficulty: files the gold patch changes."),
    ("fail_to_pass_count", "int64", "Difficulty: FAIL_TO_PASS tests."),
    ("call_depth", "int64", "Difficulty: longest chain of uses among the removed definitions (1: none uses another)."),
    ("public_api_removed", "bool", "Difficulty: a public name is gone (never for body: the signature stays)."),
    ("difficulty", "float64", "Difficulty: the estimate in [0, 1] combining the record (taskforge.difficulty)."),
    ("solve_rate", "float64", "Measured share of scored rollouts that solved the task (null until rewards exist)."),
    ("solve_attempts", "int64", "Scored rollouts behind solve_rate (0 until rewards exist)."),
)

_REWARD_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("instance_id", "string", "The task scored (a task row's instance_id)."),
    ("candidate_id", "string", "Who or what produced the candidate: gold, empty, or a rollout id."),
    ("patch_sha256", "string", "sha256 of the candidate patch, hex."),
    ("patch", "string", "The candidate patch, as scored."),
    ("reward", "float64", "The reward, in [0, 1]."),
    ("mode", "string", "binary (1.0 only if every test passes) or partial (FAIL_TO_PASS fraction)."),
    ("status", "string", "ok (the tests ran and were judged), timeout, patch_failed, tampered or infra_error."),
    ("FAIL_TO_PASS_passed", "list<string>", "FAIL_TO_PASS tests that passed."),
    ("FAIL_TO_PASS_failed", "list<string>", "FAIL_TO_PASS tests that failed, errored, were skipped or missing."),
    ("PASS_TO_PASS_passed", "list<string>", "PASS_TO_PASS tests that passed."),
    ("PASS_TO_PASS_failed", "list<string>", "PASS_TO_PASS tests that failed, errored, were skipped or missing."),
    ("outcomes", "string", "JSON: every FAIL_TO_PASS and PASS_TO_PASS id -> its outcome (passed, failed, error, "
     "skipped, xfailed, xpassed, missing, timeout, not_run)."),
    ("tampered", "bool", "The candidate tampered with tests, configuration or the test run (reward 0)."),
    ("tampering", "list<string>", "What the tamper checks found, one entry per finding."),
    ("dropped", "list<string>", "Changes of the candidate the scorer did not apply, each with why."),
    ("detail", "string", "One line on a status other than ok, or on a contradiction in the run."),
    ("apply_s", "float64", "Seconds to apply the patch and restore the trusted tests."),
    ("test_s", "float64", "Seconds the test run took."),
    ("total_s", "float64", "Seconds the whole scoring took."),
    ("image_name", "string", "Docker image the candidate was scored in."),
    ("task_sha256", "string", "The version of the task scored: sha256 of its start state, gold patch, hidden tests, "
     "lists, environment, canaries and test layout (Task.grading_sha256); empty in rows migrated from v2."),
    ("scorer_version", "string", "Version of the scorer's rules."),
    ("taskforge_version", "string", "taskforge version that scored."),
    ("scored_at", "timestamp[us, UTC]", "When the candidate was scored."),
)


def _arrow_type(code: str) -> pa.DataType:
    import pyarrow as pa

    types = {
        "string": pa.string(),
        "list<string>": pa.list_(pa.string()),
        "int64": pa.int64(),
        "float64": pa.float64(),
        "bool": pa.bool_(),
        "timestamp[us, UTC]": pa.timestamp("us", tz="UTC"),
    }
    return types[code]


def _schema(kind: str, version: int, columns: tuple[tuple[str, str, str], ...]) -> pa.Schema:
    import pyarrow as pa

    fields = [pa.field(name, _arrow_type(code), metadata={b"description": doc.encode()}) for name, code, doc in columns]
    return pa.schema(fields, metadata={b"taskforge.schema": kind.encode(), b"taskforge.schema_version": str(version).encode()})


def task_schema() -> pa.Schema:
    """The schema of task rows (version ``TASK_SCHEMA_VERSION``)."""
    return _schema("task", TASK_SCHEMA_VERSION, _TASK_COLUMNS)


def reward_schema() -> pa.Schema:
    """The schema of reward rows (version ``REWARD_SCHEMA_VERSION``)."""
    return _schema("reward", REWARD_SCHEMA_VERSION, _REWARD_COLUMNS)


@dataclass(frozen=True, kw_only=True, slots=True)
class DatasetKind:
    """One kind of row a dataset folder can hold."""

    name: str
    """Short name, recorded in the manifest: ``tasks`` or ``rewards``."""
    version: int
    """Schema version; a folder written with another version is refused."""
    key: tuple[str, ...]
    """Columns that identify a row; a resumed write skips rows whose key is already there."""
    columns: tuple[tuple[str, str, str], ...]
    """(name, type, description) of every column, in order."""
    schema: Callable[[], pa.Schema]
    """Builds the pyarrow schema (pyarrow is imported only when it is called)."""
    nullable: frozenset[str] = frozenset()
    """Columns that may hold nulls (a value not known yet); every other column must hold a value."""

    def __post_init__(self) -> None:
        names = [c[0] for c in self.columns]
        if not self.nullable <= set(names):
            raise ValueError(f"DatasetKind.nullable of {self.name} names unknown columns")
        if len(set(names)) != len(names):
            raise ValueError(f"DatasetKind.columns of {self.name} repeats a column")
        missing = [k for k in self.key if k not in names]
        if not self.key or missing:
            raise ValueError(f"DatasetKind.key of {self.name} must name columns; unknown: {missing}")

    def key_of(self, row: dict[str, object]) -> str:
        """The row's key as one string (columns joined by a NUL byte)."""
        return "\0".join(str(row[k]) for k in self.key)


TASKS = DatasetKind(name="tasks", version=TASK_SCHEMA_VERSION, key=("instance_id",), columns=_TASK_COLUMNS,
                    schema=task_schema, nullable=frozenset({"solve_rate"}))
REWARDS = DatasetKind(name="rewards", version=REWARD_SCHEMA_VERSION, key=("instance_id", "candidate_id"),
                      columns=_REWARD_COLUMNS, schema=reward_schema)
KINDS: dict[str, DatasetKind] = {kind.name: kind for kind in (TASKS, REWARDS)}


def get_kind(name: str) -> DatasetKind:
    """The kind registered under ``name``; an unknown name lists the known ones."""
    from taskforge.errors import TaskforgeError

    if name not in KINDS:
        raise TaskforgeError(f"unknown dataset kind {name!r}; known: {', '.join(sorted(KINDS))}", reason="unknown_kind")
    return KINDS[name]

