"""``taskforge sandbox``: the base image and leaked containers."""

from __future__ import annotations

import click

from taskforge.cli.common import one_line_errors

__all__ = ["sandbox_group"]


@click.group("sandbox")
def sandbox_group() -> None:
    """Manage sandbox images and containers."""


@sandbox_group.command("build-base")
@click.option("--from", "from_image", default=None, help="Build on this existing image instead of debootstrapping offline.")
@click.option("--force", is_flag=True, help="Rebuild even if the image exists.")
@one_line_errors
def build_base_command(from_image: str | None, force: bool) -> None:
    """Build (or reuse) the base image every environment builds on."""
    from taskforge.sandbox import open_backend
    from taskforge.sandbox.base_image import build_base

    base = build_base(open_backend("docker"), from_image=from_image, force=force)
    click.echo(f"{base.tag} ({base.origin}, python {base.python})")


@sandbox_group.command("gc")
@click.option("--all", "everything", is_flag=True, help="Remove every taskforge container, not only leaked ones.")
@one_line_errors
def gc_command(everything: bool) -> None:
    """Remove sandbox containers whose owning process is gone."""
    from taskforge.sandbox import open_backend

    removed = open_backend("docker").gc(everything=everything)
    click.echo(f"removed {len(removed)} container(s)")
