"""Mining runs: many repositories into one dataset, resumable, with each repository's tasks written
as soon as it finishes.

The unit of work is :func:`mine_one`: one repository, a plain call that never raises for the
repository's own failures (they come back in the outcome, with their reason). The driver,
:func:`run_mining`, hands the sources still to do to an *executor* (this process, one after
another; or Ray, ``taskforge.mining.distributed``) and writes each outcome as it arrives: a shard and its
manifest entry (``taskforge.datasets``), then ``mine-summary.json``, then, for a remote target, an
upload of both. A driver killed at any point loses at most the repositories in flight: running
the same recipe again skips every repository the manifest lists.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from taskforge.datasets.card import CARD
from taskforge.datasets.stats import MINE_SUMMARY
from taskforge.errors import TaskforgeError
from taskforge.mining.config import RUN_ONLY, MineConfig, recipe_defaults
from taskforge.mining.outcome import RepoResult
from taskforge.mining.recipe import MiningRecipe
from taskforge.sandbox import SandboxLimits
from taskforge.task import ScorerFactory

__all__ = ["Executor", "RepoOutcome", "RunSummary", "inline_executor", "mine_one", "run_mining"]

SUMMARY_FILE = MINE_SUMMARY


@dataclass(kw_only=True, slots=True)
class RepoOutcome:
    """What mining one repository gave: its task rows and summary, or why it failed."""

    source: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    failure: str = ""
    """One line (``message [reason]``) when the repository failed; empty otherwise."""
    reason: str = ""
    worker: str = ""
    """host:pid of the process that mined it."""
    seconds: float = 0.0


def mine_one(source: str, config: MineConfig, limits: SandboxLimits, make_scorer: ScorerFactory,
             on_candidate: Callable[[RepoResult], None] | None = None) -> RepoOutcome:
    """Mine one repository: the call every executor makes, with Ray or without it.

    ``make_scorer`` gives the scorer of mining's gate (the caller picks it: mining never imports
    scoring; the CLI passes :func:`taskforge.scoring.scorer.gate_scorer`)."""
    from taskforge.mining.pipeline import mine_repository
    from taskforge.sandbox import open_backend
    from taskforge.sandbox.base_image import current_base

    started = time.monotonic()
    worker = f"{os.uname().nodename}:{os.getpid()}"
    try:
        backend = open_backend("docker")
        backend.gc()  # sandboxes a killed worker on this host left behind
        with make_scorer(backend, limits, config.timeout_s) as scorer:
            result = mine_repository(source, config=config, backend=backend, base=current_base(backend), limits=limits,
                                     on_candidate=on_candidate, scorer=scorer)
    except TaskforgeError as err:
        return RepoOutcome(source=source, failure=f"{err} [{err.reason}]", reason=err.reason, worker=worker,
                           seconds=time.monotonic() - started)
    except Exception as err:  # noqa: BLE001 - a bug of ours on one repository must not end the run
        return RepoOutcome(source=source, failure=f"{_where(err)} [{INTERNAL_ERROR}]", reason=INTERNAL_ERROR,
                           worker=worker, seconds=time.monotonic() - started)
    summary = {
        "source": source, "candidates": result.candidates, "attempted": result.attempted, "refused": result.refused,
        "tasks": len(result.tasks), "rejections": dict(result.rejections), "rejected": result.rejected,
        "strategies": dict(Counter(t.strategy for t in result.tasks)),
        "stage_s": {k: round(v, 2) for k, v in result.stage_s.items()}, "runs": result.runs,
        "tests": result.tests, "passing": result.passing, "seed_dependent": result.seed_dependent,
        "date_dependent": result.date_dependent,
        "load_sensitive": result.load_sensitive, "marked_flaky": result.marked_flaky,
        "selection_sensitive": result.selection_sensitive, "run_timeout_s": round(result.run_timeout_s, 1),
        "plugins_off": result.plugins_off, "ignored": result.ignored,
        "fork_server": result.fork_server,
    }
    if result.tasks:
        summary["prefix"] = f"tasks-{result.tasks[0].repo}-{result.tasks[0].source_commit[:12]}-s{config.seed}"
    return RepoOutcome(source=source, rows=[t.to_row() for t in result.tasks], summary=summary, worker=worker,
                       seconds=time.monotonic() - started)


INTERNAL_ERROR = "internal_error"
"""The reason of a repository that failed on a bug in taskforge itself, not on the repository."""


def _where(err: BaseException) -> str:
    """One line for a bug report: the exception and the innermost frame it was raised in."""
    frames = traceback.extract_tb(err.__traceback__)
    place = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
    message = " ".join(str(err).split())[:300]
    return f"taskforge bug: {type(err).__name__}: {message}{place}; please report it with this line"


Executor = Callable[[Sequence[str], MiningRecipe], Iterator[RepoOutcome]]
"""Runs ``mine_one`` for each source and yields the outcomes as they finish (in any order)."""


def inline_executor(make_scorer: ScorerFactory, progress: Callable[[str, RepoResult], None] | None = None) -> Executor:
    """Repositories one after another in this process."""
    def run(sources: Sequence[str], recipe: MiningRecipe) -> Iterator[RepoOutcome]:
        for source in sources:
            callback = (lambda result, source=source: progress(source, result)) if progress else None
            yield mine_one(source, recipe.mine, recipe.sandbox, make_scorer, on_candidate=callback)
    return run


@dataclass(kw_only=True, slots=True)
class RunSummary:
    out: str
    rows: int
    """Rows the dataset holds now (every run's)."""
    totals: Counter[str] = field(default_factory=Counter)
    """This run's counts: candidates, attempted, tasks, rejected:REASON, repository_failed:REASON."""
    stage_s: Counter[str] = field(default_factory=Counter)
    failures: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    """Sources the dataset already had (a resumed run)."""
    pending: list[str] = field(default_factory=list)
    """Sources this run tried."""
    seconds: float = 0.0


def run_mining(
    recipe: MiningRecipe,
    executor: Executor,
    *,
    on_outcome: Callable[[RepoOutcome, RunSummary], None] | None = None,
    status: Callable[[str], None] = lambda _: None,
    again: Sequence[str] = (),
    replace: Sequence[str] = (),
) -> RunSummary:
    """Mine every source of ``recipe`` not yet in its dataset, writing each repository's tasks as
    soon as it finishes. ``on_outcome`` sees each outcome after it is written.

    ``again`` sources are mined again although the dataset lists them; the tasks of ``replace``
    sources (a subset of ``again``) are retracted first (:meth:`DatasetWriter.retract`), so the
    folder ends up with only what this run makes of them, or with their failure."""
    from taskforge.datasets import TASKS, DatasetWriter, run_versions
    from taskforge.datasets.manifest import write_atomic
    from taskforge.sandbox import open_backend
    from taskforge.sandbox.base_image import current_base

    started = time.monotonic()
    from taskforge.datasets.remote import RemoteDataset, is_uri, staging_dir

    remote = RemoteDataset(recipe.out, staging_dir(recipe.out)) if is_uri(recipe.out) else None
    folder = remote.staging if remote is not None else Path(recipe.out)
    if remote is not None:
        pulled = remote.pull(extra=(SUMMARY_FILE,))
        status(f"{recipe.out}: {pulled} shard(s) fetched into {folder}")
    base = current_base(open_backend("docker"))
    versions = run_versions(base_image=base.tag, base_image_id=base.image_id, base_origin=base.origin)
    summary = RunSummary(out=recipe.out, rows=0)
    previous = _read_summary(folder)
    with DatasetWriter(folder, kind=TASKS, recipe={"command": "mine", "config": asdict(recipe.mine)},
                       versions=versions, run_only=[f"config.{key}" for key in RUN_ONLY],
                       defaults=recipe_defaults()) as writer:
        for name in writer.adopted:
            status(f"adopted {name}, which an interrupted run had written")
        if stray := sorted(set(replace) - set(again)):
            raise TaskforgeError(f"replace names sources not mined again: {', '.join(stray)}", reason="bad_request")
        # Each replaced source's earlier shards, found now (so that a bad request fails before any
        # mining) and retracted when its new outcome arrives (so that a failure that says nothing of
        # the source, such as an unreachable host, keeps them).
        earlier = {source: _shards_of(folder, writer, source) for source in replace if source in writer.done}
        summary.skipped = [s for s in recipe.sources if s in writer.done and s not in again]
        for source in summary.skipped:
            status(f"{source}: already mined into {recipe.out} ({writer.done[source]['tasks']} tasks); skipped")
        summary.pending = [s for s in recipe.sources if s not in writer.done or s in again]
        for source in (s for s in again if s in writer.done):
            status(f"{source}: mined before ({writer.done[source]['tasks']} tasks); mining it again")
        # An earlier failure stays on record until this run's outcome for that source replaces it,
        # so a run killed before reaching a source it retries loses nothing of the summary.
        failures = dict(previous.get("failures", {}))

        def retract_earlier(outcome: RepoOutcome) -> None:
            shards = earlier.pop(outcome.source, None)
            if shards is None:
                return
            if outcome.failure and outcome.reason in TRANSIENT_REASONS:
                status(f"{outcome.source}: mining it again failed ({outcome.reason}); its earlier tasks are kept")
                return
            rows = writer.retract(shards, reason=f"mined again with --replace: {outcome.source}", done=[outcome.source])
            status(f"{outcome.source}: retracted {rows} task(s) in {len(shards)} shard(s) written before")

        def save() -> None:
            summary.rows = writer.manifest.rows
            summary.seconds = time.monotonic() - started
            data = {"repositories": list(writer.done.values()), "failures": {**failures, **summary.failures},
                    "totals": {"tasks": summary.rows, "repositories": len(writer.done),
                               "failed": len({**failures, **summary.failures})},
                    "this_run": {"totals": dict(summary.totals), "stage_s": {k: round(v, 2) for k, v in summary.stage_s.items()},
                                 "seconds": round(summary.seconds, 2)}}
            write_atomic(folder / SUMMARY_FILE, json.dumps(data, indent=2).encode())
            if remote is not None:
                remote.push(extra=(SUMMARY_FILE, CARD))

        for outcome in executor(summary.pending, recipe):
            failures.pop(outcome.source, None)
            retract_earlier(outcome)
            if outcome.failure:
                summary.failures[outcome.source] = outcome.failure
                summary.totals[f"repository_failed:{outcome.reason}"] += 1
            else:
                record = {**outcome.summary, "worker": outcome.worker, "seconds": round(outcome.seconds, 2)}
                prefix = str(record.pop("prefix", "tasks-none"))
                written = writer.write(outcome.rows, prefix=prefix, done={outcome.source: record})
                if written.skipped:
                    status(f"{outcome.source}: {written.skipped} task(s) already in {recipe.out}; skipped")
                summary.totals["candidates"] += record["candidates"]
                summary.totals["attempted"] += record["attempted"]
                summary.totals["tasks"] += written.written
                summary.stage_s.update(record["stage_s"])
                for reason, count in record["rejections"].items():
                    summary.totals[f"rejected:{reason}"] += count
            save()
            if on_outcome is not None:
                on_outcome(outcome, summary)
        save()
    return summary


TRANSIENT_REASONS = frozenset({"source_unreachable", "sandbox_unavailable", "worker_died", INTERNAL_ERROR})
"""Failures that say nothing about the source itself: ``--replace`` keeps its earlier tasks then."""


def _shards_of(folder: Path, writer: Any, source: str) -> list[str]:
    """The shards written for ``source`` by the runs that mined it (not by requests that
    ``taskforge mine --follow`` served for it, which stay): those its ``done`` record names, or,
    in a folder written before records named them, the shards whose rows all carry ``source``."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    record = writer.done[source]
    listed = [s.name for s in writer.manifest.shards]
    if "shards" in record:
        names = [name for name in record["shards"] if name in listed]
    else:
        others = {n for key, r in writer.done.items() if key != source for n in r.get("shards", ())}
        names = []
        for shard in writer.manifest.shards:
            if shard.name in others:
                continue
            column = pq.read_table(folder / shard.name, columns=["source"]).column("source")
            matching = pc.sum(pc.equal(column, source)).as_py() or 0
            if matching and matching != shard.rows:
                raise TaskforgeError(f"{folder / shard.name} mixes {source}'s tasks with others; it cannot be "
                                     "retracted whole", reason="mixed_shard")
            if matching:
                names.append(shard.name)
    if record.get("tasks", 0) and not names:
        raise TaskforgeError(f"{source}: the dataset lists {record['tasks']} task(s) of it but no shard that holds "
                             "them (its rows name the source otherwise); --replace cannot tell what to retract",
                             reason="bad_request")
    return names


def _read_summary(folder: Path) -> dict[str, Any]:
    path = folder / SUMMARY_FILE
    try:
        data = json.loads(path.read_text()) if path.is_file() else {}
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}
