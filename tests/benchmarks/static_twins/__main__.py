"""Run the static-twins benchmark: ``python3 -m tests.benchmarks.static_twins --tasks 60``."""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import taskforge.repo.canaries
from taskforge.paths import cache_key, cache_root
from taskforge.repo.canaries import place_twin

from . import __doc__ as DESCRIPTION
from .detectors import DETECTORS, Detector
from .twins import PROJECTS, TestFile, TwinnedTest, project_files

_REPO_ROOT = Path(__file__).resolve().parents[3]
TASK_SIZES = (2, 4, 8)
"""How many twinned tests of one file a simulated task holds."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Run:
    """One of a task's two runs: the file with ``twinned``'s twins in place of those tests."""

    text: str
    twinned: tuple[TwinnedTest, ...]
    real: tuple[TwinnedTest, ...]
    """The task's other tests, present as themselves in this run."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Row:
    """One detector on one project."""

    project: str
    detector: str
    tests: int
    """Twinned tests of the project."""
    win_per_test: float
    """Share of tests where the detector calls the real test real and its twin a twin."""
    tpr: float
    """Share of placed twins called twins."""
    fpr: float
    """Share of real tests called twins."""
    task_win: dict[int, float | None]
    """Task size → share of simulated tasks where every judgement in both runs is right (None:
    no file has that many twinned tests)."""


class Judge:
    """One detector's verdicts, is_twin(text, test). A detector that raises says "real" (it finds
    nothing), as a red team's crashing reader would; how often is counted in ``errors``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.detector: Detector = DETECTORS[name]
        self.errors = 0

    def __call__(self, text: str, test: TwinnedTest) -> bool:
        try:
            return bool(self.detector(text, test.name, test.classes))
        except Exception:  # noqa: BLE001 - any detector bug reads as "no twin seen", and is counted
            self.errors += 1
            return False

    def run_right(self, run: Run) -> bool:
        """Whether every judgement in ``run`` is right: each twin called a twin, each real test real."""
        return all(self(run.text, t) for t in run.twinned) and not any(self(run.text, t) for t in run.real)


def _place_all(text: str, tests: tuple[TwinnedTest, ...]) -> str:
    for test in tests:
        text = place_twin(text, test.twin)
    return text


def simulated_tasks(spec: str, files: list[TestFile], *, per_size: int) -> dict[int, list[tuple[Run, Run]]]:
    """``per_size`` tasks of each size k: a twinned test drawn at random (so a file weighs by its
    twinned tests), then k random twinned tests of its file, dealt alternately into two runs, each
    run holding the twins of its half and the other half as themselves. Seeded by ``spec``."""
    rng = random.Random(spec)
    eligible_by_test = [file for file in files for _ in file.tests]
    tasks: dict[int, list[tuple[Run, Run]]] = {}
    for k in TASK_SIZES:
        eligible = [file for file in eligible_by_test if len(file.tests) >= k]
        if not eligible:
            continue
        sims = tasks.setdefault(k, [])
        for _ in range(per_size):
            file = rng.choice(eligible)
            chosen = rng.sample(file.tests, k)
            first, second = tuple(chosen[0::2]), tuple(chosen[1::2])
            sims.append((Run(text=_place_all(file.text, first), twinned=first, real=second),
                         Run(text=_place_all(file.text, second), twinned=second, real=first)))
    return tasks


def measure(spec: str, files: list[TestFile], tasks: dict[int, list[tuple[Run, Run]]], judges: list[Judge],
            kinds: dict[str, Counter[str]]) -> list[Row]:
    """Every judge on every twinned test of ``spec`` and on its simulated tasks. Per twin kind,
    committee wins and tests are added to ``kinds["wins"]`` / ``kinds["tests"]``.

    Texts are the outer loop and judges the inner one, so each text is parsed once for all of them
    (the detectors cache per text); the verdicts do not depend on the order."""
    wins: Counter[str] = Counter()
    true_positives: Counter[str] = Counter()
    false_positives: Counter[str] = Counter()
    tests = 0
    for file in files:
        for test in file.tests:
            tests += 1
            placed = place_twin(file.text, test.twin)
            for judge in judges:
                real, twin = judge(file.text, test), judge(placed, test)
                won = not real and twin
                wins[judge.name] += won
                true_positives[judge.name] += twin
                false_positives[judge.name] += real
                if judge.name == "committee":
                    kinds["tests"][test.kind] += 1
                    kinds["wins"][test.kind] += won
    task_wins: dict[str, Counter[int]] = {judge.name: Counter() for judge in judges}
    for k, sims in tasks.items():
        for runs in sims:
            for judge in judges:
                task_wins[judge.name][k] += all(judge.run_right(run) for run in runs)
    return [Row(project=spec, detector=judge.name, tests=tests, win_per_test=wins[judge.name] / tests,
                tpr=true_positives[judge.name] / tests, fpr=false_positives[judge.name] / tests,
                task_win={k: task_wins[judge.name][k] / len(tasks[k]) if k in tasks else None for k in TASK_SIZES})
            for judge in judges]


def _measured_code() -> dict[str, str]:
    """The commit measured, and the hash of the canaries code actually imported (it may differ
    from the commit's in a working tree)."""
    commit = subprocess.run(["git", "-C", str(_REPO_ROOT), "rev-parse", "--short", "HEAD"], check=True,
                            capture_output=True, text=True).stdout.strip()
    canaries = Path(taskforge.repo.canaries.__file__).read_bytes()
    return {"commit": commit, "canaries_sha256": cache_key(canaries)[:16]}


def _rate(value: float | None) -> str:
    return f"{'n/a':>6}" if value is None else f"{value:6.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=60, help="simulated tasks per task size per project")
    parser.add_argument("--projects", default=",".join(PROJECTS), help="comma-separated name==version sdists")
    parser.add_argument("--detectors", default=",".join(DETECTORS), help=f"comma-separated, of {', '.join(DETECTORS)}")
    parser.add_argument("--cache", type=Path, default=cache_root() / "static-twins",
                        help="downloaded and extracted sdists (default: taskforge's cache root / static-twins)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here as JSON")
    args = parser.parse_args()
    names = args.detectors.split(",")
    if unknown := [n for n in names if n not in DETECTORS]:
        parser.error(f"--detectors: unknown {', '.join(unknown)}; valid: {', '.join(DETECTORS)}")
    judges = [Judge(name) for name in names]
    code = _measured_code()
    began = time.monotonic()
    rows: list[Row] = []
    kinds: dict[str, Counter[str]] = {"wins": Counter(), "tests": Counter()}
    for spec in args.projects.split(","):
        files = project_files(spec, cache=args.cache)
        tasks = simulated_tasks(spec, files, per_size=args.tasks)
        rows += measure(spec, files, tasks, judges, kinds)
        print(f"measured {spec} ({time.monotonic() - began:.0f} s)", file=sys.stderr, flush=True)

    print(f"taskforge {code['commit']}, canaries.py sha256 {code['canaries_sha256']}, {args.tasks} tasks per size")
    print(f"{'project':20} {'detector':11} {'tests':>5} {'win/test':>8} {'TPR':>6} {'FPR':>6} "
          + " ".join(f"{f'k={k}':>6}" for k in TASK_SIZES))
    for row in rows:
        print(f"{row.project:20} {row.detector:11} {row.tests:5d} {row.win_per_test:8.3f} {row.tpr:6.3f} "
              f"{row.fpr:6.3f} " + " ".join(_rate(row.task_win[k]) for k in TASK_SIZES))
    by_kind = {kind: {"wins": kinds["wins"][kind], "tests": total} for kind, total in kinds["tests"].most_common()}
    if by_kind:
        print("\ncommittee per-test win rate by twin kind (all projects):")
        for kind, tally in by_kind.items():
            print(f"  {kind:8} {tally['wins']:4d}/{tally['tests']:4d} = {tally['wins'] / tally['tests']:.3f}")
    errors = {judge.name: judge.errors for judge in judges if judge.errors}
    if errors:
        print(f"\ndetector errors (judged real): {errors}")
    k4 = {row.project: row.task_win[4] for row in rows if row.detector == "committee" and row.task_win[4] is not None}
    if k4:
        worst = max(k4.values())
        at_worst = [project for project, rate in k4.items() if rate == worst]
        where = f"all {len(k4)} projects" if len(at_worst) == len(k4) else ", ".join(at_worst)
        print(f"\nworst project, committee task win rate at k=4: {worst:.3f} ({where}); "
              f"{time.monotonic() - began:.0f} s")
    if args.json is not None:
        args.json.write_text(json.dumps({
            **code, "tasks_per_size": args.tasks, "projects": args.projects.split(","), "detectors": names,
            "seeds": "random.Random(project spec) for twin choice and tasks; make_twins seed "
                     "'{spec}:{file}:{slice start}'",
            "rows": [asdict(row) for row in rows], "by_kind": by_kind, "detector_errors": errors,
            "seconds": round(time.monotonic() - began, 1)}, indent=2))


if __name__ == "__main__":
    main()
