"""Commands over dataset folders: inspect, report, export, check out a start state."""

from __future__ import annotations

from pathlib import Path

import click

from taskforge.cli.common import one_line_errors, status
from taskforge.errors import TaskforgeError

__all__ = ["checkout_command", "export_command", "inspect_command", "migrate_command", "rate_command", "report_command"]


@click.command("inspect")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--plots", "plots_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also write PNG histograms into this folder (needs the datasets extra: matplotlib).")
@click.option("--rejections", is_flag=True,
              help="Print every rejected candidate instead: target, strategy, reason and detail (from mine-summary.json).")
@one_line_errors
def inspect_command(directory: Path, plots_dir: Path | None, rejections: bool) -> None:
    """Print what the task folder DIRECTORY holds: tasks per repository and per strategy, test
    counts, lines removed, validation and audit times, audit status, and reward statistics (from
    DIRECTORY/rewards when there is one). With --rejections, why each rejected candidate was
    rejected."""
    from taskforge.datasets.stats import (
        read_rejections,
        render,
        render_rejections,
        summarize,
        write_plots,
    )

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


@click.command("migrate")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@one_line_errors
def migrate_command(directory: Path) -> None:
    """Bring the dataset folder DIRECTORY, written by an older schema version, to the current one,
    in place and atomically (task rows v2 -> v3 gain the difficulty record, computed from each row;
    reward rows v2 -> v3 gain task_sha256, unknown). A task folder's rewards/ folder, which
    `taskforge inspect` reads, is migrated with it. A folder that is current is left as it is."""
    from taskforge.datasets.manifest import MANIFEST
    from taskforge.datasets.migrate import migrate
    from taskforge.datasets.stats import REWARDS_DIR

    folders = [directory]
    if (directory / REWARDS_DIR / MANIFEST).is_file():
        folders.append(directory / REWARDS_DIR)
    for folder in folders:
        done = migrate(folder)
        if done.before == done.after:
            click.echo(f"{folder}: schema v{done.after} is current; nothing to do")
        else:
            click.echo(f"{folder}: v{done.before} -> v{done.after}, {done.rows} rows in {done.shards} shard(s)")


@click.command("rate")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--rewards", "rewards", multiple=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="A reward folder to count (repeatable) [default: DIRECTORY/rewards].")
@one_line_errors
def rate_command(directory: Path, rewards: tuple[Path, ...]) -> None:
    """Write each task's measured solve rate into the task folder DIRECTORY: the share of its scored
    rollouts (reward rows other than gold and empty, infra errors left out) that earned 1.0."""
    from taskforge.datasets.rates import rate

    folders = list(rewards) or [directory / "rewards"]
    missing = [f for f in folders if not f.is_dir()]
    if missing:
        raise TaskforgeError(f"{missing[0]} is not a folder: score some rollouts first, or name --rewards",
                             reason="no_rewards")
    done = rate(directory, folders)
    click.echo(f"{directory}: {done.rated} of {done.tasks} tasks rated from {done.attempts} rollouts "
               f"({done.shards} shard(s) rewritten)")


@click.command("report")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path), help="Markdown file to write.")
@click.option("--validation", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="What `taskforge validate DIRECTORY --report FILE` wrote.")
@click.option("--rewards", "rewards", multiple=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="A reward folder of `taskforge score --gold --empty` (repeatable: one per scoring run).")
@click.option("--target", default=10, show_default=True, type=click.IntRange(1), help="Tasks a repository should yield.")
@one_line_errors
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


@click.command("export")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--format", "fmt", required=True, type=click.Choice(["swebench", "hf", "harbor"]),
              help="swebench: SWE-bench instances for swebench 5's harness and mini-swe-agent (a .jsonl file, or a "
                   "folder with a test split); hf: a Hugging Face dataset folder with a card; harbor: one Harbor task "
                   "folder per task.")
@click.option("--out", "out", required=True, type=click.Path(path_type=Path),
              help="Output: a .jsonl file or a new folder (swebench), a new folder (hf, harbor).")
@click.option("--images", is_flag=True, help="Build one audited image per task (start state on its environment image) and name it in image_name.")
@one_line_errors
def export_command(directory: Path, fmt: str, out: Path, images: bool) -> None:
    """Export the task folder DIRECTORY for other tools."""
    from taskforge.datasets.export import export_hf, export_swebench
    from taskforge.datasets.harbor import export_harbor

    tags: dict[str, str] | None = None
    if images:
        from taskforge.mining.images import build_task_images
        from taskforge.sandbox.docker import DockerBackend

        # Docker by name: building, auditing and deleting images is beyond the SandboxBackend protocol.
        built = build_task_images(directory, backend=DockerBackend(), on_image=lambda b: status(
            f"{b.instance_id}: {b.tag} ({'built' if b.built else 'exists'}, audit clean: {b.audit.files} files "
            f"in {b.audit.seconds:.1f}s)"))
        tags = {b.instance_id: b.tag for b in built}
    if tags is None and fmt in ("swebench", "harbor"):
        status("without --images, the tasks name their environment images, which hold no repository: the harnesses "
               "need --images")
    if fmt == "swebench":
        count = export_swebench(directory, out, images=tags)
        click.echo(f"wrote {count} SWE-bench instances to {out}")
    elif fmt == "harbor":
        count = export_harbor(directory, out, images=tags)
        click.echo(f"wrote {count} Harbor task folders to {out}")
    else:
        export_hf(directory, out, images=tags)
        click.echo(f"wrote a Hugging Face dataset folder to {out}")


@click.command("checkout")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("instance_id")
@click.argument("dest", type=click.Path(path_type=Path))
@one_line_errors
def checkout_command(directory: Path, instance_id: str, dest: Path) -> None:
    """Write out INSTANCE_ID's start state into DEST (a new folder): exactly the working tree and
    .git an agent starts from, rebuilt from the task's row."""
    from taskforge.datasets import read_tasks
    from taskforge.repo.startstate import rebuild_start_state

    tasks = {task.instance_id: task for task in read_tasks(directory)}
    if instance_id not in tasks:
        raise TaskforgeError(f"no task {instance_id!r} in {directory}", reason="no_such_task")
    task = tasks[instance_id]
    start = rebuild_start_state(task, dest)
    click.echo(f"{dest}: start state of {instance_id} at {start.commit[:12]}; image {task.image_name}")
