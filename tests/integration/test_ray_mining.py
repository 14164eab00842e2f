"""Mining on a real embedded Ray: a killed worker and a killed driver change nothing in the result.

Each run mines two corpus projects with ``taskforge mine --recipe`` in a subprocess, two
repositories at a time. The clean run's instance_ids are the reference; a run whose Ray worker is
SIGKILLed mid-repository, and a run whose driver is SIGKILLed and then started again, must end
with exactly those ids, each once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from taskforge.datasets import read_rows

pytestmark = [pytest.mark.docker, pytest.mark.ray]

SOURCES = ["pypi:iniconfig==2.3.1", "pypi:addict==2.4.0"]


def write_recipe(path: Path, out: str, max_concurrent: int = 0) -> Path:
    path.write_text(
        f'name = "ray-test"\nout = "{out}"\nsources = {json.dumps(SOURCES)}\n'
        "[mine]\nmax_tasks = 2\nseed = 1\n"
        f'[ray]\naddress = "local"\nlocal_cpus = 2\nmax_retries = 2\nmax_concurrent = {max_concurrent}\n'
    )
    return path


def start(recipe: Path, session_cache: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "taskforge.cli", "mine", "--recipe", str(recipe)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "TASKFORGE_CACHE": str(session_cache)},
    )


def finish(proc: subprocess.Popen[str], timeout: float = 900) -> str:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return out + err


def ids(out: Path) -> list[str]:
    return sorted(row["instance_id"] for row in read_rows(out))


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state, past the (comm) that may hold spaces


def ray_workers(under: int, title: str = "ray::mine_one") -> list[int]:
    """PIDs of Ray worker processes running a repository (their process title says so) that
    descend from process ``under`` (the CLI this test started: its embedded Ray's raylet starts
    them). Another run's workers on the same machine are never touched."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if cmdline.startswith(title):
                pid = ancestor = int(entry.name)
                while ancestor > 1 and ancestor != under:
                    ancestor = _parent(ancestor)
                if ancestor == under:
                    found.append(pid)
    return sorted(found)


@pytest.fixture(scope="module")
def clean_ids(tmp_path_factory, session_cache, base_image) -> list[str]:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("ray-clean")
    finish(start(write_recipe(tmp / "r.toml", str(tmp / "out")), session_cache))
    found = ids(tmp / "out")
    assert len(found) >= 3 and len(set(found)) == len(found)
    summary = json.loads((tmp / "out" / "mine-summary.json").read_text())
    assert summary["totals"]["repositories"] == 2 and not summary["failures"]
    return found


def test_a_killed_worker_is_retried_and_nothing_changes(clean_ids, tmp_path, session_cache, backend) -> None:  # type: ignore[no-untyped-def]
    leaked_before = set(backend.leaked_containers())  # left on the engine by some earlier process
    proc = start(write_recipe(tmp_path / "r.toml", str(tmp_path / "out")), session_cache)
    victim = None
    deadline = time.monotonic() + 300
    while victim is None and time.monotonic() < deadline and proc.poll() is None:
        workers = ray_workers(proc.pid)
        if workers:
            time.sleep(4)  # well into the repository: its environment and baseline are under way
            alive = [pid for pid in workers if Path(f"/proc/{pid}").exists()]
            if alive:
                victim = alive[0]
                os.kill(victim, signal.SIGKILL)
        time.sleep(0.2)
    assert victim is not None, "no Ray worker was seen mining"
    finish(proc)
    assert ids(tmp_path / "out") == clean_ids
    summary = json.loads((tmp_path / "out" / "mine-summary.json").read_text())
    assert not summary["failures"] and summary["totals"]["repositories"] == 2
    assert sorted(set(backend.leaked_containers()) - leaked_before) == [], "the killed worker's sandboxes were not collected"


def test_a_killed_driver_resumes_to_the_same_dataset(clean_ids, tmp_path, session_cache) -> None:  # type: ignore[no-untyped-def]
    # One repository at a time, so the second is always still to come when the first one's shard
    # lands (two at once on a warm cache can finish within one poll of each other).
    recipe = write_recipe(tmp_path / "r.toml", str(tmp_path / "out"), max_concurrent=1)
    proc = start(recipe, session_cache)
    manifest = tmp_path / "out" / "manifest.json"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        if manifest.is_file() and json.loads(manifest.read_text()).get("shards"):
            break  # one repository is in: kill the driver while the other is in flight
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()  # reaps it and closes its pipes
    first = json.loads(manifest.read_text())
    assert len(first["shards"]) == 1
    output = finish(start(recipe, session_cache))
    assert "already mined" in output
    assert ids(tmp_path / "out") == clean_ids
    for shard in json.loads(manifest.read_text())["shards"]:
        assert pq.read_metadata(tmp_path / "out" / shard["name"]).num_rows == shard["rows"]


def test_shards_go_to_a_filesystem_uri(clean_ids, tmp_path, session_cache) -> None:  # type: ignore[no-untyped-def]
    """A pyarrow filesystem URI as the output (file:// here; s3:// works the same way)."""
    uri = f"file://{tmp_path / 'remote'}"
    finish(start(write_recipe(tmp_path / "r.toml", uri), session_cache))
    assert ids(tmp_path / "remote") == clean_ids
    assert sorted(row["instance_id"] for row in read_rows(uri)) == clean_ids
