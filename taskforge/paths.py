"""Where taskforge keeps its caches, and where the sandbox image definitions live."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

__all__ = ["cache_key", "cache_root", "sandboxes_dir"]


def cache_root() -> Path:
    """The cache root: ``$TASKFORGE_CACHE``, else ``$XDG_CACHE_HOME/taskforge``, else ``~/.cache/taskforge``."""
    if explicit := os.environ.get("TASKFORGE_CACHE"):
        return Path(explicit).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return (Path(xdg) / "taskforge").resolve()


def cache_key(*parts: bytes | str) -> str:
    """The sha256 (hex) of ``parts``, each followed by a NUL byte: the one way cache entries and
    image tags are named from what they hold (callers keep as many hex digits as they need)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()


def sandboxes_dir() -> Path:
    """The ``sandboxes/`` folder of image definitions (Dockerfile templates, the base image's build
    script, security settings).

    It ships inside the package (``taskforge/sandboxes``): in a checkout that is a link to the
    top-level ``sandboxes/``, and a wheel holds a copy (package data).
    """
    path = Path(__file__).resolve().parent / "sandboxes"
    if not (path / "security.toml").is_file():
        raise FileNotFoundError(f"sandboxes/ not found at {path}: this install of taskforge is incomplete; "
                                "reinstall it (pip install taskforge, or pip install -e . in a checkout)")
    return path
