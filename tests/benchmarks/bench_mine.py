"""Benchmark: validated tasks per CPU-minute, fast validation against the naive reference.

    python -m tests.benchmarks.bench_mine [--projects cachetools,toolz,inflection] [--max-tasks 5]

For each project both pipelines mine the same candidates in the same order (same seed) on the
same environment image, baseline and index, interleaved project by project:
- fast: one warm container per repository, affected tests first (twice), the full suite once;
- naive (`_check_naive`): a fresh container for every check and the full suite for every check.

CPU time is the machine's busy time (/proc/stat, all cores) during each pipeline, so it counts the
sandboxes and dockerd as well as this process; wall time is printed too. Per-stage seconds of the
fast pipeline are printed for the README.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from taskforge.baseimage import current_base
from taskforge.mine import MineConfig, mine_repository
from taskforge.sandbox import open_backend
from tests.corpus import corpus


def _busy_seconds() -> float:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields) - idle) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--projects", default="cachetools,toolz,inflection")
    parser.add_argument("--max-tasks", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("bench-mine.json"))
    args = parser.parse_args()
    backend = open_backend("docker")
    base = current_base(backend)
    config = MineConfig(max_tasks=args.max_tasks, max_attempts=args.max_tasks * 4, seed=0)
    report: dict[str, dict[str, object]] = {}
    totals = {"fast": [0, 0.0, 0.0], "naive": [0, 0.0, 0.0]}
    print(f"{'project':<12}{'mode':<7}{'tasks':>6}{'cpu s':>9}{'wall s':>9}{'tasks/cpu-min':>15}")
    for name in args.projects.split(","):
        source = corpus()[name].source
        mine_repository(source, config=MineConfig(max_tasks=1, max_attempts=1), backend=backend, base=base)  # warm caches
        for mode in ("fast", "naive"):
            cpu0, wall0 = _busy_seconds(), time.monotonic()
            result = mine_repository(source, config=config, backend=backend, base=base, naive=mode == "naive")
            cpu, wall = _busy_seconds() - cpu0, time.monotonic() - wall0
            rate = len(result.tasks) / (cpu / 60) if cpu else 0.0
            totals[mode][0] += len(result.tasks)
            totals[mode][1] += cpu
            totals[mode][2] += wall
            report.setdefault(name, {})[mode] = {
                "tasks": len(result.tasks), "attempted": result.attempted, "cpu_s": round(cpu, 1),
                "wall_s": round(wall, 1), "tasks_per_cpu_min": round(rate, 2), "runs": result.runs,
                "containers": result.containers, "stage_s": {k: round(v, 1) for k, v in result.stage_s.items()},
                "rejections": dict(result.rejections),
                "instance_ids": sorted(t.instance_id for t in result.tasks),
            }
            print(f"{name:<12}{mode:<7}{len(result.tasks):>6}{cpu:>9.1f}{wall:>9.1f}{rate:>15.2f}")
    fast = totals["fast"][0] / (totals["fast"][1] / 60)
    naive = totals["naive"][0] / (totals["naive"][1] / 60)
    print(f"all: fast {fast:.2f} tasks/cpu-min, naive {naive:.2f} tasks/cpu-min, speedup {fast / naive:.2f}x")
    for name, modes in report.items():
        same = modes["fast"]["instance_ids"] == modes["naive"]["instance_ids"]
        print(f"{name}: same tasks in both modes: {same}; fast stages: {modes['fast']['stage_s']}")
    args.out.write_text(json.dumps({"projects": report, "speedup": round(fast / naive, 2)}, indent=2))


if __name__ == "__main__":
    main()
