"""taskforge's test run for other harnesses: runs in the task's container, stdlib only.

SWE-bench's eval script and Harbor's verifier (``taskforge.datasets.swebench``,
``taskforge.datasets.harbor``) write this file and a JSON config into the container and call it
with the image's interpreter, in isolated mode (``python -I``: the workspace, ``PYTHONPATH`` and the
user's site cannot shadow it)::

    python -I evalrun.py CONFIG.json prepare     # put the hidden tests back over the candidate's tree
    python -I evalrun.py CONFIG.json run         # run them as taskforge scores; print the verdict

``prepare`` records the files the candidate changed (for the guard), takes back the candidate's
changes to the test files the task runs or hides, to ``conftest.py`` files and to pytest's
configuration files (back to the start state's commit, or deleted when new), and applies
``test_patch``.

``run`` runs FAIL_TO_PASS and PASS_TO_PASS the way ``taskforge score`` does: ``python -P -m pytest``
with plugin autoloading off and the image's own pytest plugins named with ``-p``, taskforge's
report plugin (``TASKFORGE_SELECT`` picks the tests, the JUnit report carries a nonce new to the
run) and the scoring guard. The verdict follows the scorer's: every expected test must be reported
``passed``; a report without the nonce or the guard's mark, a finding of the guard, or pytest
exiting 0 without every expected test passing is tampering, and fails every test; an exit code
that disagrees with an all-passed report fails them too. It prints one line per expected test,
``PASSED <id>`` or ``FAILED <id>`` with the test's id as the config's ``harness_ids`` give it (the
form SWE-bench's pytest log parser reads: no whitespace inside an id), then pytest's own output,
each line behind ``pytest| `` so that no parser takes it for a result. With ``reward_file`` in the
config it writes the reward (``1`` or ``0``) there, last. It exits 0 exactly when the reward is 1.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import xml.etree.ElementTree as ET

CONFIG_NAMES = ("pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini", "setup.cfg", "pyproject.toml")
"""The files pytest reads its configuration from: put back to the start state before the run."""


def _git(workspace, *args, check=True):  # type: ignore[no-untyped-def]
    return subprocess.run(["git", *args], cwd=workspace, capture_output=True, text=True, check=check)


def _changed(workspace):  # type: ignore[no-untyped-def]
    """Paths (relative) the candidate changed, added or deleted since the start state's commit."""
    out = _git(workspace, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames").stdout
    return sorted({entry[3:] for entry in out.split("\0") if len(entry) > 3})


def _restore(workspace, rel):  # type: ignore[no-untyped-def]
    """``rel`` as the start state's commit has it: checked out, or removed where it has none."""
    if _git(workspace, "cat-file", "-e", f"HEAD:{rel}", check=False).returncode == 0:
        _git(workspace, "checkout", "HEAD", "--", rel)
    elif os.path.lexists(os.path.join(workspace, rel)):
        os.unlink(os.path.join(workspace, rel))


def prepare(config):  # type: ignore[no-untyped-def]
    workspace, tool_dir = config["workspace"], config["tool_dir"]
    changed = _changed(workspace)
    real = os.path.realpath(workspace)
    with open(os.path.join(tool_dir, "candidate.json"), "w", encoding="utf-8") as f:
        json.dump([os.path.join(real, rel) for rel in changed], f)
    protected = set(config["reset"])
    for rel in changed:
        name = rel.rsplit("/", 1)[-1]
        if rel in protected or name == "conftest.py" or name in CONFIG_NAMES:
            _restore(workspace, rel)
    for rel in sorted(protected):
        _restore(workspace, rel)
    patch = os.path.join(tool_dir, "test.patch")
    with open(patch, "w", encoding="utf-8") as f:
        f.write(config["test_patch"])
    applied = _git(workspace, "apply", "--whitespace=nowarn", patch, check=False)
    if applied.returncode != 0:
        print(f"taskforge: the hidden tests do not apply: {applied.stderr.strip()}")
        return 1
    return 0


def _plugins():  # type: ignore[no-untyped-def]
    from importlib import metadata

    return sorted({(ep.name, ep.module) for ep in metadata.entry_points(group="pytest11")})


def _outcomes(root):  # type: ignore[no-untyped-def]
    """node id → outcome from the JUnit report (as ``taskforge.repo.junit`` reads it), and the
    suite properties."""
    severity = {"passed": 0, "xpassed": 1, "skipped": 1, "xfailed": 1, "failed": 2, "error": 3}
    outcomes, properties = {}, []
    suites = root.findall("testsuite") if root.tag == "testsuites" else [root]
    for suite in suites:
        properties += [(p.get("name", ""), p.get("value", "")) for p in suite.findall("properties/property")]
        for case in suite.findall("testcase"):
            props = {p.get("name", ""): p.get("value", "") for p in case.findall("properties/property")}
            nodeid = props.get("taskforge.nodeid")
            if nodeid is None:
                continue
            if case.find("error") is not None:
                outcome = "error"
            elif case.find("failure") is not None:
                outcome = "failed"
            elif case.find("skipped") is not None:
                outcome = "xfailed" if case.find("skipped").get("type") == "pytest.xfail" else "skipped"
            else:
                outcome = "xpassed" if props.get("taskforge.outcome") == "xpassed" else "passed"
            earlier = outcomes.get(nodeid)
            if earlier is None or severity[outcome] > severity[earlier]:
                outcomes[nodeid] = outcome
    return outcomes, properties


def run(config):  # type: ignore[no-untyped-def]
    workspace, tool_dir = config["workspace"], config["tool_dir"]
    for name, text in config["programs"].items():
        with open(os.path.join(tool_dir, name), "w", encoding="utf-8") as f:
            f.write(text)
    select = list(config["select"])
    select_file, report = os.path.join(tool_dir, "select.json"), os.path.join(tool_dir, "report.xml")
    with open(select_file, "w", encoding="utf-8") as f:
        json.dump(select, f)
    if os.path.exists(report):
        os.unlink(report)
    candidate = os.path.join(tool_dir, "candidate.json")
    # The environment's own arguments (``--no-cov``, ``-p no:randomly``, a plugin that does not fit
    # this pytest switched off), and the image's plugins by module, but those it switches off.
    pytest_args = list(config.get("pytest_args") or [])
    off = {arg[3:] for flag, arg in zip(pytest_args, pytest_args[1:]) if flag == "-p" and arg.startswith("no:")}
    plugins = [module for name, module in _plugins() if name not in off and module not in off]
    nonce = secrets.token_hex(16)
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONPATH": tool_dir, "PYTHONDONTWRITEBYTECODE": "1",
           "TASKFORGE_NONCE": nonce, "TASKFORGE_SELECT": select_file,
           "TASKFORGE_GUARD_CANDIDATE": open(candidate, encoding="utf-8").read() if os.path.exists(candidate) else "[]",
           "TASKFORGE_GUARD_TRUSTED": json.dumps(plugins), "TASKFORGE_GUARD_START": workspace}
    files = sorted({nodeid.split("::", 1)[0] for nodeid in select})
    args = ["-p", "no:cacheprovider", "-p", config["plugin_module"], f"--junitxml={report}", "-o", "junit_family=xunit1",
            "-q", "-rN", "--continue-on-collection-errors", "--tb=line", "-p", config["guard_module"],
            *(arg for plugin in plugins for arg in ("-p", plugin)), *pytest_args,
            *(f for f in files if os.path.exists(os.path.join(workspace, f)))]
    proc = subprocess.run([sys.executable, "-P", "-m", "pytest", *args], cwd=workspace, env=env,
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=config.get("timeout_s"))
    outcomes, properties, tampering = {}, [], []
    try:
        with open(report, "rb") as f:
            outcomes, properties = _outcomes(ET.fromstring(f.read()))
    except (OSError, ET.ParseError):
        pass  # no results: every expected test is missing, so the reward is 0 (and exit 0 is tampering)
    has_report = os.path.exists(report)
    expected = {nodeid: outcomes.get(nodeid, "missing") for nodeid in select}
    all_passed = all(o == "passed" for o in expected.values())
    tampering += [value for name, value in properties if name == "taskforge.tampered"]
    if has_report and ("taskforge.nonce", nonce) not in properties:
        tampering.append("report: not this run's (no nonce)")
    if has_report and ("taskforge.guard", "1") not in properties:
        tampering.append("report: the scoring guard did not see the session end")
    if proc.returncode == 0 and not all_passed:
        tampering.append("exit: pytest exited 0 without every expected test passing")
    reward = 1 if all_passed and not tampering and proc.returncode == 0 else 0
    ids = config["harness_ids"]
    for nodeid in select:
        print(f"{'PASSED' if reward and expected[nodeid] == 'passed' else 'FAILED'} {ids.get(nodeid, nodeid)}")
    for finding in tampering:
        print(f"taskforge: tampered: {finding}")
    if all_passed and not tampering and proc.returncode != 0:
        print(f"taskforge: every expected test passed, but pytest exited {proc.returncode}: the reward is 0")
    print(f"taskforge: pytest exited {proc.returncode}; reward {reward}")
    for line in proc.stdout.decode("utf-8", "replace").splitlines():
        print(f"pytest| {line}")
    with open(os.path.join(tool_dir, "outcomes.json"), "w", encoding="utf-8") as f:
        json.dump({"reward": reward, "outcomes": expected, "tampering": tampering, "exit_code": proc.returncode}, f)
    if config.get("reward_file"):
        with open(config["reward_file"], "w", encoding="utf-8") as f:
            f.write(f"{reward}\n")
    return 0 if reward else 1


def main(argv):  # type: ignore[no-untyped-def]
    with open(argv[1], encoding="utf-8") as f:
        config = json.load(f)
    sys.stdout.flush()
    return {"prepare": prepare, "run": run}[argv[2]](config)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
