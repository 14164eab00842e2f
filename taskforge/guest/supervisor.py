"""Runs inside the sandbox as root, around one scoring run: the test outcomes leave the test
process as they happen, to a reader the candidate's code cannot reach.

Standalone (stdlib only, run with ``python -I -S``: no site, no environment, nothing of the
workspace on ``sys.path``). The scorer's containers start their init as root with only the
SETUID and SETGID capabilities; every other exec runs as the sandbox user. This one:

    python -I -S /tmp/taskforge/supervisor.py UID GID < request.json+changed-files.tar

1. makes a pipe, and starts the driver (``driver.py``, the same request on its stdin once it
   comes: a supervisor may be started before its request is known) as UID:GID
   with the pipe's write end inherited as ``$TASKFORGE_OUTCOME_FD``. The driver hands it to
   pytest, and taskforge's pytest plugin writes one JSON line to it when each test finishes and
   one when the session does;
2. reads the pipe's other end as root while the run goes on. The sandbox user cannot open
   root's file descriptors through /proc, signal or trace a root process, so whatever it does
   later (rewrite the report from a forked child, a finalizer at exit, a forged exit status)
   cannot change what was already read;
3. when the driver exits, kills every process of the sandbox user (from a child that drops to
   UID first: root here has no CAP_KILL), so the pipe has no writer left, and reads it to its end;
4. prints one JSON object: the driver's exit status and its reply (untrusted: the sandbox user
   can write to the driver's stdout), and the stream as read, with what went wrong reading it.

The stream is not proof on its own: code in the test process can write lines to the pipe too,
or stop the plugin from writing. The scorer reads one line per test at most (a second is
tampering), takes a test's outcome from the stream and holds the report to it, and canary tests
catch a process that forges outcomes from inside.
"""

import json
import os
import signal
import subprocess
import sys
import threading

TOOL_DIR = "/tmp/taskforge"
DRIVER = TOOL_DIR + "/driver.py"
OUTCOME_ENV = "TASKFORGE_OUTCOME_FD"
STREAM_LIMIT = 32 * 1024 * 1024
REPLY_LIMIT = 256 * 1024 * 1024
STDERR_LIMIT = 64 * 1024
DRAIN_S = 10.0


def _read_all(fd, limit, into):  # type: ignore[no-untyped-def]
    """Read ``fd`` to its end, keeping at most ``limit`` bytes; ``into`` gets the bytes and
    whether more came than were kept."""
    chunks, total = [], 0
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except OSError:
            break
        if not chunk:
            break
        if total < limit:
            chunks.append(chunk[: limit - total])
        total += len(chunk)
    into.append((b"".join(chunks), total > limit))


def _reap_user(uid, gid):  # type: ignore[no-untyped-def]
    """SIGKILL every process of ``uid``: a child drops to it and signals -1 (all it may signal
    but itself), then exits."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            for _ in range(3):
                try:
                    os.kill(-1, signal.SIGKILL)
                except ProcessLookupError:
                    break
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def main() -> None:
    uid, gid = int(sys.argv[1]), int(sys.argv[2])
    # The driver starts before the request is read: a supervisor started ahead of its run
    # (``DockerSandbox.prespawn``) has the driver's start-up behind it when the request comes.
    read_end, write_end = os.pipe()
    env = dict(os.environ)
    env[OUTCOME_ENV] = str(write_end)
    proc = subprocess.Popen(
        [sys.executable, DRIVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        user=uid,
        group=gid,
        extra_groups=[],
        pass_fds=(write_end,),
        env=env,
        cwd="/workspace",
    )
    os.close(write_end)
    stream, reply, errors = [], [], []
    readers = [
        threading.Thread(target=_read_all, args=(read_end, STREAM_LIMIT, stream), daemon=True),
        threading.Thread(target=_read_all, args=(proc.stdout.fileno(), REPLY_LIMIT, reply), daemon=True),
        threading.Thread(target=_read_all, args=(proc.stderr.fileno(), STDERR_LIMIT, errors), daemon=True),
    ]
    for reader in readers:
        reader.start()
    request = sys.stdin.buffer.read()
    try:
        proc.stdin.write(request)
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        try:
            proc.stdin.close()
        except OSError:
            pass
    driver_exit = proc.wait()
    _reap_user(uid, gid)
    for reader in readers:
        reader.join(DRAIN_S)
    data, overflow = stream[0] if stream else (b"", False)
    out, out_overflow = reply[0] if reply else (b"", False)
    err = errors[0][0] if errors else b""
    json.dump(
        {
            "driver_exit": driver_exit,
            "reply": out.decode("utf-8", "replace"),
            "reply_overflow": out_overflow,
            "stderr": err.decode("utf-8", "replace")[-4000:],
            "stream": data.decode("utf-8", "replace"),
            "stream_overflow": overflow,
            "stream_closed": bool(stream),
        },
        sys.stdout,
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
