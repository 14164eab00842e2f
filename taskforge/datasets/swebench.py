"""What SWE-bench's harness (5.x) needs of an instance beyond SWE-bench's own fields.

swebench 5 has no table of repositories: ``run_evaluation`` builds each instance's test spec from
the instance itself (``swebench.harness.utils.make_test_spec``), so every instance carries

- ``image``: the image to run, with the repository at ``/testbed`` (the per-task image of
  :mod:`taskforge.mining.images`, ``taskforge export --images``);
- ``eval_script``: the bash script the harness runs in the container after applying the candidate
  patch (:func:`eval_script`);
- ``log_parser``: a name in ``swebench.harness.log_parsers.PARSER_REGISTRY`` (:data:`LOG_PARSER`);
- ``eval_type``: ``pass_and_fail`` (FAIL_TO_PASS must pass, and PASS_TO_PASS keep passing).

The eval script writes taskforge's test runner (:mod:`taskforge.datasets.evalrun`) and its config
into ``/tmp/taskforge-eval``, puts the hidden tests back (``prepare``), and between SWE-bench's
output markers runs FAIL_TO_PASS and PASS_TO_PASS as ``taskforge score`` does (``run``), which
prints ``PASSED <id>`` or ``FAILED <id>`` for each. The harness's verdict is then taskforge's
reward: resolved exactly when the reward is 1.

Test ids. The pytest parser splits a result line on whitespace and keeps the second field, so a
node id with whitespace in it (``test_tokenize[blank line]``) would never be found. An instance's
FAIL_TO_PASS and PASS_TO_PASS therefore hold *harness ids* (:func:`harness_id`): the node id with
each whitespace character written as a ``\\xNN`` (or ``\\uNNNN``) escape, which leaves every other
id as it is. Two tests of a task whose harness ids are equal could not be told apart, so the
export refuses such a task (:func:`harness_ids`).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from taskforge.errors import TaskforgeError

__all__ = ["EVAL_TYPE", "EVAL_WORKDIR", "LOG_PARSER", "TOOL_DIR", "eval_config", "eval_script", "harness_id",
           "harness_ids", "heredoc", "runner_source"]

LOG_PARSER = "parse_log_pytest"
"""swebench's plain pytest parser: a line ``STATUS <id>``, the id being the second field."""
EVAL_TYPE = "pass_and_fail"
EVAL_WORKDIR = "/testbed"
"""Where the harness applies the candidate patch (a link to /workspace in a task image)."""
TOOL_DIR = "/tmp/taskforge-eval"
"""Where the eval script writes the runner, its config, the plugins and the report."""
PLUGIN_MODULE = "taskforge_pytest_plugin"
GUARD_MODULE = "taskforge_pytest_guard"

# SWE-bench's markers (swebench.harness.constants); the harness parses what is between them, and
# records the exit status of the command just before the end marker.
_START = ">>>>> Start Test Output"
_END = ">>>>> End Test Output"


def harness_id(nodeid: str) -> str:
    """``nodeid`` with every whitespace character (as ``str.split`` sees it) escaped."""
    return "".join((f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}") if c.isspace() else c
                   for c in nodeid)


def harness_ids(instance_id: str, nodeids: Sequence[str]) -> dict[str, str]:
    """node id → harness id for one task's tests; raises ``TaskforgeError`` (reason
    ``harness_id_collision``) when two node ids get the same harness id."""
    ids: dict[str, str] = {}
    seen: dict[str, str] = {}
    for nodeid in nodeids:
        hid = harness_id(nodeid)
        if hid in seen and seen[hid] != nodeid:
            raise TaskforgeError(
                f"{instance_id}: tests {seen[hid]!r} and {nodeid!r} have the same SWE-bench id {hid!r} (its log parser "
                "splits on whitespace), so the harness could not tell them apart; leave the task out of the export",
                reason="harness_id_collision")
        seen[hid] = nodeid
        ids[nodeid] = hid
    return ids


def runner_source() -> str:
    return Path(__file__).with_name("evalrun.py").read_text(encoding="utf-8")


def _test_files(row: Mapping[str, Any]) -> list[str]:
    """Files the hidden tests live in or ``test_patch`` touches: put back before the run."""
    ids = [*row["FAIL_TO_PASS"], *row["PASS_TO_PASS"]]
    return sorted({nodeid.split("::", 1)[0] for nodeid in ids} | set(_patched_paths(row["test_patch"])))


def _patched_paths(patch: str) -> list[str]:
    """The paths a git patch touches (both sides of a rename)."""
    paths = []
    for line in patch.splitlines():
        if line.startswith(("--- a/", "+++ b/")):
            paths.append(line[6:].split("\t", 1)[0])
    return paths


def eval_config(row: Mapping[str, Any], *, workspace: str = EVAL_WORKDIR, reward_file: str | None = None) -> dict[str, Any]:
    """The runner's config for one task row (see :mod:`taskforge.datasets.evalrun`)."""
    from taskforge import guest

    select = [*row["FAIL_TO_PASS"], *row["PASS_TO_PASS"]]
    return {
        "workspace": workspace,
        "tool_dir": TOOL_DIR,
        "test_patch": row["test_patch"],
        "reset": _test_files(row),
        "select": select,
        "harness_ids": harness_ids(row["instance_id"], select),
        "plugin_module": PLUGIN_MODULE,
        "pytest_args": list(json.loads(row["environment"]).get("pytest_args") or []) if row.get("environment") else [],
        "guard_module": GUARD_MODULE,
        "programs": {f"{PLUGIN_MODULE}.py": guest.source("plugin"), f"{GUARD_MODULE}.py": guest.source("guard")},
        "reward_file": reward_file,
    }


def heredoc(path: str, text: str) -> str:
    """A shell command writing ``text`` to ``path`` verbatim (a quoted here-document)."""
    marker = "TASKFORGE_EOF"
    while marker in text:
        marker += "_"
    return f"cat > {path} <<'{marker}'\n{text}{'' if text.endswith(chr(10)) else chr(10)}{marker}\n"


def eval_script(row: Mapping[str, Any]) -> str:
    """The script SWE-bench's harness runs as ``/bin/bash /eval.sh`` in the task's container."""
    config = json.dumps(eval_config(row), indent=None, ensure_ascii=True)
    runner, conf = f"{TOOL_DIR}/evalrun.py", f"{TOOL_DIR}/config.json"
    run = f"python -I {shlex.quote(runner)} {shlex.quote(conf)}"
    return (
        "#!/bin/bash\n"
        "set -uo pipefail\n"
        f"rm -rf {TOOL_DIR} && mkdir -p {TOOL_DIR}\n"
        + heredoc(runner, runner_source())
        + heredoc(conf, config + "\n")
        + f"cd {EVAL_WORKDIR}\n"
        f"{run} prepare || echo 'taskforge: could not put the hidden tests back'\n"
        f"echo '{_START}'\n"
        f"{run} run\n"
        f"echo '{_END}'\n"
    )
