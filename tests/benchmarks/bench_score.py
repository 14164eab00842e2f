"""Benchmark: what scoring a candidate costs over running the same tests bare on the host.

    python3 -m tests.benchmarks.bench_score [--tasks DIR ...] [--max-tasks N] [--repeats 5] [--rounds 3] [--json OUT]

The candidates are the tasks' gold patches, so every scoring must come back ``ok`` with reward
1.0; anything else stops the benchmark with the result's detail.

Latency, task by task, interleaved so that machine noise hits both sides alike (`--repeats` each,
after one untimed run of each side):
- host (the baseline): exactly the tests the scorer runs (FAIL_TO_PASS + PASS_TO_PASS node ids)
  on the same state (start state + test_patch + gold), in the host venv built from the image's
  wheelhouse: `python -m pytest -q -p no:cacheprovider <pytest_args> <ids>`, pytest's own wall
  time (copying the tree into the venv's workspace is not counted);
- scorer: `Scorer(concurrency=1).score(task, gold)` end to end (`duration_s`: patch filtering and
  lint on the host, a pre-started container from the pool, the tree copied in, pytest with the
  guard, the report read back and judged, the container removed), with its `apply_s`/`test_s` split.
Printed: host median, scorer p50/p95, the scorer p50 / host median ratio per task, and over all
tasks the median of those ratios and the p50/p95 of every scoring pooled. Canaries: each repeat
also scores the same task with its canaries taken out (``validation["canaries"] = []``: one run
in one container, as a task mined before them); ``+canary`` is the scorer's test time with them
over that, minus one, and the overall figure is its median over the tasks.

Throughput: one batch (every task x `--repeats` gold patches, grouped by image as `taskforge score`
orders its work) through `score_many` with `Scorer(concurrency=1)` and `Scorer(concurrency=2)`,
`--rounds` times each, alternating 1,2 / 2,1 / ...; scorings per minute from the median batch wall
time, and the ratio 2 vs 1. Each scorer scores every task once first, untimed, so start-state
rebuilds, plugin discovery and the first container starts do not count. The pool's hits
(containers already started when a scoring asked for one) are printed next to each.

Medians throughout: the machine is shared, and other people's containers compete for its CPUs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from itertools import zip_longest
from pathlib import Path
from typing import Any

from taskforge.datasets import read_tasks
from taskforge.repo.environment import Environment
from taskforge.repo.patches import apply_patch
from taskforge.repo.startstate import rebuild_start_state
from taskforge.repo.suite import _host_venv
from taskforge.sandbox import SandboxBackend, SandboxLimits, open_backend
from taskforge.scoring.scorer import RewardResult, Scorer
from taskforge.scoring.verdict import task_canaries
from taskforge.task import Task

_REPO_ROOT = Path(__file__).resolve().parents[2]
_NOISE_NOTE = "shared, noisy machine: every figure is a median (p95: linear interpolation over the samples)"


def _median(xs: Sequence[float]) -> float:
    return statistics.median(xs)


def _percentile(xs: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1), interpolated linearly between the closest samples."""
    ordered = sorted(xs)
    k = (len(ordered) - 1) * q
    low = int(k)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def _pick(tasks: list[Task], limit: int | None) -> list[Task]:
    """Up to ``limit`` tasks, taken round-robin over the repositories so that every project shows."""
    by_repo: dict[str, list[Task]] = {}
    for task in sorted(tasks, key=lambda t: (t.repo, t.instance_id)):
        by_repo.setdefault(task.repo, []).append(task)
    spread = [t for group in zip_longest(*by_repo.values()) for t in group if t is not None]
    return spread[:limit] if limit else spread


def _check(results: Iterable[RewardResult]) -> None:
    """Every gold scoring must be ``ok`` with reward 1.0; the benchmark is meaningless otherwise."""
    bad = [r for r in results if r.status != "ok" or r.reward != 1.0]
    if bad:
        lines = "\n".join(f"  {r.instance_id} [{r.candidate_id}]: status {r.status}, reward {r.reward}: {r.detail}"
                          for r in bad[:10])
        raise SystemExit(f"{len(bad)} gold scoring(s) did not score 1.0 ok:\n{lines}")


class _HostRun:
    """The bare host baseline for one task: its scored tests, on start state + test_patch + gold,
    run with plain pytest in the host venv of the task's environment."""

    def __init__(self, task: Task, scratch: Path) -> None:
        self.task = task
        self.env = Environment.from_json(json.loads(task.environment))
        self.start = rebuild_start_state(task, scratch / task.instance_id)
        hidden = apply_patch(self.start.path, {}, task.test_patch)
        self.changes = apply_patch(self.start.path, hidden, task.patch)
        self.ids = [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]
        self.venv, self.workspace = _host_venv(self.env)

    def __call__(self) -> float:
        """One run; pytest's wall time in seconds. Raises unless every selected test passed."""
        # The venv's .pth points at this fixed workspace: the state is copied there for each run.
        if self.workspace.exists():
            shutil.rmtree(self.workspace)
        shutil.copytree(self.start.path, self.workspace, symlinks=True)
        for rel, text in self.changes.items():
            path = self.workspace / rel
            if text is None:
                path.unlink()
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
        with tempfile.TemporaryDirectory(prefix="bench-score-home-") as home:
            environ = {
                "PATH": f"{self.venv / 'bin'}:{os.environ.get('PATH', '')}",
                "PYTHONDONTWRITEBYTECODE": "1",  # a fresh tree each run, as in the scorer's container
                "HOME": home,
                "LANG": "C.UTF-8",
            }
            cmd = [str(self.venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                   *self.env.pytest_args, *self.ids]
            started = time.monotonic()
            proc = subprocess.run(cmd, cwd=self.workspace, env=environ, capture_output=True, text=True,
                                  timeout=600, check=False)
            seconds = time.monotonic() - started
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["(no output)"]
        if proc.returncode != 0 or f"{len(self.ids)} passed" not in tail[0]:
            raise SystemExit(f"host run of {self.task.instance_id}: exit {proc.returncode}, expected "
                             f"{len(self.ids)} passed: {tail[0][:300]}")
        return seconds


def _without_canaries(task: Task) -> Task:
    from dataclasses import replace

    validation = {**json.loads(task.validation or "{}"), "canaries": []}
    return replace(task, validation=json.dumps(validation))


def _warm(scorer: Scorer, tasks: Sequence[Task]) -> None:
    """One untimed scoring per task: start states rebuilt, plugins listed, the pool filled."""
    for task in tasks:
        scorer.warm(task)
    _check(scorer.score_many((task, task.patch, "warmup") for task in tasks))


def _latency(tasks: Sequence[Task], *, backend: SandboxBackend, limits: SandboxLimits, repeats: int,
             scratch: Path) -> tuple[dict[str, Any], int, int]:
    rows: dict[str, Any] = {}
    print(f"{'task':<58}{'tests':>6}{'host s':>8}{'p50 s':>8}{'p95 s':>8}{'apply s':>9}{'test s':>8}"
          f"{'+s':>7}{'ratio':>8}{'twins':>6}{'+canary':>9}")
    with Scorer(backend=backend, limits=limits, concurrency=1) as scorer:
        _warm(scorer, tasks)
        hits, started = scorer.pool.hits, scorer.pool.started
        for task in tasks:
            # Switch the pool to this task's image while the host side is set up and warmed by one
            # untimed run, so that no timed scoring waits for an image switch (the throughput
            # batches do count those).
            scorer.pool.warm(task.image_name)
            host = _HostRun(task, scratch)
            host()
            host_s: list[float] = []
            results: list[RewardResult] = []
            plain: list[RewardResult] = []
            without = _without_canaries(task)
            for repeat in range(repeats):
                # Scorer first: the pool refills in the background during its own test run, not
                # during the host run after it.
                result = scorer.score(task, task.patch, candidate_id=f"gold-{repeat}")
                _check([result])
                results.append(result)
                host_s.append(host())
                plain.append(scorer.score(without, task.patch, candidate_id=f"plain-{repeat}"))
                _check(plain[-1:])
            durations = [r.duration_s for r in results]
            row: dict[str, Any] = {
                "repo": task.repo,
                "tests": len(host.ids),
                "host_median_s": _median(host_s),
                "score_p50_s": _percentile(durations, 0.50),
                "score_p95_s": _percentile(durations, 0.95),
                "apply_median_s": _median([r.apply_s for r in results]),
                "test_median_s": _median([r.test_s for r in results]),
                "plain_test_median_s": _median([r.test_s for r in plain]),
                "canaries": len(task_canaries(task)),
                "host_s": host_s,
                "score_s": durations,
            }
            row["canary_share"] = row["test_median_s"] / row["plain_test_median_s"] - 1
            row["overhead_s"] = row["score_p50_s"] - row["host_median_s"]
            row["ratio"] = row["score_p50_s"] / row["host_median_s"]
            rows[task.instance_id] = row
            print(f"{task.instance_id[:57]:<58}{row['tests']:>6}{row['host_median_s']:>8.2f}{row['score_p50_s']:>8.2f}"
                  f"{row['score_p95_s']:>8.2f}{row['apply_median_s']:>9.2f}{row['test_median_s']:>8.2f}"
                  f"{row['overhead_s']:>7.2f}{row['ratio']:>7.2f}x{row['canaries']:>6}{row['canary_share']:>8.0%}")
        return rows, scorer.pool.hits - hits, scorer.pool.started - started


def _throughput(tasks: Sequence[Task], *, backend: SandboxBackend, limits: SandboxLimits, repeats: int,
                rounds: int) -> dict[int, dict[str, Any]]:
    # Grouped by image, as `taskforge score` orders its work: the pool keeps one image warm.
    batch = [(task, task.patch, f"gold-{r}") for task in sorted(tasks, key=lambda t: (t.image_name, t.instance_id))
             for r in range(repeats)]
    scorers = {c: Scorer(backend=backend, limits=limits, concurrency=c) for c in (1, 2)}
    walls: dict[int, list[float]] = {1: [], 2: []}
    hits = dict.fromkeys(scorers, 0)
    try:
        for scorer in scorers.values():
            _warm(scorer, tasks)
        for round_ in range(rounds):
            for concurrency in (1, 2) if round_ % 2 == 0 else (2, 1):
                scorer = scorers[concurrency]
                scorer.pool.warm(batch[0][0].image_name)  # the other scorer's batch may have switched images
                before = scorer.pool.hits
                started = time.monotonic()
                results = scorer.score_many(batch)
                walls[concurrency].append(time.monotonic() - started)
                hits[concurrency] += scorer.pool.hits - before
                _check(results)
    finally:
        for scorer in scorers.values():
            scorer.close()
    report: dict[int, dict[str, Any]] = {}
    print(f"\n{'concurrency':<13}{'scorings':>9}{'wall s':>9}{'scorings/min':>14}{'pool hits':>14}")
    for concurrency, wall in walls.items():
        rate = len(batch) / (_median(wall) / 60)
        report[concurrency] = {"scorings": len(batch), "wall_median_s": _median(wall), "wall_s": wall,
                               "scorings_per_min": rate, "pool_hits": hits[concurrency],
                               "acquires": len(batch) * rounds}
        print(f"{concurrency:<13}{len(batch):>9}{_median(wall):>9.1f}{rate:>14.1f}"
              f"{hits[concurrency]:>8}/{len(batch) * rounds:<5}")
    speedup = report[2]["scorings_per_min"] / report[1]["scorings_per_min"]
    # Each round times both scorers back to back, so a round's own ratio sees the least drift in
    # the machine's load.
    paired = [one / two for one, two in zip(walls[1], walls[2], strict=True)]
    print(f"throughput, concurrency 2 vs 1: {speedup:.2f}x (median batch wall times of {rounds} round(s); "
          f"round by round: {', '.join(f'{r:.2f}x' for r in paired)}; {os.cpu_count()} CPUs)")
    report[2]["ratio_by_round"] = paired
    return report


def _on_this_engine(tasks: list[Task], backend: SandboxBackend, *, skip_unbuildable: bool = False) -> list[Task]:
    """The tasks, each naming an environment image this engine has: a task whose image is missing
    (the committed sample names the image as the machine that mined it built it; the base image,
    debootstrapped, differs from machine to machine) gets its repository's environment built here,
    with the task's own pytest arguments kept. ``skip_unbuildable``: a repository whose environment
    cannot be built here is left out, with why, instead of ending the run."""
    from dataclasses import replace

    from taskforge.errors import TaskforgeError
    from taskforge.repo.environment import build_environment
    from taskforge.repo.sources import fetch
    from taskforge.sandbox.base_image import current_base

    built: dict[str, Environment | None] = {}
    out = []
    for task in tasks:
        wheelhouse = json.loads(task.environment or "{}").get("wheelhouse")
        # The host runs need the environment's wheelhouse too: a row's names the mining machine's.
        if not backend.image_exists(task.image_name) or not (wheelhouse and Path(wheelhouse).is_dir()):
            if task.source not in built:
                try:
                    built[task.source] = build_environment(fetch(task.source), backend=backend, base=current_base(backend))
                except TaskforgeError as err:
                    if not skip_unbuildable:
                        raise
                    built[task.source] = None
                    print(f"{task.source}: left out, its environment cannot be built here: {str(err)[:300]}")
                else:
                    print(f"{task.image_name} is not on this engine: built {built[task.source].image} for {task.source}")
            env = built[task.source]
            if env is None:
                continue
            recorded = json.loads(task.environment or "{}")
            task = replace(task, image_name=env.image, environment=json.dumps(
                {**env.to_json(), "pytest_args": recorded.get("pytest_args", list(env.pytest_args))}))
        out.append(task)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=Path, nargs="+", default=[_REPO_ROOT / "datasets" / "sample"],
                        help="task dataset folders (default: datasets/sample)")
    parser.add_argument("--max-tasks", type=int, default=None,
                        help="at most this many tasks, spread round-robin over the repositories")
    parser.add_argument("--repeats", type=int, default=5, help="scorings and host runs per task")
    parser.add_argument("--rounds", type=int, default=3, help="timed throughput batches per concurrency")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here as JSON")
    args = parser.parse_args()
    if args.repeats < 1 or args.rounds < 1:
        parser.error("--repeats and --rounds must be at least 1")

    tasks = _pick([task for folder in args.tasks for task in read_tasks(folder)], args.max_tasks)
    if not tasks:
        raise SystemExit(f"no tasks in {', '.join(map(str, args.tasks))}")
    backend = open_backend("docker")
    tasks = _on_this_engine(tasks, backend)
    limits = SandboxLimits.load()
    load_before = os.getloadavg()
    began = time.monotonic()
    print(f"{len(tasks)} task(s) from {len({t.repo for t in tasks})} repo(s); {args.repeats} repeats; "
          f"{_NOISE_NOTE}; load average {load_before[0]:.2f}\n")

    with tempfile.TemporaryDirectory(prefix="bench-score-") as scratch:
        rows, hits, started = _latency(tasks, backend=backend, limits=limits, repeats=args.repeats,
                                       scratch=Path(scratch))
    ratios = [row["ratio"] for row in rows.values()]
    every = [s for row in rows.values() for s in row["score_s"]]
    overall = {
        "scorings": len(every),
        "score_p50_s": _percentile(every, 0.50),
        "score_p95_s": _percentile(every, 0.95),
        "host_median_s": _median([s for row in rows.values() for s in row["host_s"]]),
        "ratio_median": _median(ratios),
        "overhead_median_s": _median([row["overhead_s"] for row in rows.values()]),
        "canary_share_median": _median([row["canary_share"] for row in rows.values()]),
        "pool_hits": hits,
        "containers_started": started,
    }
    print(f"all {len(every)} scorings: p50 {overall['score_p50_s']:.2f} s, p95 {overall['score_p95_s']:.2f} s; "
          f"host median {overall['host_median_s']:.2f} s; scorer p50 / host median, median over tasks: "
          f"{overall['ratio_median']:.2f}x")
    print(f"overhead over the bare host run (scorer p50 - host median), median over tasks: "
          f"{overall['overhead_median_s']:.2f} s; canaries add {overall['canary_share_median']:.0%} to the "
          f"scorer's test time (median over tasks)")
    print(f"pool hits (container already started when asked for): {hits}/{len(every)}")

    throughput = _throughput(tasks, backend=backend, limits=limits, repeats=args.repeats, rounds=args.rounds)
    load_after = os.getloadavg()
    print(f"\nwall time {time.monotonic() - began:.0f} s; load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after; {_NOISE_NOTE}")
    if args.json is not None:
        args.json.write_text(json.dumps({
            "tasks": [str(folder) for folder in args.tasks],
            "repeats": args.repeats,
            "rounds": args.rounds,
            "cpus": os.cpu_count(),
            "load_average": [load_before[0], load_after[0]],
            "latency": rows,
            "overall": overall,
            "throughput": {str(c): figures for c, figures in throughput.items()},
            "throughput_ratio_2_vs_1": throughput[2]["scorings_per_min"] / throughput[1]["scorings_per_min"],
        }, indent=2))


if __name__ == "__main__":
    main()
