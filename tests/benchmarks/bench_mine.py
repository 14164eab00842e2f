"""Benchmark: validated tasks per CPU-minute, fast validation against the naive reference.

    python -m tests.benchmarks.bench_mine [--projects cachetools,glom,boltons] [--max-tasks 8] [--rounds 2]

For each project both pipelines mine the same candidates in the same order (same seed) on the
same environment image, baseline and index, interleaved project by project:
- fast: one warm container per repository, affected tests first (twice), the full suite once;
- naive (`check_naive`): a fresh container for every check and the full suite for every check,
  and each task's image audit in a fresh container of its own (fast: one scan per repository).

CPU time is what each pipeline causes: this process and its children, and the containers it
starts (under a cgroup parent of their own), so other work on a shared machine and engine does not
count; wall time is printed too. With ``--rounds N`` both pipelines mine every project N times (interleaved); each
project's CPU time is the median of its rounds (the machine is shared and noisy). Per-stage seconds of the
fast pipeline are printed for the README, and so is each fast task's audit time next to its
validation time.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time
from pathlib import Path

from taskforge.mining.pipeline import MineConfig, mine_repository
from taskforge.sandbox import SandboxLimits, open_backend
from taskforge.sandbox.base_image import current_base
from taskforge.scoring.scorer import Scorer
from taskforge.task import Task
from tests.corpus import corpus

CGROUP = f"taskforge-bench-{os.getpid()}"
"""The cgroup parent of every container this benchmark's mining starts (``SandboxLimits.cgroup_parent``)."""
GATE_CGROUP = f"{CGROUP}-gate"
"""The cgroup parent of the scorer's containers: the verdict every task gets before it is kept."""


def _cgroup_seconds(name: str) -> float:
    """CPU seconds of every container ever started under the cgroup parent ``name`` (the parent
    keeps the time of containers already removed)."""
    v1, v2 = Path("/sys/fs/cgroup/cpuacct") / name / "cpuacct.usage", Path("/sys/fs/cgroup") / name / "cpu.stat"
    if v1.exists():
        return int(v1.read_text()) / 1e9
    if v2.exists():
        return sum(int(line.split()[1]) for line in v2.read_text().splitlines() if line.startswith("usage_usec")) / 1e6
    return 0.0


def _cpu_seconds() -> tuple[float, float]:
    """CPU time this benchmark causes, and the part of it in the scorer's containers (the gate).

    All of it: this process and its children, and its own containers, which run under cgroup
    parents of their own (:data:`CGROUP`, :data:`GATE_CGROUP`). Other jobs on a shared machine and
    engine do not count, their containers included.

    The Docker daemons' own time is left out: on a shared engine it cannot be told apart from other
    jobs'. The naive pipeline starts far more containers and so causes more of it (and of runc's and
    the kernel's container setup), so the ratio errs in the naive pipeline's favour."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    gate = _cgroup_seconds(GATE_CGROUP)
    total = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + _cgroup_seconds(CGROUP) + gate
    return total, gate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--projects", default="cachetools,glom,boltons")
    parser.add_argument("--max-tasks", type=int, default=8)
    parser.add_argument("--out", type=Path, default=Path("bench-mine.json"))
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    backend = open_backend("docker")
    base = current_base(backend)
    limits = SandboxLimits.load(cgroup_parent=CGROUP)
    scorer = Scorer(backend=backend, limits=SandboxLimits.load(cgroup_parent=GATE_CGROUP))
    config = MineConfig(max_tasks=args.max_tasks, max_attempts=args.max_tasks * 4, seed=0)
    report: dict[str, dict[str, object]] = {}
    totals = {"fast": [0, 0.0, 0.0, 0.0], "naive": [0, 0.0, 0.0, 0.0]}  # tasks, cpu, wall, gate cpu
    cpu_rounds: dict[tuple[str, str], list[float]] = {}
    wall_rounds: dict[tuple[str, str], list[float]] = {}
    gate_rounds: dict[tuple[str, str], list[float]] = {}
    audit_rounds: dict[str, list[tuple[float, float]]] = {}
    print(f"{'round':<6}{'project':<12}{'mode':<7}{'tasks':>6}{'cpu s':>9}{'wall s':>9}{'tasks/cpu-min':>15}")
    for round_ in range(args.rounds):
        for name in args.projects.split(","):
            source = corpus()[name].source
            if round_ == 0:  # warm caches: the environment image, the wheels
                mine_repository(source, config=MineConfig(max_tasks=1, max_attempts=1), backend=backend, base=base,
                                scorer=scorer, limits=limits)
            for mode in ("fast", "naive"):
                (cpu0, gate0), wall0 = _cpu_seconds(), time.monotonic()
                result = mine_repository(source, config=config, backend=backend, base=base, naive=mode == "naive",
                                         scorer=scorer, limits=limits)
                (cpu1, gate1), wall = _cpu_seconds(), time.monotonic() - wall0
                cpu, gate = cpu1 - cpu0, gate1 - gate0
                cpu_rounds.setdefault((name, mode), []).append(cpu)
                gate_rounds.setdefault((name, mode), []).append(gate)
                wall_rounds.setdefault((name, mode), []).append(wall)
                ids = sorted(t.instance_id for t in result.tasks)
                entry = report.setdefault(name, {}).setdefault(mode, {"instance_ids": ids, "rounds": []})
                assert isinstance(entry, dict)
                if entry["instance_ids"] != ids:
                    print(f"warning: {name} {mode} mined other tasks in round {round_ + 1}")
                entry["rounds"].append({
                    "tasks": len(result.tasks), "attempted": result.attempted, "cpu_s": round(cpu, 1),
                    "wall_s": round(wall, 1), "gate_cpu_s": round(gate, 1), "runs": result.runs,
                    "containers": result.containers,
                    "stage_s": {k: round(v, 1) for k, v in result.stage_s.items()},
                    "rejections": dict(result.rejections),
                })
                if mode == "fast":
                    for instance_id, validation_s, audit_s in _audit_against_validation(result.tasks):
                        audit_rounds.setdefault(instance_id, []).append((validation_s, audit_s))
                rate = len(result.tasks) / (cpu / 60) if cpu else 0.0
                print(f"{round_ + 1:<6}{name:<12}{mode:<7}{len(result.tasks):>6}{cpu:>9.1f}{wall:>9.1f}{rate:>15.2f}")
    print(f"\nmedians over {args.rounds} round(s):")
    for (name, mode), cpus in cpu_rounds.items():
        entry = report[name][mode]
        assert isinstance(entry, dict)
        tasks = len(entry["instance_ids"])
        cpu, wall = statistics.median(cpus), statistics.median(wall_rounds[(name, mode)])
        gate = statistics.median(gate_rounds[(name, mode)])
        entry.update({"tasks": tasks, "cpu_s": round(cpu, 1), "wall_s": round(wall, 1), "gate_cpu_s": round(gate, 1),
                      "tasks_per_cpu_min": round(tasks / (cpu / 60), 2) if cpu else 0.0,
                      "stage_s": entry["rounds"][-1]["stage_s"]})
        totals[mode][0] += tasks
        totals[mode][1] += cpu
        totals[mode][2] += wall
        totals[mode][3] += gate
        print(f"{name:<12}{mode:<7}{tasks:>6}{cpu:>9.1f}{wall:>9.1f}{entry['tasks_per_cpu_min']:>15.2f}"
              f"   (cpu s per round: {', '.join(f'{c:.1f}' for c in cpus)}; the scorer's verdicts: {gate:.1f})")
    audits = [(i, statistics.median(v for v, _ in rows), statistics.median(a for _, a in rows))
              for i, rows in audit_rounds.items()]
    fast = totals["fast"][0] / (totals["fast"][1] / 60)
    naive = totals["naive"][0] / (totals["naive"][1] / 60)
    print(f"all: fast {fast:.2f} tasks/cpu-min, naive {naive:.2f} tasks/cpu-min, speedup {fast / naive:.2f}x")
    # What the verdict through the scorer costs: both pipelines pay the same for it.
    print(f"the scorer's verdicts (gold and empty, fresh containers): fast {totals['fast'][3]:.1f} of "
          f"{totals['fast'][1]:.1f} CPU s ({totals['fast'][3] / totals['fast'][1]:.0%}), naive {totals['naive'][3]:.1f} "
          f"of {totals['naive'][1]:.1f} ({totals['naive'][3] / totals['naive'][1]:.0%}); speedup without them "
          f"{(totals['naive'][1] - totals['naive'][3]) / (totals['fast'][1] - totals['fast'][3]) * totals['fast'][0] / max(totals['naive'][0], 1):.2f}x")
    for name, modes in report.items():
        same = modes["fast"]["instance_ids"] == modes["naive"]["instance_ids"]
        print(f"{name}: same tasks in both modes: {same}; fast stages: {modes['fast']['stage_s']}")
    print(f"\n{'task':<64}{'validation s':>13}{'audit s':>9}{'audit/val':>10}")
    for instance_id, validation_s, audit_s in audits:
        print(f"{instance_id[:63]:<64}{validation_s:>13.2f}{audit_s:>9.2f}{audit_s / validation_s:>10.1%}")
    ratios = [a / v for _, v, a in audits]
    if ratios:
        print(f"audit time / validation time per task: median {statistics.median(ratios):.1%}, max {max(ratios):.1%}")
    scorer.close()
    args.out.write_text(json.dumps({"projects": report, "speedup": round(fast / naive, 2),
                                    "audit": [{"instance_id": i, "validation_s": v, "audit_s": a} for i, v, a in audits]},
                                   indent=2))


def _audit_against_validation(tasks: list[Task]) -> list[tuple[str, float, float]]:
    """Per task: its validation time (the sandboxed runs that validated it) and its audit time
    (fingerprint, start-state scan, and its share of the repository's image scan)."""
    rows = []
    for task in tasks:
        validation = json.loads(task.validation)
        validation_s = sum(validation["affected_s"]) + sum(validation["start_state_s"])
        rows.append((task.instance_id, validation_s, json.loads(task.audit)["seconds"]))
    return rows


if __name__ == "__main__":
    main()
