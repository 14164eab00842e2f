"""taskforge.repo.sources against real things: git repositories built here, file:// remotes, real PyPI sdists."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from taskforge.errors import SourceError
from taskforge.repo.sources import ParsedSource, Snapshot, fetch, parse_source

_IDENTITY = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.com",
    "GIT_COMMITTER_NAME": "Test Author",
    "GIT_COMMITTER_EMAIL": "author@example.com",
}


def git(cwd: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", "-c", "commit.gpgSign=false", "-c", "tag.gpgSign=false", *args],
        cwd=cwd,
        env={**os.environ, **_IDENTITY},
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.strip()


def commit_file(repo: Path, rel: str, text: str, message: str) -> str:
    (repo / rel).parent.mkdir(parents=True, exist_ok=True)
    (repo / rel).write_text(text)
    git(repo, "add", rel)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def leftovers(cache: Path) -> list[str]:
    """Everything under the cache dir: after a failed fetch there must be nothing (no .tmp-*, no entry)."""
    return sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*")) if cache.exists() else []


def assert_clean_checkout(snapshot: Snapshot) -> None:
    assert snapshot.path.is_dir()
    assert git(snapshot.path, "rev-parse", "HEAD") == snapshot.commit
    assert git(snapshot.path, "status", "--porcelain", "--untracked-files=all") == ""
    stored = Snapshot.from_json(json.loads((snapshot.path.parent / "snapshot.json").read_text()))
    assert (stored.commit, stored.path, stored.kind) == (snapshot.commit, snapshot.path, snapshot.kind)
    assert not [p for p in snapshot.path.parent.parent.parent.iterdir() if p.name.startswith(".tmp-")]


# --- parse_source --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("pypi:addict==2.4.0", ("pypi", "addict", "2.4.0")),
        ("pypi:addict", ("pypi", "addict", None)),
        ("pypi:backports.zoneinfo == 0.2.1", ("pypi", "backports.zoneinfo", "0.2.1")),
        ("https://github.com/o/r.git", ("git", "https://github.com/o/r.git", None)),
        ("https://github.com/o/r.git@v1.2", ("git", "https://github.com/o/r.git", "v1.2")),
        ("https://user@host.example/o/r.git", ("git", "https://user@host.example/o/r.git", None)),
        ("https://user@host.example/o/r@main", ("git", "https://user@host.example/o/r", "main")),
        ("http://h/r.git@" + "a" * 40, ("git", "http://h/r.git", "a" * 40)),
        ("ssh://git@h:2222/o/r.git@dev", ("git", "ssh://git@h:2222/o/r.git", "dev")),
        ("git://h/r.git", ("git", "git://h/r.git", None)),
        ("file:///srv/repos/r.git@v2", ("git", "file:///srv/repos/r.git", "v2")),
        ("git@github.com:owner/repo.git", ("git", "git@github.com:owner/repo.git", None)),
        ("git@github.com:owner/repo.git@main", ("git", "git@github.com:owner/repo.git", "main")),
        ("git@github.com:repo.git@v3", ("git", "git@github.com:repo.git", "v3")),
        # a rev cannot hold '/': the '@' must come after the URL's last '/'
        ("https://h/r.git@feature/x", ("git", "https://h/r.git@feature/x", None)),
        ("/abs/path/to/proj", ("local", "/abs/path/to/proj", None)),
    ],
)
def test_parse_source(spec: str, expected: tuple[str, str, str | None]) -> None:
    parsed = parse_source(spec)
    assert isinstance(parsed, ParsedSource)
    assert tuple(parsed) == expected


def test_parse_source_resolves_relative_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert parse_source("sub/proj") == ParsedSource(kind="local", target=str(tmp_path.resolve() / "sub/proj"), ref=None)
    assert parse_source("./proj@x").target == str(tmp_path.resolve() / "proj@x")  # local paths take no rev


@pytest.mark.parametrize(
    "spec",
    ["", "   ", "pypi:", "pypi:addict==", "pypi:addict>=2", "pypi:-bad", "pypi:addict==not a version",
     "ftp://h/r.git", "https://host.example", "https://h/r.git@", "https://h/r.git@-x", "https://h/"],
)  # fmt: skip
def test_parse_source_rejects_malformed_specs(spec: str) -> None:
    with pytest.raises(SourceError) as info:
        parse_source(spec)
    assert info.value.reason == "source_invalid"
    assert "\n" not in str(info.value)


def test_snapshot_json_round_trip_and_validation(tmp_path: Path) -> None:
    snapshot = Snapshot(name="r", source="https://h/r.git@v1", kind="git", commit="a" * 40, path=tmp_path, version=None)
    assert Snapshot.from_json(snapshot.to_json()) == snapshot
    with pytest.raises(ValueError, match="commit"):
        Snapshot(name="r", source="x", kind="git", commit="abc", path=tmp_path, version=None)
    with pytest.raises(ValueError, match="kind"):
        Snapshot(name="r", source="x", kind="svn", commit="a" * 40, path=tmp_path)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="version"):
        Snapshot(name="r", source="x", kind="pypi", commit="a" * 40, path=tmp_path, version=None)


# --- PyPI ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def iniconfig(tmp_path_factory: pytest.TempPathFactory) -> tuple[Snapshot, Path]:
    cache = tmp_path_factory.mktemp("pypi-cache")
    return fetch("pypi:iniconfig==2.3.1", cache_dir=cache), cache


def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make pip unable to reach any index: no config files, no index, no find-links."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_NO_INDEX", "1")


def test_pypi_fetch_gives_one_commit_repo_of_the_sdist(iniconfig: tuple[Snapshot, Path]) -> None:
    snapshot, cache = iniconfig
    assert (snapshot.name, snapshot.kind, snapshot.version) == ("iniconfig", "pypi", "2.3.1")
    assert snapshot.source == "pypi:iniconfig==2.3.1"
    assert snapshot.path == cache.resolve() / "pypi" / "iniconfig-2.3.1" / "repo"
    assert_clean_checkout(snapshot)
    assert git(snapshot.path, "rev-list", "--count", "HEAD") == "1"
    assert git(snapshot.path, "log", "-1", "--format=%an <%ae>|%cn <%ce>|%aI|%cI") == (
        "taskforge <taskforge@localhost>|taskforge <taskforge@localhost>|"
        "2000-01-01T00:00:00+00:00|2000-01-01T00:00:00+00:00"
    )
    tracked = set(git(snapshot.path, "ls-files").splitlines())
    on_disk = {p.relative_to(snapshot.path).as_posix() for p in snapshot.path.rglob("*")
               if p.is_file() and ".git" not in p.relative_to(snapshot.path).parts}  # fmt: skip
    assert tracked == on_disk  # every file of the sdist is committed, .gitignore notwithstanding
    assert {"PKG-INFO", "pyproject.toml", "src/iniconfig/__init__.py"} <= tracked
    assert "\nVersion: 2.3.1\n" in (snapshot.path / "PKG-INFO").read_text()


def test_pypi_same_sdist_gives_same_commit_in_another_cache(
    iniconfig: tuple[Snapshot, Path], tmp_path: Path
) -> None:
    again = fetch("pypi:iniconfig==2.3.1", cache_dir=tmp_path / "other")
    assert again.commit == iniconfig[0].commit
    assert again.path != iniconfig[0].path


def test_pypi_cache_hit_needs_no_network(
    iniconfig: tuple[Snapshot, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    snapshot, cache = iniconfig
    _offline(monkeypatch)
    # pip really cannot download anything now ...
    with pytest.raises(SourceError) as info:
        fetch("pypi:iniconfig==2.0.0", cache_dir=tmp_path / "empty")
    assert info.value.reason == "source_not_found"
    # ... yet the cached sdist is served, also under a differently spelled name and version.
    assert fetch("pypi:iniconfig==2.3.1", cache_dir=cache) == snapshot
    hit = fetch("pypi:IniConfig==2.3.1.0", cache_dir=cache)
    assert (hit.path, hit.commit) == (snapshot.path, snapshot.commit)
    assert (hit.name, hit.source, hit.version) == ("IniConfig", "pypi:IniConfig==2.3.1.0", "2.3.1.0")


def test_pypi_latest_takes_the_version_from_the_sdist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = fetch("pypi:addict", cache_dir=tmp_path)
    assert snapshot.version is not None and snapshot.version.split(".")[0].isdigit()
    assert snapshot.source == f"pypi:addict=={snapshot.version}"
    assert (snapshot.path / "addict" / "addict.py").is_file()
    assert_clean_checkout(snapshot)
    _offline(monkeypatch)
    assert fetch(snapshot.source, cache_dir=tmp_path) == snapshot


@pytest.mark.parametrize("spec", ["pypi:taskforge-no-such-project-3f9a1c==1.0", "pypi:iniconfig==99.0.0"])
def test_pypi_missing_project_or_version(spec: str, tmp_path: Path) -> None:
    with pytest.raises(SourceError) as info:
        fetch(spec, cache_dir=tmp_path / "cache")
    assert info.value.reason == "source_not_found"
    assert str(info.value) == f"PyPI has no source distribution for {spec.removeprefix('pypi:')}"
    assert leftovers(tmp_path / "cache") == []


# --- git URLs ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Origin:
    bare: Path
    url: str
    first: str  # tagged v1 (annotated) and light (lightweight)
    main: str  # tip of main, the default branch
    feature: str  # tip of feature


def make_origin(root: Path) -> Origin:
    work = root / "work"
    work.mkdir(parents=True)
    git(work, "init", "-q", "-b", "main")
    first = commit_file(work, "pkg/mod.py", "VALUE = 1\n", "first")
    git(work, "tag", "-a", "v1", "-m", "release 1")
    git(work, "tag", "light")
    main = commit_file(work, "pkg/mod.py", "VALUE = 2\n", "second")
    git(work, "checkout", "-q", "-b", "feature")
    feature = commit_file(work, "pkg/feature.py", "FEATURE = True\n", "feature")
    git(work, "checkout", "-q", "main")
    bare = root / "origin.git"
    git(root, "clone", "-q", "--bare", str(work), str(bare))
    return Origin(bare=bare, url=bare.resolve().as_uri(), first=first, main=main, feature=feature)


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Origin:
    return make_origin(tmp_path_factory.mktemp("origin"))


@pytest.mark.parametrize(
    ("rev", "commit_of", "value"),
    [
        (None, "main", "VALUE = 2\n"),
        ("main", "main", "VALUE = 2\n"),
        ("feature", "feature", "VALUE = 2\n"),
        ("v1", "first", "VALUE = 1\n"),
        ("light", "first", "VALUE = 1\n"),
        ("HEAD", "main", "VALUE = 2\n"),
        ("first-sha", "first", "VALUE = 1\n"),
        ("first-short-sha", "first", "VALUE = 1\n"),
    ],
)
def test_git_fetch_at_rev(origin: Origin, tmp_path: Path, rev: str | None, commit_of: str, value: str) -> None:
    if rev == "first-sha":
        rev = origin.first
    elif rev == "first-short-sha":
        rev = origin.first[:10]
    spec = f"{origin.url}@{rev}" if rev else origin.url
    snapshot = fetch(spec, cache_dir=tmp_path)
    assert (snapshot.name, snapshot.kind, snapshot.source, snapshot.version) == ("origin", "git", spec, None)
    assert snapshot.commit == getattr(origin, commit_of)
    assert_clean_checkout(snapshot)
    assert (snapshot.path / "pkg/mod.py").read_text() == value
    assert (snapshot.path / "pkg/feature.py").exists() == (commit_of == "feature")
    # shallow even for SHAs: the remote sends the commit itself (an abbreviated SHA is resolved aside)
    assert git(snapshot.path, "rev-parse", "--is-shallow-repository") == "true"


def test_git_clones_branches_shallow(origin: Origin, tmp_path: Path) -> None:
    snapshot = fetch(f"{origin.url}@main", cache_dir=tmp_path)
    assert git(snapshot.path, "rev-parse", "--is-shallow-repository") == "true"
    assert git(snapshot.path, "rev-list", "--count", "HEAD") == "1"


def test_git_revs_naming_one_commit_share_an_entry(origin: Origin, tmp_path: Path) -> None:
    by_tag = fetch(f"{origin.url}@v1", cache_dir=tmp_path)
    by_sha = fetch(f"{origin.url}@{origin.first.upper()}", cache_dir=tmp_path)
    assert by_sha.path == by_tag.path and by_sha.commit == origin.first
    assert by_sha.source == f"{origin.url}@{origin.first.upper()}"


def test_git_pinned_sha_is_served_from_cache_after_origin_is_gone(tmp_path: Path) -> None:
    origin = make_origin(tmp_path / "o")
    spec = f"{origin.url}@{origin.first}"
    snapshot = fetch(spec, cache_dir=tmp_path / "cache")
    shutil.rmtree(origin.bare)
    assert fetch(spec, cache_dir=tmp_path / "cache") == snapshot
    # a branch must be resolved against the remote, which is gone now
    with pytest.raises(SourceError) as info:
        fetch(f"{origin.url}@main", cache_dir=tmp_path / "cache")
    assert info.value.reason == "source_unreachable"


@pytest.mark.parametrize("rev", ["no-such-branch", "f" * 40, "abcdef1"])
def test_git_missing_rev_is_invalid(origin: Origin, tmp_path: Path, rev: str) -> None:
    with pytest.raises(SourceError) as info:
        fetch(f"{origin.url}@{rev}", cache_dir=tmp_path / "cache")
    assert info.value.reason == "source_invalid"
    assert origin.url in str(info.value) and "\n" not in str(info.value)
    assert leftovers(tmp_path / "cache") == []


@pytest.mark.parametrize(
    "spec",
    ["file:///nonexistent/repo.git", "https://127.0.0.1:9/x.git", f"file:///nonexistent/repo.git@{'a' * 40}"],
)
def test_git_unreachable(spec: str, tmp_path: Path) -> None:
    with pytest.raises(SourceError) as info:
        fetch(spec, cache_dir=tmp_path / "cache")
    assert info.value.reason == "source_unreachable"
    assert spec.partition("@")[0] in str(info.value) and "\n" not in str(info.value)
    assert leftovers(tmp_path / "cache") == []


# --- local folders -------------------------------------------------------------------------------


@pytest.fixture
def local_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "proj"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / ".gitignore").write_text("*.log\n")
    (repo / "gone.txt").write_text("to be deleted\n")
    commit_file(repo, "pkg/mod.py", "VALUE = 1\n", "initial")
    git(repo, "add", ".gitignore", "gone.txt")
    git(repo, "commit", "-q", "-m", "more")
    return repo


def test_local_clean_git_repo_is_cloned_at_head(local_repo: Path, tmp_path: Path) -> None:
    snapshot = fetch(str(local_repo), cache_dir=tmp_path / "cache")
    head = git(local_repo, "rev-parse", "HEAD")
    assert (snapshot.name, snapshot.kind, snapshot.source, snapshot.commit) == ("proj", "local", str(local_repo), head)
    assert_clean_checkout(snapshot)
    assert (snapshot.path / "pkg/mod.py").read_text() == "VALUE = 1\n"
    assert fetch(str(local_repo), cache_dir=tmp_path / "cache") == snapshot


def test_local_dirty_git_repo_is_snapshotted_on_top_of_head(local_repo: Path, tmp_path: Path) -> None:
    head = git(local_repo, "rev-parse", "HEAD")
    (local_repo / "pkg/mod.py").write_text("VALUE = 2\n")  # modified
    (local_repo / "new.py").write_text("NEW = 1\n")  # untracked
    (local_repo / "debug.log").write_text("ignored\n")  # ignored
    (local_repo / "gone.txt").unlink()  # deleted
    (local_repo / "staged.py").write_text("STAGED = 1\n")
    git(local_repo, "add", "staged.py")
    status_before = git(local_repo, "status", "--porcelain")

    snapshot = fetch(str(local_repo), cache_dir=tmp_path / "cache")
    assert snapshot.commit != head
    assert git(snapshot.path, "rev-parse", "HEAD^") == head
    assert_clean_checkout(snapshot)
    assert (snapshot.path / "pkg/mod.py").read_text() == "VALUE = 2\n"
    assert (snapshot.path / "new.py").read_text() == "NEW = 1\n"
    assert (snapshot.path / "staged.py").read_text() == "STAGED = 1\n"
    assert not (snapshot.path / "gone.txt").exists()
    assert not (snapshot.path / "debug.log").exists()
    # the user's repository is left as it was
    assert git(local_repo, "rev-parse", "HEAD") == head
    assert git(local_repo, "status", "--porcelain") == status_before

    # deterministic: the same dirty state gives the same commit, in this cache (a hit) and another
    assert fetch(str(local_repo), cache_dir=tmp_path / "cache") == snapshot
    assert fetch(str(local_repo), cache_dir=tmp_path / "other").commit == snapshot.commit
    # a further change gives a new snapshot
    (local_repo / "new.py").write_text("NEW = 2\n")
    changed = fetch(str(local_repo), cache_dir=tmp_path / "cache")
    assert changed.commit != snapshot.commit and changed.path != snapshot.path
    assert (changed.path / "new.py").read_text() == "NEW = 2\n"


def test_local_plain_folder_is_committed_deterministically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def make(folder: Path) -> None:
        (folder / "pkg").mkdir(parents=True)
        (folder / "pkg/mod.py").write_text("VALUE = 1\n")
        (folder / ".gitignore").write_text("*.py\n")  # ignored by git, yet part of the snapshot
        (folder / "run.sh").write_text("#!/bin/sh\n")
        (folder / "run.sh").chmod(0o755)
        (folder / "link").symlink_to("pkg/mod.py")
        (folder / "vendor/.git").mkdir(parents=True)
        (folder / "vendor/.git/config").write_text("[core]\n")
        (folder / "vendor/lib.txt").write_text("lib\n")

    make(tmp_path / "a" / "plain")
    make(tmp_path / "b" / "copy")
    monkeypatch.chdir(tmp_path / "a")
    snapshot = fetch("plain", cache_dir=tmp_path / "cache")
    assert (snapshot.name, snapshot.kind, snapshot.source) == ("plain", "local", str(tmp_path.resolve() / "a/plain"))
    assert_clean_checkout(snapshot)
    assert git(snapshot.path, "rev-list", "--count", "HEAD") == "1"
    tracked = dict(line.split("\t")[::-1] for line in git(snapshot.path, "ls-files", "-s").splitlines())
    assert set(tracked) == {".gitignore", "link", "pkg/mod.py", "run.sh", "vendor/lib.txt"}
    assert tracked["run.sh"].startswith("100755") and tracked["link"].startswith("120000")

    # same content elsewhere: the same entry (keyed by content), named after the folder asked for
    copy = fetch(str(tmp_path / "b" / "copy"), cache_dir=tmp_path / "cache")
    assert (copy.path, copy.commit, copy.name) == (snapshot.path, snapshot.commit, "copy")
    # changed content: a new snapshot
    (tmp_path / "b/copy/pkg/mod.py").write_text("VALUE = 2\n")
    changed = fetch(str(tmp_path / "b" / "copy"), cache_dir=tmp_path / "cache")
    assert changed.commit != snapshot.commit


def test_local_missing_path(tmp_path: Path) -> None:
    with pytest.raises(SourceError) as info:
        fetch(str(tmp_path / "nope"), cache_dir=tmp_path / "cache")
    assert info.value.reason == "source_not_found"
    assert str(tmp_path / "nope") in str(info.value)
    assert leftovers(tmp_path / "cache") == []


def test_local_empty_folder_is_invalid_and_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "empty/.git-not-really").mkdir(parents=True)
    with pytest.raises(SourceError) as info:
        fetch(str(tmp_path / "empty"), cache_dir=tmp_path / "cache")
    assert info.value.reason == "source_invalid"
    assert leftovers(tmp_path / "cache") == []


def test_concurrent_fetches_agree_and_leave_no_temporaries(local_repo: Path, tmp_path: Path) -> None:
    (local_repo / "new.py").write_text("NEW = 1\n")
    cache = tmp_path / "cache"
    with ThreadPoolExecutor(max_workers=4) as pool:
        snapshots = list(pool.map(lambda _: fetch(str(local_repo), cache_dir=cache), range(4)))
    assert len({(s.path, s.commit) for s in snapshots}) == 1
    assert_clean_checkout(snapshots[0])
    assert [p.name for p in cache.iterdir()] == ["local"]
    assert len(list((cache / "local").iterdir())) == 1
