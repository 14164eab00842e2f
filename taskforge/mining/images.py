"""One image per task, for SWE-bench-style agents and harnesses: the start state on top of the
environment image, set up the way those harnesses run an image.

    FROM <the task's environment image>
    COPY --chown=10001:10001 start/ /workspace/     the start state: working tree and fresh .git
    USER root
    RUN ln -s /workspace /testbed; git config --system safe.directory for both; HOME=/root (0755)
    WORKDIR /testbed
    STOPSIGNAL SIGKILL

SWE-bench's harness (5.x) and mini-swe-agent run an image as root (``docker run IMAGE``, then
``docker exec`` commands) and work in ``/testbed``, so:

- ``/testbed`` is a link to ``/workspace``, where the start state is (the environment's ``.pth``
  points there, so the package imports from it, wherever it is reached from); the tree stays owned
  by the sandbox user (uid 10001), so it can be run as that user too;
- git trusts the repository for every user (``safe.directory``, system-wide), as the harness runs
  git as root in a tree root does not own;
- ``HOME`` is ``/root``, which exists, holds an empty ``.bashrc`` (mini-swe-agent points
  ``BASH_ENV`` at it) and is readable by the sandbox user too;
- ``STOPSIGNAL SIGKILL``: the harness keeps a container alive with ``tail -f /dev/null``, which
  ignores SIGTERM as PID 1, so stopping one would wait out Docker's grace period.

The tag is ``taskforge-task-REPO:DIGEST``, the digest of the id of the environment image it is
built FROM, the start state's commit, the instance id and the Dockerfile itself: the same task on
the same environment image always gets the same tag, a new recipe a new one, and an image already
there under that tag is reused (and audited again).

The audit. No layer may hold original code, so each image is audited as it is, from inside:

- the start state is fingerprinted and scanned on the host, as ``taskforge audit`` does;
- then the image itself is scanned in a hardened sandbox: every root an agent can read
  (``taskforge.mining.audit.scan.IMAGE_ROOTS``) and the image's /workspace and /tmp. A hardened sandbox
  mounts empty tmpfs over /workspace and /tmp, which hides what the image holds there, so the
  scan runs in a throwaway *view* of the image: ``FROM`` the task image, with its /workspace and
  /tmp copied (``cp -a``, inside the build, from the image's own layers) to ``/taskforge-audit``.
  Findings there are reported under their paths in the task image. The view is deleted after.

An image with any finding is deleted, and the export fails.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from taskforge.errors import TaskforgeError

if TYPE_CHECKING:
    from taskforge.mining.audit.fingerprint import Fingerprint
    from taskforge.mining.audit.scan import AuditResult
    from taskforge.mining.audit.vocabulary import Interfaces
    from taskforge.sandbox import SandboxBackend, SandboxLimits
    from taskforge.task import Task

    class ImageBackend(SandboxBackend, Protocol):
        """A sandbox backend that can also delete images (the Docker backend can)."""

        def remove_image(self, tag: str) -> None: ...

__all__ = ["AUDIT_VIEW", "HARNESS_WORKDIR", "TASK_WORKSPACE", "TaskImage", "build_task_image", "build_task_images", "task_image_tag"]

TASK_WORKSPACE = "/workspace"
"""Where the start state is in a task image (the environment's .pth points there)."""
AUDIT_VIEW = "/taskforge-audit"
"""Where the audit view copies the paths a hardened sandbox hides (outside every IMAGE_ROOT)."""
_HIDDEN_BY_TMPFS = ("/workspace", "/tmp")

HARNESS_WORKDIR = "/testbed"
"""Where SWE-bench-style harnesses look for the repository: a link to TASK_WORKSPACE."""
_TASK_DOCKERFILE = """\
FROM {env_image}
COPY --chown={user} start/ {workspace}/
USER root
RUN ln -s {workspace} {testbed} \\
 && git config --system --add safe.directory {workspace} \\
 && git config --system --add safe.directory {testbed} \\
 && mkdir -p /root && touch /root/.bashrc && chmod 0755 /root && chmod 0644 /root/.bashrc
ENV HOME=/root
WORKDIR {testbed}
STOPSIGNAL SIGKILL
"""
# RUN as root: the view copies what the image holds, whoever owns it.
_VIEW_DOCKERFILE = """\
FROM {task_image}
USER root
RUN mkdir -p {view} && {copies}
"""


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskImage:
    """One task's image, built (or found) and audited."""

    instance_id: str
    tag: str
    image_id: str
    built: bool
    """False when an image of that tag was already there (it was audited all the same)."""
    audit: AuditResult
    """The host scan of the start state and the scan of the image, together."""


def task_image_tag(task: Task, *, env_image_id: str, user: str | None = None) -> str:
    """``taskforge-task-REPO:DIGEST`` of the environment image's id (as built here: the image the
    task image is made FROM), ``base_commit``, instance id and the Dockerfile (whose tree owner is
    ``user``, by default the sandbox's)."""
    from taskforge.sandbox import SandboxLimits

    dockerfile = _dockerfile(task, user=user or SandboxLimits.load().user)
    digest = hashlib.sha256(
        f"{env_image_id}\0{task.base_commit}\0{task.instance_id}\0{dockerfile}".encode()).hexdigest()[:16]
    repo = re.sub(r"[^a-z0-9._-]+", "-", task.repo.lower()).strip("-._") or "repo"
    return f"taskforge-task-{repo}:{digest}"


def _dockerfile(task: Task, *, user: str) -> str:
    return _TASK_DOCKERFILE.format(env_image=task.image_name, user=user, workspace=TASK_WORKSPACE,
                                   testbed=HARNESS_WORKDIR)


def _view_paths(path: str) -> str:
    """The task image's path of a path in the view: /taskforge-audit/workspace/x → /workspace/x."""
    if path.startswith(AUDIT_VIEW + "/"):
        return path[len(AUDIT_VIEW):]
    return path


def _scan_in_image(tag: str, fingerprint_key: str, fingerprint: Fingerprint, *, backend: ImageBackend,
                   limits: SandboxLimits, interfaces: Interfaces) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from taskforge.mining.audit.scan import IMAGE_ROOTS, scan_image

    view = f"taskforge-audit-view-{tag.replace(':', '-').removeprefix('taskforge-task-')}:scan"
    copies = " && ".join(f"cp -a {p} {AUDIT_VIEW}{p}" for p in _HIDDEN_BY_TMPFS)
    with tempfile.TemporaryDirectory(prefix="taskforge-view-") as context:
        (Path(context) / "Dockerfile").write_text(_VIEW_DOCKERFILE.format(task_image=tag, view=AUDIT_VIEW, copies=copies))
        backend.build_image(Path(context), tag=view, labels={"taskforge.role": "audit-view"})
    try:
        # The fresh sandbox's own /tmp (a tmpfs) holds only the scanner; the image's /tmp is in the view.
        roots = [r for r in IMAGE_ROOTS if r != "/tmp"] + [AUDIT_VIEW]
        with backend.start(view, limits=limits, labels={"taskforge.role": "audit"}) as box:
            findings, totals = scan_image({fingerprint_key: fingerprint}, sandbox=box, roots=roots,
                                          interfaces=interfaces)
    finally:
        backend.remove_image(view)
    return [{**f, "path": _view_paths(str(f["path"]))} for f in findings[fingerprint_key]], totals


def build_task_image(task: Task, *, backend: ImageBackend, limits: SandboxLimits | None = None) -> TaskImage:
    """Build (or find) the task's image and audit it; raises ``TaskforgeError`` (reason
    ``image_audit_findings``) and deletes the image if the audit finds anything."""
    from taskforge.mining.audit.scan import AuditResult, audit_task_state
    from taskforge.mining.audit.vocabulary import task_interfaces
    from taskforge.repo.patches import apply_patch
    from taskforge.repo.sources import fetch
    from taskforge.repo.startstate import rebuild_start_state
    from taskforge.sandbox import SandboxLimits

    limits = limits or SandboxLimits.load()
    tag = task_image_tag(task, env_image_id=backend.image_id(task.image_name), user=limits.user)
    dockerfile = _dockerfile(task, user=limits.user)
    with tempfile.TemporaryDirectory(prefix="taskforge-image-") as tmp:
        context = Path(tmp)
        start = rebuild_start_state(task, context / "start")
        source = fetch(task.source)
        fingerprint, audit = audit_task_state(
            source_dir=source.path, start_dir=start.path, start_changes=apply_patch(source.path, {}, task.removal_patch),
            strategy=task.strategy, test_ids=task.FAIL_TO_PASS,
            interfaces=task_interfaces(task),
        )
        if fingerprint.empty:
            raise TaskforgeError(f"{task.instance_id}: its removed code has nothing distinctive to search for, so no "
                                 "audit can vouch for an image of it", reason="audit_empty_fingerprint")
        built = not backend.image_exists(tag)
        if built:
            (context / "Dockerfile").write_text(dockerfile)
            backend.build_image(context, tag=tag, labels={
                "taskforge.role": "task", "taskforge.instance_id": task.instance_id,
                "taskforge.base_commit": task.base_commit, "taskforge.env_image": task.image_name,
            })
    findings, totals = _scan_in_image(tag, task.instance_id, fingerprint, backend=backend, limits=limits,
                                      interfaces=task_interfaces(task))
    combined = AuditResult(
        findings=audit.findings + findings, fingerprint=audit.fingerprint, files=audit.files + int(totals["files"]),
        bytes=audit.bytes + int(totals["bytes"]), seconds=audit.seconds + float(totals["seconds"]),
        image_scanned=True,
    )
    if not combined.clean:
        backend.remove_image(tag)
        shown = "; ".join(f"{f['kind']} {f['match']} in {f['path']}" for f in combined.findings[:5])
        raise TaskforgeError(f"the image of {task.instance_id} holds remnants of the removed code: {shown}",
                             reason="image_audit_findings")
    return TaskImage(instance_id=task.instance_id, tag=tag, image_id=backend.image_id(tag), built=built, audit=combined)


def build_task_images(
    directory: Path, *, backend: ImageBackend, limits: SandboxLimits | None = None,
    on_image: Callable[[TaskImage], None] | None = None, only: Sequence[str] | None = None,
) -> list[TaskImage]:
    """:func:`build_task_image` for every task of the folder (or those in ``only``), in order;
    the first failure raises."""
    from taskforge.datasets.reader import read_tasks

    images = []
    for task in read_tasks(directory):
        if only is not None and task.instance_id not in only:
            continue
        image = build_task_image(task, backend=backend, limits=limits)
        images.append(image)
        if on_image is not None:
            on_image(image)
    return images
