"""Commands of the mining side: run a project's suite, mine tasks, validate and audit them again."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from taskforge.cli.common import one_line_errors, status

if TYPE_CHECKING:
    from taskforge.mining.audit.scan import AuditResult
    from taskforge.task import Task

__all__ = ["audit_command", "mine_command", "test_command", "validate_command"]


@click.command("test")
@click.argument("source")
@click.option("--runs", default=1, show_default=True, type=click.IntRange(1), help="Repeat the suite; tests whose outcome changes are flaky.")
@click.option("--json", "as_json", is_flag=True, help="Print per-test results as JSON.")
@click.option("--timeout", "timeout_s", default=1800.0, show_default=True, type=click.FloatRange(min=1), help="Wall-clock limit per run, seconds.")
@one_line_errors
def test_command(source: str, runs: int, as_json: bool, timeout_s: float) -> None:
    """Run SOURCE's own pytest suite in a hardened sandbox.

    SOURCE is pypi:NAME==VERSION, a git URL with an optional @REV, or a local path.
    Exit status 0 means the suite ran (failing tests are results, not errors).
    """
    from taskforge.repo.environment import build_environment
    from taskforge.repo.sources import fetch
    from taskforge.repo.suite import check_run, require_test_files, run_suite
    from taskforge.sandbox import open_backend
    from taskforge.sandbox.base_image import current_base

    backend = open_backend("docker")
    snapshot = fetch(source)
    finding = require_test_files(snapshot)
    status(f"snapshot {snapshot.name} @ {snapshot.commit[:12]}")
    env = build_environment(snapshot, backend=backend, base=current_base(backend))
    env = dataclasses.replace(env, pytest_args=(*env.pytest_args, *finding))
    status(f"environment {env.image} ({len(env.installed)} wheels, {len(env.dropped)} requirements dropped)")
    for dropped in env.dropped:
        status(f"  dropped {dropped.requirement} ({dropped.origin}): {dropped.reason}")
    result = run_suite(snapshot, env, backend=backend, runs=runs, timeout_s=timeout_s)
    check_run(result)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2, ensure_ascii=False))
        return
    summary = result.summary()
    counts = ", ".join(f"{n} {k}" for k, n in sorted(summary["counts"].items()))
    click.echo(f"{snapshot.source}: {summary['tests']} tests ({counts}) in {summary['median_duration_s']:.1f}s "
               f"median over {runs} run(s); status {'/'.join(summary['status'])}")
    if result.flaky:
        click.echo(f"flaky: {len(result.flaky)}")
        for nodeid, seen in sorted(result.flaky.items()):
            click.echo(f"  {nodeid}: {' / '.join(seen)}")


@click.command("mine")
@click.argument("sources", nargs=-1)
@click.option("--recipe", "recipe_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A mining recipe (recipes/*.toml): sources, limits, sandbox and Ray settings.")
@click.option("--out", "out_dir", help="Dataset folder or pyarrow filesystem URI for the task shards (overrides the recipe's).")
@click.option("--address", help="Ray: local (an embedded Ray, the default with --recipe), auto, ray://HOST:PORT, "
              "or inline (no Ray: one repository after another in this process, the default without --recipe).")
@click.option("--max-tasks", type=click.IntRange(1), help="Valid tasks per repository [default: 10].")
@click.option("--strategies", help="Comma-separated removal strategies [default: body,symbol,module].")
@click.option("--keep-flagged", is_flag=True, default=None, help="Keep tasks whose leak audit found remnants (marked in the audit column) instead of rejecting them.")
@click.option("--seed", type=int, help="Seed for the candidate ranking [default: 0].")
@click.option("--again", "again", multiple=True, metavar="SOURCE",
              help="Mine SOURCE again although the dataset lists it as mined (after an upgrade that changes "
                   "its result); its tasks written before stay, new ones are added. Repeatable.")
@click.option("--replace", is_flag=True,
              help="With --again: retract the tasks the earlier runs wrote for SOURCE before mining it again, so "
                   "the dataset holds only what this version makes of it (the manifest keeps the retracted "
                   "shards' names and the reason).")
@click.option("--follow", "follow_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Follow the task folder DIR: mine what its requests ask for (a trainer's requests for harder "
                   "tasks, DIR/requests/pending), with the folder's own configuration, until stopped.")
@click.option("--poll", "poll_s", type=click.FloatRange(0.1), default=10.0, show_default=True,
              help="With --follow: seconds between looks for new requests.")
@click.option("--once", is_flag=True, help="With --follow: stop once no request is pending.")
@one_line_errors
def mine_command(sources: tuple[str, ...], recipe_path: Path | None, out_dir: str | None, address: str | None,
                 max_tasks: int | None, strategies: str | None, keep_flagged: bool | None, seed: int | None,
                 again: tuple[str, ...], replace: bool, follow_dir: Path | None, poll_s: float, once: bool) -> None:
    """Mine feature-removal tasks from each SOURCE (or the recipe's sources) into a dataset.

    The dataset gets one shard per repository, written as soon as the repository finishes, and a
    manifest (taskforge.datasets). Running again with the same options resumes: sources already
    mined are skipped, and no task is written twice. A repository that fails is recorded with its
    reason (in mine-summary.json) and the run goes on. Exit status 1 means every repository tried
    failed.
    """
    from taskforge.mining.recipe import load_recipe, recipe_from_dict
    from taskforge.mining.run import (
        RepoOutcome,
        RunSummary,
        inline_executor,
        run_mining,
    )
    from taskforge.scoring.scorer import gate_scorer

    if follow_dir is not None:
        if sources or recipe_path is not None or out_dir is not None:
            raise click.UsageError("--follow DIR mines what DIR's requests ask for: give no SOURCES, --recipe or --out")
        _follow(follow_dir, address or "local", poll_s=poll_s, once=once)
        return
    try:
        if recipe_path is not None:
            recipe = load_recipe(recipe_path)
            if sources:
                raise click.UsageError("give either SOURCES or --recipe, not both")
        else:
            if not sources:
                raise click.UsageError("give SOURCES or --recipe")
            if out_dir is None:
                raise click.UsageError("--out is required without --recipe")
            recipe = recipe_from_dict({"out": out_dir, "sources": list(sources), "ray": {"address": "inline"}})
        table = recipe.to_dict()
        if out_dir is not None:
            table["out"] = out_dir
        if address is not None:
            table["ray"]["address"] = address
        overrides = {"max_tasks": max_tasks, "seed": seed, "keep_flagged": keep_flagged}
        table["mine"].update({k: v for k, v in overrides.items() if v is not None})
        candidates = table["mine"].pop("candidates")
        if strategies is not None:
            candidates["strategies"] = [s.strip() for s in strategies.split(",") if s.strip()]
        recipe = recipe_from_dict({**table, "candidates": candidates})
        recipe.name = table["name"]
    except ValueError as err:
        raise click.BadParameter(str(err)) from err

    from tqdm import tqdm

    if recipe.ray.address == "inline":
        bars: dict[str, tqdm] = {}  # type: ignore[type-arg]

        def progress(source: str, result: object) -> None:
            bar = bars.get(source)
            if bar is None:
                bar = bars[source] = tqdm(total=recipe.mine.max_attempts, desc=source, unit="cand", leave=True, file=sys.stderr)
            bar.update(result.attempted - bar.n)  # type: ignore[attr-defined]  # refusals cost no attempt
            bar.set_postfix(tasks=len(result.tasks), rejected=sum(result.rejections.values()),  # type: ignore[attr-defined]
                            refused=result.refused)  # type: ignore[attr-defined]

        executor = inline_executor(gate_scorer, progress)
    else:
        from taskforge.mining.distributed import ray_executor

        executor = ray_executor(gate_scorer)
    overall = tqdm(total=len(recipe.sources), desc="repositories", unit="repo", file=sys.stderr,
                   disable=recipe.ray.address == "inline")

    def finished(outcome: RepoOutcome, summary: RunSummary) -> None:
        for bar in (bars.values() if recipe.ray.address == "inline" else ()):
            bar.close()
        overall.update(1)
        rejected = sum(v for k, v in summary.totals.items() if k.startswith("rejected:"))
        overall.set_postfix(tasks=summary.totals["tasks"], rejected=rejected, failed=len(summary.failures))
        if outcome.failure:
            overall.write(f"failed {outcome.source}: {outcome.failure}", file=sys.stderr)

    unknown = sorted(set(again) - set(recipe.sources))
    if unknown:
        raise click.BadParameter(f"not a source of this run: {', '.join(unknown)}", param_hint="--again")
    if replace and not again:
        raise click.UsageError("--replace retracts the tasks of the --again sources: name them with --again")
    summary = run_mining(recipe, executor, on_outcome=finished, status=status, again=again,
                         replace=again if replace else ())
    overall.update(len(summary.skipped))
    overall.close()
    totals = summary.totals
    click.echo(f"candidates {totals['candidates']}, validated {totals['attempted']}, valid tasks {totals['tasks']}"
               f" ({summary.rows} in {recipe.out})")
    for key, count in sorted(totals.items()):
        if key.startswith("rejected:"):
            click.echo(f"  rejected {key.removeprefix('rejected:')}: {count}")
    for source, reason in summary.failures.items():
        click.echo(f"  failed {source}: {reason}")
    click.echo("time per stage: " + ", ".join(f"{k} {v:.1f}s" for k, v in sorted(summary.stage_s.items(), key=lambda kv: -kv[1])))
    if summary.pending and len(summary.failures) == len(summary.pending):
        sys.exit(1)  # nothing was mined at all


def _follow(directory: Path, address: str, *, poll_s: float, once: bool) -> None:
    from taskforge.mining.follow import follow
    from taskforge.mining.recipe import RayConfig
    from taskforge.mining.run import inline_executor
    from taskforge.sandbox import SandboxLimits
    from taskforge.scoring.scorer import gate_scorer

    ray = RayConfig(address=address)
    if address == "inline":
        executor = inline_executor(gate_scorer)
    else:
        from taskforge.mining.distributed import ray_executor

        executor = ray_executor(gate_scorer)
    status(f"following {directory}: requests in {directory / 'requests' / 'pending'}" + (" (until none is pending)" if once else ""))
    done = follow(directory, executor, sandbox=SandboxLimits.load(None), ray=ray, poll_s=poll_s, once=once, status=status)
    click.echo(f"served {len(done.served)} request(s), {done.tasks} new task(s) in {directory}")


@click.command("validate")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--report", "report_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write each task's result as JSON (instance_id: ok, problems, task_sha256), for `taskforge "
              "report`. Tasks it already holds, in the same version (task_sha256), are not checked again: a long "
              "validation resumes where it stopped, and a task mined again since is checked again.")
@one_line_errors
def validate_command(directory: Path, report_path: Path | None) -> None:
    """Validate every task in DIRECTORY again, from scratch, in fresh containers."""
    from taskforge.datasets import read_tasks
    from taskforge.mining.revalidate import validate_tasks
    from taskforge.sandbox import open_backend
    from taskforge.sandbox.base_image import current_base

    backend = open_backend("docker")
    tasks = read_tasks(directory)
    results = validate_tasks(tasks, backend=backend, base=current_base(backend), report=report_path, on_status=status)
    for task in tasks:
        result = results[task.instance_id]
        click.echo(f"{'ok     ' if result['ok'] else 'BROKEN '} {task.instance_id}")
        for problem in ([] if result["ok"] else result["problems"][:10]):
            click.echo(f"        {problem}")
    broken = sum(1 for t in tasks if not results[t.instance_id]["ok"])
    click.echo(f"{len(tasks) - broken} of {len(tasks)} tasks hold")
    if broken:
        sys.exit(1)


@click.command("audit")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@one_line_errors
def audit_command(directory: Path) -> None:
    """Audit every task in DIRECTORY for remnants of its removed code, and store each result in
    the task's row (the ``audit`` column). Exit status 1 if any task has findings."""
    from taskforge.mining.audit.scan import AuditResult
    from taskforge.mining.revalidate import audit_dataset
    from taskforge.sandbox import open_backend

    def show(task: Task, audit: AuditResult | str) -> None:
        if not isinstance(audit, AuditResult):
            click.echo(f"FAILED  {task.instance_id}: {audit}")
        elif audit.clean:
            click.echo(f"clean   {task.instance_id}  ({audit.files} files, {audit.seconds:.2f}s)")
        else:
            click.echo(f"LEAK    {task.instance_id}")
            for finding in audit.findings[:10]:
                click.echo(f"        {finding['kind']:<10} {finding['match']:<10} {finding['path']}")

    counts = audit_dataset(directory, backend=open_backend("docker"), on_task=show)
    click.echo(f"{counts.clean} of {counts.total} tasks clean, {counts.flagged} with findings, {counts.failed} not audited")
    if counts.flagged or counts.failed:
        sys.exit(1)
