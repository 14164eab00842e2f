"""Base and environment images: content-derived tags, reuse, no project code; leaked-container gc."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from taskforge.repo.environment import build_environment
from taskforge.repo.sources import fetch
from taskforge.sandbox import SandboxLimits
from taskforge.sandbox.base_image import build_base

pytestmark = pytest.mark.docker


def test_build_base_is_idempotent(backend, base_image) -> None:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    again = build_base(backend)
    assert again == base_image
    assert time.monotonic() - started < 30, "a second build reuses the image (only a probe runs)"


def test_build_base_from_an_existing_image(backend, base_image) -> None:  # type: ignore[no-untyped-def]
    derived = build_base(backend, from_image=base_image.tag)
    try:
        assert derived.tag.startswith("taskforge-base:from-")
        assert derived.origin == f"from {base_image.tag}"
        assert derived.python == base_image.python
        with backend.start(derived.tag, limits=SandboxLimits.load()) as box:
            result = box.exec(["sh", "-c", "id -un && git --version"], timeout_s=30)
        assert result.status == "ok", result.text()
        assert result.stdout.decode().startswith("sandbox\ngit version")
        assert build_base(backend, from_image=base_image.tag).tag == derived.tag
    finally:
        build_base(backend)  # make the offline image the current base again


def test_environment_image_holds_no_project_code(backend, base_image, session_cache) -> None:  # type: ignore[no-untyped-def]
    snapshot = fetch("pypi:iniconfig==2.3.1")
    env = build_environment(snapshot, backend=backend, base=base_image)
    assert build_environment(snapshot, backend=backend, base=base_image) == env, "second build reuses"
    assert not any(name.startswith("iniconfig==") for name in env.installed)
    with backend.start(env.image, limits=SandboxLimits.load()) as box:
        # The metadata is installed, the code is not: nothing of iniconfig's source in any path.
        meta = box.exec(["python", "-c", "import importlib.metadata as m; print(m.version('iniconfig'))"], timeout_s=30)
        assert meta.stdout.decode().strip() == "2.3.1", meta.text()
        missing = box.exec(["python", "-c", "import iniconfig"], timeout_s=30)
        assert "ModuleNotFoundError" in missing.text()
        # The venv's pip and setuptools are gone: their vendored copies of other projects would
        # be a copy of the removed code for a task of one of those.
        tools = box.exec(["python", "-c", "import importlib.util as u; print([m for m in ('pip', 'setuptools', "
                          "'pkg_resources') if u.find_spec(m)])"], timeout_s=30)
        assert tools.stdout.decode().strip() == "[]", tools.text()
        vendored = box.exec(["sh", "-c", "find / -path /proc -prune -o \\( -name _vendor -o -name '*.whl' \\) -print 2>/dev/null; true"],
                            timeout_s=120, workdir="/")
        assert vendored.stdout == b"", vendored.stdout
        grep = box.exec(["sh", "-c", "grep -rl 'def parse_ini_data\\|class IniConfig' /opt /usr /etc /var /home 2>/dev/null; true"], timeout_s=120, workdir="/")
        assert grep.stdout == b"", grep.stdout


def test_gc_removes_containers_of_dead_owners(backend, base_image, tmp_path) -> None:  # type: ignore[no-untyped-def]
    script = textwrap.dedent(
        f"""
        import sys, time
        from taskforge.sandbox import SandboxLimits, open_backend
        box = open_backend("docker").start({base_image.tag!r}, limits=SandboxLimits.load())
        print(box.name, flush=True)
        time.sleep(600)
        """
    )
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    name = owner.stdout.readline().strip()
    assert name in backend.managed_containers()
    assert name not in backend.gc(), "its owner is alive: not leaked"
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait()
    owner.stdout.close()
    proc = subprocess.run([sys.executable, "-m", "taskforge.cli", "sandbox", "gc"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "removed" in proc.stdout
    assert name not in backend.managed_containers()


def test_gc_never_fails_when_another_process_removes_the_same_containers(backend, base_image) -> None:  # type: ignore[no-untyped-def]
    """Two runs starting at once both collect the containers a killed run left; removing one that
    the other is removing answers 409 ("removal already in progress"), and a resumed sweep failed
    every repository with it as an internal error. Several gcs race here over leaked containers."""
    import threading

    script = textwrap.dedent(
        f"""
        import time
        from taskforge.sandbox import SandboxLimits, open_backend
        backend = open_backend("docker")
        boxes = [backend.start({base_image.tag!r}, limits=SandboxLimits.load()) for _ in range(6)]
        print(" ".join(b.name for b in boxes), flush=True)
        time.sleep(600)
        """
    )
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    names = owner.stdout.readline().split()
    assert len(names) == 6
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait()
    owner.stdout.close()
    errors: list[BaseException] = []

    def collect() -> None:
        try:
            backend.gc()
        except BaseException as err:  # noqa: BLE001 - the test reports any
            errors.append(err)

    threads = [threading.Thread(target=collect) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    backend.gc()
    assert not set(names) & set(backend.managed_containers())
