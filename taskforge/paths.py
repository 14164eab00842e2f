"""Where taskforge keeps its caches, and where the sandbox image definitions live."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_root", "sandboxes_dir"]


def cache_root() -> Path:
    """The cache root: ``$TASKFORGE_CACHE``, else ``$XDG_CACHE_HOME/taskforge``, else ``~/.cache/taskforge``."""
    if explicit := os.environ.get("TASKFORGE_CACHE"):
        return Path(explicit).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return (Path(xdg) / "taskforge").resolve()


def sandboxes_dir() -> Path:
    """The ``sandboxes/`` folder of image definitions (Dockerfile templates, security settings).

    taskforge is installed from its source checkout (``pip install -e .``), so the folder sits
    beside the package.
    """
    path = Path(__file__).resolve().parent.parent / "sandboxes"
    if not path.is_dir():
        raise FileNotFoundError(f"sandboxes/ not found at {path}; install taskforge from its source checkout")
    return path
