"""Harbor task folders (``taskforge export DIR --format harbor --out OUT``): one folder per task, in
the layout Harbor's ``Task`` loads (the format of Terminal-Bench, NeMo Gym and Repo2RLEnv)::

    OUT/INSTANCE_ID/
        instruction.md          the problem statement
        task.toml               timeouts; the verifier in its own container; what it collects
        environment/Dockerfile  FROM the task image (the start state at /testbed)
        solution/solve.sh       applies the gold patch (Harbor's oracle agent runs it)
        tests/test.sh           the verifier: taskforge's test run, which writes the reward

The verifier's files enter only at verification: Harbor copies ``tests/`` into the verifier's
container when it verifies, and the image holds neither the hidden tests nor the runner. Nothing
the agent can write counts as a reward: the verifier runs in a *separate* container, a fresh copy
of the environment (``[verifier] environment_mode = "separate"``); what crosses over from the
agent's container is one file, the agent's changes as a patch (a ``[[verifier.collect]]`` command
writes it, an artifact carries it), which the verifier applies to the start state as a candidate,
like any prediction. The test run then takes back changes to tests and configuration, puts the
hidden tests back, runs them as ``taskforge score`` does, and writes ``/logs/verifier/reward.txt``
last (after deleting any reward file there), ``1`` or ``0``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from taskforge.datasets.manifest import fsync_dir
from taskforge.datasets.swebench import EVAL_WORKDIR, TOOL_DIR, heredoc, eval_config, runner_source
from taskforge.errors import TaskforgeError

__all__ = ["CANDIDATE_ARTIFACT", "REWARD_FILE", "export_harbor", "harbor_task_files"]

REWARD_FILE = "/logs/verifier/reward.txt"
CANDIDATE_ARTIFACT = "taskforge-candidate.patch"
"""The agent's changes, as the collect command writes them (in /tmp) and Harbor carries them (under
/logs/artifacts in the verifier's container)."""
_COLLECT = (f"cd {EVAL_WORKDIR} && git add -A && git diff --cached --binary HEAD > /tmp/{CANDIDATE_ARTIFACT}; "
            f"test -f /tmp/{CANDIDATE_ARTIFACT} || : > /tmp/{CANDIDATE_ARTIFACT}")


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a TOML basic string


def _task_toml(row: Mapping[str, Any], *, agent_timeout_s: float, verifier_timeout_s: float) -> str:
    return f"""schema_version = "1.4"

[metadata]
instance_id = {_toml_string(row["instance_id"])}
repo = {_toml_string(row["repo"])}
source = {_toml_string(row["source"])}
base_commit = {_toml_string(row["base_commit"])}
strategy = {_toml_string(row["strategy"])}
exported_by = "taskforge"

[agent]
timeout_sec = {agent_timeout_s}

[verifier]
timeout_sec = {verifier_timeout_s}
environment_mode = "separate"

[[verifier.collect]]
command = {_toml_string(_COLLECT)}

[environment]
build_timeout_sec = 600.0
workdir = "{EVAL_WORKDIR}"

[[artifacts]]
source = "/tmp/{CANDIDATE_ARTIFACT}"
destination = "{CANDIDATE_ARTIFACT}"
"""


def _test_sh(row: Mapping[str, Any]) -> str:
    config = json.dumps(eval_config(row, reward_file=REWARD_FILE), ensure_ascii=True)
    runner, conf = f"{TOOL_DIR}/evalrun.py", f"{TOOL_DIR}/config.json"
    return (
        "#!/bin/bash\n"
        "# taskforge's verifier: the agent's patch on a fresh start state, the hidden tests put back\n"
        "# and run as `taskforge score` runs them; the reward is written last.\n"
        "set -uo pipefail\n"
        f"rm -f /logs/verifier/reward.txt /logs/verifier/reward.json\n"
        f"mkdir -p /logs/verifier && rm -rf {TOOL_DIR} && mkdir -p {TOOL_DIR}\n"
        + heredoc(runner, runner_source())
        + heredoc(conf, config + "\n")
        + f"cd {EVAL_WORKDIR}\n"
        f"candidate=/logs/artifacts/{CANDIDATE_ARTIFACT}\n"
        'if [ -s "$candidate" ] && ! git apply --whitespace=nowarn "$candidate"; then\n'
        "  echo 'taskforge: the agent patch does not apply'; echo 0 > /logs/verifier/reward.txt; exit 0\n"
        "fi\n"
        f"python -I {runner} {conf} prepare || {{ echo 0 > /logs/verifier/reward.txt; exit 0; }}\n"
        f"python -I {runner} {conf} run | tee /logs/verifier/test-output.txt\n"
        f'test -s {REWARD_FILE} || echo 0 > {REWARD_FILE}\n'
    )


def _solve_sh(row: Mapping[str, Any]) -> str:
    return ("#!/bin/bash\n# The gold patch: what removed the feature, put back.\nset -euo pipefail\n"
            f"cd {EVAL_WORKDIR}\n" + heredoc("/tmp/taskforge-gold.patch", row["patch"])
            + "git apply /tmp/taskforge-gold.patch\nrm -f /tmp/taskforge-gold.patch\n")


def harbor_task_files(row: Mapping[str, Any], *, image: str, agent_timeout_s: float = 1800.0,
                      verifier_timeout_s: float = 900.0) -> dict[str, str]:
    """Relative path → text of one task's Harbor folder."""
    return {
        "instruction.md": row["problem_statement"].rstrip("\n") + "\n",
        "task.toml": _task_toml(row, agent_timeout_s=agent_timeout_s, verifier_timeout_s=verifier_timeout_s),
        "environment/Dockerfile": f"FROM {image}\nWORKDIR {EVAL_WORKDIR}\n",
        "solution/solve.sh": _solve_sh(row),
        "tests/test.sh": _test_sh(row),
    }


def export_harbor(directory: Path, out: Path, *, images: Mapping[str, str] | None = None) -> int:
    """Write one Harbor task folder per task of ``directory`` into the new folder ``out``;
    ``images`` maps instance_id → its task image (without, the row's environment image, which
    holds no repository). Returns the number of tasks."""
    from taskforge.datasets.export import _rows_with_shard

    if out.exists():
        raise TaskforgeError(f"{out} already exists; export into a new folder", reason="output_exists")
    _, rows = _rows_with_shard(directory)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        for _, row in rows:
            image = (images or {}).get(row["instance_id"], row["image_name"])
            for rel, text in harbor_task_files(row, image=image).items():
                path = staging / row["instance_id"] / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
                path.chmod(0o755 if rel.endswith(".sh") else 0o644)
        for path in staging.rglob("*"):
            if path.is_file():
                with path.open("rb") as f:
                    os.fsync(f.fileno())
        staging.chmod(0o755)
        os.rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fsync_dir(out.parent)
    return len(rows)
