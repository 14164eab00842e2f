"""A solve-rate curriculum: train mostly on tasks the policy sometimes solves.

    curriculum = Curriculum(task_ids, low=0.1, high=0.9, window=8, seed=0)
    chosen = curriculum.sample(4)                       # instance ids
    curriculum.update(chosen[0], [1.0, 0.0])            # that task's rewards this step
    curriculum.report()                                 # solve-rate histogram, counts
    state = curriculum.state_dict()                     # JSON; load_state_dict(state) resumes

A task's **solve rate** is the mean of its last ``window`` rewards (with binary rewards, the
share of recent episodes that solved it). A task whose rate is inside ``[low, high]`` teaches
the most: its rollouts differ in reward, so group-relative advantages are not all zero. A task is

- **unseen** until its first reward,
- **in the band** when ``low <= rate <= high``,
- **outside** when seen and not in the band (always failed or nearly always solved, so far),
- **retired** when its last ``retire_after`` rewards (twice the window by default) average at
  least ``retire_at`` (1.0 by default: solved every time); a retired task is not sampled again.
  The retirement record is longer than the window because it is final: a task solved half the
  time fills a window of 8 with wins once in 256 tries, a record of 16 once in 65536.

Each pick of :meth:`sample` comes from the band with probability ``1 - explore`` and otherwise
explores: an unseen task if any is left, else an outside one. When the chosen group is empty the
pick comes from the other (so at the start, with nothing seen, every pick explores), and when
every task is retired, picks come from the retired ones. Within a group the pick is uniform. The
tasks of one ``sample`` call are distinct while there are enough non-retired tasks. A random
generator seeded with ``seed`` makes every call sequence deterministic, and its state travels in
``state_dict``.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["HISTOGRAM_BUCKETS", "Curriculum"]

HISTOGRAM_BUCKETS = 10
"""Equal-width solve-rate buckets in ``report()`` (the last one includes 1.0)."""


@dataclass(kw_only=True, slots=True)
class _Config:
    low: float
    high: float
    window: int
    explore: float
    retire_at: float
    retire_after: int

    def __post_init__(self) -> None:
        if not 0 <= self.low < self.high <= 1:
            raise ValueError(f"low and high must satisfy 0 <= low < high <= 1, got {self.low} and {self.high}")
        if self.window < 1:
            raise ValueError(f"window must be at least 1, got {self.window}")
        if not 0 <= self.explore <= 1:
            raise ValueError(f"explore must be in [0, 1], got {self.explore}")
        if not 0 < self.retire_at <= 1:
            raise ValueError(f"retire_at must be in (0, 1], got {self.retire_at}")
        if self.retire_after < 1:
            raise ValueError(f"retire_after must be at least 1, got {self.retire_after}")

    @property
    def kept(self) -> int:
        """Rewards kept per task: enough for the solve rate and for retirement."""
        return max(self.window, self.retire_after)


class Curriculum:
    """Tracks each task's recent solve rate and samples tasks by it (see the module docstring)."""

    def __init__(
        self,
        task_ids: Sequence[str],
        *,
        low: float = 0.1,
        high: float = 0.9,
        window: int = 8,
        explore: float = 0.1,
        retire_at: float = 1.0,
        retire_after: int | None = None,
        seed: int = 0,
    ) -> None:
        """``retire_after``: how many of the last rewards retirement looks at (default ``2 * window``)."""
        if not task_ids:
            raise ValueError("a curriculum needs at least one task")
        if len(set(task_ids)) != len(task_ids):
            raise ValueError("task ids must be distinct")
        self.config = _Config(low=low, high=high, window=window, explore=explore, retire_at=retire_at,
                              retire_after=2 * window if retire_after is None else retire_after)
        self.task_ids = list(task_ids)
        self._rewards: dict[str, list[float]] = {task_id: [] for task_id in self.task_ids}
        self._rng = random.Random(seed)

    def add(self, task_ids: Iterable[str]) -> list[str]:
        """Take in tasks that appeared while training runs (harder ones a miner wrote); they start
        unseen. Returns those that were new."""
        added = [t for t in dict.fromkeys(task_ids) if t not in self._rewards]
        self.task_ids += added
        self._rewards.update({t: [] for t in added})
        return added

    # -- what is known of each task ---------------------------------------------------------------

    def update(self, task_id: str, rewards: Iterable[float]) -> None:
        """Record ``task_id``'s rewards (each clamped to [0, 1]); the solve rate reads the last
        ``window``, retirement the last ``retire_after``."""
        if task_id not in self._rewards:
            raise KeyError(f"task {task_id!r} is not in this curriculum")
        history = self._rewards[task_id]
        history += [min(1.0, max(0.0, float(r))) for r in rewards]
        del history[:-self.config.kept]

    def solve_rate(self, task_id: str) -> float | None:
        """The mean of the task's last ``window`` rewards; None while it is unseen."""
        recent = self._rewards[task_id][-self.config.window:]
        return sum(recent) / len(recent) if recent else None

    def status(self, task_id: str) -> str:
        """``unseen``, ``band``, ``outside`` or ``retired``."""
        rate = self.solve_rate(task_id)
        if rate is None:
            return "unseen"
        record = self._rewards[task_id][-self.config.retire_after:]
        if len(record) == self.config.retire_after and sum(record) / len(record) >= self.config.retire_at:
            return "retired"
        return "band" if self.config.low <= rate <= self.config.high else "outside"

    @property
    def retired(self) -> list[str]:
        return [t for t in self.task_ids if self.status(t) == "retired"]

    # -- sampling ---------------------------------------------------------------------------------

    def sample(self, n: int) -> list[str]:
        """``n`` task ids to run next (distinct while enough tasks are not retired)."""
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")
        groups: dict[str, list[str]] = {"band": [], "unseen": [], "outside": [], "retired": []}
        for task_id in self.task_ids:
            groups[self.status(task_id)].append(task_id)
        chosen: list[str] = []
        taken: set[str] = set()
        for _ in range(n):
            live = [t for t in groups["band"] + groups["unseen"] + groups["outside"] if t not in taken]
            if not live and taken:  # every live task is in this sample already: allow repeats
                taken.clear()
            pick = self._pick(groups, taken)
            chosen.append(pick)
            taken.add(pick)
        return chosen

    def _pick(self, groups: Mapping[str, list[str]], taken: set[str]) -> str:
        def free(name: str) -> list[str]:
            return [t for t in groups[name] if t not in taken]

        exploring = self._rng.random() < self.config.explore
        band = free("band")
        explore = free("unseen") or free("outside")
        first, second = (explore, band) if exploring else (band, explore)
        pool = first or second or free("retired") or groups["retired"]
        return pool[self._rng.randrange(len(pool))]

    # -- reporting and checkpoints ----------------------------------------------------------------

    def report(self) -> dict[str, Any]:
        """The solve-rate distribution: a histogram over seen tasks (bucket label → count), the
        counts per status, and the mean rate of the seen tasks (None when none is seen)."""
        histogram = {f"{i / HISTOGRAM_BUCKETS:.1f}-{(i + 1) / HISTOGRAM_BUCKETS:.1f}": 0
                     for i in range(HISTOGRAM_BUCKETS)}
        labels = list(histogram)
        counts = {"unseen": 0, "band": 0, "outside": 0, "retired": 0}
        rates = []
        for task_id in self.task_ids:
            counts[self.status(task_id)] += 1
            rate = self.solve_rate(task_id)
            if rate is not None:
                rates.append(rate)
                histogram[labels[min(HISTOGRAM_BUCKETS - 1, int(rate * HISTOGRAM_BUCKETS))]] += 1
        return {"tasks": len(self.task_ids), **counts, "histogram": histogram,
                "mean_solve_rate": sum(rates) / len(rates) if rates else None}

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume (JSON-serializable): the reward windows and the generator."""
        version, internal, gauss = self._rng.getstate()
        return {"rewards": {t: list(h) for t, h in self._rewards.items() if h},
                "rng": [version, list(internal), gauss]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from ``state_dict()``. Tasks it does not mention start unseen (a dataset that
        grew); a task it holds that this curriculum lacks raises ``ValueError``."""
        unknown = sorted(set(state["rewards"]) - set(self._rewards))
        if unknown:
            raise ValueError(f"the saved curriculum holds {len(unknown)} task(s) this one lacks, e.g. {unknown[0]!r}")
        self._rewards = {t: [] for t in self.task_ids}
        for task_id, history in state["rewards"].items():
            self._rewards[task_id] = [float(r) for r in history][-self.config.kept:]
        version, internal, gauss = state["rng"]
        self._rng.setstate((version, tuple(internal), gauss))
