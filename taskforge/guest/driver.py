"""Runs inside the sandbox: put the workspace in a given state, run pytest, report back.

Standalone (stdlib only): it is copied into the sandbox as ``/tmp/taskforge/driver.py`` and run
as one exec per test run, which keeps a run to a single round trip:

    python /tmp/taskforge/driver.py < request.json+changed-files.tar

stdin is the request, as one line of JSON, then a tar of the files to write. The request travels on
stdin, not in argv: a selection of a few thousand node ids is more than one argument may hold
(Linux caps a single argument at 128 KiB: "argument list too long").

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
- ``layout``: pytest only configures itself and the plugin reports its ``python_files`` and
  ``testpaths`` (nothing is collected);
- ``nonces``: one per run; each run's JUnit report must carry its own;
- ``bytecode_cache``: false for a container that serves one run (the scorer's): then the image's
  own precompiled bytecode is used and nothing is written, instead of compiling everything again
  into the cache below;
- ``fork_server``: run pytest in a child forked from a *fork server* of this container that has
  pytest and its plugins imported already (see below), instead of in a new interpreter.

Under the scoring supervisor (``supervisor.py``) the driver's environment has
``$TASKFORGE_OUTCOME_FD``, a pipe the supervisor reads as root: pytest inherits it (and the run
never goes to a fork server, which does not have it).

Fork server: a warm container runs pytest hundreds of times, and a new interpreter spends about
0.1 s of CPU importing pytest before it collects anything. ``driver.py --fork-server SLOT`` starts
one that imports pytest (and the plugins pytest would load) with the workspace first on
``sys.path``, as ``python -m pytest`` has it, then forks a child per run that sets the run's
environment, output and arguments and calls pytest's entry point. It refuses to serve (and the
runs go to new interpreters) if anything it imported lives under /workspace: the code under test
must be imported afresh by every run. Two servers take turns, so a run and the next (a check and
its repeat) have different hash seeds, as new interpreters would; ``random`` reseeds in every
forked child. A server outlives the exec that started it (the reaps below spare it) and
serves the later runs of the container; one whose interpreter settings (``PYTHON*`` variables)
differ from a run's is replaced.

It prints a JSON list with one object per run: pytest's exit code, the tail of its output, the
JUnit report, the resource limits the run ran into, which interpreter ran pytest (``fork``, or
``new`` with why no fork server served it) and, if asked, the coverage map and the modules
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
LAYOUT = TOOL_DIR + "/layout.json"
OUTPUT = TOOL_DIR + "/output.txt"
SERVER_SOCKET = TOOL_DIR + "/fork-server-%d.sock"
SERVER_STATE = TOOL_DIR + "/fork-server-%d.json"
SERVER_LOG = TOOL_DIR + "/fork-server-%d.log"
SERVER_TURN = TOOL_DIR + "/fork-server-turn"
SERVER_EXIT = TOOL_DIR + "/fork-server-exit"
OUTCOME_ENV = "TASKFORGE_OUTCOME_FD"
SERVER_SLOTS = 2
SERVER_START_S = 60.0
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
errors, calls = {}, set()
workspace = sys.argv[2] + "/"
def _profile(frame, event, arg):
    if event == "call":
        code = frame.f_code
        if code.co_filename.startswith(workspace):
            calls.add((code.co_filename[len(workspace):], code.co_firstlineno, code.co_name))
sys.setprofile(_profile)
for module in json.loads(sys.argv[1]):
    try:
        importlib.import_module(module)
    except BaseException as err:  # any failure at import is what this check reports
        errors[module] = ("%s: %s" % (type(err).__name__, err))[:300]
sys.setprofile(None)
print(json.dumps({"errors": errors, "calls": sorted(calls)}))
"""


def _import_errors(modules, env):  # type: ignore[no-untyped-def]
    """Import every module in one fresh interpreter: the ones that fail, with their error, and the
    code of the workspace that ran meanwhile (file, first line, name of each code object called:
    module bodies, class bodies, functions), which tells what runs while the package is imported."""
    if not modules:
        return {}, []
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL, json.dumps(modules), WORKSPACE],
        cwd=WORKSPACE,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        lines = (proc.stderr.strip() or "exit %d" % proc.returncode).splitlines()
        return {"<interpreter>": lines[-1][:300]}, []
    reply = json.loads(proc.stdout.strip().splitlines()[-1])
    return reply["errors"], reply["calls"]


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
    for stale in (REPORT, COVERAGE, SELECT, LAYOUT):
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
    import_errors, import_calls = _import_errors(imports, env)
    args = list(request["args"])
    if request.get("select") is not None:
        with open(SELECT, "w", encoding="utf-8") as f:
            json.dump(request["select"], f)
        env["TASKFORGE_SELECT"] = SELECT
        files = sorted({nodeid.split("::", 1)[0] for nodeid in request["select"]})
        args += [f for f in files if os.path.exists(os.path.join(WORKSPACE, f))]
    if request.get("layout"):
        env["TASKFORGE_LAYOUT_OUT"] = LAYOUT
    if request.get("coverage"):
        env["TASKFORGE_COVERAGE_OUT"] = COVERAGE
        env["TASKFORGE_COVERAGE_SOURCE"] = os.pathsep.join(request["coverage"])
    before = _limit_counters()
    returncode = None
    open(OUTPUT, "wb").close()  # nothing of an earlier run's output may pass for this one's
    interpreter = "none"
    if request.get("pytest", True) and _may_fork(request):
        returncode = _forked_pytest(args, env)
        interpreter = "fork" if returncode is not None else "new (%s)" % (_REFUSED[0] or "no fork server")
    elif request.get("pytest", True):
        interpreter = "new"
    if request.get("pytest", True) and returncode is None:
        # Busy processes beside pytest, in the sandbox's CPU quota: a test that depends on timing
        # shows it here rather than later on a loaded scoring machine.
        burners = [subprocess.Popen([sys.executable, "-S", "-c", "while True: pass"], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                   for _ in range(int(request.get("contend") or 0))]
        try:
            with open(OUTPUT, "wb") as out:
                returncode = subprocess.run(
                    [sys.executable, *request.get("python_args", []), "-m", "pytest", *args],
                    cwd=WORKSPACE,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    pass_fds=_outcome_fds(),
                ).returncode
        finally:
            for burner in burners:
                burner.kill()
                burner.wait()
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
        "layout": read(LAYOUT),
        "import_errors": import_errors,
        "import_calls": import_calls,
        "limits_hit": sorted(name for name in after if after[name] > before[name]),
        "seconds": time.monotonic() - started,
        "interpreter": interpreter,
    }


def _outcome_fds():  # type: ignore[no-untyped-def]
    """The supervisor's outcome pipe (``supervisor.py``), which pytest inherits, if there is one."""
    fd = os.environ.get(OUTCOME_ENV, "")
    return (int(fd),) if fd.isdigit() else ()


def _reap() -> None:
    """Kill every other process of the sandbox user, so nothing a test started outlives its run,
    but the fork servers. Without servers, one ``kill(-1)``. With them, every other process is
    first stopped (a stopped process cannot fork: a fork bomb freezes), then killed, sweep after
    sweep until a sweep finds nobody."""
    spare = _server_pids()
    if not spare:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass  # nothing was left to kill
        return
    spare |= {1, os.getpid()}
    for sweep in range(100):
        found = [pid for pid in _live_pids() if pid not in spare]
        if not found:
            return
        if sweep:
            time.sleep(0.001)  # let the ones killed last sweep finish dying
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in found:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
                except PermissionError:
                    spare.add(pid)  # another user's: kill(-1) would not reach it either
    # A process that survives a hundred sweeps outruns them: no server may stay beside it.
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _live_pids():  # type: ignore[no-untyped-def]
    """Every process but zombies (dead already, waiting for their parent to collect them)."""
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open("/proc/%s/stat" % name, "rb") as f:
                    state = f.read().rsplit(b")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state not in (b"Z", b"X"):
                pids.append(int(name))
    return pids


# -- the fork server ----------------------------------------------------------------------------


def _may_fork(request):  # type: ignore[no-untyped-def]
    """Runs the fork server may serve: plain interpreter options, no coverage (the baseline's
    tracer starts with the interpreter)."""
    return (request.get("fork_server", False) and request.get("bytecode_cache", True)
            and not request.get("python_args") and not request.get("coverage")
            and OUTCOME_ENV not in os.environ)


def _interpreter_env(env):  # type: ignore[no-untyped-def]
    """What an interpreter reads at start-up and a forked child cannot change."""
    return {key: value for key, value in env.items() if key.startswith("PYTHON")}


def _read_state(slot):  # type: ignore[no-untyped-def]
    try:
        with open(SERVER_STATE % slot, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _server_pids():  # type: ignore[no-untyped-def]
    pids = set()
    for slot in range(SERVER_SLOTS):
        state = _read_state(slot)
        if state and state.get("pid") and os.path.exists("/proc/%d" % state["pid"]):
            pids.add(state["pid"])
    return pids


_REFUSED = [None]
"""Why the last fork server asked for did not serve (its refusal), for the run's reply."""


def _server(slot, env):  # type: ignore[no-untyped-def]
    """The socket of a live fork server in ``slot`` started with ``env``'s interpreter settings
    (started now if need be), or None if it refuses to serve this workspace."""
    wanted = _interpreter_env(env)
    state = _read_state(slot)
    _REFUSED[0] = None
    if state is not None and state.get("env") == wanted:
        if state.get("refused"):
            _REFUSED[0] = state["refused"]
            return None
        if os.path.exists("/proc/%d" % state["pid"]):
            return SERVER_SOCKET % slot
    if state is not None and state.get("pid"):
        try:
            os.kill(state["pid"], signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for stale in (SERVER_STATE % slot, SERVER_SOCKET % slot):
        if os.path.exists(stale):
            os.unlink(stale)
    server_env = {key: value for key, value in env.items()
                  if key not in ("TASKFORGE_NONCE", "TASKFORGE_SELECT")}
    with open(SERVER_LOG % slot, "wb") as log:
        subprocess.Popen([sys.executable, os.path.abspath(__file__), "--fork-server", str(slot)],
                         cwd=WORKSPACE, env=server_env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                         start_new_session=True)
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        state = _read_state(slot)
        if state is not None:
            _REFUSED[0] = state.get("refused")
            return None if state.get("refused") else SERVER_SOCKET % slot
        time.sleep(0.005)
    _REFUSED[0] = "did not start within %d s" % SERVER_START_S
    return None


def _next_slot():  # type: ignore[no-untyped-def]
    """The fork server for this run: they take turns, so two runs in a row (a check and its
    repeat) never share a hash seed."""
    slot = 0
    if os.path.exists(SERVER_TURN):
        with open(SERVER_TURN) as f:
            slot = int(f.read() or 0) % SERVER_SLOTS
    with open(SERVER_TURN, "w") as f:
        f.write(str((slot + 1) % SERVER_SLOTS))
    return slot


def _forked_pytest(args, env):  # type: ignore[no-untyped-def]
    """pytest's exit code from a child of a fork server, or None (run it the usual way)."""
    import socket

    slot = _next_slot()
    path = _server(slot, env)
    if path is None:
        return None
    if os.path.exists(SERVER_EXIT):
        os.unlink(SERVER_EXIT)
    message = json.dumps({"args": args, "env": env, "cwd": WORKSPACE, "output": OUTPUT, "exit": SERVER_EXIT})
    replies = {}
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(path)
            conn.sendall(message.encode())
            conn.shutdown(socket.SHUT_WR)
            with conn.makefile("rb") as stream:
                for line in stream:  # {"pid": ...} once forked, {"exit_code": ...} when done
                    replies.update(json.loads(line))
    except (OSError, ValueError):
        pass  # the server died, or was never there
    if "exit_code" in replies:
        return int(replies["exit_code"])
    if "pid" not in replies:
        return None  # nothing was started: this run goes to a new interpreter
    # The server died (a test killed it) while its child ran on: wait for the child, then take
    # the status it left (none: it was killed too).
    while os.path.exists("/proc/%d" % replies["pid"]) and replies["pid"] in _live_pids():
        time.sleep(0.01)
    try:
        with open(SERVER_EXIT) as f:
            return int(f.read())
    except (OSError, ValueError):
        return -signal.SIGKILL


def _serve(slot):  # type: ignore[no-untyped-def]
    """``driver.py --fork-server SLOT``: import pytest, then fork a child per request."""
    import importlib.metadata
    import socket

    os.chdir(WORKSPACE)
    sys.path[0] = WORKSPACE  # as `python -m pytest` run in the workspace has it
    refused = None
    try:
        import pytest

        if not os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
            for entry in importlib.metadata.entry_points(group="pytest11"):
                entry.load()
    except BaseException as err:  # whatever fails here fails in the run too, in a new interpreter
        refused = "import: %s: %s" % (type(err).__name__, err)
    if refused is None:
        inside = sorted(
            name for name, module in list(sys.modules.items())
            if any(str(place).startswith(WORKSPACE + "/")
                   for place in [getattr(module, "__file__", None) or "", *list(getattr(module, "__path__", None) or [])])
        )
        if inside:
            refused = "imports the code under test: " + ", ".join(inside[:5])
    state = {"pid": os.getpid(), "env": _interpreter_env(os.environ)}
    if refused is not None:
        _write_state(slot, {**state, "refused": refused})
        return
    try:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(SERVER_SOCKET % slot)
        listener.listen(4)
    except OSError as err:  # the driver waits for a state: say why there is no server
        _write_state(slot, {**state, "refused": "socket: %s" % err})
        return
    _write_state(slot, state)
    while True:
        conn, _ = listener.accept()
        with conn:
            data = b""
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            request = json.loads(data)
            pid = os.fork()
            if pid == 0:
                listener.close()
                conn.close()
                _child(request, pytest)
            try:
                conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            except OSError:
                pass  # the driver is gone (its exec timed out)
            _, status = os.waitpid(pid, 0)
            code = os.waitstatus_to_exitcode(status)
            try:
                conn.sendall(json.dumps({"exit_code": code}).encode() + b"\n")
            except OSError:
                pass


def _write_state(slot, state):  # type: ignore[no-untyped-def]
    tmp = SERVER_STATE % slot + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state, f)
    os.replace(tmp, SERVER_STATE % slot)


def _child(request, pytest):  # type: ignore[no-untyped-def]
    """In the forked child: become ``python -m pytest ARGS`` with the run's environment, then exit
    as that interpreter would (atexit handlers, non-daemon threads joined)."""
    import atexit
    import threading
    import traceback

    code = 1
    try:
        output = os.open(request["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.close(output)
        os.close(devnull)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.pycache_prefix = os.environ.get("PYTHONPYCACHEPREFIX") or None
        sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
        sys.argv = [os.path.join(os.path.dirname(pytest.__file__), "__main__.py"), *request["args"]]
        code = pytest.console_main()
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:  # as an uncaught exception ends an interpreter: traceback, status 1
        traceback.print_exc()
        code = 1
    finally:
        try:
            threading._shutdown()  # type: ignore[attr-defined]
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
            with open(request["exit"] + ".tmp", "w") as f:  # for a driver whose server died meanwhile
                f.write(str(code))
            os.replace(request["exit"] + ".tmp", request["exit"])
        finally:
            os._exit(code)


def main() -> None:
    if sys.argv[1:2] == ["--fork-server"]:
        _serve(int(sys.argv[2]))
        return
    line = sys.stdin.buffer.readline()
    if not line.strip():
        return  # a driver started ahead of a run that never came (``supervisor.py``)
    request = json.loads(line)
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
