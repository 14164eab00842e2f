"""The harnesses people already use run taskforge's exports unmodified, installed for real from the
package index (tests/integration/harnesses.py): SWE-bench's harness (5.x), mini-swe-agent (2.x)
and Harbor's task loader. Only the model mini-swe-agent talks to is faked: a scripted loopback
OpenAI-compatible server, an outside service.

The tasks come from three corpus projects (iniconfig, whose tests have ids with spaces, portion
and configobj); their images are built and audited by ``taskforge export --images``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from taskforge.datasets import read_tasks
from taskforge.datasets.harbor import CANDIDATE_ARTIFACT
from tests.integration.harnesses import CORPUS, broken_patch, corpus_tasks, tool_env, tool_venv

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _taskforge(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "taskforge.cli", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def exported(tmp_path_factory, backend, base_image, session_cache) -> Iterator[tuple[Path, Path]]:  # type: ignore[no-untyped-def]
    """The corpus tasks (a task folder) and their SWE-bench export with per-task images (a folder
    with a test split)."""
    root = tmp_path_factory.mktemp("harnesses")
    tasks = corpus_tasks(root / "tasks", backend=backend, base_image=base_image)
    before = {tag for image in backend.client.images.list() for tag in image.tags}
    _taskforge("export", str(tasks), "--format", "swebench", "--out", str(root / "swebench"), "--images")
    yield tasks, root / "swebench"
    for instance in _instances(root / "swebench"):
        if instance["image"] not in before:
            backend.remove_image(instance["image"])


def _instances(folder: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in (folder / "test.jsonl").read_text().splitlines()]


def _swebench(folder: Path, predictions: str, run_id: str, cwd: Path) -> dict[str, bool]:
    """Run swebench's harness as its README says; instance id → resolved."""
    venv = tool_venv("swebench")
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "swebench.harness.run_evaluation", "--dataset_name", str(folder),
         "--split", "test", "--predictions_path", predictions, "--run_id", run_id, "--max_workers", "2",
         "--timeout", "900"],
        cwd=cwd, env=tool_env(venv), capture_output=True, text=True, timeout=3600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    reports = list(cwd.glob(f"*.{run_id}.json"))
    assert len(reports) == 1, proc.stdout[-3000:]
    report = json.loads(reports[0].read_text())
    assert not report["error_ids"], (report, proc.stdout[-3000:])
    return {i["instance_id"]: i["instance_id"] in report["resolved_ids"] for i in _instances(folder)}


def test_swebench_harness_resolves_gold_and_agrees_with_taskforge_on_gold_empty_and_broken(  # type: ignore[no-untyped-def]
        exported, tmp_path: Path) -> None:
    tasks_dir, folder = exported
    tasks = read_tasks(tasks_dir)
    assert {t.repo for t in tasks} == set(CORPUS) and len(tasks) >= 3
    assert any(" " in t for task in tasks for t in task.FAIL_TO_PASS + task.PASS_TO_PASS)  # ids the parser must read
    preds = {
        "empty": [{"instance_id": t.instance_id, "model_patch": "", "model_name_or_path": "empty"} for t in tasks],
        "broken": [{"instance_id": t.instance_id, "model_patch": broken_patch(t.patch), "model_name_or_path": "broken"}
                   for t in tasks],
    }
    harness: dict[tuple[str, str], bool] = {}
    gold = _swebench(folder, "gold", "gold", tmp_path)
    assert gold == {t.instance_id: True for t in tasks}  # 100% of gold resolves
    harness.update({(i, "gold"): r for i, r in gold.items()})
    for name, rows in preds.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        harness.update({(i, name): r for i, r in _swebench(folder, str(path), name, tmp_path).items()})

    # taskforge's own reward for the same candidates.
    scored = tmp_path / "preds.jsonl"
    scored.write_text("".join(json.dumps(r) + "\n" for rows in preds.values() for r in rows))
    _taskforge("score", "--tasks", str(tasks_dir), "--predictions", str(scored), "--gold", "--empty",
               "--out", str(tmp_path / "rewards"))
    from taskforge.datasets import read_rows

    rewards = {(r["instance_id"], r["candidate_id"]): r["reward"] for r in read_rows(tmp_path / "rewards")}
    assert set(rewards) == set(harness)
    assert {k: v == 1.0 for k, v in rewards.items()} == harness
    assert sorted(harness.values()).count(True) == len(tasks)  # gold resolves; empty and broken do not


class _ScriptedModel:
    """An OpenAI-compatible chat endpoint on loopback that plays a model solving each task with
    its gold patch: first a bash call that applies it and writes ``patch.txt``, then the submit
    command mini-swe-agent's SWE-bench config asks for. It finds the task by its problem statement."""

    def __init__(self, tasks) -> None:  # type: ignore[no-untyped-def]
        import http.server
        import threading

        self.tasks = tasks
        self.requests = 0
        scripted = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                scripted.requests += 1
                reply = json.dumps(scripted.reply(body["messages"])).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def reply(self, messages: list[dict]) -> dict:  # type: ignore[type-arg]
        text = "\n".join(m["content"] if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
                         for m in messages if m["role"] == "user")
        task = next(t for t in self.tasks if t.problem_statement.strip() in text)
        if not any(m["role"] == "tool" for m in messages):
            command = ("cd /testbed && git apply - <<'TASKFORGE_GOLD'\n" + task.patch + "TASKFORGE_GOLD\n"
                       "git diff > patch.txt && git status --short")
            thought = "I will restore the feature, then write the patch file."
        else:
            command = "cd /testbed && echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt"
            thought = "The patch is ready; submitting it."
        call = {"id": f"call_{self.requests}", "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": command})}}
        return {"id": f"chatcmpl-{self.requests}", "object": "chat.completion", "created": 0, "model": "scripted",
                "choices": [{"index": 0, "finish_reason": "tool_calls",
                             "message": {"role": "assistant", "content": thought, "tool_calls": [call]}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_mini_swe_agent_with_a_scripted_model_makes_predictions_taskforge_scores_1(  # type: ignore[no-untyped-def]
        exported, tmp_path: Path) -> None:
    tasks_dir, folder = exported
    tasks = read_tasks(tasks_dir)
    venv = tool_venv("mini-swe-agent")
    model = _ScriptedModel(tasks)
    out = tmp_path / "mini"
    try:
        # The README's command, with the model pointed at the scripted endpoint.
        proc = subprocess.run(
            [str(venv / "bin" / "mini-extra"), "swebench", "--subset", str(folder), "--split", "test",
             "--output", str(out), "--workers", "2", "--model", "openai/scripted",
             "-c", "swebench.yaml", "-c", f"model.model_kwargs.api_base={model.url}",
             "-c", "model.model_kwargs.api_key=none"],
            cwd=tmp_path, capture_output=True, text=True, timeout=1800, check=False,
            env=tool_env(venv, MSWEA_CONFIGURED="true", MSWEA_SILENT_STARTUP="1", MSWEA_COST_TRACKING="ignore_errors",
                         MSWEA_GLOBAL_CONFIG_DIR=str(tmp_path / "mini-config")))
    finally:
        model.close()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    preds = json.loads((out / "preds.json").read_text())
    assert set(preds) == {t.instance_id for t in tasks}, (out / "minisweagent.log").read_text()[-3000:]
    for task in tasks:
        traj = json.loads((out / task.instance_id / f"{task.instance_id}.traj.json").read_text())
        assert traj["info"]["exit_status"] == "Submitted", traj["info"]
        assert preds[task.instance_id]["model_patch"].startswith("diff --git")
    # preds.json as mini-swe-agent wrote it: a dict keyed by instance id.
    _taskforge("score", "--tasks", str(tasks_dir), "--predictions", str(out / "preds.json"),
               "--out", str(tmp_path / "rewards"))
    from taskforge.datasets import read_rows

    rows = read_rows(tmp_path / "rewards")
    assert {(r["instance_id"], r["candidate_id"], r["reward"], r["status"]) for r in rows} == {
        (t.instance_id, "openai/scripted", 1.0, "ok") for t in tasks}


_HARBOR_LOAD = """
import json, sys, typing
if not hasattr(typing, "override"):  # harbor declares Python >= 3.12; on 3.11 only this name is missing
    import typing_extensions
    typing.override = typing_extensions.override
from pathlib import Path
from harbor.models.task.task import Task
out = {}
for d in sorted(Path(sys.argv[1]).iterdir()):
    t = Task(d)
    out[d.name] = {"valid": Task.is_valid_dir(d), "instruction": t.instruction,
                   "mode": t.config.verifier.environment_mode.value,
                   "collect": [c.command for c in t.config.verifier.collect],
                   "artifacts": [[a.source, a.destination] for a in t.config.artifacts],
                   "test": str(t.paths.discovered_test_path_for(t.config.environment.os)),
                   "solve": str(t.paths.discovered_solve_path)}
print(json.dumps(out))
"""


def _harbor_verify(backend, image: str, task_dir: Path, candidate: str) -> str:  # type: ignore[no-untyped-def]
    """What Harbor's separate verifier does with the folder: a fresh container of the environment,
    the collected patch under /logs/artifacts, tests/ copied to /tests, ``bash /tests/test.sh``;
    returns /logs/verifier/reward.txt."""
    import io
    import tarfile

    box = backend.client.containers.run(image, ["sleep", "600"], detach=True, network_disabled=True)
    try:
        data = io.BytesIO()
        with tarfile.open(fileobj=data, mode="w") as tar:
            for rel, text in {f"logs/artifacts/{CANDIDATE_ARTIFACT}": candidate,
                              "tests/test.sh": (task_dir / "tests" / "test.sh").read_text(),
                              # an agent's forged reward, left where the verifier writes its own
                              "logs/verifier/reward.txt": "1\n"}.items():
                blob = text.encode()
                info = tarfile.TarInfo(rel)
                info.size, info.mode = len(blob), 0o755
                tar.addfile(info, io.BytesIO(blob))
        box.put_archive("/", data.getvalue())
        code, output = box.exec_run(["bash", "/tests/test.sh"], workdir="/testbed")
        code, reward = box.exec_run(["cat", "/logs/verifier/reward.txt"])
        return reward.decode().strip()
    finally:
        box.remove(force=True)


def test_harbor_loads_the_export_and_its_verifier_pays_gold_only(exported, backend, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    tasks_dir, folder = exported
    tasks = read_tasks(tasks_dir)
    images = {i["instance_id"]: i["image"] for i in _instances(folder)}
    out = tmp_path / "harbor"
    from taskforge.datasets.harbor import export_harbor

    assert export_harbor(tasks_dir, out, images=images) == len(tasks)
    venv = tool_venv("harbor")
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", _HARBOR_LOAD, str(out)], capture_output=True, text=True,
                          env=tool_env(venv), timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = json.loads(proc.stdout)
    assert set(loaded) == {t.instance_id for t in tasks}
    for task in tasks:
        entry = loaded[task.instance_id]
        assert entry["valid"] and entry["instruction"].strip() == task.problem_statement.strip()
        assert entry["mode"] == "separate"  # the verifier never runs where the agent wrote
        assert entry["artifacts"] == [[f"/tmp/{CANDIDATE_ARTIFACT}", CANDIDATE_ARTIFACT]]
        assert entry["test"].endswith("tests/test.sh") and entry["solve"].endswith("solution/solve.sh")
        # The image holds neither the runner nor the hidden tests; they arrive with tests/.
        assert "evalrun" not in (out / task.instance_id / "environment" / "Dockerfile").read_text()
    task = tasks[0]
    image = images[task.instance_id]
    assert _harbor_verify(backend, image, out / task.instance_id, task.patch) == "1"
    assert _harbor_verify(backend, image, out / task.instance_id, "") == "0"  # the forged "1" did not count
