"""Report: how `taskforge test` in the sandbox agrees with a plain host pytest run, per project.

    python -m tests.benchmarks.agreement [--projects iniconfig,addict,...]

The default list is the 12 projects the agreement tests use (3 in CI, 9 more with `-m slow`).
For each it prints the tests seen, the share of test ids (union of both runs) with equal
outcomes, the passing count against the corpus's hand-made count, and the requirements dropped.
"""

from __future__ import annotations

import argparse

from taskforge.repo.environment import build_environment
from taskforge.repo.sources import fetch
from taskforge.repo.suite import check_run, compare_runs, run_suite, run_suite_on_host
from taskforge.sandbox import open_backend
from taskforge.sandbox.base_image import current_base
from tests.corpus import corpus
from tests.integration.test_corpus_agreement import CI_PROJECTS, MORE_PROJECTS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--projects", default=",".join(CI_PROJECTS + MORE_PROJECTS))
    args = parser.parse_args()
    backend = open_backend("docker")
    base = current_base(backend)
    print(f"{'project':<14}{'ids':>6}{'agree':>9}{'passed':>8}{'corpus':>8}  dropped")
    for name in args.projects.split(","):
        project = corpus()[name]
        snapshot = fetch(project.source)
        env = build_environment(snapshot, backend=backend, base=base)
        sandboxed = run_suite(snapshot, env, backend=backend)
        check_run(sandboxed)
        agreement = compare_runs(sandboxed.runs[0], run_suite_on_host(snapshot, env))
        passed = sum(1 for o in sandboxed.outcomes.values() if o == "passed")
        dropped = ", ".join(d.requirement for d in env.dropped) or "-"
        print(f"{name:<14}{agreement.total:>6}{agreement.rate:>9.2%}{passed:>8}{project.pass_count:>8}  {dropped}")
        for nodeid, (left, right) in list(agreement.differences.items())[:5]:
            print(f"    {nodeid}: sandbox {left}, host {right}")


if __name__ == "__main__":
    main()
