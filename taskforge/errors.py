"""The few exceptions taskforge raises on purpose.

Every error carries a short machine-readable ``reason`` (recorded on rejected work, counted in run
summaries) and a one-line human message (printed by the CLI). Catch them at the per-repository or
per-task boundary; nowhere else.

    TaskforgeError
    ├── SourceError            a repository could not be fetched or unpacked
    ├── DependencyError        its dependencies could not be resolved into a wheelhouse
    ├── EnvironmentBuildError  its environment image could not be built
    ├── SandboxError           the sandbox infrastructure failed
    │   └── SandboxUnavailable the container engine is not reachable
    ├── NoTestsError           the repository has no tests to run
    ├── TestRunError           pytest ran but could not produce results (collection errors, crash)
    └── LLMError               an LLM endpoint failed, or its model misbehaved (taskforge.llm.client)
"""

from __future__ import annotations

__all__ = [
    "DependencyError",
    "EnvironmentBuildError",
    "LLMError",
    "NoTestsError",
    "SandboxError",
    "SandboxUnavailable",
    "SourceError",
    "TaskforgeError",
    "TestRunError",
]


class TaskforgeError(Exception):
    """Base class. ``str(err)`` is a single line fit for a user; ``err.reason`` is a short code."""

    reason: str = "error"

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(" ".join(message.split()))
        if reason is not None:
            self.reason = reason


class SourceError(TaskforgeError):
    reason = "source_unavailable"


class DependencyError(TaskforgeError):
    reason = "dependency_unresolvable"


class EnvironmentBuildError(TaskforgeError):
    reason = "environment_build_failed"


class SandboxError(TaskforgeError):
    reason = "sandbox_error"


class SandboxUnavailable(SandboxError):
    reason = "sandbox_unavailable"


class NoTestsError(TaskforgeError):
    reason = "no_tests"


class TestRunError(TaskforgeError):
    reason = "test_run_failed"
    __test__ = False  # not a pytest test class, despite the name


class LLMError(TaskforgeError):
    """``reason``: ``llm_timeout``, ``llm_server_error`` (5xx, 429, unreachable), ``llm_request_rejected``
    (another 4xx), ``llm_malformed_output`` or ``llm_budget_exhausted``."""

    reason = "llm_error"
