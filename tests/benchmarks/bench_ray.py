"""Benchmark: mining corpus projects on an embedded Ray with 1 and with 2 workers.

    python -m tests.benchmarks.bench_ray [--projects iniconfig,addict,inflection,cachetools,funcy,glom]
                                         [--max-tasks 3] [--rounds 1] [--json bench-ray.json]

Every round mines the same projects twice into fresh dataset folders, through the same driver
the CLI uses (``taskforge.mining.run.run_mining`` with ``taskforge.mining.distributed.ray_executor``): once
with one repository in flight, once with two, in alternating order from round to round. Sources
and environment images are built before the first round, so both configurations pay the same
(uncached) work: baselines, coverage, candidates, validation, audit. It reports the wall time of
each, the speedup (goal: at least 1.7x on 2 cores), that both produced the same instance_ids, and
tasks per CPU-hour, where CPU is the machine's busy time (/proc/stat) over the run: run it on an
otherwise idle machine. Ray's startup is inside the timing (a few seconds per run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from taskforge.mining.distributed import ray_executor
from taskforge.mining.recipe import recipe_from_dict
from taskforge.mining.run import run_mining
from taskforge.repo.environment import build_environment
from taskforge.repo.sources import fetch
from taskforge.sandbox import open_backend
from taskforge.sandbox.base_image import current_base
from taskforge.scoring.scorer import gate_scorer
from tests.corpus import corpus


def _busy_seconds() -> float:
    """CPU seconds the whole machine spent busy (user, nice, system, irq, softirq, steal)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    import os

    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _run(sources: list[str], workers: int, max_tasks: int, out: Path) -> dict[str, object]:
    recipe = recipe_from_dict({
        "out": str(out), "sources": sources, "mine": {"max_tasks": max_tasks, "seed": 0},
        "ray": {"address": "local", "local_cpus": 2, "max_concurrent": workers},
    })
    cpu, wall = _busy_seconds(), time.monotonic()
    summary = run_mining(recipe, ray_executor(gate_scorer))
    wall, cpu = time.monotonic() - wall, _busy_seconds() - cpu
    if summary.failures:
        raise SystemExit(f"{workers} worker(s): repositories failed: {summary.failures}")
    from taskforge.datasets import read_rows

    ids = sorted(row["instance_id"] for row in read_rows(out))
    return {"workers": workers, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "tasks": len(ids), "ids": ids,
            "tasks_per_cpu_hour": round(len(ids) / (cpu / 3600), 1) if cpu else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--projects", default="iniconfig,addict,inflection,cachetools,funcy,glom")
    parser.add_argument("--max-tasks", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", type=Path, default=Path("bench-ray.json"))
    args = parser.parse_args()
    projects = corpus()
    sources = [projects[name].source for name in args.projects.split(",")]
    backend = open_backend("docker")
    base = current_base(backend)
    for source in sources:  # fetched and built once, outside the timing
        build_environment(fetch(source), backend=backend, base=base)
    runs: dict[int, list[dict[str, object]]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        for round_ in range(args.rounds):
            for workers in ((1, 2) if round_ % 2 == 0 else (2, 1)):
                result = _run(sources, workers, args.max_tasks, Path(tmp) / f"r{round_}-w{workers}")
                runs[workers].append(result)
                print(f"round {round_}: {workers} worker(s): {result['tasks']} tasks in {result['wall_s']} s wall, "
                      f"{result['cpu_s']} CPU s, {result['tasks_per_cpu_hour']} tasks/CPU-hour", flush=True)
    same = all(r["ids"] == runs[1][0]["ids"] for rs in runs.values() for r in rs)
    wall = {w: statistics.median(float(r["wall_s"]) for r in rs) for w, rs in runs.items()}  # type: ignore[arg-type]
    rate = {w: statistics.median(float(r["tasks_per_cpu_hour"]) for r in rs) for w, rs in runs.items()}  # type: ignore[arg-type]
    speedup = wall[1] / wall[2]
    print(f"\n{'workers':<9}{'wall s':>9}{'tasks/CPU-hour':>16}")
    for workers in (1, 2):
        print(f"{workers:<9}{wall[workers]:>9.1f}{rate[workers]:>16.1f}")
    print(f"speedup (median wall, 1 worker / 2 workers): {speedup:.2f}x (goal 1.70x); same instance_ids: {same}")
    args.json.write_text(json.dumps({"projects": args.projects.split(","), "max_tasks": args.max_tasks,
                                     "runs": {str(w): [{k: v for k, v in r.items() if k != "ids"} for r in rs]
                                              for w, rs in runs.items()},
                                     "speedup": round(speedup, 3), "same_ids": same}, indent=2))


if __name__ == "__main__":
    main()
