"""Runs inside the sandbox: put the workspace in a given state, run pytest, report back.

Standalone (stdlib only): it is copied into the sandbox as ``/tmp/taskforge/driver.py`` and run
as one exec per test run, which keeps a run to a single round trip:

    python /tmp/taskforge/driver.py '<json request>' < changed-files.tar

A request may ask for the same run several times (one nonce each, ``nonces``): the repeats
share the exec, and each starts from a fresh reset, with every process of the one before killed.

The request says:
- ``reset``: restore /workspace to its committed state (``git reset --hard``, ``git clean -fdx``)
  and empty /tmp but for /tmp/taskforge, so that no run sees another's leftovers;
- ``delete``: repo-relative paths to remove after the reset; stdin is a tar of files to write;
- ``args``: pytest arguments; ``env``: extra environment for pytest; ``python_args``: interpreter
  options before ``-m pytest`` (the scorer's ``-P``);
- ``select``: node ids to run: only their files are collected, and the taskforge plugin
  deselects the rest of those files' tests;
- ``coverage``: directories to measure, per test;
- ``imports``: modules to import first (before the first run), in one fresh interpreter; those
  that fail are reported;
- ``pytest``: false to skip pytest (an import check alone);
- ``nonces``: one per run; each run's JUnit report must carry its own;
- ``bytecode_cache``: false for a container that serves one run (the scorer's): then the image's
  own precompiled bytecode is used and nothing is written, instead of compiling everything again
  into the cache below.

It prints a JSON list with one object per run: pytest's exit code, the tail of its output, the
JUnit report, the resource limits the run ran into and, if asked, the coverage map and the modules
that failed to import. Then it kills every other process of the sandbox user (``kill(-1)``, which
spares PID 1 and the caller), so nothing a test started outlives the run: the same reap the
sandbox layer does after an exec, done here to save an exec per run. pytest's own output goes to
a file, so a chatty suite cannot flood the channel that carries the report.
"""

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time

WORKSPACE = "/workspace"
TOOL_DIR = "/tmp/taskforge"
REPORT = TOOL_DIR + "/report.xml"
COVERAGE = TOOL_DIR + "/coverage.json"
SELECT = TOOL_DIR + "/select.json"
OUTPUT = TOOL_DIR + "/output.txt"
# Bytecode (and pytest's rewritten test modules) outlive the reset here, so a warm container
# compiles each source file once instead of once per run. Python and pytest reuse a cached file
# only while the source's mtime (whole seconds) and size match; every file this driver writes gets
# a fresh mtime from a counter in 2001, a time git never stamps, so a changed file can never be
# mistaken for an earlier version of the same size.
PYCACHE = TOOL_DIR + "/pycache"
MTIME_COUNTER = TOOL_DIR + "/mtime"
_MTIME_BASE = 1_000_000_000


def _reset() -> None:
    subprocess.run(["git", "reset", "-q", "--hard", "HEAD"], cwd=WORKSPACE, check=True)
    subprocess.run(["git", "clean", "-q", "-f", "-d", "-x"], cwd=WORKSPACE, check=True)
    for scratch in ("/tmp", "/dev/shm"):
        for name in os.listdir(scratch):
            path = os.path.join(scratch, name)
            if path == TOOL_DIR:
                continue
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
    os.makedirs("/tmp/home", exist_ok=True)


_IMPORT_ALL = """
import importlib, json, sys
errors = {}
for module in json.loads(sys.argv[1]):
    try:
        importlib.import_module(module)
    except BaseException as err:  # any failure at import is what this check reports
        errors[module] = ("%s: %s" % (type(err).__name__, err))[:300]
print(json.dumps(errors))
"""


def _import_errors(modules, env):  # type: ignore[no-untyped-def]
    """Import every module in one fresh interpreter; the ones that fail, with their error."""
    if not modules:
        return {}
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL, json.dumps(modules)],
        cwd=WORKSPACE,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        lines = (proc.stderr.strip() or "exit %d" % proc.returncode).splitlines()
        return {"<interpreter>": lines[-1][:300]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


_COUNTERS = {
    "pids_limit": ("/sys/fs/cgroup/pids/pids.events", "/sys/fs/cgroup/pids.events"),
    "oom": ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events"),
}
_COUNTER_KEYS = {"pids_limit": "max", "oom": "oom_kill"}


def _limit_counters():  # type: ignore[no-untyped-def]
    """The cgroup's count of refused forks and OOM kills (cgroup v1 or v2 files)."""
    counts = {}
    for name, paths in _COUNTERS.items():
        counts[name] = 0
        for path in paths:
            if os.path.exists(path):
                with open(path) as f:
                    for line in f:
                        key, _, value = line.partition(" ")
                        if key == _COUNTER_KEYS[name]:
                            counts[name] = int(value)
    return counts


def _stamp(paths):  # type: ignore[no-untyped-def]
    """Give each written file an mtime no earlier run has seen (see PYCACHE)."""
    count = 0
    if os.path.exists(MTIME_COUNTER):
        with open(MTIME_COUNTER) as f:
            count = int(f.read())
    for path in paths:
        count += 1
        os.utime(path, (_MTIME_BASE + count, _MTIME_BASE + count), follow_symlinks=False)
    with open(MTIME_COUNTER, "w") as f:
        f.write(str(count))


def _apply(request, payload):  # type: ignore[no-untyped-def]
    """Put the workspace in the state the request asks for."""
    if request.get("reset"):
        _reset()
    # The tar comes from taskforge on the host, not from the repository; the image's Python may
    # predate extraction filters (Debian 12 ships 3.11.2).
    with tarfile.open(fileobj=io.BytesIO(payload), mode="r") as tar:
        written = []
        for member in tar:
            tar.extract(member, WORKSPACE)
            written.append(os.path.join(WORKSPACE, member.name))
    _stamp(written)
    for rel in request.get("delete", []):
        path = os.path.join(WORKSPACE, rel)
        if os.path.lexists(path):
            os.unlink(path)
        # As in a checkout, a folder whose files are all gone is gone too: an empty
        # `pkg.egg-info/` left behind would still be found as a distribution with no metadata.
        parent = os.path.dirname(path)
        while parent != WORKSPACE and os.path.isdir(parent) and not os.listdir(parent):
            os.rmdir(parent)
            parent = os.path.dirname(parent)
    for stale in (REPORT, COVERAGE, SELECT):
        if os.path.exists(stale):
            os.unlink(stale)


def _run(request, nonce, imports):  # type: ignore[no-untyped-def]
    """One pytest run on the current workspace: its reply."""
    started = time.monotonic()
    env = dict(os.environ)
    if request.get("bytecode_cache", True):
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = PYCACHE
    env.update(request.get("env", {}))
    env["TASKFORGE_NONCE"] = nonce
    import_errors = _import_errors(imports, env)
    args = list(request["args"])
    if request.get("select") is not None:
        with open(SELECT, "w", encoding="utf-8") as f:
            json.dump(request["select"], f)
        env["TASKFORGE_SELECT"] = SELECT
        files = sorted({nodeid.split("::", 1)[0] for nodeid in request["select"]})
        args += [f for f in files if os.path.exists(os.path.join(WORKSPACE, f))]
    if request.get("coverage"):
        env["TASKFORGE_COVERAGE_OUT"] = COVERAGE
        env["TASKFORGE_COVERAGE_SOURCE"] = os.pathsep.join(request["coverage"])
    before = _limit_counters()
    with open(OUTPUT, "wb") as out:
        if request.get("pytest", True):
            returncode = subprocess.run(
                [sys.executable, *request.get("python_args", []), "-m", "pytest", *args],
                cwd=WORKSPACE,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            ).returncode
        else:
            returncode = None
    after = _limit_counters()
    with open(OUTPUT, "rb") as f:
        f.seek(max(0, os.path.getsize(OUTPUT) - 8192))
        tail = f.read().decode("utf-8", "replace")

    def read(path: str):  # type: ignore[no-untyped-def]
        if not os.path.exists(path):
            return None
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()

    return {
        "exit_code": returncode,
        "output_tail": tail,
        "report": read(REPORT),
        "coverage": read(COVERAGE),
        "import_errors": import_errors,
        "limits_hit": sorted(name for name in after if after[name] > before[name]),
        "seconds": time.monotonic() - started,
    }


def _reap() -> None:
    """Kill every other process of the sandbox user, so nothing a test started outlives its run."""
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        pass  # nothing was left to kill


def main() -> None:
    request = json.loads(sys.argv[1])
    payload = sys.stdin.buffer.read()
    replies = []
    for number, nonce in enumerate(request["nonces"]):
        if number:
            _reap()  # what the previous repeat started must not see this one
        _apply(request, payload)
        imports = (request.get("imports") or []) if number == 0 else []
        replies.append(_run(request, nonce, imports))
    json.dump(replies, sys.stdout)
    sys.stdout.flush()
    _reap()


if __name__ == "__main__":
    main()
