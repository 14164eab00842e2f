"""Following a task folder: mine what its requests ask for, while training reads it.

    taskforge mine --follow DIR [--address local] [--poll 10] [--once]

The follower takes the folder's pending requests (:mod:`taskforge.datasets.requests`) one at a
time, oldest first. For each it mines the request's repository with the folder's own mining
configuration, changed only where the request says (its strategies, difficulty band and
``max_tasks``), through the same executor as ``taskforge mine`` (Ray, or inline). The new tasks
go into the folder as a new shard under its manifest, with the request recorded in the
manifest's ``done`` (``request:ID``), so a reader that opens the folder again sees them: the
trainer's curriculum does, at the step after they land. The request's ``done`` record says how
many tasks came of it, or why none did. Tasks that are already in the folder are not written twice.

The follower runs until it is stopped (or, with ``--once``, until no request is pending). A
killed follower loses at most the request in flight, which the next one mines again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from taskforge.datasets import TASKS, DatasetWriter, read_manifest, run_versions
from taskforge.datasets.requests import (
    MineRequest,
    claim,
    finish,
    follow_lock,
    pending_requests,
    requeue_claimed,
)
from taskforge.errors import TaskforgeError
from taskforge.mining.config import RUN_ONLY, recipe_defaults
from taskforge.mining.recipe import MiningRecipe, RayConfig, recipe_from_dict
from taskforge.mining.run import Executor
from taskforge.sandbox import SandboxLimits

__all__ = ["FollowSummary", "follow", "request_recipe"]


@dataclass(kw_only=True, slots=True)
class FollowSummary:
    served: list[str] = field(default_factory=list)
    """Request ids finished, in order."""
    tasks: int = 0
    """Tasks written for them."""
    requeued: list[str] = field(default_factory=list)
    """Claims a dead follower had left, put back at the start."""


def request_recipe(directory: Path, request: MineRequest, *, sandbox: SandboxLimits, ray: RayConfig) -> MiningRecipe:
    """The folder's mining configuration, with the request's strategies, band and ``max_tasks``."""
    manifest = read_manifest(directory)
    if manifest.kind != TASKS.name:
        raise TaskforgeError(f"{directory} holds {manifest.kind}, not tasks", reason="wrong_kind")
    config = dict(manifest.recipe.get("config", {}))
    if manifest.recipe.get("command") != "mine" or not config:
        raise TaskforgeError(f"{directory} was not written by `taskforge mine`: its manifest has no mining "
                             "configuration to follow", reason="recipe_mismatch")
    candidates = {**config.pop("candidates"), "strategies": list(request.strategies),
                  "difficulty": list(request.difficulty) if isinstance(request.difficulty, tuple) else request.difficulty}
    llm = config.pop("llm")
    table = {"out": str(directory), "sources": [request.source], "mine": {**config, "max_tasks": request.max_tasks},
             "candidates": candidates, "llm": llm, "ray": asdict(ray)}
    recipe = recipe_from_dict(table)
    return replace(recipe, sandbox=sandbox, name=f"request:{request.request_id}")


def follow(
    directory: Path,
    executor: Executor,
    *,
    sandbox: SandboxLimits,
    ray: RayConfig,
    poll_s: float = 10.0,
    once: bool = False,
    stop: Callable[[], bool] = lambda: False,
    status: Callable[[str], None] = lambda _: None,
) -> FollowSummary:
    """Serve ``directory``'s requests until ``stop()`` (or, with ``once``, until none is pending)."""
    directory = Path(directory)
    summary = FollowSummary()
    with follow_lock(directory):
        summary.requeued = requeue_claimed(directory)
        for request_id in summary.requeued:
            status(f"request {request_id}: left claimed by a follower that died; pending again")
        while not stop():
            pending = pending_requests(directory)
            if not pending:
                if once:
                    break
                time.sleep(poll_s)
                continue
            request = pending[0]
            if not claim(directory, request):
                continue
            status(f"request {request.request_id}: mining {request.source} ({', '.join(request.strategies)}, "
                   f"difficulty {request.difficulty}, up to {request.max_tasks} tasks)")
            outcome = _serve(directory, request, executor, sandbox=sandbox, ray=ray)
            finish(directory, request, outcome)
            summary.served.append(request.request_id)
            summary.tasks += int(outcome.get("tasks", 0))
            status(f"request {request.request_id}: " + (f"{outcome['tasks']} new task(s)" if not outcome.get("failure")
                                                        else f"failed: {outcome['failure']}"))
    return summary


def _serve(directory: Path, request: MineRequest, executor: Executor, *, sandbox: SandboxLimits,
           ray: RayConfig) -> dict[str, Any]:
    try:
        recipe = request_recipe(directory, request, sandbox=sandbox, ray=ray)
    except (TaskforgeError, ValueError) as err:
        return {"tasks": 0, "failure": str(err), "reason": getattr(err, "reason", "bad_request")}
    from taskforge.sandbox import open_backend
    from taskforge.sandbox.base_image import current_base

    outcomes = list(executor([request.source], recipe))
    outcome = outcomes[0]
    if outcome.failure:
        return {"tasks": 0, "failure": outcome.failure, "reason": outcome.reason}
    base = current_base(open_backend("docker"))
    versions = run_versions(base_image=base.tag, base_image_id=base.image_id, base_origin=base.origin)
    manifest = read_manifest(directory)
    record = {**outcome.summary, "worker": outcome.worker, "seconds": round(outcome.seconds, 2),
              "request": request.to_json()}
    prefix = str(record.pop("prefix", "tasks-none"))
    # The folder's own recipe: the request's changes are recorded with its tasks, in ``done``.
    with DatasetWriter(directory, kind=TASKS, recipe=manifest.recipe, versions=versions,
                       run_only=[f"config.{key}" for key in RUN_ONLY],
                       defaults=recipe_defaults()) as writer:
        written = writer.write(outcome.rows, prefix=prefix, done={f"request:{request.request_id}": record})
    instance_ids = [row["instance_id"] for row in outcome.rows]
    return {"tasks": written.written, "skipped": written.skipped, "instance_ids": instance_ids,
            "shards": written.shards, "candidates": record.get("candidates", 0),
            "attempted": record.get("attempted", 0), "rejections": record.get("rejections", {})}
