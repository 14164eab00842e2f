"""Per-task images (``taskforge export --images``) on the real sample tasks: the start state at
/workspace on the environment image, ready for a SWE-bench-style harness, and audited from
inside; an image that holds removed code anywhere an agent can read, /workspace and /tmp
included (which a hardened sandbox hides under tmpfs), fails the export and is deleted."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from taskforge.cli import main
from taskforge.datasets import (
    read_manifest,
    read_tasks,
)
from taskforge.errors import TaskforgeError
from taskforge.mining.images import build_task_image, task_image_tag

pytestmark = pytest.mark.docker



@pytest.fixture(scope="module")
def folder(local_sample, backend):  # type: ignore[no-untyped-def]
    """The sample, with image_name pointing at the environment image as this machine builds it."""
    out, env = local_sample
    tasks = read_tasks(out)
    tags = [task_image_tag(t, env_image_id=backend.image_id(env.image)) for t in tasks]
    there_before = {tag for tag in tags if backend.image_exists(tag)}
    yield out, env
    for tag in set(tags) - there_before:  # the images this module built
        backend.remove_image(tag)


def _docker_run(backend, image: str, script: str) -> str:  # type: ignore[no-untyped-def]
    """Run ``script`` in a plain container of ``image``, as a SWE-bench-style harness would."""
    output = backend.client.containers.run(image, ["sh", "-c", script], remove=True, network_disabled=True)
    return output.decode()


def test_export_with_images_names_audited_per_task_images(folder, backend, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    directory, _ = folder
    tasks = read_tasks(directory)
    out = tmp_path / "instances.jsonl"
    result = CliRunner().invoke(main, ["export", str(directory), "--format", "swebench", "--out", str(out), "--images"])
    assert result.exit_code == 0, result.output
    instances = [json.loads(line) for line in out.read_text().splitlines()]
    assert [i["image_name"] for i in instances] == [
        task_image_tag(t, env_image_id=backend.image_id(t.image_name)) for t in tasks]
    for task, instance in zip(tasks, instances, strict=True):
        image = instance["image_name"]
        assert backend.image_labels(image)["taskforge.instance_id"] == task.instance_id
        # A harness runs the image as it is, as root in /testbed (SWE-bench 5, mini-swe-agent): the
        # start state is there, at the task's one commit, clean, git trusts it, HOME exists, and
        # the package imports from there. The sandbox user can use it too.
        report = _docker_run(backend, image, "id -u; pwd; cd /testbed; git log --format=%H; git status --porcelain | wc -l; "
                                             "git rev-list --all | wc -l; python -c 'import iniconfig; print(iniconfig.__file__)'; "
                                             "test -d $HOME && test -f $HOME/.bashrc && echo home-ok; "
                                             "su -s /bin/sh sandbox -c 'cd /testbed && git status --porcelain | wc -l; "
                                             "test -r /root/.bashrc && echo home-readable'")
        uid, cwd, commit, dirty, commits, module, home, sandbox_dirty, readable = report.split()
        # Docker resolves the WORKDIR link: the shell starts in /workspace, which /testbed is.
        assert (uid, cwd, commit, dirty, commits) == ("0", "/workspace", task.base_commit, "0", "1")
        assert module.startswith("/workspace/") or module.startswith("/testbed/")
        assert (home, sandbox_dirty, readable) == ("home-ok", "0", "home-readable")
        config = backend.client.images.get(image).attrs["Config"]
        assert (config["User"] in ("", "root", "0"), config["WorkingDir"], config.get("StopSignal")) == (
            True, "/testbed", "SIGKILL")
    # The hidden tests fail at the start state (+ test_patch) and pass with the gold patch, run
    # in the image as an agent's harness would: in /testbed, as root.
    task = tasks[0]
    ids = " ".join(f"'{t}'" for t in task.FAIL_TO_PASS)
    script = ("git apply - <<'EOF'\n" + task.test_patch + "EOF\n"
              f"python -m pytest -q -p no:cacheprovider {ids} >/dev/null; echo $?; git apply - <<'EOF'\n"
              + task.patch + f"EOF\npython -m pytest -q -p no:cacheprovider {ids} >/dev/null; echo $?")
    start, gold = _docker_run(backend, instances[0]["image_name"], script).split()
    assert start in ("1", "2") and gold == "0"  # 1: tests failed; 2: their module no longer imports


@pytest.mark.parametrize("where", ["/opt/vendor/leak.py", "/workspace/.cache/leak.py", "/tmp/leak.py"])
def test_an_image_with_removed_code_fails_the_audit_and_is_deleted(folder, backend, tmp_path: Path, where: str) -> None:  # type: ignore[no-untyped-def]
    directory, env = folder
    task = read_tasks(directory)[0]
    removed_code = "".join(line[1:] + "\n" for line in task.patch.splitlines()
                           if line.startswith("+") and not line.startswith("+++"))
    context = tmp_path / "leaky"
    context.mkdir()
    (context / "leak.py").write_text(removed_code)
    (context / "Dockerfile").write_text(f"FROM {env.image}\nCOPY leak.py {where}\n")
    leaky_env = f"taskforge-test-leaky-env:{where.strip('/').replace('/', '-').replace('.', '-')}"
    backend.build_image(context, tag=leaky_env, labels={"taskforge.role": "test"})
    leaky = replace(task, image_name=leaky_env)
    try:
        with pytest.raises(TaskforgeError, match=f"holds remnants of the removed code: .* in {where}") as err:
            build_task_image(leaky, backend=backend)
        assert err.value.reason == "image_audit_findings"
        assert not backend.image_exists(task_image_tag(leaky, env_image_id=backend.image_id(leaky_env)))
        assert not [t for img in backend.client.images.list() for t in img.tags if t.startswith("taskforge-audit-view")]
    finally:
        backend.remove_image(leaky_env)


def test_audit_command_rewrites_shards_through_the_manifest(folder, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    directory, _ = folder
    copy = tmp_path / "copy"
    shutil.copytree(directory, copy)
    before = read_manifest(copy)
    result = CliRunner().invoke(main, ["audit", str(copy)])
    assert result.exit_code == 0, result.output
    after = read_manifest(copy)
    assert len(after.runs) == len(before.runs) + 1
    assert [s.name for s in after.shards] == [s.name for s in before.shards]
    assert [s.sha256 for s in after.shards] != [s.sha256 for s in before.shards]  # fresh audit timings
    audited = read_tasks(copy)
    assert all(json.loads(t.audit)["clean"] and json.loads(t.audit)["image_scanned"] for t in audited)
    assert [replace(t, audit="") for t in audited] == [replace(t, audit="") for t in read_tasks(directory)]
