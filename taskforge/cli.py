"""The ``taskforge`` command line.

Commands stay few; knobs belong in recipes. Every command turns a ``TaskforgeError`` into one
line on stderr (``error: <message> [<reason>]``) and exit status 1.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

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
    from taskforge.baseimage import current_base
    from taskforge.environment import build_environment
    from taskforge.sandbox import open_backend
    from taskforge.sources import fetch
    from taskforge.testrun import check_run, require_test_files, run_suite

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


@main.group()
def sandbox() -> None:
    """Manage sandbox images and containers."""


@sandbox.command("build-base")
@click.option("--from", "from_image", default=None, help="Build on this existing image instead of debootstrapping offline.")
@click.option("--force", is_flag=True, help="Rebuild even if the image exists.")
@_one_line_errors
def build_base_command(from_image: str | None, force: bool) -> None:
    """Build (or reuse) the base image every environment builds on."""
    from taskforge.baseimage import build_base
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
