"""Episodes: the mined tasks an RL run trains and validates on, read through taskforge's reader.

    episodes = load_episodes(["datasets/sample", "s3://bucket/tasks"])
    train, validation = split_by_repository(episodes, 0.2, seed=0)

An :class:`Episode` wraps one ``taskforge.task.Task`` (the row exactly as the shard holds it) and
names what the trainer reads from it. The split keeps every repository on one side only, so that
validation measures tasks from code the policy never trained on.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from taskforge import read_tasks

if TYPE_CHECKING:
    from taskforge import Task

__all__ = ["Episode", "load_episodes", "split_by_repository"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Episode:
    """One task to act on (the environment needs the whole row: its start state, image and tests)."""

    task: Task

    @property
    def instance_id(self) -> str:
        return self.task.instance_id

    @property
    def repo(self) -> str:
        return self.task.repo

    @property
    def problem_statement(self) -> str:
        return self.task.problem_statement

    @property
    def image(self) -> str:
        """The task's environment image (``image_name``)."""
        return self.task.image_name


def load_episodes(targets: Path | str | Sequence[Path | str]) -> list[Episode]:
    """Every task of one or more task folders (or URIs), in the order given and, within each, in
    manifest order. An instance id found twice raises ``ValueError`` naming it."""
    if isinstance(targets, (str, Path)):
        targets = [targets]
    episodes: list[Episode] = []
    seen: dict[str, Path | str] = {}
    for target in targets:
        for task in read_tasks(target):
            if task.instance_id in seen:
                raise ValueError(f"task {task.instance_id} is in both {seen[task.instance_id]} and {target}")
            seen[task.instance_id] = target
            episodes.append(Episode(task=task))
    return episodes


def split_by_repository(
    episodes: Sequence[Episode], validation_fraction: float, *, seed: int
) -> tuple[list[Episode], list[Episode]]:
    """Split into (train, validation) with no repository on both sides; the same inputs and seed
    give the same split.

    The repositories (sorted by name) are shuffled with ``seed`` and moved to validation one at a
    time until it holds at least ``validation_fraction`` of the episodes. One repository always
    stays in train, so a dataset of a single repository has no validation; with a fraction above
    0 and two or more repositories, validation gets at least one. Each side keeps the input order.
    """
    if not 0 <= validation_fraction < 1:
        raise ValueError(f"validation_fraction must be in [0, 1), got {validation_fraction}")
    sizes: dict[str, int] = {}
    for episode in episodes:
        sizes[episode.repo] = sizes.get(episode.repo, 0) + 1
    repos = sorted(sizes)
    random.Random(seed).shuffle(repos)
    target = validation_fraction * len(episodes)
    held_out: set[str] = set()
    held = 0
    for repo in repos[:-1]:  # the last one stays in train whatever the fraction
        if held >= target or validation_fraction == 0:
            break
        held_out.add(repo)
        held += sizes[repo]
    train = [e for e in episodes if e.repo not in held_out]
    validation = [e for e in episodes if e.repo in held_out]
    return train, validation
