"""Harder tasks while training runs: ask for them when a repository saturates, and take them in.

    growth = TaskGrowth(config, tasks)               # the run's training tasks, by instance id
    growth.ask(curriculum, step=12)                  # request records for saturated repositories
    new = growth.refresh(known=set(tasks), train_repos=...)   # tasks the folders gained since

A repository **saturates** when every one of its training tasks has been seen and the mean of
their solve rates reaches ``[rl.curriculum] saturated_at`` (the band's ``high`` by default): the
curriculum can only re-weight tasks the policy already solves. Then, if no request of that
repository is open and none was made since its task count last changed, a request record goes
into the first task folder (:mod:`taskforge.datasets.requests`): its source, the strategies and
difficulty band to mine, how many tasks. A miner that follows the folder (``taskforge mine
--follow DIR``) mines them and writes them under the folder's manifest.

Every ``refresh_every`` steps the folders are looked at again: when a manifest changed, its tasks
are read and those the run does not know yet are returned, for the curriculum to take in (they
start unseen, so they are explored first). Tasks of a repository on the validation side stay
there; tasks of a repository the run has never seen join training.

With several processes, rank 0 decides (writes the requests, reads the folders) and broadcasts
the new tasks' ids, and every rank reads those rows itself: the ranks' curricula stay identical.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskforge import MineRequest, is_uri, open_requests, read_manifest, read_tasks, submit_request

if TYPE_CHECKING:
    from taskforge import Task
    from trainer.rl.config import CurriculumConfig
    from trainer.rl.curriculum import Curriculum

__all__ = ["TaskGrowth", "saturated_repositories"]


def saturated_repositories(curriculum: Curriculum, tasks: Mapping[str, Task], *, threshold: float,
                           min_seen: int) -> dict[str, float]:
    """repo -> the mean solve rate of its tasks, for each repository whose training tasks are all
    seen (at least ``min_seen``) with a mean rate of at least ``threshold``."""
    by_repo: dict[str, list[str]] = defaultdict(list)
    for instance_id in curriculum.task_ids:
        if instance_id in tasks:
            by_repo[tasks[instance_id].repo].append(instance_id)
    out = {}
    for repo, ids in sorted(by_repo.items()):
        rates = [curriculum.solve_rate(i) for i in ids]
        if len(ids) < min_seen or any(r is None for r in rates):
            continue
        mean = sum(rates) / len(rates)  # type: ignore[arg-type]
        if mean >= threshold:
            out[repo] = mean
    return out


@dataclass(kw_only=True, slots=True)
class TaskGrowth:
    """Requests for harder tasks and the tasks that come of them (see the module docstring)."""

    config: CurriculumConfig
    targets: Sequence[str]
    """The run's task folders (``[rl] tasks``); requests go into the first."""
    asked: dict[str, int] = field(default_factory=dict)
    """repo -> how many training tasks it had when it was last asked for more."""
    manifests: dict[str, str] = field(default_factory=dict)
    """target -> its manifest's ``updated_at`` when last read."""

    def __post_init__(self) -> None:
        for target in self.targets:
            self.manifests[str(target)] = self._stamp(target)

    @staticmethod
    def _stamp(target: str | Path) -> str:
        if is_uri(str(target)):
            return ""
        manifest = read_manifest(Path(target))
        return f"{manifest.updated_at}:{manifest.rows}"

    # -- asking ------------------------------------------------------------------------------------

    def ask(self, curriculum: Curriculum, tasks: Mapping[str, Task], *, step: int) -> list[MineRequest]:
        """Write a request for each saturated repository that has none open; returns them."""
        if not self.config.request_harder:
            return []
        folder = Path(self.targets[0])
        threshold = self.config.saturated_at or self.config.high
        counts: dict[str, int] = defaultdict(int)
        sources: dict[str, str] = {}
        for instance_id in curriculum.task_ids:
            task = tasks.get(instance_id)
            if task is not None:
                counts[task.repo] += 1
                sources[task.repo] = task.source
        made = []
        for repo, mean in saturated_repositories(curriculum, tasks, threshold=threshold,
                                                 min_seen=self.config.min_seen).items():
            if self.asked.get(repo) == counts[repo] or open_requests(folder, repo=repo):
                continue
            request = submit_request(folder, MineRequest(
                repo=repo, source=sources[repo], strategies=tuple(self.config.request_strategies),
                difficulty=self.config.request_difficulty or None, max_tasks=self.config.request_tasks,
                reason=f"solve rate {mean:.2f} over its {counts[repo]} task(s), at or above {threshold}",
                requested_by=f"trainer step {step}"))
            self.asked[repo] = counts[repo]
            made.append(request)
        return made

    # -- taking in -------------------------------------------------------------------------------

    def refresh(self, *, step: int, known: Iterable[str]) -> list[Task]:
        """Tasks of the run's folders that are not in ``known`` (in folder order), when a folder's
        manifest changed since the last look; every ``refresh_every`` steps."""
        every = self.config.refresh_every
        if not every or step % every:
            return []
        known = set(known)
        found: list[Task] = []
        for target in self.targets:
            stamp = self._stamp(target)
            if not stamp or stamp == self.manifests.get(str(target)):
                continue
            self.manifests[str(target)] = stamp
            found += [t for t in read_tasks(target) if t.instance_id not in known]
        return found

    def state_dict(self) -> dict[str, Any]:
        return {"asked": dict(self.asked)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.asked = {str(k): int(v) for k, v in state.get("asked", {}).items()}
