"""Programs that run inside the sandboxes, copied there as source: stdlib only, one file each.

- ``driver``: runs pytest in the container (fresh interpreters or a warm fork server);
- ``plugin``: pytest's report plugin, the JUnit-style outcomes the host reads;
- ``guard``: the scoring guard plugin that watches pytest's reporting machinery;
- ``supervisor``: runs a scoring run's driver as the sandbox user and reads its tests' outcomes,
  as they happen, as root;
- ``scanner``: the leak scanner the audit runs over a start state or a whole image.

The host reads each file with :func:`source` and writes it into the container under the name the
container expects; nothing here imports taskforge.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["PROGRAMS", "source", "source_path"]

PROGRAMS = ("driver", "plugin", "guard", "supervisor", "scanner")


def source_path(program: str) -> Path:
    """The file of one guest program (one of :data:`PROGRAMS`)."""
    if program not in PROGRAMS:
        raise ValueError(f"no guest program {program!r}; known: {', '.join(PROGRAMS)}")
    return Path(__file__).with_name(f"{program}.py")


def source(program: str) -> str:
    """The source text of one guest program."""
    return source_path(program).read_text(encoding="utf-8")
