"""Measured solve rates, written beside each task's difficulty record: ``taskforge rate``.

A task's solve rate is the share of its scored rollouts that earned reward 1.0. Rollouts are the
reward rows of candidates other than the reference ones (``gold`` and ``empty``, which
``taskforge score --gold --empty`` writes to check the task itself), and rows whose status is
``infra_error`` are left out (the sandbox failed, not the solver), as are rows scored against another
version of the task than the folder holds (``task_sha256``: mined again since, or unknown in rows
migrated from reward schema v2). The rates go into the task
rows' ``solve_rate`` and ``solve_attempts`` columns, shard by shard, with the writer's atomic
rewrite; every other column keeps its value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from taskforge.datasets.manifest import read_manifest
from taskforge.datasets.schema import TASKS
from taskforge.datasets.writer import DatasetWriter, run_versions
from taskforge.errors import TaskforgeError

__all__ = ["REFERENCE_CANDIDATES", "Rated", "rate", "solve_counts"]

REFERENCE_CANDIDATES = frozenset({"gold", "empty"})
"""Candidates that check a task rather than attempt it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Rated:
    """What :func:`rate` did."""

    tasks: int
    """Task rows in the folder."""
    rated: int
    """Tasks with at least one scored rollout."""
    attempts: int
    """Rollouts counted."""
    shards: int
    """Shards rewritten."""


def solve_counts(reward_dirs: Iterable[Path], versions: Mapping[str, str]) -> dict[str, tuple[int, int]]:
    """instance_id -> (solved, attempts) over the rollouts of every reward folder that scored the
    task in its version ``versions[instance_id]`` (a task's grading_sha256)."""
    from taskforge.datasets.reader import open as open_dataset

    counts: dict[str, list[int]] = {}
    for directory in reward_dirs:
        kind = read_manifest(directory).kind
        if kind != "rewards":
            raise TaskforgeError(f"{directory} holds {kind}, not rewards", reason="wrong_kind")
        columns = ["instance_id", "candidate_id", "reward", "status", "task_sha256"]
        table = open_dataset(directory).to_table(columns=columns).to_pydict()
        for instance, candidate, reward, status, version in zip(*(table[c] for c in columns), strict=True):
            if candidate in REFERENCE_CANDIDATES or status == "infra_error" or versions.get(instance) != version:
                continue
            solved_attempts = counts.setdefault(instance, [0, 0])
            solved_attempts[0] += reward == 1.0
            solved_attempts[1] += 1
    return {k: (v[0], v[1]) for k, v in counts.items()}


def rate(directory: Path, reward_dirs: Iterable[Path]) -> Rated:
    """Write the solve rates measured in ``reward_dirs`` into the task rows of ``directory``."""
    import pyarrow.parquet as pq

    from taskforge.task import Task

    reward_dirs = list(reward_dirs)
    for folder, wanted in ((directory, "tasks"), *((d, "rewards") for d in reward_dirs)):
        if (kind := read_manifest(folder).kind) != wanted:
            raise TaskforgeError(f"{folder} holds {kind}, not {wanted}", reason="wrong_kind")
    tasks = rated = attempts = shards = 0
    # Opening the writer first finishes a rewrite a killed run left, and holds the folder while the
    # task versions are read and the rates written.
    with DatasetWriter(directory, kind=TASKS, recipe=read_manifest(directory).recipe, versions=run_versions()) as writer:
        listed = {shard.name: pq.read_table(directory / shard.name).to_pylist() for shard in writer.manifest.shards}
        counts = solve_counts(reward_dirs, {row["instance_id"]: Task.from_row(row).grading_sha256
                                            for rows in listed.values() for row in rows})
        for name, rows in listed.items():
            updated = [_rated(row, counts.get(row["instance_id"])) for row in rows]
            tasks += len(rows)
            rated += sum(1 for row in updated if row["solve_attempts"])
            attempts += sum(row["solve_attempts"] for row in updated)
            if updated != rows:
                writer.rewrite(name, updated)
                shards += 1
    return Rated(tasks=tasks, rated=rated, attempts=attempts, shards=shards)


def _rated(row: Mapping[str, object], count: tuple[int, int] | None) -> dict[str, object]:
    solved, attempts = count or (0, 0)
    return {**row, "solve_rate": round(solved / attempts, 6) if attempts else None, "solve_attempts": attempts}
