"""Held-out check of the scorer's verdicts: the gold patch scores 1.0 and the empty patch 0.0, each
scored twice in fresh containers, on one task of each of the first N projects of a task folder
(the held-out sweep's by default, which nothing was tuned on). A change to the scorer or the guard
that makes honest code look like tampering shows here as a gold patch below 1.0.

    python3 -m tests.benchmarks.heldout_verdicts [--tasks datasets/heldout] [--projects 10]

Environment images missing on this engine are built first (as ``bench_score`` does). Prints one
line per scoring and a summary; exits 1 if any verdict is wrong.
"""

from __future__ import annotations

import argparse
import sys

from taskforge.datasets import read_tasks
from taskforge.sandbox import open_backend
from taskforge.scoring.scorer import Scorer
from taskforge.task import Task
from tests.benchmarks.bench_score import _on_this_engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="datasets/heldout")
    parser.add_argument("--projects", type=int, default=10)
    args = parser.parse_args()
    first: dict[str, Task] = {}
    for task in sorted(read_tasks(args.tasks), key=lambda t: (t.repo, t.instance_id)):
        first.setdefault(task.repo, task)
    backend = open_backend("docker")
    picked = _on_this_engine(list(first.values())[: args.projects], backend, skip_unbuildable=True)
    wrong = []
    total = 0
    with Scorer(backend=backend, concurrency=1) as scorer:
        for task in picked:
            for candidate, patch, expected in (("gold", task.patch, 1.0), ("empty", "", 0.0)):
                for run in range(2):
                    result = scorer.score(task, patch, candidate_id=f"{candidate}-{run}")
                    total += 1
                    line = f"{task.repo} {task.instance_id} {candidate} {run}: {result.status} {result.reward}"
                    print(line, (result.detail or "")[:200], flush=True)
                    if result.reward != expected or (candidate == "gold" and result.status != "ok"):
                        wrong.append(line)
    print(f"{len(picked)} projects, {total} scorings, {len(wrong)} wrong verdicts")
    for line in wrong:
        print("  WRONG:", line)
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()
