"""Canaries and the supervised verdict on tasks mined from projects nothing was tuned on.

    python3 -m tests.benchmarks.canaries_heldout [--tasks datasets/heldout] [--per-repo 2] [--repos a,b] [--json OUT]

For up to ``--per-repo`` tasks of each repository (in the order mining wrote them): the scorer
calibrates the task's canaries and confirms them with a gold scoring (``Scorer.calibrate`` and
``Scorer.confirm``, as mining's gate does for every new task: one twin per test, dropped where
gold passes it in place), then scores its gold patch twice and its empty patch once, each through
the two-run plan with twins in place. Printed per task: twins kept by kind, how many FAIL_TO_PASS tests a twin covers,
the gold and empty rewards and statuses. A correct solution must never trip a canary: any gold
scoring below 1.0, or any ``tampered``, is listed with its detail.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

from taskforge.datasets import read_tasks
from taskforge.sandbox import SandboxLimits, open_backend
from taskforge.scoring.scorer import Scorer
from taskforge.scoring.verdict import task_canaries
from tests.benchmarks.bench_score import _on_this_engine

_REPO_ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=Path, default=_REPO_ROOT / "datasets" / "heldout")
    parser.add_argument("--per-repo", type=int, default=2)
    parser.add_argument("--repos", default="", help="comma-separated repository names (default: all)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    by_repo: dict[str, list] = {}
    for task in read_tasks(args.tasks):
        by_repo.setdefault(task.repo, []).append(task)
    wanted = {r for r in args.repos.split(",") if r}
    tasks = [t for repo, group in by_repo.items() if not wanted or repo in wanted for t in group[: args.per_repo]]
    backend = open_backend("docker")
    tasks = _on_this_engine(tasks, backend, skip_unbuildable=True)  # environments a dataset from another machine names are built here
    rows = []
    began = time.monotonic()
    with Scorer(backend=backend, limits=SandboxLimits.load(), timeout_s=600, concurrency=2) as scorer:
        calibrated = [scorer.confirm(scorer.calibrate(task))[0] for task in tasks]
        work = [(t, t.patch, f"gold-{n}") for t in calibrated for n in range(2)] + [(t, "", "empty") for t in calibrated]
        results = scorer.score_many(work)
    by_task: dict[str, list] = {}
    for result in results:
        by_task.setdefault(result.instance_id, []).append(result)
    print(f"{'task':<64}{'twins':>18}{'covered':>9}  gold          empty")
    for task in calibrated:
        twins = task_canaries(task)
        kinds = Counter(t.kind for t in twins)
        covered = len({i for t in twins for i in t.tests})
        gold = [r for r in by_task[task.instance_id] if r.candidate_id.startswith("gold")]
        empty = [r for r in by_task[task.instance_id] if r.candidate_id == "empty"]
        row = {"instance_id": task.instance_id, "repo": task.repo, "twins": dict(kinds), "covered": covered,
               "fail_to_pass": len(task.FAIL_TO_PASS),
               "gold": [(r.reward, r.status, r.detail[:200]) for r in gold],
               "empty": [(r.reward, r.status, r.detail[:200]) for r in empty]}
        rows.append(row)
        kind_text = ",".join(f"{k}:{v}" for k, v in sorted(kinds.items())) or "none"
        print(f"{task.instance_id[:63]:<64}{kind_text:>18}{covered:>4}/{len(task.FAIL_TO_PASS):<4}  "
              f"{' '.join(f'{r.reward:g}/{r.status}' for r in gold):<14}{' '.join(f'{r.reward:g}/{r.status}' for r in empty)}")
    gold_all = [g for row in rows for g in row["gold"]]
    bad = [(row["instance_id"], g) for row in rows for g in row["gold"] if g[0] != 1.0 or g[1] != "ok"]
    empty_bad = [(row["instance_id"], e) for row in rows for e in row["empty"] if e[0] != 0.0]
    with_twins = sum(1 for row in rows if row["twins"])
    print(f"\n{len(rows)} tasks of {len(by_repo)} repositories; {with_twins} with canaries; gold 1.0 ok on "
          f"{len(gold_all) - len(bad)}/{len(gold_all)} scorings; empty above 0 on {len(empty_bad)}; "
          f"FAIL_TO_PASS tests a twin covers: {sum(r['covered'] for r in rows)}/{sum(r['fail_to_pass'] for r in rows)}; "
          f"{time.monotonic() - began:.0f} s")
    for instance_id, (reward, status, detail) in bad + empty_bad:
        print(f"  {instance_id}: {reward:g} {status}: {detail}")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
