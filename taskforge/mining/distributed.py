"""Mining on Ray: the only module in taskforge that imports Ray.

Each repository is one Ray task running :func:`taskforge.mining.run.mine_one`, declaring the CPUs and
memory of the sandbox it runs (``ray.num_cpus``, default the sandbox's ``cpus``; memory:
``sandbox.memory_mb``), so Ray never puts more concurrent sandboxes on a node than its CPUs hold.
The driver keeps at most ``ray.max_concurrent`` repositories in flight (default: as many as the
cluster's CPUs allow) and yields each outcome the moment it finishes, so its tasks reach the
dataset before the rest of the run ends.

Faults: a worker process that dies mid-repository (killed, out of memory, node lost) makes Ray run
the repository again from scratch, up to ``ray.max_retries`` times; its sandboxes are removed by
the next ``mine_one`` on that host, and since a worker writes nothing (its rows travel back to the
driver), nothing partial is ever kept. A repository whose retries run out is recorded with reason
``worker_died``, and the run goes on.

    ray.address = "local"        an embedded Ray on this machine (started and stopped here)
    ray.address = "auto"         the cluster this machine belongs to (``ray start`` ran here)
    ray.address = "ray://h:10001"  a remote cluster through Ray Client
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

from taskforge.mining.recipe import MiningRecipe
from taskforge.mining.run import Executor, RepoOutcome, mine_one
from taskforge.task import ScorerFactory

__all__ = ["ray_executor"]


def _mine_remote(source: str, config: Any, limits: Any, make_scorer: ScorerFactory) -> RepoOutcome:
    try:
        import setproctitle  # Ray ships it; the title names the repository in `ps`

        setproctitle.setproctitle(f"ray::mine_one {source}")
    except ImportError:
        pass
    return mine_one(source, config, limits, make_scorer)


def ray_executor(make_scorer: ScorerFactory, address: str | None = None) -> Executor:
    """An executor that runs each repository as a Ray task (``address`` overrides the recipe's);
    ``make_scorer`` (a module-level function: Ray pickles it by reference) gives each worker its
    gate's scorer."""

    def run(sources: Sequence[str], recipe: MiningRecipe) -> Iterator[RepoOutcome]:
        import ray
        from ray.exceptions import RayError

        target = address or recipe.ray.address
        started_here = False
        if not ray.is_initialized():
            if target == "local":
                # Workers of a local Ray inherit this process's environment (TASKFORGE_CACHE, ...).
                ray.init(num_cpus=recipe.ray.local_cpus or os.cpu_count(), include_dashboard=False,
                         log_to_driver=False, configure_logging=False)
            else:
                ray.init(address=target, log_to_driver=False, configure_logging=False)
            started_here = True
        try:
            cpus = recipe.repo_cpus
            remote = ray.remote(_mine_remote).options(  # type: ignore[attr-defined]
                num_cpus=cpus, memory=recipe.sandbox.memory_mb * 1024 * 1024,
                max_retries=recipe.ray.max_retries, retry_exceptions=False, name="mine_one",
            )
            limit = recipe.ray.max_concurrent or max(1, int(ray.cluster_resources().get("CPU", 1) // cpus))
            todo = list(sources)
            in_flight: dict[Any, str] = {}
            while todo or in_flight:
                while todo and len(in_flight) < limit:
                    source = todo.pop(0)
                    in_flight[remote.remote(source, recipe.mine, recipe.sandbox, make_scorer)] = source
                done, _ = ray.wait(list(in_flight), num_returns=1)
                for ref in done:
                    source = in_flight.pop(ref)
                    try:
                        yield ray.get(ref)
                    except RayError as err:
                        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
                        why = " / ".join(dict.fromkeys(lines[:1] + lines[-2:]))[:400] or type(err).__name__
                        yield RepoOutcome(source=source, reason="worker_died",
                                          failure=f"{source}: its worker died {recipe.ray.max_retries + 1} time(s): "
                                                  f"{type(err).__name__}: {why} [worker_died]")
        finally:
            if started_here:
                ray.shutdown()

    return run
