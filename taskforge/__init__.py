"""taskforge: mine verifiable coding tasks from real repositories, and score candidates against them.

The names below are the public API, the one the trainer uses: the task row and its reader, the
scorer (local, or over HTTP), the sandbox environment an agent acts in, the errors, and the typed
config loader. Importing this package is cheap: each name is imported on first use, and Docker,
git and everything heavy are imported inside the modules and functions that need them.

    import taskforge
    tasks = taskforge.read_tasks("tasks/")
    with taskforge.Scorer(backend=taskforge.open_backend("docker")) as scorer:
        result = scorer.score(tasks[0], patch)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_API = {
    "Task": "taskforge.task",
    "read_tasks": "taskforge.datasets",
    "Scorer": "taskforge.scoring.scorer",
    "RewardResult": "taskforge.scoring.rewards",
    "RewardClient": "taskforge.scoring.client",
    "RewardScorer": "taskforge.scoring.protocol",
    "Sandbox": "taskforge.sandbox",
    "SandboxBackend": "taskforge.sandbox",
    "SandboxLimits": "taskforge.sandbox",
    "open_backend": "taskforge.sandbox",
    "Environment": "taskforge.repo.environment",
    "WORKSPACE": "taskforge.repo.environment",
    "rebuild_start_state": "taskforge.repo.startstate",
    "TaskforgeError": "taskforge.errors",
    "SandboxError": "taskforge.errors",
    "typed_config": "taskforge.config",
    "is_test_path": "taskforge.repo.testfiles",
    "TestLayout": "taskforge.repo.testfiles",
    "checked_value": "taskforge.config",
    "is_uri": "taskforge.datasets",
    "read_manifest": "taskforge.datasets",
    "MineRequest": "taskforge.datasets.requests",
    "submit_request": "taskforge.datasets.requests",
    "open_requests": "taskforge.datasets.requests",
    "BANDS": "taskforge.difficulty",
}
"""Public name -> the module that defines it (imported on first use)."""

__all__ = [
    "__version__",
    "BANDS",
    "MineRequest",
    "Environment",
    "RewardClient",
    "RewardResult",
    "RewardScorer",
    "Sandbox",
    "SandboxBackend",
    "SandboxError",
    "SandboxLimits",
    "Scorer",
    "Task",
    "TaskforgeError",
    "TestLayout",
    "WORKSPACE",
    "checked_value",
    "is_test_path",
    "is_uri",
    "open_backend",
    "open_requests",
    "read_manifest",
    "read_tasks",
    "rebuild_start_state",
    "submit_request",
    "typed_config",
]

if TYPE_CHECKING:
    from taskforge.config import checked_value, typed_config
    from taskforge.datasets import is_uri, read_manifest, read_tasks
    from taskforge.datasets.requests import MineRequest, open_requests, submit_request
    from taskforge.difficulty import BANDS
    from taskforge.errors import SandboxError, TaskforgeError
    from taskforge.repo.environment import WORKSPACE, Environment
    from taskforge.repo.startstate import rebuild_start_state
    from taskforge.repo.testfiles import TestLayout, is_test_path
    from taskforge.sandbox import Sandbox, SandboxBackend, SandboxLimits, open_backend
    from taskforge.scoring.client import RewardClient
    from taskforge.scoring.protocol import RewardScorer
    from taskforge.scoring.rewards import RewardResult
    from taskforge.scoring.scorer import Scorer
    from taskforge.task import Task


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'taskforge' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
