"""Shared fixtures: a real Docker backend, the real base image, and an isolated cache per session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from taskforge.errors import SandboxUnavailable


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A cache root shared by the whole session, so sources and environments are built once.

    ``TASKFORGE_TEST_CACHE`` keeps it across sessions (handy when iterating locally).
    """
    root = Path(os.environ.get("TASKFORGE_TEST_CACHE") or tmp_path_factory.mktemp("taskforge-cache"))
    previous = os.environ.get("TASKFORGE_CACHE")
    os.environ["TASKFORGE_CACHE"] = str(root)
    yield root
    if previous is None:
        os.environ.pop("TASKFORGE_CACHE", None)
    else:
        os.environ["TASKFORGE_CACHE"] = previous


@pytest.fixture(scope="session")
def backend():  # type: ignore[no-untyped-def]
    """The Docker backend. Without an engine, docker tests skip, unless TASKFORGE_REQUIRE_DOCKER=1 (CI)."""
    from taskforge.sandbox import open_backend

    try:
        return open_backend("docker")
    except SandboxUnavailable as err:
        if os.environ.get("TASKFORGE_REQUIRE_DOCKER") == "1":
            raise
        pytest.skip(f"no Docker engine: {err}")


@pytest.fixture(scope="session")
def base_image(backend, session_cache: Path):  # type: ignore[no-untyped-def]
    """The offline base image (built once per machine; later sessions reuse it by its content tag)."""
    from taskforge.sandbox.base_image import build_base

    return build_base(backend)


SAMPLE = Path(__file__).resolve().parents[1] / "datasets" / "sample"


@pytest.fixture(scope="session")
def local_sample(tmp_path_factory, backend, base_image, session_cache):  # type: ignore[no-untyped-def]
    """A copy of datasets/sample whose image_name is the environment image as this machine builds
    it (the folder, and that environment)."""
    from dataclasses import replace

    from taskforge.datasets import (
        TASKS,
        DatasetWriter,
        read_manifest,
        read_tasks,
        run_versions,
    )
    from taskforge.repo.environment import build_environment
    from taskforge.repo.sources import fetch

    tasks = read_tasks(SAMPLE)
    env = build_environment(fetch(tasks[0].source), backend=backend, base=base_image)
    out = tmp_path_factory.mktemp("sample")
    with DatasetWriter(out, kind=TASKS, recipe=read_manifest(SAMPLE).recipe, versions=run_versions()) as writer:
        writer.write((replace(t, image_name=env.image).to_row() for t in tasks), prefix="tasks-sample")
    return out, env
