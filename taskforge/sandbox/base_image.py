"""The base image every environment image is built on.

Two ways to get one:
- offline (the default, for air-gapped machines): ``sandboxes/base/build-rootfs.sh`` debootstraps
  a minimal Debian with python3, venv and git, and the tarball is ``docker import``-ed;
- ``--from IMAGE``: ``sandboxes/templates/base-from.Dockerfile`` builds on an image the user names.

Either way the tag is derived from the recipe's content, so building twice reuses the image. The
chosen base is recorded in ``<cache>/base-image.json``; environment builds read it from there.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from taskforge.errors import SandboxError
from taskforge.paths import cache_key, cache_root, sandboxes_dir
from taskforge.sandbox import SandboxBackend, SandboxLimits

__all__ = ["BaseImage", "build_base", "current_base", "debian_mirror"]

OFFLINE_SUITE = "bookworm"
BASE_REPOSITORY = "taskforge-base"


@dataclass(frozen=True, kw_only=True, slots=True)
class BaseImage:
    tag: str
    """Docker tag, e.g. ``taskforge-base:3f2a…``."""
    image_id: str
    python: str
    """``major.minor`` of the image's python3; host-side wheel resolution must match it."""
    origin: str
    """How it was made: ``debootstrap bookworm`` or ``from python:3.12-slim``."""
    python_full: str = ""
    """The image's full Python version (``3.11.2``): wheels are checked against their Requires-Python
    with it, since a host of the same ``major.minor`` may be a newer patch release."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def debian_mirror() -> str:
    """The Debian mirror the host's apt uses (``$TASKFORGE_DEBIAN_MIRROR`` overrides it)."""
    if explicit := os.environ.get("TASKFORGE_DEBIAN_MIRROR"):
        return explicit
    candidates = [Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")]
    for path in candidates:
        if not path.is_file():
            continue
        text = path.read_text()
        match = re.search(r"^URIs:\s*(\S+/debian)\s*$", text, re.M) or re.search(
            r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+/debian)\s", text, re.M
        )
        if match:
            return match.group(1)
    return "http://deb.debian.org/debian"


def _state_file() -> Path:
    return cache_root() / "base-image.json"




def build_base(backend: SandboxBackend, *, from_image: str | None = None, force: bool = False) -> BaseImage:
    """Build (or reuse) the base image and record it as the current one."""
    if from_image is None:
        script = sandboxes_dir() / "base" / "build-rootfs.sh"
        tag = f"{BASE_REPOSITORY}:{cache_key(script.read_bytes(), OFFLINE_SUITE)[:16]}"
        origin = f"debootstrap {OFFLINE_SUITE}"
        if force or not backend.image_exists(tag):
            _build_offline(backend, script=script, tag=tag)
    else:
        template = (sandboxes_dir() / "templates" / "base-from.Dockerfile").read_text()
        recipe_hash = cache_key(template, from_image)[:16]
        tag = f"{BASE_REPOSITORY}:from-{recipe_hash}"
        origin = f"from {from_image}"
        if force or not backend.image_exists(tag):
            with tempfile.TemporaryDirectory(prefix="taskforge-base-") as ctx:
                dockerfile = template.format(from_image=from_image, recipe_hash=recipe_hash)
                (Path(ctx) / "Dockerfile").write_text(dockerfile)
                backend.build_image(Path(ctx), tag=tag, labels={"taskforge.base.origin": origin})
    python, python_full = _probe_python(backend, tag)
    base = BaseImage(tag=tag, image_id=backend.image_id(tag), python=python, origin=origin, python_full=python_full)
    _record(base)
    return base


def _record(base: BaseImage) -> None:
    state = _state_file()
    state.parent.mkdir(parents=True, exist_ok=True)
    tmp = state.with_suffix(".tmp")
    tmp.write_text(json.dumps(base.to_json(), indent=2))
    tmp.replace(state)


def _build_offline(backend: SandboxBackend, *, script: Path, tag: str) -> None:
    if os.geteuid() != 0:
        raise SandboxError("the offline base image needs root (debootstrap); run as root or use --from IMAGE")
    with tempfile.TemporaryDirectory(prefix="taskforge-rootfs-", dir="/var/tmp") as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        with tarball.open("wb") as out:
            proc = subprocess.run(
                ["bash", str(script), OFFLINE_SUITE, debian_mirror()],
                stdout=out,
                stderr=subprocess.PIPE,
                text=False,
                check=False,
            )
        if proc.returncode != 0:
            last = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
            raise SandboxError(f"building the base root filesystem failed: {last[0]}", reason="image_build_failed")
        backend.import_image(
            tarball,
            tag=tag,
            changes=[
                "ENV LANG=C.UTF-8",
                "ENV PATH=/usr/local/bin:/usr/bin:/bin",
                f'LABEL taskforge.base.origin="debootstrap {OFFLINE_SUITE}"',
                'CMD ["/bin/sh"]',
            ],
        )


def _probe_python(backend: SandboxBackend, tag: str) -> tuple[str, str]:
    """``(major.minor, major.minor.micro)`` of the image's python3."""
    limits = SandboxLimits.load(memory_mb=512)
    with backend.start(tag, limits=limits) as box:
        result = box.exec(
            ["python3", "-c", "import sys; print('%d.%d %d.%d.%d' % (sys.version_info[:2] + sys.version_info[:3]))"],
            timeout_s=60,
        )
    if result.exit_code != 0:
        raise SandboxError(f"base image {tag} has no working python3: {result.text().strip()[:200]}")
    minor, full = result.stdout.decode().split()
    return minor, full


def current_base(backend: SandboxBackend) -> BaseImage:
    """The base image recorded by the last ``build_base``; it must still exist."""
    state = _state_file()
    if not state.is_file():
        raise SandboxError(
            "no base image yet; run `taskforge sandbox build-base` first", reason="base_image_missing"
        )
    base = BaseImage(**json.loads(state.read_text()))
    if not backend.image_exists(base.tag):
        raise SandboxError(
            f"base image {base.tag} is gone; run `taskforge sandbox build-base` again",
            reason="base_image_missing",
        )
    if not base.python_full:  # recorded before the full version was
        base = BaseImage(**{**base.to_json(), "python_full": _probe_python(backend, base.tag)[1]})
        _record(base)
    return base
