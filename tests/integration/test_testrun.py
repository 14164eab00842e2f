"""Sandboxed suite runs on small local projects: outcomes, node ids, flaky detection, the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from taskforge.repo.environment import build_environment
from taskforge.repo.sources import fetch
from taskforge.repo.suite import run_suite

pytestmark = pytest.mark.docker

PYPROJECT = """
    [build-system]
    requires = ["setuptools>=61"]
    build-backend = "setuptools.build_meta"
    [project]
    name = "{name}"
    version = "0.1"
    [project.scripts]
    {name}-cli = "{name}.cli:main"
"""

TRICKY = '''
import importlib.metadata
import os

import pytest

from tricky import double


@pytest.mark.parametrize("value", ["a b", "x[1]", "é ü", "a::b", "p/q", ""])
def test_ids(value):
    assert double(value) == value * 2


class TestGroup:
    class TestInner:
        def test_nested(self):
            assert True

    def test_fails(self):
        assert double(1) == 3


@pytest.mark.xfail(reason="known")
def test_xfail():
    assert False


@pytest.mark.xfail(reason="fixed already")
def test_xpass():
    assert True


@pytest.mark.skip(reason="not here")
def test_skipped():
    pass


@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")


def test_error(broken):
    pass


def test_metadata_and_console_script():
    assert importlib.metadata.version("tricky") == "0.1"
    assert os.popen("tricky-cli").read().strip() == "cli ran"


@pytest.mark.parametrize("n", range(16))
def test_flaky_hash(n):
    # str hashes are randomized per process: each case passes in about half of all runs.
    assert hash(f"taskforge-{n}") % 2 == 0


def test_no_leftovers_from_earlier_runs():
    # Every run starts from a pristine tree and an empty /tmp and /dev/shm.
    for marker in ("/tmp/marker", "/dev/shm/marker", "/workspace/marker"):
        assert not os.path.exists(marker)
        open(marker, "w").close()
'''


def _project(root: Path) -> Path:
    files = {
        "pyproject.toml": PYPROJECT.format(name="tricky"),
        "src/tricky/__init__.py": "def double(x):\n    return x * 2\n",
        "src/tricky/cli.py": "def main():\n    print('cli ran')\n",
        "tests/test_tricky.py": TRICKY,
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


@pytest.fixture(scope="module")
def tricky(tmp_path_factory, backend, base_image, session_cache):  # type: ignore[no-untyped-def]
    snapshot = fetch(str(_project(tmp_path_factory.mktemp("tricky") / "tricky")))
    env = build_environment(snapshot, backend=backend, base=base_image)
    return snapshot, env


def test_outcomes_and_node_ids(tricky, backend) -> None:  # type: ignore[no-untyped-def]
    snapshot, env = tricky
    assert env.import_roots == ("src",)
    result = run_suite(snapshot, env, backend=backend, runs=2)
    outcomes = result.outcomes
    prefix = "tests/test_tricky.py::"
    # pytest escapes non-ASCII characters in parameter ids; the node id is what pytest prints.
    for param in ["a b", "x[1]", "\\xe9 \\xfc", "a::b", "p/q", ""]:
        assert outcomes[f"{prefix}test_ids[{param}]"] == "passed", sorted(outcomes)
    assert outcomes[f"{prefix}TestGroup::TestInner::test_nested"] == "passed"
    assert outcomes[f"{prefix}TestGroup::test_fails"] == "failed"
    assert outcomes[f"{prefix}test_xfail"] == "xfailed"
    assert outcomes[f"{prefix}test_xpass"] == "xpassed"
    assert outcomes[f"{prefix}test_skipped"] == "skipped"
    assert outcomes[f"{prefix}test_error"] == "error"
    assert outcomes[f"{prefix}test_metadata_and_console_script"] == "passed"
    assert outcomes[f"{prefix}test_no_leftovers_from_earlier_runs"] == "passed"
    assert result.runs[1].results[f"{prefix}test_no_leftovers_from_earlier_runs"].outcome == "passed"
    # With 16 cases, all agreeing across two runs has odds of 2**-16.
    assert result.flaky, "no hash-dependent case changed its outcome"
    for nodeid, seen in result.flaky.items():
        assert nodeid.startswith(f"{prefix}test_flaky_hash[")
        assert sorted(seen) == ["failed", "passed"]
    assert [run.status for run in result.runs] == ["tests_failed", "tests_failed"]


def test_cli_json_and_summary(tricky, session_cache: Path) -> None:  # type: ignore[no-untyped-def]
    snapshot, _ = tricky
    environ = {**os.environ, "TASKFORGE_CACHE": str(session_cache)}
    proc = subprocess.run(
        [sys.executable, "-m", "taskforge.cli", "test", str(snapshot.path), "--json"],
        capture_output=True, text=True, env=environ, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["tests"] == 30
    assert data["tests_by_id"]["tests/test_tricky.py::test_ids[\\xe9 \\xfc]"]["outcome"] == "passed"
    assert "assert 2 == 3" in data["tests_by_id"]["tests/test_tricky.py::TestGroup::test_fails"]["message"]

    proc = subprocess.run(
        [sys.executable, "-m", "taskforge.cli", "test", str(snapshot.path), "--runs", "2"],
        capture_output=True, text=True, env=environ, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert "30 tests" in proc.stdout
    assert "flaky: " in proc.stdout
    assert "test_flaky_hash[" in proc.stdout


def test_warm_runs_never_reuse_stale_bytecode(tricky, backend) -> None:  # type: ignore[no-untyped-def]
    """A warm container keeps compiled modules across runs; a same-size edit in the same second
    must still be seen, in the package and in a (assertion-rewritten) test module alike."""
    from taskforge.repo.suite import SuiteRunner

    snapshot, env = tricky
    fails = "tests/test_tricky.py::TestGroup::test_fails"  # asserts double(1) == 3
    states = [
        ({}, "failed"),
        ({"src/tricky/__init__.py": "def double(x):\n    return x * 3\n"}, "passed"),
        ({"src/tricky/__init__.py": "def double(x):\n    return x * 4\n"}, "failed"),
        ({"src/tricky/__init__.py": "def double(x):\n    return x + 2\n"}, "passed"),
        ({}, "failed"),
        ({"tests/test_tricky.py": TRICKY.replace("double(1) == 3", "double(1) == 2")}, "passed"),
        ({"tests/test_tricky.py": TRICKY.replace("double(1) == 3", "double(1) == 5")}, "failed"),
    ]
    with SuiteRunner(snapshot, env, backend=backend) as runner:
        seen = [runner.run(changes=changes, select=[fails]).results[fails].outcome for changes, _ in states]
        assert runner.containers_started == 1
    assert seen == [expected for _, expected in states]


def test_repeats_in_one_exec_are_independent_runs(tricky, backend) -> None:  # type: ignore[no-untyped-def]
    """Repeats sharing an exec each start from a reset tree and empty /tmp, in a new interpreter
    (so hash-dependent tests still vary), and each report carries its own nonce."""
    from taskforge.repo.suite import SuiteRunner

    snapshot, env = tricky
    prefix = "tests/test_tricky.py::"
    with SuiteRunner(snapshot, env, backend=backend) as runner:
        runs = runner.run_repeated(repeats=2, imports=["tricky", "tricky.missing"])
    assert len(runs) == 2
    for run in runs:
        assert run.results[f"{prefix}test_no_leftovers_from_earlier_runs"].outcome == "passed"
        assert run.results[f"{prefix}TestGroup::test_fails"].outcome == "failed"
    assert "tricky.missing" in runs[0].import_errors and not runs[1].import_errors
    hashes = [{t: r.outcome for t, r in run.results.items() if "test_flaky_hash" in t} for run in runs]
    assert hashes[0] != hashes[1]  # 16 cases agreeing across two interpreters: odds 2**-16


def test_a_selection_larger_than_one_argument_runs(tricky, backend) -> None:  # type: ignore[no-untyped-def]
    """A selection of thousands of ids (here 300 KiB) is more than one argv entry may hold (128
    KiB on Linux); the request goes over stdin, and the selected tests run."""
    from taskforge.repo.suite import SuiteRunner

    snapshot, env = tricky
    wanted = "tests/test_tricky.py::test_skipped"
    padding = [f"tests/test_tricky.py::test_absent_{n:05d}[{'x' * 40}]" for n in range(5000)]
    with SuiteRunner(snapshot, env, backend=backend) as runner:
        run = runner.run(select=[wanted, *padding])
    assert len(json.dumps(padding)) > 256 * 1024
    assert set(run.results) == {wanted} and run.results[wanted].outcome == "skipped"


def test_deleting_every_file_of_a_folder_removes_the_folder(tricky, backend) -> None:  # type: ignore[no-untyped-def]
    """As a checkout of the start state would: an empty `pkg.egg-info/` left behind still counts
    as an installed distribution (with no version)."""
    from taskforge.repo.suite import SuiteRunner

    snapshot, env = tricky
    with SuiteRunner(snapshot, env, backend=backend) as runner:
        runner.run(changes={"tests/test_tricky.py": None, "src/tricky/cli.py": None}, pytest=False)
        box = runner.sandbox()
        assert box.exec(["test", "-e", "/workspace/tests"], timeout_s=30).exit_code == 1
        assert box.exec(["test", "-e", "/workspace/src/tricky/cli.py"], timeout_s=30).exit_code == 1
        assert box.exec(["test", "-d", "/workspace/src/tricky"], timeout_s=30).exit_code == 0


def _container_processes(box) -> list[str]:  # type: ignore[no-untyped-def]
    listing = box.exec(["sh", "-c", "for d in /proc/[0-9]*; do tr '\\0' ' ' < $d/cmdline; echo; done"],
                       timeout_s=30, reap=False)
    return [line.strip() for line in listing.stdout.decode().splitlines() if line.strip()]


def test_forked_runs_match_new_interpreters(tricky, backend) -> None:  # type: ignore[no-untyped-def]
    """The fork servers serve the runs of a warm container (two of them, taking turns) and give
    what new interpreters give; what a test leaves running is killed after its run, the servers
    are not; a server killed by a test is replaced."""
    from taskforge.repo.suite import SuiteRunner

    snapshot, env = tricky
    steady = lambda run: {t: r.outcome for t, r in run.results.items() if "flaky_hash" not in t}  # noqa: E731
    background = TRICKY + (
        "\n\ndef test_leaves_a_process_behind():\n"
        "    import subprocess\n"
        "    subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
    )
    with SuiteRunner(snapshot, env, backend=backend, fork_server=False) as plain:
        expected = steady(plain.run(changes={"tests/test_tricky.py": background}))
    with SuiteRunner(snapshot, env, backend=backend) as runner:
        runs = [runner.run(changes={"tests/test_tricky.py": background}) for _ in range(3)]
        box = runner.sandbox()
        states = [json.loads(box.read_file(f"/tmp/taskforge/fork-server-{slot}.json")) for slot in (0, 1)]
        processes = _container_processes(box)
        assert all("refused" not in state for state in states), states
        assert sum("--fork-server" in p for p in processes) == 2, processes
        assert not any(p.startswith("sleep") for p in processes), processes
        # A test that kills the servers: the next run starts new ones and still reports.
        killer = TRICKY + (
            "\n\ndef test_kills_the_servers():\n"
            "    import json, os, signal\n"
            "    for slot in (0, 1):\n"
            "        os.kill(json.load(open(f'/tmp/taskforge/fork-server-{slot}.json'))['pid'], signal.SIGKILL)\n"
        )
        killed = runner.run(changes={"tests/test_tricky.py": killer})
        after = [runner.run() for _ in range(2)]
        new_states = [json.loads(box.read_file(f"/tmp/taskforge/fork-server-{slot}.json")) for slot in (0, 1)]
    assert all(steady(run) == expected for run in runs)
    assert expected["tests/test_tricky.py::test_leaves_a_process_behind"] == "passed"
    # The run whose test killed its own server still reports, once (no second pytest beside it).
    assert killed.results["tests/test_tricky.py::test_kills_the_servers"].outcome == "passed"
    assert steady(killed) == {**{t: o for t, o in expected.items() if "leaves_a_process" not in t},
                              "tests/test_tricky.py::test_kills_the_servers": "passed"}
    assert all(run.results["tests/test_tricky.py::TestGroup::test_fails"].outcome == "failed" for run in after)
    assert {s["pid"] for s in new_states}.isdisjoint({s["pid"] for s in states})


def test_no_fork_server_when_pytest_imports_the_code_under_test(backend, base_image, session_cache) -> None:  # type: ignore[no-untyped-def]
    """Mining iniconfig, which pytest itself imports: a server would hold the workspace's
    iniconfig as it was when the server started, so it refuses and runs get new interpreters."""
    from taskforge.repo.suite import SuiteRunner

    snapshot = fetch("pypi:iniconfig==2.3.1")
    env = build_environment(snapshot, backend=backend, base=base_image)
    with SuiteRunner(snapshot, env, backend=backend) as runner:
        run = runner.run()
        state = json.loads(runner.sandbox().read_file("/tmp/taskforge/fork-server-0.json"))
    assert run.status == "ok" and run.results
    assert "iniconfig" in state["refused"], state
