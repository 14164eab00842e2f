"""The planted-leak suite: the removed code hidden in every channel a model could look in, and the
audit finds it there, with the right kind; a clean start state and a real site-packages give no
finding at all.

A tiny real package (``tests/fixtures/audit/original``, "stanzakit") loses a feature three ways
(``tasks.json``: a hollowed body, a removed function with its private helper, a removed module).
Each test writes that task's clean start state into a real git repository, plants the original
code in one channel with the real tool that would leave it there (py_compile, mypy, pytest,
coverage, hypothesis, pip, git, pygments) or in an encoding (base64, hex, zlib, lzma, rot13,
UTF-16/32), scans, and checks exactly which paths were reported. Start states that keep a copy
themselves (a stub, a docs code block, a backup, a commented-out or encoded copy) are audited
as mining audits them, the fingerprint built knowing the copy.
Tools that are not dependencies of taskforge (mypy, coverage, hypothesis, pygments) skip their
test when missing; the recorded mypy cache and the compiled Java class always run.
"""

from __future__ import annotations

import base64
import bz2
import codecs
import compileall
import gzip
import importlib.util
import io
import json
import lzma
import marshal
import os
import py_compile
import random
import shutil
import site
import sqlite3
import subprocess
import sys
import tarfile
import textwrap
import threading
import zipapp
import zipfile
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from taskforge.guest import scanner
from taskforge.guest.scanner import scan
from taskforge.mining.audit.fingerprint import Fingerprint, build_fingerprint
from taskforge.mining.audit.scan import audit_start_state, unread

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "audit"
ORIGINAL = FIXTURES / "original"
TASKS: dict[str, Any] = json.loads((FIXTURES / "tasks.json").read_text())
FEATURE = {"body": "stanzakit/headers.py", "symbol": "stanzakit/headers.py", "module": "stanzakit/ledger.py"}
"""The module each task's removed code lived in."""
QUIET = {"PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


# ---------------------------------------------------------------------------------------------
# The tasks and their start states
# ---------------------------------------------------------------------------------------------


def project_files(root: Path = ORIGINAL) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


@dataclass(frozen=True, kw_only=True, slots=True)
class Task:
    strategy: str
    fingerprint: Fingerprint
    start: dict[str, str]
    """The clean start state: every file the agent gets."""
    hidden: dict[str, str]
    """Original text of the hidden test files."""
    before: dict[str, str]
    """Original text of every file the task changed."""
    after: dict[str, str | None]
    """The same files in the start state (None: deleted)."""

    def audit(self, *roots: Path) -> list[dict[str, Any]]:
        result = scan({"fingerprints": {self.strategy: self.fingerprint.to_json()}, "roots": [str(r) for r in roots]})
        findings: list[dict[str, Any]] = result["findings"][self.strategy]
        return findings

    def audit_kept(self, root: Path, kept: Mapping[str, str]) -> list[dict[str, Any]]:
        """The audit as mining runs it (fingerprint and start-state scan) of a start state that
        keeps ``kept`` besides the clean files: the fingerprint is built knowing them."""
        ws = workspace(root, self, kept)
        visible = {p.relative_to(ws).as_posix(): p.read_text() for p in ws.rglob("*")
                   if p.is_file() and ".git" not in p.relative_to(ws).parts}
        _, result = audit_start_state(start_dir=ws, before=self.before, after=self.after, visible=visible,
                                      strategy=self.strategy, test_ids=TASKS[self.strategy]["test_ids"])
        return result.findings


@pytest.fixture(scope="module")
def tasks() -> dict[str, Task]:
    original = project_files()
    built = {}
    for strategy, spec in TASKS.items():
        after = {path: None if src is None else (FIXTURES / src).read_text() for path, src in spec["start"].items()}
        start = {path: text for path, text in original.items() if path not in after}
        start.update({path: text for path, text in after.items() if text is not None})
        before = {path: original[path] for path in after}
        built[strategy] = Task(
            strategy=strategy,
            fingerprint=build_fingerprint(before=before, after=after, visible=start, strategy=strategy,
                                          test_ids=spec["test_ids"]),
            start=start,
            hidden={path: original[path] for path in after if path.startswith("tests/")},
            before=before,
            after=after,
        )
    return built


def write_tree(root: Path, files: Mapping[str, str]) -> Path:
    for path, text in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return root


def git(cwd: Path, *args: str, input_text: str | None = None) -> str:
    command = ["git", "-c", "user.name=taskforge", "-c", "user.email=taskforge@example.com",
               "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", *args]
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    return subprocess.run(command, cwd=cwd, check=True, capture_output=True, text=True, env=env,
                          input=input_text).stdout


def workspace(root: Path, task: Task, kept: Mapping[str, str] = {}) -> Path:
    """The task's clean start state as the sandbox holds it: the files (and ``kept``), in a
    one-commit repository."""
    write_tree(root, {**task.start, **kept})
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "start state")
    return root


def run_python(cwd: Path, *args: str, env: Mapping[str, str] = QUIET) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], check=False, cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(cwd), **env}, timeout=300)


def located(findings: list[dict[str, Any]], base: Path) -> set[tuple[str, str]]:
    """(path relative to ``base``, kind) of every finding."""
    return {(os.path.relpath(f["path"], base) if f["path"].startswith(str(base)) else f["path"], f["kind"])
            for f in findings}


def pyc_path(source: str) -> str:
    return importlib.util.cache_from_source(source)


@pytest.fixture(scope="module")
def original_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pristine copy of the original project, for the tools that must run on it."""
    return write_tree(tmp_path_factory.mktemp("original"), project_files())


# ---------------------------------------------------------------------------------------------
# Bytecode
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["body", "symbol", "module"])
def test_stale_pyc_in_pycache(tmp_path: Path, tasks: dict[str, Task], strategy: str) -> None:
    task = tasks[strategy]
    ws = workspace(tmp_path / "ws", task)
    compileall.compile_dir(str(ws), quiet=1)  # the start state byte-compiled: clean bytecode
    stale = pyc_path(FEATURE[strategy])
    py_compile.compile(str(ORIGINAL / FEATURE[strategy]), cfile=str(ws / stale), doraise=True)
    findings = task.audit(ws)
    assert located(findings, ws) == {(stale, "pyc")}
    # Bytecode has no source tokens: a hollowed body shows in its names, a removed symbol in its
    # code object's signature.
    assert findings[0]["match"] == {"body": "body", "symbol": "signature", "module": "signature"}[strategy]


def test_orphan_pyc_elsewhere(tmp_path: Path, tasks: dict[str, Task]) -> None:
    task = tasks["symbol"]
    ws = workspace(tmp_path / "ws", task)
    orphan = tmp_path / "tmp" / "build-cache" / "headers.cpython-311.pyc"
    orphan.parent.mkdir(parents=True)
    py_compile.compile(str(ORIGINAL / FEATURE["symbol"]), cfile=str(orphan), doraise=True)
    assert located(task.audit(ws, tmp_path / "tmp"), tmp_path) == {("tmp/build-cache/headers.cpython-311.pyc", "pyc")}


# ---------------------------------------------------------------------------------------------
# Tool caches: mypy, pytest, hypothesis, coverage
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mypy_caches(original_copy: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real mypy caches of the original package: the default (sqlite, fixed format) and JSON."""
    pytest.importorskip("mypy")
    out = tmp_path_factory.mktemp("mypy")
    caches = {"sqlite": out / "sqlite", "json": out / "json"}
    flags = {"sqlite": [], "json": ["--no-sqlite-cache", "--no-fixed-format-cache"]}
    for name, cache in caches.items():
        result = run_python(original_copy, "-m", "mypy", "--cache-dir", str(cache), *flags[name], "stanzakit")
        assert result.returncode == 0, result.stdout + result.stderr
    return caches


@pytest.mark.parametrize("strategy", ["symbol", "module"])
@pytest.mark.parametrize("cache_format", ["sqlite", "json"])
def test_mypy_cache(tmp_path: Path, tasks: dict[str, Task], mypy_caches: dict[str, Path], strategy: str,
                    cache_format: str) -> None:
    task = tasks[strategy]
    ws = workspace(tmp_path / "ws", task)
    shutil.copytree(mypy_caches[cache_format], ws / ".mypy_cache")
    found = located(task.audit(ws), ws)
    # Every module the task changed: the removed code's own, and for the symbol task the package
    # __init__, whose symbol table refers to the function it re-exported.
    stems = {"symbol": ["headers", "__init__"], "module": ["ledger"]}[strategy]
    if cache_format == "json":
        expected = {(f".mypy_cache/3.11/stanzakit/{stem}.data.json", "json") for stem in stems}
        if strategy == "module":
            # The removed module's meta file: its name, path and dependencies.
            expected.add((".mypy_cache/3.11/stanzakit/ledger.meta.json", "json"))
        assert found == expected
    else:
        # mypy spreads modules over sqlite shards; the typeshed ones (builtins, typing, ...) hold
        # nothing of the package.
        shards = set()
        for shard in (ws / ".mypy_cache/3.11").glob("cache.*.db"):
            with sqlite3.connect(shard) as db:
                paths = {row[0] for row in db.execute("SELECT path FROM files2")}
            if any(f"stanzakit/{stem}.data.ff" in paths for stem in stems):
                shards.add((shard.relative_to(ws).as_posix(), "sqlite"))
        assert len(shards) == len(stems) and found == shards


@pytest.mark.parametrize("strategy", ["symbol", "module"])
def test_recorded_mypy_json_cache(tmp_path: Path, tasks: dict[str, Task], strategy: str) -> None:
    # Recorded from a real mypy 2.4 run (see fixtures/audit/README.md): runs without mypy installed.
    task = tasks[strategy]
    ws = workspace(tmp_path / "ws", task)
    name = Path(FEATURE[strategy]).stem + ".data.json"
    target = ws / ".mypy_cache/3.11/stanzakit" / name
    target.parent.mkdir(parents=True)
    shutil.copy(FIXTURES / "mypy" / name, target)
    findings = task.audit(ws)
    assert located(findings, ws) == {(f".mypy_cache/3.11/stanzakit/{name}", "json")}
    # The symbol table spells the removed function's signature (argument names and kinds).
    assert findings[0]["match"] == "signature"


def test_pytest_cache_of_the_validation_run(tmp_path: Path, tasks: dict[str, Task]) -> None:
    # Validation runs the hidden tests on the start state, where they fail: pytest's cache keeps
    # their ids (lastfailed) and every collected id (nodeids) after the tests are hidden again.
    task = tasks["body"]
    ws = workspace(tmp_path / "ws", task)
    write_tree(ws, task.hidden)
    result = run_python(ws, "-m", "pytest", "-q", "tests")
    assert result.returncode == 1, result.stdout
    write_tree(ws, {path: task.start[path] for path in task.hidden})
    findings = task.audit(ws)
    assert located(findings, ws) == {
        (".pytest_cache/v/cache/lastfailed", "json"),
        (".pytest_cache/v/cache/nodeids", "json"),
    }
    assert {f["match"] for f in findings} == {"test_id"}


def test_hypothesis_constants_cache(tmp_path: Path, tasks: dict[str, Task], original_copy: Path) -> None:
    # Hypothesis collects the string constants of local modules and caches them on disk
    # (.hypothesis/constants/<hash>, "# file: ..." and a list of short constants).
    pytest.importorskip("hypothesis")
    task = tasks["body"]
    project = write_tree(tmp_path / "original", project_files())
    write_tree(project, {"tests/test_props.py": (
        "from hypothesis import given, settings, strategies as st\n"
        "from stanzakit.headers import fold_widget_header\n\n\n"
        # Constants are collected on a 5% chance per draw: a fixed seed makes that certain here.
        "@settings(max_examples=20, deadline=None, derandomize=True)\n"
        "@given(st.text())\n"
        "def test_fold_never_crashes(line):\n"
        "    fold_widget_header(line)\n"
    )})
    result = run_python(project, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_props.py")
    assert result.returncode == 0, result.stdout
    ws = workspace(tmp_path / "ws", task)
    shutil.copytree(project / ".hypothesis", ws / ".hypothesis")
    findings = task.audit(ws)
    assert len(findings) == 1
    assert findings[0]["path"].startswith(str(ws / ".hypothesis/constants/"))
    assert (findings[0]["kind"], findings[0]["match"]) == ("text", "constant")


def test_coverage_data_with_test_contexts(tmp_path: Path, tasks: dict[str, Task]) -> None:
    # coverage.py's .coverage (sqlite) keeps file paths, line numbers and, with dynamic contexts,
    # the test that ran each line: no source, but the hidden test ids ("test_headers.test_fold_...").
    pytest.importorskip("coverage")
    task = tasks["body"]
    project = write_tree(tmp_path / "original", project_files())
    (project / ".coveragerc").write_text("[run]\ndynamic_context = test_function\n")
    result = run_python(project, "-m", "coverage", "run", "--data-file", str(project / ".coverage"),
                        "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
    assert result.returncode == 0, result.stdout + result.stderr
    ws = workspace(tmp_path / "ws", task)
    shutil.copy(project / ".coverage", ws / ".coverage")
    findings = task.audit(ws)
    assert located(findings, ws) == {(".coverage", "sqlite")}
    assert findings[0]["match"] == "test_id"


# ---------------------------------------------------------------------------------------------
# Builds and installs: build/lib, egg-info, wheels, sdists, archives
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(wheel, source tree with the build/ and *.egg-info pip left there) of the original."""
    source = write_tree(tmp_path_factory.mktemp("wheel-src"), project_files())
    dist = tmp_path_factory.mktemp("dist")
    result = run_python(source, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                        "-q", "-w", str(dist), ".", env={**QUIET, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = dist.glob("stanzakit-*.whl")
    return wheel, source


@pytest.mark.parametrize("strategy", ["symbol", "module"])
def test_build_lib_left_in_the_workspace(tmp_path: Path, tasks: dict[str, Task], built_wheel: tuple[Path, Path],
                                         strategy: str) -> None:
    task = tasks[strategy]
    ws = workspace(tmp_path / "ws", task)
    _, source = built_wheel
    shutil.copytree(source / "build", ws / "build")
    shutil.copytree(source / "stanzakit.egg-info", ws / "stanzakit.egg-info")
    findings = task.audit(ws)
    # egg-info's SOURCES.txt names stanzakit/ledger.py for the module task: a path alone is weak
    # evidence, not a finding; the copies under build/lib are (for the symbol task, the original
    # __init__ too: it re-exports the removed function).
    expected = {(f"build/lib/{FEATURE[strategy]}", "text")}
    if strategy == "symbol":
        expected.add(("build/lib/stanzakit/__init__.py", "text"))
    assert located(findings, ws) == expected
    assert {f["match"] for f in findings if f["path"].endswith(FEATURE[strategy])} == {"ngram"}


def test_egg_info_beside_a_copy_of_the_package(tmp_path: Path, tasks: dict[str, Task],
                                               built_wheel: tuple[Path, Path]) -> None:
    # An unpacked sdist or an old ``setup.py develop`` tree: metadata plus the package sources.
    task = tasks["symbol"]
    ws = workspace(tmp_path / "ws", task)
    _, source = built_wheel
    elsewhere = tmp_path / "tmp" / "stanzakit-1.0.0"
    shutil.copytree(source / "stanzakit.egg-info", elsewhere / "stanzakit.egg-info")
    shutil.copytree(source / "stanzakit", elsewhere / "stanzakit")
    found = located(task.audit(ws, tmp_path / "tmp"), tmp_path)
    assert found == {("tmp/stanzakit-1.0.0/stanzakit/headers.py", "text"),
                     ("tmp/stanzakit-1.0.0/stanzakit/__init__.py", "text")}


def test_wheel_installed_into_site_packages(tmp_path: Path, tasks: dict[str, Task],
                                            built_wheel: tuple[Path, Path]) -> None:
    task = tasks["module"]
    ws = workspace(tmp_path / "ws", task)
    wheel, _ = built_wheel
    site_packages = tmp_path / "site-packages"
    result = run_python(tmp_path, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target",
                        str(site_packages), str(wheel), env={"PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    found = located(task.audit(ws, site_packages), site_packages)
    assert found == {("stanzakit/ledger.py", "text"), (pyc_path("stanzakit/ledger.py"), "pyc")}


def _sdist(source: Path, target: Path, compression: str) -> None:
    with tarfile.open(target, "w:gz" if compression == "gz" else "w:xz") as archive:
        for path in sorted(source.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                archive.add(path, arcname=f"stanzakit-1.0.0/{path.relative_to(source).as_posix()}")


@pytest.mark.parametrize("archive", ["wheel", "sdist.tar.gz", "tar.xz", "zip", "gz", "bz2", "xz"])
def test_archive_in_a_temporary_folder(tmp_path: Path, tasks: dict[str, Task], built_wheel: tuple[Path, Path],
                                       archive: str) -> None:
    task = tasks["symbol"]
    ws = workspace(tmp_path / "ws", task)
    wheel, _ = built_wheel
    drop = tmp_path / "tmp"
    drop.mkdir()
    headers = (ORIGINAL / "stanzakit/headers.py").read_bytes()
    if archive == "wheel":
        shutil.copy(wheel, drop / wheel.name)
        expected = {(f"tmp/{wheel.name}!/stanzakit/{module}", "zip") for module in ("headers.py", "__init__.py")}
    elif archive in ("sdist.tar.gz", "tar.xz"):
        name = "stanzakit-1.0.0." + archive.removeprefix("sdist.")
        _sdist(ORIGINAL, drop / name, "gz" if archive.endswith("gz") else "xz")
        expected = {(f"tmp/{name}!/stanzakit-1.0.0/stanzakit/headers.py", "tar"),
                    (f"tmp/{name}!/stanzakit-1.0.0/stanzakit/__init__.py", "tar"),
                    (f"tmp/{name}!/stanzakit-1.0.0/tests/test_headers.py", "tar")}
    elif archive == "zip":
        with zipfile.ZipFile(drop / "backup.zip", "w", zipfile.ZIP_DEFLATED) as zipped:
            zipped.writestr("stanzakit/headers.py", headers)
        expected = {("tmp/backup.zip!/stanzakit/headers.py", "zip")}
    else:
        compressors: dict[str, Callable[[bytes], bytes]] = {
            "gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress,
        }
        (drop / f"headers.py.{archive}").write_bytes(compressors[archive](headers))
        expected = {(f"tmp/headers.py.{archive}", {"gz": "gzip"}.get(archive, archive))}
    assert located(task.audit(ws, drop), tmp_path) == expected


# ---------------------------------------------------------------------------------------------
# Git: loose and packed objects, deltas, stash, reflog
# ---------------------------------------------------------------------------------------------


def original_blob(repo: Path) -> str:
    return git(repo, "hash-object", str(ORIGINAL / "stanzakit/headers.py")).strip()


def test_git_loose_object(tmp_path: Path, tasks: dict[str, Task]) -> None:
    task = tasks["body"]
    ws = workspace(tmp_path / "ws", task)
    blob = git(ws, "hash-object", "-w", str(ORIGINAL / "stanzakit/headers.py")).strip()  # dangling
    assert located(task.audit(ws), ws) == {(f".git/objects/{blob[:2]}/{blob[2:]}", "git-loose")}


def _history_with_the_original(root: Path, task: Task) -> tuple[Path, str]:
    """A repository with upstream history (an older version of the module, then the original)
    and the start state on top; returns it and the older version's blob id.

    Git keeps the newest, largest version of a file whole and older ones as deltas against it:
    the older version, which holds the removed body too, is only found once its delta is applied.
    """
    original = project_files()
    older = dict(original)
    headers = original["stanzakit/headers.py"]
    older["stanzakit/headers.py"] = headers[:headers.index("\n\nclass StanzaParser")] + "\n"
    write_tree(root, older)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "fold widget headers")
    write_tree(root, original)
    git(root, "commit", "-q", "-am", "add StanzaParser")
    write_tree(root, {path: task.start[path] for path in TASKS[task.strategy]["start"]})
    git(root, "commit", "-q", "-am", "start state")
    return root, git(root, "hash-object", "--stdin", input_text=older["stanzakit/headers.py"]).strip()


@pytest.mark.parametrize("delta", ["ofs-delta", "ref-delta"])
def test_git_packed_and_deltified(tmp_path: Path, tasks: dict[str, Task], delta: str) -> None:
    task = tasks["body"]
    repo, older = _history_with_the_original(tmp_path / "repo", task)
    # ref-delta: bases named by object id instead of pack offset (older git, thin packs).
    config = "true" if delta == "ofs-delta" else "false"
    git(repo, "-c", f"repack.useDeltaBaseOffset={config}", "repack", "-a", "-d", "-f", "-q")
    git(repo, "prune-packed")
    (index,) = (repo / ".git/objects/pack").glob("*.idx")
    line = next(row for row in git(repo, "verify-pack", "-v", str(index)).splitlines() if row.startswith(older))
    assert len(line.split()) == 7, f"the older blob is not a delta: {line}"
    (pack,) = (repo / ".git/objects/pack").glob("*.pack")
    findings = task.audit(repo)
    hidden_tests = git(repo, "hash-object", str(ORIGINAL / "tests/test_headers.py")).strip()
    blobs = {older, original_blob(repo), hidden_tests}
    assert located(findings, repo) == {(f".git/objects/pack/{pack.name}!{blob}", "git-pack") for blob in blobs}
    assert {f["match"] for f in findings} == {"ngram"}


def test_git_bundle_and_a_pack_under_another_name(tmp_path: Path, tasks: dict[str, Task]) -> None:
    """History carried as a bundle (``git bundle create``), and a pack file renamed: both read."""
    task = tasks["body"]
    repo, _ = _history_with_the_original(tmp_path / "repo", task)
    ws = workspace(tmp_path / "ws", task)
    git(repo, "bundle", "create", "-q", str(ws / "history.bundle"), "--all")
    git(repo, "repack", "-a", "-d", "-q")
    (pack,) = (repo / ".git/objects/pack").glob("*.pack")
    shutil.copy(pack, ws / "data.bin")
    found = located(task.audit(ws), ws)
    blob = original_blob(repo)
    assert (f"history.bundle!pack!{blob}", "git-bundle") in found
    assert (f"data.bin!{blob}", "git-pack") in found


def test_thin_git_bundle(tmp_path: Path, tasks: dict[str, Task]) -> None:
    """A bundle of the commits after the start state (``git bundle create start..HEAD``) holds a
    thin pack: the original module is a delta against the start state's version, whose base is
    not in the bundle. What the delta inserts, the removed body, is read."""
    task = tasks["body"]
    ws = workspace(tmp_path / "ws", task)
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(ws), str(clone))
    shutil.copy(ORIGINAL / FEATURE["body"], clone / FEATURE["body"])
    git(clone, "commit", "-q", "-am", "the feature back")
    git(clone, "bundle", "create", "-q", str(ws / "later.bundle"), "origin/main..main")
    findings = task.audit(ws)
    located_in = [(os.path.relpath(f["path"], ws).split("!")[0], f["kind"]) for f in findings]
    assert located_in == [("later.bundle", "git-bundle")]
    assert "!pack!delta-" in findings[0]["path"] and findings[0]["match"] == "ngram"


def test_git_alternates_are_followed(tmp_path: Path, tasks: dict[str, Task]) -> None:
    """A start state that borrows objects from a store outside the scanned roots: the store is read."""
    task = tasks["body"]
    ws = workspace(tmp_path / "ws", task)
    store = tmp_path / "elsewhere" / "objects"
    store.mkdir(parents=True)
    blob = git(ws, "hash-object", str(ORIGINAL / "stanzakit/headers.py")).strip()
    git(ws, "--git-dir", str(tmp_path / "elsewhere"), "init", "-q", "--bare")
    git(tmp_path / "elsewhere", "hash-object", "-w", str(ORIGINAL / "stanzakit/headers.py"))
    (ws / ".git/objects/info").mkdir(parents=True, exist_ok=True)
    (ws / ".git/objects/info/alternates").write_text(f"{store}\n")
    assert (str(store / blob[:2] / blob[2:]), "git-loose") in located(task.audit(ws), ws)


def test_git_stash_entry(tmp_path: Path, tasks: dict[str, Task]) -> None:
    task = tasks["symbol"]
    ws = workspace(tmp_path / "ws", task)
    shutil.copy(ORIGINAL / "stanzakit/headers.py", ws / "stanzakit/headers.py")
    git(ws, "stash", "-q")
    assert (ws / "stanzakit/headers.py").read_text() == task.start["stanzakit/headers.py"]
    blob = original_blob(ws)
    assert located(task.audit(ws), ws) == {(f".git/objects/{blob[:2]}/{blob[2:]}", "git-loose")}


@pytest.mark.parametrize("storage", ["loose", "packed"])
def test_git_reflog_of_an_amended_commit(tmp_path: Path, tasks: dict[str, Task], storage: str) -> None:
    task = tasks["module"]
    repo = tmp_path / "ws"
    write_tree(repo, project_files())
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "import")
    for path in TASKS["module"]["start"]:
        (repo / path).unlink()
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--amend", "-m", "start state")  # the original lives on in the reflog
    assert "import" in git(repo, "reflog")
    if storage == "packed":
        git(repo, "gc", "-q")
    blob = git(repo, "hash-object", str(ORIGINAL / "stanzakit/ledger.py")).strip()
    test_blob = git(repo, "hash-object", str(ORIGINAL / "tests/test_ledger.py")).strip()
    found = located(task.audit(repo), repo)
    if storage == "loose":
        assert found == {(f".git/objects/{b[:2]}/{b[2:]}", "git-loose") for b in (blob, test_blob)}
    else:
        (pack,) = (repo / ".git/objects/pack").glob("*.pack")
        assert found == {(f".git/objects/pack/{pack.name}!{b}", "git-pack") for b in (blob, test_blob)}


# ---------------------------------------------------------------------------------------------
# Copies in other forms: backups, docs, notebooks, stubs, Java
# ---------------------------------------------------------------------------------------------


def test_orig_backup(tmp_path: Path, tasks: dict[str, Task]) -> None:
    task = tasks["body"]
    ws = workspace(tmp_path / "ws", task)
    shutil.copy(ORIGINAL / "stanzakit/headers.py", ws / "stanzakit/headers.py.orig")
    assert located(task.audit(ws), ws) == {("stanzakit/headers.py.orig", "text")}


def test_built_docs_page_with_highlighted_source(tmp_path: Path, tasks: dict[str, Task]) -> None:
    pygments = pytest.importorskip("pygments")
    from pygments.formatters import HtmlFormatter  # type: ignore[import-untyped]
    from pygments.lexers import PythonLexer  # type: ignore[import-untyped]

    task = tasks["body"]
    ws = workspace(tmp_path / "ws", task)
    page = ws / "docs/_build/html/_modules/stanzakit/headers.html"
    page.parent.mkdir(parents=True)
    source = (ORIGINAL / "stanzakit/headers.py").read_text()
    page.write_text(pygments.highlight(source, PythonLexer(), HtmlFormatter(full=True, linenos="table")))
    assert '<span class="n">split_stanza</span>' in page.read_text()  # one span per token
    findings = task.audit(ws)
    assert located(findings, ws) == {("docs/_build/html/_modules/stanzakit/headers.html", "html")}
    assert findings[0]["match"] == "ngram"


def test_notebook_checkpoint(tmp_path: Path, tasks: dict[str, Task]) -> None:
    task = tasks["symbol"]
    ws = workspace(tmp_path / "ws", task)
    source = (ORIGINAL / "stanzakit/headers.py").read_text()
    cell = source[source.index("def fold_widget_header"):source.index("class StanzaParser")]
    notebook = {
        "nbformat": 4, "nbformat_minor": 5, "metadata": {"language_info": {"name": "python"}},
        "cells": [
            {"cell_type": "markdown", "id": "a1", "metadata": {}, "source": ["# Trying the folder\n"]},
            {"cell_type": "code", "id": "b2", "metadata": {}, "execution_count": 1, "outputs": [],
             "source": cell.splitlines(keepends=True)},
        ],
    }
    target = ws / "notebooks/.ipynb_checkpoints/explore-checkpoint.ipynb"
    target.parent.mkdir(parents=True)
    target.write_text(json.dumps(notebook, indent=1))
    findings = task.audit(ws)
    assert located(findings, ws) == {("notebooks/.ipynb_checkpoints/explore-checkpoint.ipynb", "notebook")}
    assert findings[0]["match"] == "ngram"


def test_stub_with_the_removed_signature(tmp_path: Path, tasks: dict[str, Task]) -> None:
    task = tasks["symbol"]
    ws = workspace(tmp_path / "ws", task)
    (ws / "stanzakit/headers.pyi").write_text(
        "SEPARATOR: str\n\n"
        "def split_stanza(line: str) -> list[str]: ...\n"
        "def fold_widget_header(line: str, *, strict: bool = ..., limit: int = ...) -> list[str]: ...\n\n"
        "class StanzaParser:\n"
        "    stanzas: list[list[str]]\n"
        "    def __init__(self) -> None: ...\n"
        "    def feed(self, line: str) -> None: ...\n"
    )
    findings = task.audit(ws)
    assert located(findings, ws) == {("stanzakit/headers.pyi", "text")}
    assert findings[0]["match"] == "signature"


@pytest.mark.parametrize("strategy", ["body", "symbol"])
def test_compiled_java_class(tmp_path: Path, tasks: dict[str, Task], strategy: str) -> None:
    # StanzaFolder.class (javac, committed with its source) carries the removed function's name
    # and constants in its constant pool: the audit is not Python-only.
    task = tasks[strategy]
    ws = workspace(tmp_path / "ws", task)
    (ws / "build/classes").mkdir(parents=True)
    shutil.copy(FIXTURES / "java/StanzaFolder.class", ws / "build/classes/StanzaFolder.class")
    findings = task.audit(ws)
    assert located(findings, ws) == {("build/classes/StanzaFolder.class", "java-class")}
    evidence = {(e["match"], e["value"]) for e in findings[0]["evidence"]}
    assert {("constant", "widget header lacks a stanza separator"), ("constant", "continued-stanza")} <= evidence
    members = {("name", "java member fold_widget_header"), ("name", "java member _merge_continuations")}
    # Method names are evidence only where the task removed them.
    assert members <= evidence if strategy == "symbol" else not members & evidence


# ---------------------------------------------------------------------------------------------
# Compiled programs, core dumps and archives behind a prefix
# ---------------------------------------------------------------------------------------------

SHORT_CONSTANTS = ("continued-stanza", "gear teeth", "#widget-remark", "stanza-overflow:")
"""Short strings of the body task's hidden tests and removed body: each alone is weak evidence;
two of them in one file reach the report score."""


def _header(kind: str) -> bytes:
    """The start of a file of ``kind``: the real interpreter's ELF header (a program), the same
    marked as a core dump, a Mach-O executable, a PE program, or no known format."""
    elf = Path(sys.executable).resolve().read_bytes()[:64]
    if kind == "elf":
        return elf
    if kind == "elf-core":
        return elf[:16] + (4).to_bytes(2, "little" if elf[5] == 1 else "big") + elf[18:]
    if kind == "mach-o":
        return b"\xcf\xfa\xed\xfe" + (0x01000007).to_bytes(4, "little") + bytes(4) + (2).to_bytes(4, "little")
    if kind == "pe":
        return b"MZ" + bytes(0x3A) + (0x40).to_bytes(4, "little") + b"PE\x00\x00" + bytes(20)
    return b"\x00BLOB\x00"


def _binary_with(kind: str, strings: tuple[str, ...], *, spacing: int) -> bytes:
    """A binary of ``kind`` holding ``strings`` NUL-terminated, ``spacing`` bytes of machine code
    (seeded noise) apart: a program's string table is far from source."""
    noise = random.Random(7).randbytes(spacing)
    body = b"".join(noise + s.encode() + b"\x00" for s in strings)
    return _header(kind) + body + noise


@pytest.mark.parametrize("kind", ["elf", "mach-o", "pe"])
def test_compiled_program_holding_short_strings_by_chance(tmp_path: Path, tasks: dict[str, Task], kind: str) -> None:
    # A linter's executable held a dozen of a project's short test strings, scattered over
    # megabytes among its own: that is no copy of the tests.
    task = tasks["body"]
    ws = workspace(tmp_path / "ws", task)
    (ws / "bin").mkdir()
    (ws / "bin/linter").write_bytes(_binary_with(kind, SHORT_CONSTANTS, spacing=64 * 1024))
    assert task.audit(ws) == []


@pytest.mark.parametrize("kind", ["elf-core", "blob"])
def test_short_strings_count_in_a_core_dump_or_unknown_binary(tmp_path: Path, tasks: dict[str, Task],
                                                              kind: str) -> None:
    # A core dump is the memory of a process, which may have run the original code: the same
    # scattered strings are evidence there, as in any binary that is not a program.
    task = tasks["body"]
    ws = workspace(tmp_path / "ws", task)
    (ws / "core.1234").write_bytes(_binary_with(kind, SHORT_CONSTANTS, spacing=64 * 1024))
    findings = task.audit(ws)
    assert located(findings, ws) == {("core.1234", "binary")}
    assert sorted(e["match"] for e in findings[0]["evidence"]) == ["constant"] * len(SHORT_CONSTANTS)


def test_short_strings_that_cluster_in_a_program_count(tmp_path: Path, tasks: dict[str, Task]) -> None:
    # Three of the hidden tests' strings side by side in a program's data: copied test data.
    task = tasks["body"]
    ws = workspace(tmp_path / "ws", task)
    (ws / "libstanza.so").write_bytes(_binary_with("elf", SHORT_CONSTANTS[:3], spacing=40))
    assert located(task.audit(ws), ws) == {("libstanza.so", "binary")}


def test_short_strings_beside_other_evidence_in_a_program_count(tmp_path: Path, tasks: dict[str, Task]) -> None:
    # A compiled module of the original also holds a name of the removed code: then its short
    # strings count with it, however far apart.
    task = tasks["symbol"]
    ws = workspace(tmp_path / "ws", task)
    name = next(n for n in task.fingerprint.names if "." not in n and not n.startswith("test"))
    program = _binary_with("elf", (*SHORT_CONSTANTS[:2], f"def {name}(x):"), spacing=64 * 1024)
    (ws / "headers.cpython-311-x86_64-linux-gnu.so").write_bytes(program)
    findings = task.audit(ws)
    assert located(findings, ws) == {("headers.cpython-311-x86_64-linux-gnu.so", "binary")}
    assert {e["match"] for e in findings[0]["evidence"]} >= {"name", "constant"}


def test_a_build_of_the_project_keeps_its_short_strings(tmp_path: Path, tasks: dict[str, Task]) -> None:
    # A Cython, mypyc or Nuitka build of the original module names it; a removed body shows in
    # it only as its strings, short ones included.
    task = tasks["body"]
    assert "stanzakit.headers" in task.fingerprint.modules
    ws = workspace(tmp_path / "ws", task)
    program = _binary_with("elf", ("stanzakit/headers.py", *SHORT_CONSTANTS[:2]), spacing=64 * 1024)
    (ws / "stanzakit/headers.cpython-311-x86_64-linux-gnu.so").write_bytes(program)
    assert located(task.audit(ws), ws) == {("stanzakit/headers.cpython-311-x86_64-linux-gnu.so", "binary")}


def test_a_zip_member_that_cannot_be_read_leaves_the_others_read(tmp_path: Path, tasks: dict[str, Task]) -> None:
    # An unsupported compression method on the first member (as an encrypted one fails too): the
    # stored original behind it is still read, as a member and in the archive's raw bytes.
    task = tasks["symbol"]
    ws = workspace(tmp_path / "ws", task)
    with zipfile.ZipFile(tmp_path / "bundle.zip", "w", zipfile.ZIP_STORED) as zipped:
        zipped.writestr("README", "nothing here\n" * 20)
        zipped.writestr("stanzakit/headers.py", (ORIGINAL / "stanzakit/headers.py").read_bytes())
    bundle = bytearray((tmp_path / "bundle.zip").read_bytes())
    for header in (b"PK\x03\x04", b"PK\x01\x02"):  # the first member's method: 99
        offset = bundle.index(header) + (8 if header == b"PK\x03\x04" else 10)
        bundle[offset:offset + 2] = b"c\x00"
    (ws / "tools").mkdir()
    (ws / "tools/bundle.zip").write_bytes(bytes(bundle))
    (ws / "tools/installer").write_bytes(_binary_with("elf", (), spacing=4096) + bytes(bundle))
    assert located(task.audit(ws), ws) >= {("tools/bundle.zip!/stanzakit/headers.py", "zip"),
                                           ("tools/installer!/stanzakit/headers.py", "zip")}


def _ar_archive(members: Mapping[str, bytes]) -> bytes:
    """A GNU ``ar`` archive (``ar rc``), long names in its ``//`` table."""
    table = b"".join(name.encode() + b"/\n" for name in members if len(name) > 15)
    out = [b"!<arch>\n"]
    if table:
        out.append(b"//".ljust(48) + str(len(table)).encode().ljust(10) + b"`\n" + table + b"\n" * (len(table) & 1))
    offset = 0
    for name, content in members.items():
        if len(name) > 15:
            field = f"/{offset}".encode()
            offset += len(name) + 2
        else:
            field = f"{name}/".encode()
        header = field.ljust(16) + b"0".ljust(12) + b"0".ljust(6) + b"0".ljust(6) + b"100644".ljust(8)
        out.append(header + str(len(content)).encode().ljust(10) + b"`\n" + content + b"\n" * (len(content) & 1))
    return b"".join(out)


def test_a_static_library_is_read_as_the_objects_it_holds(tmp_path: Path, tasks: dict[str, Task]) -> None:
    # libpython3.11.a held two of a project's short test strings in two objects: objects are
    # programs, and a static library is no unknown blob.
    task = tasks["body"]
    ws = workspace(tmp_path / "ws", task)
    objects = {f"module_{i}_with_a_long_name.o": _binary_with("elf", (constant,), spacing=8192)
               for i, constant in enumerate(SHORT_CONSTANTS)}
    (ws / "libthing.a").write_bytes(_ar_archive(objects))
    assert task.audit(ws) == []


def _headers_tarball(mode: str, arcname: str = "stanzakit/headers.py") -> bytes:
    """A tarball (``mode``: ``w:gz``, ``w:xz``) holding the original ``stanzakit/headers.py``."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode=mode) as tar:
        tar.add(ORIGINAL / "stanzakit/headers.py", arcname=arcname)
    return data.getvalue()


def test_a_debian_package_is_opened(tmp_path: Path, tasks: dict[str, Task]) -> None:
    task = tasks["symbol"]
    ws = workspace(tmp_path / "ws", task)
    data = _headers_tarball("w:xz", arcname="./usr/lib/python3/dist-packages/stanzakit/headers.py")
    deb = _ar_archive({"debian-binary": b"2.0\n", "control.tar.gz": gzip.compress(b"\0" * 1024),
                       "data.tar.xz": data})
    (ws / "python3-stanzakit_1.0_all.deb").write_bytes(deb)
    path = "python3-stanzakit_1.0_all.deb!/data.tar.xz!/usr/lib/python3/dist-packages/stanzakit/headers.py"
    assert located(task.audit(ws), ws) == {(path, "ar")}


@pytest.mark.parametrize("payload", ["frozen", "tarball", "small installer"])
def test_compressed_streams_inside_a_program(tmp_path: Path, tasks: dict[str, Task], payload: str) -> None:
    # A frozen application (PyInstaller: the project's modules marshalled, each a zlib stream in
    # an archive appended to the program) and an installer with a tarball behind its code (a
    # small one too: a tarball's padding inflates to many times the file's size).
    task = tasks["symbol"]
    ws = workspace(tmp_path / "ws", task)
    source = (ORIGINAL / "stanzakit/headers.py").read_text()
    if payload == "frozen":
        inner = zlib.compress(marshal.dumps(compile(source, "stanzakit/headers.py", "exec")))
        kind = "zlib"
    else:
        inner = _headers_tarball("w:gz")
        kind = "tar"
    (ws / "tools").mkdir()
    spacing = 64 if payload == "small installer" else 64 * 1024
    (ws / "tools/app").write_bytes(_binary_with("elf", (), spacing=spacing) + inner + bytes(64))
    assert payload != "small installer" or len((ws / "tools/app").read_bytes()) * 8 < len(gzip.decompress(inner))
    found = located(task.audit(ws), ws)
    assert found and all(path.startswith("tools/app!@0x") and k == kind for path, k in found), found


def test_damaged_binaries_end_neither_the_file_nor_the_walk(tmp_path: Path, tasks: dict[str, Task]) -> None:
    # A red team's finds: an ar member whose size is negative looped for ever; mutated marshalled
    # code made marshal raise SystemError, which ended the whole scan. Each is a damaged file now,
    # and the copy beside them is still found.
    task = tasks["symbol"]
    root = tmp_path / "tmp"
    root.mkdir()
    (root / "neg.a").write_bytes(b"!<arch>\n" + b"x.o/".ljust(48) + b"-60".ljust(10) + b"`\n" + bytes(64))
    shutil.copy(FIXTURES / "damaged/marshalled-code-systemerror.bin", root / "frozen_entry")
    with pytest.raises(SystemError):
        marshal.loads((root / "frozen_entry").read_bytes())
    shutil.copy(ORIGINAL / "stanzakit/headers.py", root / "headers.py.bak")
    done: list[dict[str, Any]] = []
    worker = threading.Thread(target=lambda: done.append(
        scan({"fingerprints": {"t": task.fingerprint.to_json()}, "roots": [str(root)]})), daemon=True)
    worker.start()
    worker.join(120)
    assert done, "the scan did not end"
    assert str(root / "headers.py.bak") in {f["path"] for f in done[0]["findings"]["t"]}
    assert [s["path"] for s in done[0]["skipped"]] == [str(root / "neg.a")]


def test_image_data_in_a_binary_spends_no_budget(tmp_path: Path, tasks: dict[str, Task]) -> None:
    # A dark screenshot's pixel rows inflate to printable bytes ("(,4(,4..."): no text, so its
    # streams are not inflated, and 48 of them no longer use up the budget whose end fails closed.
    task = tasks["symbol"]
    root = tmp_path / "docs"
    root.mkdir()
    rows = zlib.compress((b"\x00" + b"(,4" * 1920) * 1080)
    for i in range(48):
        (root / f"shot{i}.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(16) + rows + bytes(12))
    result = scan({"fingerprints": {"t": task.fingerprint.to_json()}, "roots": [str(root)],
                   "max_file_bytes": 4 * 1024 * 1024})
    assert result["skipped"] == [] and result["findings"]["t"] == []


def test_base64_keeps_its_last_group() -> None:
    # A base64 blob whose data is not a multiple of 3 bytes lost its last bytes, and an embedded
    # wheel of such a size read as a damaged zip.
    for size in range(1, 64):
        data = bytes(range(size))
        encoded = base64.b64encode(data)
        assert scanner._b64decode(encoded) == data
        assert scanner._b64decode(encoded.rstrip(b"=")) == data


@pytest.mark.parametrize("prefix", ["shebang", "program", "program, and a trailer after the zip"])
def test_zip_behind_a_prefix(tmp_path: Path, tasks: dict[str, Task], prefix: str) -> None:
    # A zipapp (compressed, behind its shebang) or a self-extracting program with the original
    # package appended: the members are read, not the compressed bytes as a binary. A red team
    # appended 100 KiB after the zip, which puts its end record out of a zip reader's sight.
    task = tasks["symbol"]
    ws = workspace(tmp_path / "ws", task)
    source = write_tree(tmp_path / "app", {"stanzakit/headers.py": (ORIGINAL / "stanzakit/headers.py").read_text(),
                                             "__main__.py": "import stanzakit.headers\n"})
    zipapp.create_archive(source, tmp_path / "app.pyz", interpreter="/usr/bin/env python3", compressed=True)
    archive = (tmp_path / "app.pyz").read_bytes()
    if prefix.startswith("program"):
        archive = _binary_with("elf", (), spacing=256 * 1024) + archive.split(b"\n", 1)[1]
    if prefix.endswith("trailer after the zip"):
        archive += random.Random(3).randbytes(100 * 1024)
    (ws / "tools").mkdir()
    (ws / "tools/app").write_bytes(archive)
    assert located(task.audit(ws), ws) == {("tools/app!/stanzakit/headers.py", "zip")}


def test_a_tarball_behind_a_long_shell_script(tmp_path: Path, tasks: dict[str, Task]) -> None:
    # An installer (makeself and its kind): a shell script longer than the 8 KiB that decide
    # whether a file is text, then a gzipped tarball of the original package. Read as text
    # alone, the payload went unread.
    task = tasks["symbol"]
    ws = workspace(tmp_path / "ws", task)
    script = "#!/bin/sh\n" + "".join(f"echo 'installing step {i} of the bundled tools'\n" for i in range(400))
    script += 'tail -c +"$OFFSET" "$0" | tar xz\nexit 0\n'
    assert len(script) > 8192
    (ws / "tools").mkdir()
    (ws / "tools/install.sh").write_bytes(script.encode() + _headers_tarball("w:gz"))
    found = located(task.audit(ws), ws)
    assert found and all(path.startswith("tools/install.sh!@") for path, _ in found), found


# ---------------------------------------------------------------------------------------------
# Encoded copies: base64, hex, bare zlib and lzma streams, rot13, UTF-16 and UTF-32
# ---------------------------------------------------------------------------------------------


def _python_string(encoded: str, width: int = 60) -> str:
    """``encoded`` as a Python module spells a long literal: implicitly joined pieces."""
    pieces = "\n".join(f'    "{encoded[i:i + width]}"' for i in range(0, len(encoded), width))
    return f"FOLDER = (\n{pieces}\n)\n"


def _in_python(data: bytes) -> bytes:
    return _python_string(base64.b64encode(data).decode()).encode()


def _in_json(data: bytes) -> bytes:
    return json.dumps({"d": base64.urlsafe_b64encode(zlib.compress(data)).decode()}).encode()


def _escaped(data: bytes) -> bytes:
    return ("DATA = b'" + "".join(f"\\x{c:02x}" for c in data) + "'\n").encode()


def _text_as(encoding: str) -> Callable[[bytes], bytes]:
    return lambda data: data.decode().encode(encoding)


ENCODED: dict[str, tuple[str, Callable[[bytes], bytes], str]] = {
    # name: (file, how the original module is written into it, the channel reported)
    "base64": ("notes/blob.txt", base64.b64encode, "base64"),
    "base64, MIME lines": ("notes/blob.eml", base64.encodebytes, "base64"),
    "base64 in a Python literal": ("notes/blob.py", _in_python, "base64"),
    "urlsafe base64 of zlib, in JSON": ("notes/blob.json", _in_json, "base64"),
    "hex": ("notes/blob.hex", lambda data: data.hex().encode(), "hex"),
    "hex escapes": ("notes/blob.py", _escaped, "hex"),
    "zlib stream": ("notes/blob.z", zlib.compress, "zlib"),
    "lzma stream": ("notes/blob.lzma", lambda data: lzma.compress(data, format=lzma.FORMAT_ALONE), "lzma"),
    "rot13": ("notes/blob.txt", lambda data: codecs.encode(data.decode(), "rot13").encode(), "rot13"),
    "utf-16": ("notes/blob.txt", _text_as("utf-16"), "utf-16"),
    "utf-16-be without a mark": ("notes/blob.txt", _text_as("utf-16-be"), "utf-16"),
    "utf-32": ("notes/blob.txt", _text_as("utf-32"), "utf-32"),
}


@pytest.mark.parametrize("encoding", sorted(ENCODED))
def test_encoded_copy(tmp_path: Path, tasks: dict[str, Task], encoding: str) -> None:
    task = tasks["body"]
    ws = workspace(tmp_path / "ws", task)
    path, encode, channel = ENCODED[encoding]
    (ws / path).parent.mkdir(parents=True, exist_ok=True)
    (ws / path).write_bytes(encode((ORIGINAL / FEATURE["body"]).read_bytes()))
    findings = task.audit(ws)
    assert {(os.path.relpath(f["path"].split("!")[0], ws), f["kind"]) for f in findings} == {(path, channel)}
    assert {f["match"] for f in findings} == {"ngram"}


def test_what_the_decoding_budget_leaves_is_reported_unread(tmp_path: Path, tasks: dict[str, Task]) -> None:
    """Fail closed: blobs beyond the scan's decoding budget are skips that make a start state
    unclean (``unread``), not blobs passed over."""
    task = tasks["body"]
    root = tmp_path / "blobs"
    root.mkdir()
    texts = [base64.b64encode(b"# note %d, an ordinary one: nothing removed in it\n" % i * 120) for i in range(6)]
    for i, text in enumerate(texts):
        (root / f"note{i}.txt").write_bytes(text)
    limit = len(texts[0]) + 16  # files up to this size are read; a budget of four times it decodes four blobs
    result = scan({"fingerprints": {"t": task.fingerprint.to_json()}, "roots": [str(root)], "max_file_bytes": limit})
    over = [s for s in result["skipped"] if s["reason"].startswith("decoding past the budget")]
    assert len(over) == 2 and all(unread(s["reason"]) for s in over)
    assert result["findings"] == {"t": []}


# ---------------------------------------------------------------------------------------------
# Copies the start state keeps: compared with the original, not left out as visible
# ---------------------------------------------------------------------------------------------


def removed_code(strategy: str) -> str:
    """The removed implementation as a copy would hold it: the function, or the whole module."""
    if strategy == "module":
        return (ORIGINAL / FEATURE["module"]).read_text()
    source = (ORIGINAL / FEATURE[strategy]).read_text()
    return source[source.index("def fold_widget_header"):source.index("def _merge_continuations")]


def original_module(strategy: str) -> str:
    return (ORIGINAL / FEATURE[strategy]).read_text()


def _doctest(code: str) -> str:
    lines = code.rstrip("\n").splitlines()
    return "\n".join([">>> " + lines[0], *("... " + line for line in lines[1:])]) + "\n"


def _commented(code: str) -> str:
    return "import sys\n\nPY2 = sys.version_info < (3,)\n\n" + textwrap.indent(code, "# ", lambda line: True)


def _docs_page(code: str) -> str:
    return "Folding\n=======\n\n.. code-block:: python\n\n" + textwrap.indent(code, "    ")


KEPT: dict[str, Callable[[str], tuple[str, str, str]]] = {
    # name: strategy -> (the file kept, its text, the channel reported)
    "stub": lambda s: ("stanzakit/copy.pyi", "SEPARATOR: str\n\n\n" + removed_code(s), "text"),
    "docs code block": lambda s: ("docs/folding.rst", _docs_page(removed_code(s)), "text"),
    "doctest session": lambda s: ("docs/folding.md", "Folding by hand:\n\n" + _doctest(removed_code(s)), "quoted"),
    "backup under a name the scrub does not know": lambda s: (FEATURE[s] + ".keep", original_module(s), "text"),
    "stale Python module": lambda s: (FEATURE[s].replace(".py", "_old.py"), original_module(s), "text"),
    "a Python name no import reaches": lambda s: (FEATURE[s] + " pre-refactor.py", original_module(s), "text"),
    "commented out": lambda s: ("stanzakit/compat.py", _commented(removed_code(s)), "quoted"),
    "base64 in a module": lambda s: ("stanzakit/_resources.py", _in_python(removed_code(s).encode()).decode(),
                                     "base64"),
    "hex in test data": lambda s: ("tests/data/fold.json", json.dumps({"payload": removed_code(s).encode().hex()}),
                                   "hex"),
    "rot13 note": lambda s: ("notes/fold.txt", codecs.encode(removed_code(s), "rot13"), "rot13"),
}


@pytest.mark.parametrize("strategy", ["body", "symbol", "module"])
@pytest.mark.parametrize("channel", sorted(KEPT))
def test_a_start_state_that_keeps_a_copy(tmp_path: Path, tasks: dict[str, Task], channel: str, strategy: str) -> None:
    """A verbatim copy of the removed implementation that the start state itself keeps: the
    fingerprint used to leave out everything visible, copies included. Compared with the
    original, each is a finding, reported once (its git blob is the same text)."""
    task = tasks[strategy]
    path, text, kind = KEPT[channel](strategy)
    findings = task.audit_kept(tmp_path / "ws", {path: text})
    assert [(f["path"], f["kind"], f["match"]) for f in findings] == [(f"/workspace/{path}", kind, "copy")]


@pytest.mark.parametrize("strategy", ["body", "symbol", "module"])
def test_what_the_task_shows_is_no_copy(tmp_path: Path, tasks: dict[str, Task], strategy: str) -> None:
    """What a start state legitimately shows of the removed code: docs that spell out the
    signature, quote the docstring and show a call, a stub of the interface, a README example.
    None of it is a copy of the implementation."""
    if strategy == "module":
        kept = {
            "docs/api.rst": (".. automodule:: stanzakit.ledger\n\n"
                             ".. function:: tally_widget_counts(lines, *, default_kind=None)\n\n"
                             "   Tally how many widgets of each kind a manifest declares.\n"),
            "stanzakit/ledger.pyi": ("class WidgetLedger:\n"
                                     "    def record(self, kind: str, amount: int) -> None: ...\n\n"
                                     "def tally_widget_counts(lines: list[str], *, default_kind: str = ...)"
                                     " -> dict[str, int]: ...\n"),
        }
    else:
        kept = {
            "docs/api.rst": (
                ".. function:: fold_widget_header(line: str, *, strict: bool = False, limit: int = 3) -> list[str]\n\n"
                "   Fold a widget header line into its stanza parts, merging continuation markers.\n\n"
                "   >>> fold_widget_header('gear :: continued-stanza teeth :: 3')\n   ['gear teeth', '3']\n"
            ),
            "stanzakit/headers.pyi": ("SEPARATOR: str\n\ndef split_stanza(line: str) -> list[str]: ...\n"
                                      "def fold_widget_header(line: str, *, strict: bool = ..., limit: int = ...)"
                                      " -> list[str]: ...\n"),
            "README.md": ("```python\nfrom stanzakit import fold_widget_header\n\n"
                          "fold_widget_header(line, strict=True)\n```\n"),
        }
    assert tasks[strategy].audit_kept(tmp_path / "ws", kept) == []


# ---------------------------------------------------------------------------------------------
# Several tasks in one scan; the script itself
# ---------------------------------------------------------------------------------------------


def test_one_scan_serves_every_task_of_a_repository(tmp_path: Path, tasks: dict[str, Task]) -> None:
    # A shared image layer holds the ledger module's bytecode: a leak for the module task only.
    layer = tmp_path / "layer"
    layer.mkdir()
    py_compile.compile(str(ORIGINAL / "stanzakit/ledger.py"), cfile=str(layer / "ledger.pyc"), doraise=True)
    result = scan({"fingerprints": {s: t.fingerprint.to_json() for s, t in tasks.items()}, "roots": [str(layer)]})
    assert {s: len(f) for s, f in result["findings"].items()} == {"body": 0, "symbol": 0, "module": 1}


def test_damaged_containers_are_skipped_and_the_scan_goes_on(tmp_path: Path, tasks: dict[str, Task]) -> None:
    task = tasks["symbol"]
    root = tmp_path / "tmp"
    root.mkdir()
    headers = (ORIGINAL / "stanzakit/headers.py").read_bytes()
    (root / "pack-broken.pack").write_bytes(b"PACK\x00\x00\x00\x02\x00\x00\x00\x05" + b"\x95\x0axx")
    (root / "truncated.py.gz").write_bytes(gzip.compress(b"# nothing removed here\n" * 50)[:40])
    with zipfile.ZipFile(root / "odd.zip", "w", zipfile.ZIP_DEFLATED) as zipped:
        zipped.writestr("stanzakit/headers.py", headers)
    odd = bytearray((root / "odd.zip").read_bytes())
    for header in (b"PK\x03\x04", b"PK\x01\x02"):  # compression method 99: unsupported
        offset = odd.index(header) + (8 if header == b"PK\x03\x04" else 10)
        odd[offset:offset + 2] = b"c\x00"
    (root / "odd.zip").write_bytes(bytes(odd))
    shutil.copy(ORIGINAL / "stanzakit/headers.py", root / "headers.py.bak")
    result = scan({"fingerprints": {"t": task.fingerprint.to_json()}, "roots": [str(root)]})
    assert [f["path"] for f in result["findings"]["t"]] == [str(root / "headers.py.bak")]
    skipped = {os.path.basename(s["path"].split("!")[0]) for s in result["skipped"]}
    assert skipped == {"pack-broken.pack", "truncated.py.gz", "odd.zip"}


def test_script_in_a_bare_interpreter(tmp_path: Path, tasks: dict[str, Task]) -> None:
    # The sandbox runs a copy of the file with its own Python, without taskforge: -I -S.
    task = tasks["symbol"]
    ws = workspace(tmp_path / "ws", task)
    script = shutil.copy(scanner.__file__, tmp_path / "audit_scan.py")
    request = {"fingerprints": {"t1": task.fingerprint.to_json()}, "roots": [str(ws)]}
    # The request file holds the fingerprint in clear text; placed inside a root, it must not
    # report itself (the script excludes its own request and file).
    request_file = ws / "audit-request.json"
    request_file.write_text(json.dumps(request))
    by_file = subprocess.run([sys.executable, "-I", "-S", script, str(request_file)],
                             capture_output=True, text=True, check=True)
    output = json.loads(by_file.stdout)
    assert output["findings"] == {"t1": []}
    assert output["files"] >= len(task.start) and output["bytes"] > 0 and output["seconds"] >= 0
    request_file.unlink()
    shutil.copy(ORIGINAL / "stanzakit/headers.py", ws / "headers.py.bak")
    by_stdin = subprocess.run([sys.executable, "-I", "-S", script], input=json.dumps(request),
                              capture_output=True, text=True, check=True)
    assert [f["path"] for f in json.loads(by_stdin.stdout)["findings"]["t1"]] == [str(ws / "headers.py.bak")]


# ---------------------------------------------------------------------------------------------
# Clean tasks: zero findings
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["body", "symbol", "module"])
def test_clean_start_state_has_no_findings(tmp_path: Path, tasks: dict[str, Task], strategy: str) -> None:
    # Everything the sandbox legitimately holds after a scrubbed setup: the start state in a fresh
    # one-commit repository (packed), its bytecode, pytest's cache of the visible tests, and an
    # installed copy of the start state in site-packages.
    task = tasks[strategy]
    ws = workspace(tmp_path / "ws", task)
    git(ws, "gc", "-q")
    result = run_python(ws, "-m", "pytest", "-q", "tests", env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert result.returncode == 0, result.stdout
    compileall.compile_dir(str(ws), quiet=1)
    site_packages = tmp_path / "site-packages"
    shutil.copytree(ws / "stanzakit", site_packages / "stanzakit")
    compileall.compile_dir(str(site_packages), quiet=1)
    assert (ws / ".pytest_cache/v/cache/nodeids").exists()
    assert task.audit(ws, site_packages) == []


def test_clean_start_state_with_a_mypy_cache_has_no_findings(tmp_path: Path, tasks: dict[str, Task]) -> None:
    pytest.importorskip("mypy")
    task = tasks["symbol"]
    ws = workspace(tmp_path / "ws", task)
    for flags in ([], ["--no-sqlite-cache", "--no-fixed-format-cache"]):
        cache = ws / f".mypy_cache{len(flags)}"
        result = run_python(ws, "-m", "mypy", "--cache-dir", str(cache), *flags, "stanzakit")
        assert result.returncode == 0, result.stdout
    assert task.audit(ws) == []


HOST_PACKAGES = ("_pytest", "pluggy", "hypothesis", "click", "pip", "setuptools", "coverage", "packaging",
                 "pygments", "git", "docker")
"""Installed packages scanned in place: about 40 MB of third-party code, text and bytecode."""


def host_site_packages() -> Iterator[Path]:
    for folder in site.getsitepackages():
        for name in HOST_PACKAGES:
            if (Path(folder) / name).is_dir():
                yield Path(folder) / name


def test_real_site_packages_have_no_findings(tasks: dict[str, Task]) -> None:
    roots = list(host_site_packages())
    assert len(roots) >= 4
    result = scan({"fingerprints": {s: t.fingerprint.to_json() for s, t in tasks.items()},
                   "roots": [str(r) for r in roots]})
    assert result["findings"] == {"body": [], "symbol": [], "module": []}
    assert result["files"] > 1000


@pytest.mark.slow
def test_whole_host_site_packages_have_no_findings(tasks: dict[str, Task]) -> None:
    result = scan({"fingerprints": {s: t.fingerprint.to_json() for s, t in tasks.items()},
                   "roots": site.getsitepackages()})
    assert result["findings"] == {"body": [], "symbol": [], "module": []}
