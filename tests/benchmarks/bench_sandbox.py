"""Benchmark: what the sandbox costs over a plain host pytest run.

    python -m tests.benchmarks.bench_sandbox [--projects boltons,cachetools,inflection] [--repeats 5]

For each corpus project it builds the environment once (not timed), then times, `--repeats`
times each, interleaved so that machine noise hits both sides alike:
- host: the same pytest command on the host, in a venv from the same wheelhouse (the baseline);
- sandbox: `run_suite`, i.e. what `taskforge test` does after its caches are warm: start a
  hardened container, copy the tree in, run pytest, read the report back, remove the container.
It prints medians and the sandbox/host ratio, then the cost of one exec in a warm container and of
starting a container. Results also go to --out as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from taskforge.repo.environment import build_environment
from taskforge.repo.sources import fetch
from taskforge.repo.suite import check_run, run_suite, run_suite_on_host
from taskforge.sandbox import SandboxLimits, open_backend
from taskforge.sandbox.base_image import build_base
from tests.corpus import corpus


def _median(xs: list[float]) -> float:
    return statistics.median(xs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--projects", default="boltons,cachetools,inflection")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--exec-samples", type=int, default=50)
    parser.add_argument("--out", type=Path, default=Path("bench-sandbox.json"))
    args = parser.parse_args()

    backend = open_backend("docker")
    base = build_base(backend)
    limits = SandboxLimits.load()
    report: dict[str, object] = {"projects": {}}
    print(f"{'project':<14}{'tests':>7}{'host s':>10}{'sandbox s':>11}{'ratio':>8}")
    for name in args.projects.split(","):
        project = corpus()[name]
        snapshot = fetch(project.source)
        env = build_environment(snapshot, backend=backend, base=base)
        host_s, sandbox_s = [], []
        tests = 0
        for _ in range(args.repeats):
            started = time.monotonic()
            host = run_suite_on_host(snapshot, env)
            host_s.append(time.monotonic() - started)
            started = time.monotonic()
            result = run_suite(snapshot, env, backend=backend, limits=limits)
            sandbox_s.append(time.monotonic() - started)
            check_run(result)
            tests = len(result.outcomes)
            assert host.results, f"host run of {name} produced no results"
        ratio = _median(sandbox_s) / _median(host_s)
        report["projects"][name] = {  # type: ignore[index]
            "tests": tests,
            "host_median_s": round(_median(host_s), 3),
            "sandbox_median_s": round(_median(sandbox_s), 3),
            "ratio": round(ratio, 2),
            "host_s": [round(x, 3) for x in host_s],
            "sandbox_s": [round(x, 3) for x in sandbox_s],
        }
        print(f"{name:<14}{tests:>7}{_median(host_s):>10.2f}{_median(sandbox_s):>11.2f}{ratio:>7.2f}x")

    start_s, exec_s = [], []
    for _ in range(5):
        started = time.monotonic()
        box = backend.start(base.tag, limits=limits)
        start_s.append(time.monotonic() - started)
        box.close()
    with backend.start(base.tag, limits=limits) as box:
        for _ in range(args.exec_samples):
            started = time.monotonic()
            box.exec(["true"], timeout_s=30, reap=False)
            exec_s.append(time.monotonic() - started)
        reaped_s = []
        for _ in range(args.exec_samples):
            started = time.monotonic()
            box.exec(["true"], timeout_s=30)
            reaped_s.append(time.monotonic() - started)
    report["container_start_median_s"] = round(_median(start_s), 4)
    report["exec_median_ms"] = round(1000 * _median(exec_s), 1)
    report["exec_with_reap_median_ms"] = round(1000 * _median(reaped_s), 1)
    print(f"container start (median of 5): {_median(start_s) * 1000:.0f} ms")
    print(f"one exec in a warm container (median of {args.exec_samples}): {_median(exec_s) * 1000:.1f} ms; "
          f"with the leftover-process reap: {_median(reaped_s) * 1000:.1f} ms")
    args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
