"""The ``taskforge`` command line: thin commands over the pipeline's packages.

Commands stay few; knobs belong in recipes. Every command turns a ``TaskforgeError`` into one
line on stderr (``error: <message> [<reason>]``) and exit status 1 (:mod:`taskforge.cli.common`).

- :mod:`~taskforge.cli.mine`: ``test``, ``mine``, ``validate``, ``audit``;
- :mod:`~taskforge.cli.score`: ``score``, ``serve``;
- :mod:`~taskforge.cli.data`: ``inspect``, ``report``, ``export``, ``checkout``;
- :mod:`~taskforge.cli.sandbox`: ``sandbox build-base``, ``sandbox gc``.
"""

from __future__ import annotations

import click

from taskforge.cli import data, mine, sandbox, score

__all__ = ["main"]


@click.group()
@click.version_option(package_name="taskforge")
def main() -> None:
    """Turn real repositories into verifiable coding tasks."""


for command in (mine.test_command, mine.mine_command, mine.validate_command, mine.audit_command,
                score.score_command, score.serve_command, data.inspect_command, data.report_command,
                data.export_command, data.checkout_command, data.migrate_command, data.rate_command, sandbox.sandbox_group):
    main.add_command(command)
