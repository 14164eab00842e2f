"""The one way taskforge runs git on the host: :func:`run_git`.

Every command gets the same hermetic settings: hooks and signing from the user's configuration do
not run on (or change) snapshots and start states, line endings are never converted, paths are
printed as they are, and git never waits for a password or a terminal. Callers add what is theirs:
an identity and a date for the commits they make, and ``GIT_CONFIG_NOSYSTEM`` or
``GIT_CONFIG_GLOBAL`` when the machine's or the user's configuration must not count (patches, start
states); fetching a source keeps both (credentials, proxies, URL rewrites).
The guest driver, inside containers, runs its own git with the standard library.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["GIT_CONFIG", "GitResult", "run_git"]

GIT_CONFIG = (
    "-c", "core.hooksPath=/dev/null",
    "-c", "commit.gpgSign=false",
    "-c", "core.autocrlf=false",
    "-c", "core.quotepath=false",
    "-c", "advice.detachedHead=false",
)  # fmt: skip
"""Passed to every command."""


def _base_env() -> dict[str, str]:
    env = {"GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0"}
    if "GIT_SSH_COMMAND" not in os.environ and "GIT_SSH" not in os.environ:
        env["GIT_SSH_COMMAND"] = "ssh -o BatchMode=yes"  # fail instead of asking for a password
    return env


@dataclass(frozen=True, slots=True)
class GitResult:
    status: int
    raw: bytes
    """What git wrote on stdout."""
    stderr: str

    @property
    def ok(self) -> bool:
        return self.status == 0

    @property
    def stdout(self) -> str:
        """stdout decoded as the file system encodes paths (``os.fsdecode``)."""
        return os.fsdecode(self.raw)


def run_git(*args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None, stdin: str | None = None,
            timeout: float | None = None) -> GitResult:
    """Run ``git ARGS`` in ``cwd``; a command past ``timeout`` seconds is killed and reported with
    a ``Timeout:`` line on stderr (status -9)."""
    try:
        proc = subprocess.run(
            ["git", *GIT_CONFIG, *args], cwd=cwd, input=None if stdin is None else os.fsencode(stdin),
            capture_output=True, env={**os.environ, **_base_env(), **(env or {})}, timeout=timeout, check=False,
        )
    except subprocess.TimeoutExpired as err:
        stderr = os.fsdecode(err.stderr or b"")
        return GitResult(-9, err.stdout or b"",
                         f"{stderr}\nTimeout: git {args[0] if args else ''} did not complete in {timeout:g} s")
    return GitResult(proc.returncode, proc.stdout, proc.stderr.decode("utf-8", "replace"))
