"""The ``taskforge`` command line.

Commands stay few; knobs belong in recipes. Every command turns a ``TaskforgeError`` into one
line on stderr (``error: <message> [<reason>]``) and exit status 1.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar, cast

import click

from taskforge.errors import TaskforgeError

__all__ = ["main"]

F = TypeVar("F", bound=Callable[..., Any])


def _one_line_errors(func: F) -> F:
    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except TaskforgeError as err:
            click.echo(f"error: {err} [{err.reason}]", err=True)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


@click.group()
@click.version_option(package_name="taskforge")
def main() -> None:
    """Turn real repositories into verifiable coding tasks."""


@main.command("test")
@click.argument("source")
@click.option("--runs", default=1, show_default=True, type=click.IntRange(1), help="Repeat the suite; tests whose outcome changes are flaky.")
@click.option("--json", "as_json", is_flag=True, help="Print per-test results as JSON.")
@click.option("--timeout", "timeout_s", default=1800.0, show_default=True, type=click.FloatRange(min=1), help="Wall-clock limit per run, seconds.")
@_one_line_errors
def test_command(source: str, runs: int, as_json: bool, timeout_s: float) -> None:
    """Run SOURCE's own pytest suite in a hardened sandbox.

    SOURCE is pypi:NAME==VERSION, a git URL with an optional @REV, or a local path.
    Exit status 0 means the suite ran (failing tests are results, not errors).
    """
    from taskforge.sandbox.base_image import current_base
    from taskforge.repo.environment import build_environment
    from taskforge.sandbox import open_backend
    from taskforge.repo.sources import fetch
    from taskforge.repo.suite import check_run, require_test_files, run_suite

    backend = open_backend("docker")
    snapshot = fetch(source)
    require_test_files(snapshot)
    _status(f"snapshot {snapshot.name} @ {snapshot.commit[:12]}")
    env = build_environment(snapshot, backend=backend, base=current_base(backend))
    _status(f"environment {env.image} ({len(env.installed)} wheels, {len(env.dropped)} requirements dropped)")
    for dropped in env.dropped:
        _status(f"  dropped {dropped.requirement} ({dropped.origin}): {dropped.reason}")
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


@main.command("mine")
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
@_one_line_errors
def mine_command(sources: tuple[str, ...], recipe_path: Path | None, out_dir: str | None, address: str | None,
                 max_tasks: int | None, strategies: str | None, keep_flagged: bool | None, seed: int | None) -> None:
    """Mine feature-removal tasks from each SOURCE (or the recipe's sources) into a dataset.

    The dataset gets one shard per repository, written as soon as the repository finishes, and a
    manifest (taskforge.datasets). Running again with the same options resumes: sources already
    mined are skipped, and no task is written twice. A repository that fails is recorded with its
    reason (in mine-summary.json) and the run goes on. Exit status 1 means every repository tried
    failed.
    """
    from taskforge.mining.recipe import load_recipe, recipe_from_dict
    from taskforge.mining.run import RepoOutcome, RunSummary, inline_executor, run_mining

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
            bar.update(1)
            bar.set_postfix(tasks=len(result.tasks), rejected=sum(result.rejections.values()))  # type: ignore[attr-defined]

        executor = inline_executor(progress)
    else:
        from taskforge.mining.distributed import ray_executor

        executor = ray_executor()
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

    summary = run_mining(recipe, executor, on_outcome=finished, status=_status)
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


@main.command("validate")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--report", "report_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write each task's result as JSON (instance_id: ok, problems), for `taskforge report`. "
              "Tasks it already holds are not checked again: a long validation resumes where it stopped.")
@_one_line_errors
def validate_command(directory: Path, report_path: Path | None) -> None:
    """Validate every task in DIRECTORY again, from scratch, in fresh containers."""
    from taskforge.sandbox.base_image import current_base
    from taskforge.datasets import read_tasks
    from taskforge.datasets.manifest import write_atomic
    from taskforge.sandbox import open_backend
    from taskforge.mining.revalidate import check_task

    backend = open_backend("docker")
    base = current_base(backend)
    tasks = read_tasks(directory)
    results: dict[str, dict[str, Any]] = {}
    if report_path is not None and report_path.is_file():
        try:
            results = json.loads(report_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise click.BadParameter(f"{report_path} is not valid JSON ({err}); remove it to validate again",
                                     param_hint="--report") from err
        done = sum(1 for t in tasks if t.instance_id in results)
        if done:
            _status(f"{done} task(s) already in {report_path}; not checked again")
    for task in tasks:
        if task.instance_id not in results:
            check = check_task(task, backend=backend, base=base)
            results[task.instance_id] = {"ok": check.ok, "problems": check.problems}
            if report_path is not None:  # after every task: an interrupted validation keeps what it did
                write_atomic(report_path, json.dumps(results, indent=1).encode())
        result = results[task.instance_id]
        click.echo(f"{'ok     ' if result['ok'] else 'BROKEN '} {task.instance_id}")
        for problem in ([] if result["ok"] else result["problems"][:10]):
            click.echo(f"        {problem}")
    broken = sum(1 for t in tasks if not results[t.instance_id]["ok"])
    click.echo(f"{len(tasks) - broken} of {len(tasks)} tasks hold")
    if broken:
        sys.exit(1)


@main.command("audit")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@_one_line_errors
def audit_command(directory: Path) -> None:
    """Audit every task in DIRECTORY for remnants of its removed code, and store each result in
    the task's row (the ``audit`` column). Exit status 1 if any task has findings."""
    from dataclasses import replace

    import pyarrow.parquet as pq

    from taskforge.mining.audit.scan import AuditResult
    from taskforge.datasets import TASKS, DatasetWriter, read_manifest, run_versions
    from taskforge.task import Task
    from taskforge.sandbox import open_backend
    from taskforge.mining.revalidate import audit_tasks

    backend = open_backend("docker")
    flagged = failed = total = 0
    # Opening the folder for writing checks it and finishes any interrupted rewrite first.
    with DatasetWriter(directory, kind=TASKS, recipe=read_manifest(directory).recipe, versions=run_versions()) as writer:
        for shard in list(writer.manifest.shards):
            tasks = [Task.from_row(row) for row in pq.read_table(directory / shard.name).to_pylist()]
            audits = audit_tasks(tasks, backend=backend)
            updated = []
            for task in tasks:
                total += 1
                audit = audits[task.instance_id]
                if not isinstance(audit, AuditResult):
                    failed += 1
                    click.echo(f"FAILED  {task.instance_id}: {audit}")
                    updated.append(task)
                    continue
                updated.append(replace(task, audit=audit.to_json()))
                if audit.clean:
                    click.echo(f"clean   {task.instance_id}  ({audit.files} files, {audit.seconds:.2f}s)")
                else:
                    flagged += 1
                    click.echo(f"LEAK    {task.instance_id}")
                    for finding in audit.findings[:10]:
                        click.echo(f"        {finding['kind']:<10} {finding['match']:<10} {finding['path']}")
            writer.rewrite(shard.name, (t.to_row() for t in updated))
    click.echo(f"{total - flagged - failed} of {total} tasks clean, {flagged} with findings, {failed} not audited")
    if flagged or failed:
        sys.exit(1)


@main.command("score")
@click.option("--tasks", "tasks_dir", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Task dataset folder.")
@click.option("--predictions", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="SWE-bench predictions (JSONL or a JSON list): instance_id, model_patch, model_name_or_path.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Reward dataset folder (TASKS/rewards is where `taskforge inspect` looks).")
@click.option("--mode", default="binary", show_default=True, type=click.Choice(["binary", "partial"]),
              help="binary: 1.0 only if every test passes; partial: the FAIL_TO_PASS fraction.")
@click.option("--concurrency", default=4, show_default=True, type=click.IntRange(1), help="Scorings at once.")
@click.option("--timeout", "timeout_s", default=600.0, show_default=True, type=click.FloatRange(min=1),
              help="Wall-clock limit of one test run, seconds.")
@click.option("--gold", is_flag=True, help="Also score every task's gold patch (candidate_id gold).")
@click.option("--empty", is_flag=True, help="Also score the empty patch for every task (candidate_id empty).")
@_one_line_errors
def score_command(tasks_dir: Path, predictions: Path | None, out_dir: Path, mode: str, concurrency: int,
                  timeout_s: float, gold: bool, empty: bool) -> None:
    """Score candidate patches against the tasks of TASKS into reward rows in OUT.

    Each prediction is scored with the tamper-resistant scorer (the trusted tests are put back;
    tampering scores 0) and stored as a reward row keyed by (instance_id, candidate_id), the
    candidate being the prediction's model_name_or_path. Running again resumes: pairs already in
    OUT are skipped. A prediction for an unknown instance_id is reported and counted, not scored.
    """
    from collections import Counter

    from taskforge.datasets import read_tasks
    from taskforge.scoring.server import RewardSink, candidate_key
    from taskforge.sandbox import open_backend
    from taskforge.scoring.scorer import (
        SCORER_VERSION,
        RewardMode,
        RewardResult,
        Scorer,
        load_predictions,
    )

    if predictions is None and not (gold or empty):
        raise click.UsageError("nothing to score: give --predictions, --gold or --empty")
    tasks = {task.instance_id: task for task in read_tasks(tasks_dir)}
    candidates: list[tuple[str, str, str]] = []  # (instance_id, patch, candidate_id)
    unknown: Counter[str] = Counter()
    if predictions is not None:
        try:
            rows = load_predictions(predictions)
        except ValueError as err:
            raise click.BadParameter(str(err), param_hint="--predictions") from err
        for row in rows:
            if row["instance_id"] not in tasks:
                unknown[row["instance_id"]] += 1
                _status(f"unknown instance_id {row['instance_id']!r} (candidate {row['model_name_or_path']!r}): "
                        "not in the tasks; not scored")
                continue
            candidates.append((row["instance_id"], row["model_patch"],
                               candidate_key(row["model_name_or_path"], row["model_patch"])))
    for flag, name in ((gold, "gold"), (empty, "empty")):
        if flag:
            for task in tasks.values():
                candidates.append((task.instance_id, task.patch if name == "gold" else "", name))

    recipe = {"command": "score", "mode": mode, "scorer_version": SCORER_VERSION}
    with RewardSink(out_dir, recipe=recipe, prefix="rewards-score", flush_rows=256, flush_s=60.0) as sink:
        work: list[tuple[str, str, str]] = []
        seen: set[str] = set()
        already = repeated = 0
        for instance_id, patch, candidate_id in candidates:
            key = f"{instance_id}\0{candidate_id}"  # REWARDS.key_of
            if key in sink.keys:
                already += 1
            elif key in seen:
                repeated += 1
            else:
                seen.add(key)
                work.append((instance_id, patch, candidate_id))
        if already:
            _status(f"{already} candidate(s) already scored in {out_dir}; skipped")
        if repeated:
            _status(f"{repeated} prediction(s) repeat an (instance_id, candidate) pair; only the first is scored")
        work.sort(key=lambda w: tasks[w[0]].image_name)  # one image at a time keeps the container pool warm
        progress = _ScoreProgress(len(work))
        scorer = Scorer(backend=open_backend("docker"), timeout_s=timeout_s, concurrency=concurrency,
                        mode=cast("RewardMode", mode))

        def stored(result: RewardResult) -> None:
            sink.add(result)
            progress.update(result)

        with scorer:
            results = scorer.score_many(((tasks[i], p, c) for i, p, c in work), on_result=stored)
        progress.finish()
    total_rows = len(sink.keys)  # closing the sink wrote the last rows

    statuses = Counter(r.status for r in results)
    mean = sum(r.reward for r in results) / len(results) if results else 0.0
    click.echo(f"scored {len(results)} candidate(s) for {len({r.instance_id for r in results})} task(s): "
               f"mean reward {mean:.3f}")
    click.echo("status: " + (", ".join(f"{s} {n}" for s, n in statuses.most_common()) or "none"))
    by_candidate: dict[str, list[float]] = {}
    for result in results:
        by_candidate.setdefault(result.candidate_id, []).append(result.reward)
    for candidate_id, rewards in sorted(by_candidate.items()):
        click.echo(f"  {candidate_id}: {len(rewards)} scored, mean reward {sum(rewards) / len(rewards):.3f}")
    click.echo(f"unknown instance_id: {sum(unknown.values())}; already scored: {already}; repeated: {repeated}")
    click.echo(f"{out_dir}: {total_rows} reward rows")


class _ScoreProgress:
    """One line on stderr, redrawn with ``\\r``: done/total, mean reward, statuses."""

    def __init__(self, total: int) -> None:
        import threading
        from collections import Counter

        self.total = total
        self.done = 0
        self.reward = 0.0
        self.statuses: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._width = 0
        self._draw()

    def update(self, result: Any) -> None:
        with self._lock:
            self.done += 1
            self.reward += result.reward
            self.statuses[result.status] += 1
            self._draw()

    def _draw(self) -> None:
        width = 24
        filled = width * self.done // self.total if self.total else width
        mean = self.reward / self.done if self.done else 0.0
        statuses = " ".join(f"{s} {n}" for s, n in self.statuses.most_common())
        line = (f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total}  mean {mean:.3f}  "
                f"{statuses}  {time.monotonic() - self._started:.0f}s")
        self._width = max(self._width, len(line))
        sys.stderr.write(line.ljust(self._width))
        sys.stderr.flush()

    def finish(self) -> None:
        sys.stderr.write("\n")
        sys.stderr.flush()


@main.command("serve")
@click.option("--tasks", "tasks_dir", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Task dataset folder.")
@click.option("--port", default=8088, show_default=True, type=click.IntRange(0, 65535), help="0 takes a free port.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--concurrency", default=4, show_default=True, type=click.IntRange(1), help="Scorings at once.")
@click.option("--max-queue", default=64, show_default=True, type=click.IntRange(1),
              help="Scorings waiting or running; beyond it requests get 503.")
@click.option("--request-timeout", "request_timeout_s", default=900.0, show_default=True,
              type=click.FloatRange(min=0, min_open=True), help="Seconds before a request gets 504.")
@click.option("--api-key-env", default="TASKFORGE_API_KEY", show_default=True,
              help="Environment variable holding the API key; when it is set, requests need Authorization: Bearer KEY.")
@click.option("--timeout", "timeout_s", default=600.0, show_default=True, type=click.FloatRange(min=1),
              help="Wall-clock limit of one test run, seconds.")
@click.option("--max-body-bytes", default=32 * 1024 * 1024, show_default=True, type=click.IntRange(1),
              help="Largest request body read.")
@click.option("--rewards-out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also store every result as a reward row in this dataset folder.")
@_one_line_errors
def serve_command(tasks_dir: Path, port: int, host: str, concurrency: int, max_queue: int, request_timeout_s: float,
                  api_key_env: str, timeout_s: float, max_body_bytes: int, rewards_out: Path | None) -> None:
    """Serve rewards over HTTP: POST /score and /score_many score candidate patches against the
    tasks of TASKS (protocol: README, or taskforge.scoring.server). SIGTERM or SIGINT stops it
    cleanly: scorings in flight finish, reward rows are stored, the containers are removed."""
    import os
    import signal
    import threading

    from taskforge.datasets import read_tasks
    from taskforge.scoring.server import RewardServer, ServerConfig
    from taskforge.sandbox import open_backend
    from taskforge.scoring.scorer import Scorer

    api_key = os.environ.get(api_key_env)
    if api_key is not None and not api_key.strip():
        raise click.BadParameter(f"${api_key_env} is set but empty; unset it or give it a key",
                                 param_hint="--api-key-env")
    tasks = read_tasks(tasks_dir)
    config = ServerConfig(host=host, port=port, max_queue=max_queue, request_timeout_s=request_timeout_s,
                          max_body_bytes=max_body_bytes, rewards_out=rewards_out)
    scorer = Scorer(backend=open_backend("docker"), timeout_s=timeout_s, concurrency=concurrency)
    try:
        server = RewardServer(tasks, scorer=scorer, config=config, api_key=api_key.strip() if api_key else None)
    except OSError as err:  # the server closed the scorer
        raise TaskforgeError(f"cannot listen on {host}:{port}: {err.strerror or err}", reason="listen_failed") from err
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server.start()
    auth = f"API key from ${api_key_env}" if api_key else "no API key"
    if not api_key and host not in ("127.0.0.1", "localhost", "::1"):
        _status(f"warning: listening on {host} with no API key; anyone who reaches it can use it")
    _status(f"serving {len(tasks)} tasks from {tasks_dir} on {server.url} ({auth}, concurrency {concurrency}, "
            f"queue {max_queue})")
    try:
        while not stop.wait(1.0):
            pass
    finally:
        _status("stopping: finishing the scorings in flight")
        server.close()
    _status("stopped")


@main.command("inspect")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--plots", "plots_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also write PNG histograms into this folder (needs the datasets extra: matplotlib).")
@click.option("--rejections", is_flag=True,
              help="Print every rejected candidate instead: target, strategy, reason and detail (from mine-summary.json).")
@_one_line_errors
def inspect_command(directory: Path, plots_dir: Path | None, rejections: bool) -> None:
    """Print what the task folder DIRECTORY holds: tasks per repository and per strategy, test
    counts, lines removed, validation and audit times, audit status, and reward statistics (from
    DIRECTORY/rewards when there is one). With --rejections, why each rejected candidate was
    rejected."""
    from taskforge.datasets.stats import read_rejections, render, render_rejections, summarize, write_plots

    if rejections:
        click.echo(render_rejections(read_rejections(directory)), nl=False)
        return

    summary = summarize(directory)
    click.echo(render(summary), nl=False)
    if plots_dir is not None:
        try:
            import matplotlib  # noqa: F401 - only to say what is missing
        except ImportError as err:
            raise TaskforgeError("--plots needs matplotlib: pip install 'taskforge[datasets]'",
                                 reason="missing_dependency") from err
        for path in write_plots(summary, plots_dir):
            click.echo(f"wrote {path}")


@main.command("report")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path), help="Markdown file to write.")
@click.option("--validation", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="What `taskforge validate DIRECTORY --report FILE` wrote.")
@click.option("--rewards", "rewards", multiple=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="A reward folder of `taskforge score --gold --empty` (repeatable: one per scoring run).")
@click.option("--target", default=10, show_default=True, type=click.IntRange(1), help="Tasks a repository should yield.")
@_one_line_errors
def report_command(directory: Path, out: Path, validation: Path | None, rewards: tuple[Path, ...], target: int) -> None:
    """Write the yield report of the mined folder DIRECTORY: one row per repository (baseline,
    tests, candidates, attempts, tasks, rejections by reason, failure), a cause for every one below
    --target tasks, and what validation and scoring runs found."""
    from taskforge.datasets.manifest import write_atomic
    from taskforge.datasets.report import build_report, render_report

    report = build_report(directory, target=target, validation=validation, rewards=list(rewards))
    write_atomic(out, render_report(report).encode())
    click.echo(f"{out}: {len(report.rows)} repositories, baseline ran in {report.with_baseline}, "
               f"{report.at_target} yielded {target} valid tasks, {report.tasks} tasks")


@main.command("export")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--format", "fmt", required=True, type=click.Choice(["swebench", "hf"]),
              help="swebench: JSONL of SWE-bench instances; hf: a Hugging Face dataset folder with a card.")
@click.option("--out", "out", required=True, type=click.Path(path_type=Path), help="Output file (swebench) or new folder (hf).")
@click.option("--images", is_flag=True, help="Build one audited image per task (start state on its environment image) and name it in image_name.")
@_one_line_errors
def export_command(directory: Path, fmt: str, out: Path, images: bool) -> None:
    """Export the task folder DIRECTORY for other tools."""
    from taskforge.datasets.export import export_hf, export_swebench

    tags: dict[str, str] | None = None
    if images:
        from taskforge.mining.images import build_task_images
        from taskforge.sandbox.docker import DockerBackend

        # Docker by name: building, auditing and deleting images is beyond the SandboxBackend protocol.
        built = build_task_images(directory, backend=DockerBackend(), on_image=lambda b: _status(
            f"{b.instance_id}: {b.tag} ({'built' if b.built else 'exists'}, audit clean: {b.audit.files} files "
            f"in {b.audit.seconds:.1f}s)"))
        tags = {b.instance_id: b.tag for b in built}
    if fmt == "swebench":
        count = export_swebench(directory, out, images=tags)
        click.echo(f"wrote {count} SWE-bench instances to {out}")
    else:
        export_hf(directory, out, images=tags)
        click.echo(f"wrote a Hugging Face dataset folder to {out}")


@main.command("checkout")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("instance_id")
@click.argument("dest", type=click.Path(path_type=Path))
@_one_line_errors
def checkout_command(directory: Path, instance_id: str, dest: Path) -> None:
    """Write out INSTANCE_ID's start state into DEST (a new folder): exactly the working tree and
    .git an agent starts from, rebuilt from the task's row."""
    from taskforge.datasets import read_tasks
    from taskforge.mining.revalidate import rebuild_start_state

    tasks = {task.instance_id: task for task in read_tasks(directory)}
    if instance_id not in tasks:
        raise TaskforgeError(f"no task {instance_id!r} in {directory}", reason="no_such_task")
    task = tasks[instance_id]
    start = rebuild_start_state(task, dest)
    click.echo(f"{dest}: start state of {instance_id} at {start.commit[:12]}; image {task.image_name}")


@main.group()
def sandbox() -> None:
    """Manage sandbox images and containers."""


@sandbox.command("build-base")
@click.option("--from", "from_image", default=None, help="Build on this existing image instead of debootstrapping offline.")
@click.option("--force", is_flag=True, help="Rebuild even if the image exists.")
@_one_line_errors
def build_base_command(from_image: str | None, force: bool) -> None:
    """Build (or reuse) the base image every environment builds on."""
    from taskforge.sandbox.base_image import build_base
    from taskforge.sandbox import open_backend

    base = build_base(open_backend("docker"), from_image=from_image, force=force)
    click.echo(f"{base.tag} ({base.origin}, python {base.python})")


@sandbox.command("gc")
@click.option("--all", "everything", is_flag=True, help="Remove every taskforge container, not only leaked ones.")
@_one_line_errors
def gc_command(everything: bool) -> None:
    """Remove sandbox containers whose owning process is gone."""
    from taskforge.sandbox import open_backend

    removed = open_backend("docker").gc(everything=everything)
    click.echo(f"removed {len(removed)} container(s)")


def _status(message: str) -> None:
    click.echo(message, err=True)


if __name__ == "__main__":
    main()
