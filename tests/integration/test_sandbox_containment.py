"""Hostile commands stay inside the sandbox, end with a clear status, and leave the host alone."""

from __future__ import annotations

import subprocess

import pytest

from taskforge.errors import SandboxError
from taskforge.sandbox import SandboxLimits

pytestmark = pytest.mark.docker

SMALL = SandboxLimits.load(memory_mb=256, pids_limit=64, output_limit_bytes=1 << 20)


@pytest.fixture
def box(backend, base_image):  # type: ignore[no-untyped-def]
    with backend.start(base_image.tag, limits=SMALL) as sandbox:
        yield sandbox
    assert sandbox.name not in backend.managed_containers(), "the sandbox container leaked"


def _host_still_forks() -> bool:
    return subprocess.run(["true"], check=False).returncode == 0


def test_fork_bomb_hits_pids_limit_and_is_killed(box) -> None:  # type: ignore[no-untyped-def]
    result = box.exec(["bash", "-c", ":(){ :|:& };:"], timeout_s=20)
    assert result.status == "pids_limit", result
    assert _host_still_forks()
    # Nothing of the bomb survives its exec: either every leftover was killed, or the container.
    if box.alive:
        survivors = box.exec(["sh", "-c", "ls -d /proc/[0-9]* | wc -l"], timeout_s=10, reap=False)
        assert int(survivors.stdout) <= 4, "init, sleep, sh and ls"
    else:
        with pytest.raises(SandboxError, match="no longer running"):
            box.exec(["true"], timeout_s=5)


def test_python_fork_bomb_is_capped_by_pids_limit(box) -> None:  # type: ignore[no-untyped-def]
    code = (
        "import os, errno\n"
        "n = 0\n"
        "while n < 10000:\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            import time; time.sleep(30); os._exit(0)\n"
        "        n += 1\n"
        "    except OSError as e:\n"
        "        print('fork refused after', n, errno.errorcode[e.errno]); break\n"
    )
    result = box.exec(["python3", "-c", code], timeout_s=60)
    assert result.status == "pids_limit"
    assert result.exit_code == 0
    forks = int(result.stdout.decode().split()[3])
    assert forks < SMALL.pids_limit
    assert "EAGAIN" in result.stdout.decode()
    assert _host_still_forks()


def test_memory_bomb_is_oom_killed(box) -> None:  # type: ignore[no-untyped-def]
    result = box.exec(["python3", "-c", "b = bytearray(1 << 30); print('survived')"], timeout_s=60)
    assert result.status == "oom"
    assert result.exit_code == 137
    assert b"survived" not in result.stdout
    assert box.alive, "an OOM kill ends the command, not the sandbox"
    assert box.exec(["true"], timeout_s=10).status == "ok"


def test_infinite_loop_ends_by_timeout(box) -> None:  # type: ignore[no-untyped-def]
    result = box.exec(["python3", "-c", "while True: pass"], timeout_s=3)
    assert result.status == "timeout"
    assert 3 <= result.duration_s < 20


def test_gigabyte_of_stdout_is_truncated_and_flagged(box) -> None:  # type: ignore[no-untyped-def]
    result = box.exec(["head", "-c", str(1 << 30), "/dev/zero"], timeout_s=300)
    assert result.status == "ok"
    assert result.truncated
    assert len(result.stdout) == SMALL.output_limit_bytes
    assert result.output_bytes == 1 << 30


def test_network_connections_fail(box) -> None:  # type: ignore[no-untyped-def]
    code = (
        "import socket, sys\n"
        "for host in ('1.1.1.1', '172.17.0.1', '8.8.8.8'):\n"
        "    try:\n"
        "        socket.create_connection((host, 53), timeout=3)\n"
        "        print('connected', host); sys.exit(0)\n"
        "    except OSError as e:\n"
        "        print(host, e)\n"
        "sys.exit(3)\n"
    )
    result = box.exec(["python3", "-c", code], timeout_s=60)
    assert result.exit_code == 3, result.text()
    assert "Network is unreachable" in result.text()
    dns = box.exec(["python3", "-c", "import socket; socket.getaddrinfo('pypi.org', 443)"], timeout_s=60)
    assert dns.status == "failed"


@pytest.mark.parametrize("path", ["/etc/taskforge-escape", "/usr/lib/escape", "/opt/escape", "/escape", "/home/sandbox/x"])
def test_writes_outside_work_dirs_fail(box, path: str) -> None:  # type: ignore[no-untyped-def]
    result = box.exec(["sh", "-c", f"echo x > {path}"], timeout_s=30)
    assert result.status == "failed"
    assert "Read-only file system" in result.text()


def test_work_dirs_are_writable_and_user_is_unprivileged(box) -> None:  # type: ignore[no-untyped-def]
    result = box.exec(
        ["sh", "-c", "echo a > /workspace/a && echo b > /tmp/b && id -u && grep CapEff /proc/self/status"],
        timeout_s=30,
    )
    assert result.status == "ok", result.text()
    uid, caps = result.stdout.decode().split("\n")[:2]
    assert uid == "10001"
    assert caps.split()[1] == "0000000000000000"


def test_tree_round_trip(box, tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "src"
    (src / "pkg" / "sub dir").mkdir(parents=True)
    (src / "pkg" / "sub dir" / "ünïcode.txt").write_text("é")
    (src / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (src / "run.sh").chmod(0o755)
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("x")
    box.put_tree(src, "/workspace", exclude=[".git"])
    assert box.exec(["./run.sh"], timeout_s=10).stdout == b"ran\n"
    assert box.read_file("/workspace/pkg/sub dir/ünïcode.txt") == "é".encode()
    assert box.exec(["test", "-e", "/workspace/.git"], timeout_s=10).status == "failed"
    out = tmp_path / "out"
    box.get_tree("/workspace", out)
    assert (out / "pkg" / "sub dir" / "ünïcode.txt").read_text() == "é"
    with pytest.raises(FileNotFoundError):
        box.read_file("/workspace/missing")


# A command that says when it started (before reading its stdin) and what it read.
_STAMPED = ["python3", "-c", "import sys, time; t = time.time(); data = sys.stdin.read(); print(t, len(data))"]


def test_prespawned_command_is_taken_over_by_the_same_exec(box) -> None:  # type: ignore[no-untyped-def]
    import time

    box.prespawn(_STAMPED)
    time.sleep(1.0)  # it started and waits on its stdin
    asked = time.time()
    result = box.exec(_STAMPED, timeout_s=30, stdin=b"x" * 100_000)
    started, read = result.stdout.decode().split()
    assert result.exit_code == 0 and int(read) == 100_000
    assert float(started) < asked - 0.5, "the exec started a new process instead of taking over the waiting one"
    # Taken once: the next exec of the same command starts its own.
    asked = time.time()
    again = box.exec(_STAMPED, timeout_s=30, stdin=b"y")
    assert float(again.stdout.decode().split()[0]) >= asked - 0.05


def test_another_exec_ends_the_prespawned_command_first(box) -> None:  # type: ignore[no-untyped-def]
    import time

    marker = "/tmp/prespawned-ended"
    box.prespawn(["sh", "-c", f"cat > /dev/null; sleep 0.3; echo > {marker}"])
    # A different command (and the same command without stdin) does not take it: it is ended,
    # its stdin closed and its output read to its end, before the other command starts.
    seen = box.exec(["sh", "-c", f"test -e {marker} && echo ended || echo running"], timeout_s=30, reap=False)
    assert seen.stdout.decode().split() == ["ended"], seen.text()
    asked = time.time()
    fresh = box.exec(_STAMPED, timeout_s=30, stdin=b"")
    assert float(fresh.stdout.decode().split()[0]) >= asked - 0.05


def test_closing_a_sandbox_with_a_prespawned_command(backend, base_image) -> None:  # type: ignore[no-untyped-def]
    box = backend.start(base_image.tag, limits=SMALL)
    box.prespawn(["sh", "-c", "cat > /dev/null"])
    box.close()
    assert box.name not in backend.managed_containers()
    with pytest.raises(SandboxError, match="no longer running"):
        box.exec(["true"], timeout_s=10)
