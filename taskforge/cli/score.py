"""Commands of the scoring side: score candidates into a reward folder, serve rewards over HTTP."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click

from taskforge.cli.common import one_line_errors, status
from taskforge.errors import TaskforgeError

if TYPE_CHECKING:
    from taskforge.scoring.rewards import RewardMode

__all__ = ["score_command", "serve_command"]


@click.command("score")
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
@one_line_errors
def score_command(tasks_dir: Path, predictions: Path | None, out_dir: Path, mode: str, concurrency: int,
                  timeout_s: float, gold: bool, empty: bool) -> None:
    """Score candidate patches against the tasks of TASKS into reward rows in OUT.

    Each prediction is scored with the tamper-resistant scorer (the trusted tests are put back;
    tampering scores 0) and stored as a reward row keyed by (instance_id, candidate_id), the
    candidate being the prediction's model_name_or_path. Running again resumes: pairs already in
    OUT are skipped, unless the row was scored against another version of the task (mined again
    since, or unknown: a row migrated from reward schema v2) or is an ``infra_error`` (an image
    that could not be built, say): the pair is scored again and its new row replaces the old one. A prediction for an unknown instance_id is reported and counted, not scored.
    """
    from collections import Counter

    from taskforge.datasets import read_tasks
    from taskforge.sandbox import open_backend
    from taskforge.scoring.batch import ScorePlan, plan_candidates, score_candidates
    from taskforge.scoring.rewards import load_predictions

    if predictions is None and not (gold or empty):
        raise click.UsageError("nothing to score: give --predictions, --gold or --empty")
    tasks = {task.instance_id: task for task in read_tasks(tasks_dir)}
    rows: list[dict[str, str]] = []
    if predictions is not None:
        try:
            rows = load_predictions(predictions)
        except ValueError as err:
            raise click.BadParameter(str(err), param_hint="--predictions") from err
    plan = ScorePlan()
    progress: _ScoreProgress | None = None

    def planned(made: ScorePlan) -> None:
        nonlocal plan, progress
        plan = made
        for instance_id, candidate in plan.unknown:
            status(f"unknown instance_id {instance_id!r} (candidate {candidate!r}): not in the tasks; not scored")
        if plan.already:
            status(f"{plan.already} candidate(s) already scored in {out_dir}; skipped")
        if plan.stale:
            status(f"{len(plan.stale)} candidate(s) in {out_dir} were scored against another version of their task "
                   "(mined again since, or unknown: a row from before reward schema v3) or not scored (infra_error): "
                   "taken out and scored again")
        if plan.repeated:
            status(f"{plan.repeated} prediction(s) repeat an (instance_id, candidate) pair; only the first is scored")
        progress = _ScoreProgress(len(plan.work))

    results, total_rows = score_candidates(
        out_dir, tasks, lambda stored: plan_candidates(tasks, rows, gold=gold, empty=empty, stored=stored),
        backend=open_backend("docker"), mode=cast("RewardMode", mode), concurrency=concurrency, timeout_s=timeout_s,
        on_plan=planned, on_result=lambda result: progress.update(result) if progress else None)
    if progress is not None:
        progress.finish()

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
    click.echo(f"unknown instance_id: {len(plan.unknown)}; already scored: {plan.already}; "
               f"scored again (task changed): {len(plan.stale)}; repeated: {plan.repeated}")
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


@click.command("serve")
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
@one_line_errors
def serve_command(tasks_dir: Path, port: int, host: str, concurrency: int, max_queue: int, request_timeout_s: float,
                  api_key_env: str, timeout_s: float, max_body_bytes: int, rewards_out: Path | None) -> None:
    """Serve rewards over HTTP: POST /score and /score_many score candidate patches against the
    tasks of TASKS (protocol: README, or taskforge.scoring.server). SIGTERM or SIGINT stops it
    cleanly: scorings in flight finish, reward rows are stored, the containers are removed."""
    import os
    import signal
    import threading

    from taskforge.datasets import read_tasks
    from taskforge.sandbox import open_backend
    from taskforge.scoring.scorer import Scorer
    from taskforge.scoring.server import RewardServer, ServerConfig

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
        status(f"warning: listening on {host} with no API key; anyone who reaches it can use it")
    status(f"serving {len(tasks)} tasks from {tasks_dir} on {server.url} ({auth}, concurrency {concurrency}, "
            f"queue {max_queue})")
    try:
        while not stop.wait(1.0):
            pass
    finally:
        status("stopping: finishing the scorings in flight")
        server.close()
    status("stopped")
