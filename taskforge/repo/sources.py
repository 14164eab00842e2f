"""Fetch a repository snapshot (a clean git work tree at one commit) from PyPI, a git URL or a local folder.

A source spec is one of:

    pypi:NAME==VERSION        an sdist from the package index (``pypi:NAME`` takes the latest version)
    URL[@REV]                 a git repository: https://, http://, ssh://, git://, file://, or
                              scp-like ``user@host:owner/repo.git``; REV is a branch, tag or commit
    PATH                      a local folder, absolute or relative; a git repository or a plain folder

``fetch`` puts every snapshot in the cache as ``<cache>/<kind>/<key>/{repo/, snapshot.json}``. An
entry is built in a ``.tmp-*`` folder beside the kinds and renamed into place with ``snapshot.json``
written last, so a half-built entry is never visible and a failed fetch leaves nothing behind. Keys
depend only on what the snapshot holds (never on the time of the fetch), so asking again for the same
source is a cache hit that needs no network, except ``pypi:NAME`` without a version, which must ask
the index what the latest version is.

Snapshots made here rather than cloned (sdists, plain folders, uncommitted changes) are committed
with a fixed author and date, so the same content always gives the same commit SHA.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple, get_args

from packaging.utils import canonicalize_name, canonicalize_version
from packaging.version import InvalidVersion, Version

from taskforge.errors import SourceError
from taskforge.paths import cache_key, cache_root
from taskforge.repo.git import run_git

__all__ = ["ParsedSource", "Snapshot", "SourceKind", "fetch", "parse_source"]

SourceKind = Literal["pypi", "git", "local"]

# Network operations get a generous limit (large repositories, slow mirrors); anything that runs
# past it is killed rather than left hanging.
NETWORK_TIMEOUT_S = 600.0
LOCAL_GIT_TIMEOUT_S = 300.0

SNAPSHOT_AUTHOR = "taskforge <taskforge@localhost>"
SNAPSHOT_DATE = "2000-01-01T00:00:00+00:00"

_SHA_RE = re.compile(r"[0-9a-f]{40}")
_HEXISH_RE = re.compile(r"[0-9a-fA-F]{4,40}")
_URL_RE = re.compile(r"(https?|ssh|git|file)://")
# user@host:path. The user must start with a word character so that nothing here reads as an option.
_SCP_RE = re.compile(r"[A-Za-z0-9_][\w.+-]*@[A-Za-z0-9_][\w.-]*:")
# PEP 508 project names.
_PYPI_NAME_RE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
_SDIST_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz", ".txz", ".tar", ".zip")

_SNAPSHOT_COMMIT_ENV = {
    "GIT_AUTHOR_NAME": "taskforge",
    "GIT_AUTHOR_EMAIL": "taskforge@localhost",
    "GIT_AUTHOR_DATE": SNAPSHOT_DATE,
    "GIT_COMMITTER_NAME": "taskforge",
    "GIT_COMMITTER_EMAIL": "taskforge@localhost",
    "GIT_COMMITTER_DATE": SNAPSHOT_DATE,
}
# Written to $GIT_DIR/info/attributes of repositories we commit ourselves: it outranks any
# .gitattributes in the content, so no filter, eol or text conversion touches the committed bytes.
_RAW_ATTRIBUTES = "* -text -filter -ident !eol !working-tree-encoding\n"


@dataclass(frozen=True, kw_only=True, slots=True)
class Snapshot:
    """One fetched repository: a clean git work tree in the cache, checked out at ``commit``."""

    name: str
    """Repository name: the PyPI project name as given, the URL's basename without .git, or the folder name."""
    source: str
    """Canonical source spec, e.g. ``pypi:addict==2.4.0``, ``https://x/y.git@v1``, ``/abs/path``."""
    kind: SourceKind
    """Where it came from: ``pypi``, ``git`` or ``local``."""
    commit: str
    """40-hex SHA of the checked-out commit."""
    path: Path
    """The work tree inside the cache. Shared by every consumer: treat it as read-only."""
    version: str | None = None
    """The PyPI version; None for other kinds."""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("Snapshot.name must not be empty")
        if self.kind not in get_args(SourceKind):
            raise ValueError(f"Snapshot.kind must be one of {get_args(SourceKind)}, got {self.kind!r}")
        if not _SHA_RE.fullmatch(self.commit):
            raise ValueError(f"Snapshot.commit must be 40 lowercase hex digits, got {self.commit!r}")
        if (self.version is None) != (self.kind != "pypi"):
            raise ValueError(f"Snapshot.version must be set exactly for pypi snapshots, got {self.version!r}")

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "kind": self.kind,
            "commit": self.commit,
            "path": str(self.path),
            "version": self.version,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Snapshot:
        return cls(
            name=data["name"],
            source=data["source"],
            kind=data["kind"],
            commit=data["commit"],
            path=Path(data["path"]),
            version=data["version"],
        )


class ParsedSource(NamedTuple):
    """A source spec taken apart; ``parse_source`` checks its form but touches no network."""

    kind: SourceKind
    target: str
    """pypi: the project name as given; git: the URL without ``@rev``; local: the absolute path."""
    ref: str | None
    """pypi: the version (None means latest); git: the rev (None means the remote's HEAD); local: None."""


def parse_source(spec: str) -> ParsedSource:
    """Split a source spec into kind, target and ref. Raises SourceError(source_invalid) if malformed."""
    spec = spec.strip()
    if not spec:
        raise SourceError("empty source spec", reason="source_invalid")
    if spec.startswith("pypi:"):
        return _parse_pypi(spec)
    if _URL_RE.match(spec) or _SCP_RE.match(spec):
        return _parse_git(spec)
    if "://" in spec:
        raise SourceError(f"unsupported URL scheme in source {spec}", reason="source_invalid")
    return ParsedSource(kind="local", target=str(Path(spec).expanduser().resolve()), ref=None)


def fetch(spec: str, *, cache_dir: Path | None = None) -> Snapshot:
    """Return the snapshot for ``spec``, from the cache when it is there, else fetching it into the cache.

    ``cache_dir`` defaults to ``cache_root() / "sources"``.
    """
    parsed = parse_source(spec)
    cache = Path(cache_dir) if cache_dir is not None else cache_root() / "sources"
    cache = cache.expanduser().resolve()
    if parsed.kind == "pypi":
        return _fetch_pypi(name=parsed.target, version=parsed.ref, cache=cache)
    if parsed.kind == "git":
        return _fetch_git(url=parsed.target, rev=parsed.ref, cache=cache)
    return _fetch_local(Path(parsed.target), cache=cache)


# --- parsing -----------------------------------------------------------------------------------


def _parse_pypi(spec: str) -> ParsedSource:
    name, sep, version = (part.strip() for part in spec.removeprefix("pypi:").partition("=="))
    if not _PYPI_NAME_RE.fullmatch(name) or (sep and not version):
        raise SourceError(f"expected pypi:NAME or pypi:NAME==VERSION, got {spec}", reason="source_invalid")
    if not sep:
        return ParsedSource(kind="pypi", target=name, ref=None)
    try:
        Version(version)
    except InvalidVersion:
        raise SourceError(f"invalid version {version!r} in source {spec}", reason="source_invalid") from None
    return ParsedSource(kind="pypi", target=name, ref=version)


def _parse_git(spec: str) -> ParsedSource:
    # The rev follows the last '@' after the last '/' (or, for scp-like specs with no '/' in their
    # path, after the ':'), so that user@ in front of the host is never taken for a rev.
    url_match = _URL_RE.match(spec)
    if url_match:
        path_start = spec.find("/", url_match.end())
        if path_start < 0 or not spec[path_start:].strip("/"):
            raise SourceError(f"git URL {spec} has no repository path", reason="source_invalid")
        rev_search_from = max(spec.rfind("/"), path_start) + 1
    else:
        rev_search_from = max(spec.rfind("/"), spec.index(":")) + 1
    url, rev = spec, None
    at = spec.rfind("@", rev_search_from)
    if at >= 0:
        url, rev = spec[:at], spec[at + 1 :]
        if not rev or rev.startswith("-") or any(ch.isspace() for ch in rev):
            raise SourceError(f"invalid rev {rev!r} in source {spec}", reason="source_invalid")
    if not _git_name(url):
        raise SourceError(f"git URL {spec} names no repository", reason="source_invalid")
    return ParsedSource(kind="git", target=url, ref=rev)


def _git_name(url: str) -> str:
    return re.split(r"[/:]", url.rstrip("/"))[-1].removesuffix(".git")


# --- cache entries -----------------------------------------------------------------------------


@contextmanager
def _staging(cache: Path) -> Iterator[Path]:
    """A fresh temporary folder inside ``cache``; removed on exit unless it was published."""
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=cache))
    try:
        yield tmp
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def _stored_commit(entry: Path) -> str | None:
    """The commit of a published cache entry, or None when there is no entry."""
    if not entry.is_dir():
        return None
    return str(json.loads((entry / "snapshot.json").read_text())["commit"])


def _publish(tmp: Path, entry: Path, snapshot: Snapshot) -> Snapshot:
    """Write snapshot.json into the staged ``tmp`` folder and rename it to ``entry``.

    If a concurrent fetch published ``entry`` first, keep theirs: it holds the same content.
    """
    (tmp / "snapshot.json").write_text(json.dumps(snapshot.to_json(), indent=2, sort_keys=True) + "\n")
    entry.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(tmp, entry)
    except OSError as err:
        if err.errno not in (errno.EEXIST, errno.ENOTEMPTY):
            raise
        theirs = _stored_commit(entry)
        assert theirs is not None
        return Snapshot(
            name=snapshot.name,
            source=snapshot.source,
            kind=snapshot.kind,
            commit=theirs,
            path=entry / "repo",
            version=snapshot.version,
        )
    return snapshot




# --- PyPI ----------------------------------------------------------------------------------------


def _fetch_pypi(*, name: str, version: str | None, cache: Path) -> Snapshot:
    def snapshot(version: str, commit: str, entry: Path) -> Snapshot:
        return Snapshot(
            name=name,
            source=f"pypi:{name}=={version}",
            kind="pypi",
            commit=commit,
            path=entry / "repo",
            version=version,
        )

    def entry_for(version: str) -> Path:
        return cache / "pypi" / f"{canonicalize_name(name)}-{canonicalize_version(version)}"

    if version is not None and (commit := _stored_commit(entry_for(version))):
        return snapshot(version, commit, entry_for(version))
    with _staging(cache) as tmp:
        archive = _pip_download(name=name, version=version, dest=tmp / "download")
        version = version or _sdist_version(archive.name)
        entry = entry_for(version)
        if commit := _stored_commit(entry):
            return snapshot(version, commit, entry)
        _unpack(archive, tmp / "unpack")
        top = list((tmp / "unpack").iterdir())
        root = top[0] if len(top) == 1 and top[0].is_dir() and not top[0].is_symlink() else tmp / "unpack"
        if not any(path.is_file() or path.is_symlink() for path in root.rglob("*")):
            raise SourceError(f"the sdist {archive.name} of {name} holds no files", reason="source_invalid")
        os.rename(root, tmp / "repo")
        shutil.rmtree(tmp / "download")
        if (tmp / "unpack").exists():
            shutil.rmtree(tmp / "unpack")
        commit = _commit_new_repo(tmp / "repo", message=f"Snapshot of {archive.name}")
        return _publish(tmp, entry, snapshot(version, commit, entry))


def _pip_download(*, name: str, version: str | None, dest: Path) -> Path:
    """Download the sdist of ``name`` (==``version``, else latest) into ``dest`` and return its path.

    pip keeps the user's configuration (index mirrors, certificates). ``--no-binary NAME`` rather than
    ``:all:``: only this project must come as an sdist, not the build backend pip installs to read it.
    """
    requirement = f"{name}=={version}" if version else name
    command = [
        sys.executable, "-m", "pip", "--no-input", "download", "--no-deps", "--no-binary", name,
        "--progress-bar", "off", "--dest", str(dest), requirement,
    ]  # fmt: skip
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=NETWORK_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise SourceError(
            f"pip download of {requirement} did not finish in {NETWORK_TIMEOUT_S:g} s", reason="source_unreachable"
        ) from None
    if result.returncode != 0:
        if "No matching distribution found" in result.stderr:
            raise SourceError(f"PyPI has no source distribution for {requirement}", reason="source_not_found")
        raise SourceError(
            f"pip could not download the sdist of {requirement}: {_last_error_line(result.stderr)}",
            reason="source_unreachable",
        )
    files = sorted(dest.iterdir())
    if len(files) != 1 or not files[0].name.endswith(_SDIST_SUFFIXES):
        raise SourceError(
            f"pip download of {requirement} gave {[f.name for f in files]}, not one sdist", reason="source_invalid"
        )
    return files[0]


def _sdist_version(filename: str) -> str:
    stem = next(filename.removesuffix(suffix) for suffix in _SDIST_SUFFIXES if filename.endswith(suffix))
    _, dash, version = stem.rpartition("-")
    if not dash or not version:
        raise SourceError(f"cannot read a version from the sdist name {filename}", reason="source_invalid")
    return version


def _unpack(archive: Path, dest: Path) -> None:
    """Unpack an sdist, refusing members that would land outside ``dest``."""
    dest.mkdir()
    try:
        if archive.name.endswith(".zip"):
            with zipfile.ZipFile(archive) as zf:
                for member in zf.namelist():
                    if member.startswith("/") or not (dest / member).resolve().is_relative_to(dest.resolve()):
                        raise SourceError(
                            f"{archive.name} has a member outside its folder: {member}", reason="source_invalid"
                        )
                zf.extractall(dest)
        else:
            with tarfile.open(archive) as tf:
                tf.extractall(dest, filter="data")
    except (tarfile.TarError, zipfile.BadZipFile) as err:
        raise SourceError(f"cannot unpack {archive.name}: {err}", reason="source_invalid") from None


# --- git URLs ------------------------------------------------------------------------------------


def _fetch_git(*, url: str, rev: str | None, cache: Path) -> Snapshot:
    name = _git_name(url)

    def snapshot(commit: str, entry: Path) -> Snapshot:
        return Snapshot(
            name=name,
            source=f"{url}@{rev}" if rev else url,
            kind="git",
            commit=commit,
            path=entry / "repo",
            version=None,
        )

    def entry_for(commit: str) -> Path:
        return cache / "git" / cache_key(url, commit)[:32]

    branch: str | None = None  # a name `git clone --branch` accepts; None clones the default branch
    if rev is not None and _SHA_RE.fullmatch(rev.lower()):
        commit = rev.lower()  # pinned: the cache can answer without asking the remote
    else:
        commit, branch = _resolve_remote_rev(url, rev, cache=cache)
    entry = entry_for(commit)
    if _stored_commit(entry):
        return snapshot(commit, entry)
    with _staging(cache) as tmp:
        _checkout_remote(url, branch=branch, pinned=commit, clone_default=rev is None, dest=tmp / "repo")
        return _publish(tmp, entry, snapshot(commit, entry))


def _resolve_remote_rev(url: str, rev: str | None, *, cache: Path) -> tuple[str, str | None]:
    """Ask the remote which commit ``rev`` (None: HEAD) names; return it and, if any, its branch or tag name."""
    patterns = (rev, f"{rev}^{{}}") if rev else ("HEAD",)  # "v1" alone does not match the peeled "v1^{}"
    listing = _git("ls-remote", url, *patterns, timeout=NETWORK_TIMEOUT_S, reason="source_unreachable",
                   failure=f"cannot reach git repository {url}")  # fmt: skip
    refs: dict[str, str] = {}
    for line in listing.splitlines():
        sha, _, ref = line.partition("\t")
        refs[ref] = sha
    if rev is None:
        if "HEAD" not in refs:
            raise SourceError(f"git repository {url} has no HEAD commit", reason="source_invalid")
        return refs["HEAD"], None
    # Branches win over tags, as with `git clone --branch`; an annotated tag resolves to its commit.
    for ref, branch in (
        (f"refs/heads/{rev}", rev),
        (f"refs/tags/{rev}^{{}}", rev),
        (f"refs/tags/{rev}", rev),
        (rev, None),
    ):
        if ref in refs:
            return refs[ref], branch
    if _HEXISH_RE.fullmatch(rev):
        # An abbreviated SHA: only a full clone can tell which commit it names.
        return _resolve_abbreviated_sha(url, rev, cache=cache), None
    raise SourceError(f"git repository {url} has no branch or tag {rev}", reason="source_invalid")


def _resolve_abbreviated_sha(url: str, rev: str, *, cache: Path) -> str:
    with _staging(cache) as scratch:
        _git("clone", "--quiet", "--bare", "--", url, str(scratch / "bare"), timeout=NETWORK_TIMEOUT_S,
             reason="source_unreachable", failure=f"cannot clone git repository {url}")  # fmt: skip
        status, out, _ = _git_run("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", cwd=scratch / "bare")
    if status != 0:
        raise SourceError(f"git repository {url} has no commit {rev}", reason="source_invalid")
    return out.strip()


def _checkout_remote(url: str, *, branch: str | None, pinned: str, clone_default: bool, dest: Path) -> None:
    """Put commit ``pinned`` of ``url`` at ``dest``, cloning as shallowly as the remote allows."""
    if branch is not None or clone_default:
        branch_args = ("--branch", branch) if branch is not None else ()
        _git("clone", "--quiet", "--depth", "1", *branch_args, "--", url, str(dest), timeout=NETWORK_TIMEOUT_S,
             reason="source_unreachable", failure=f"cannot clone git repository {url}")  # fmt: skip
        if _head(dest) == pinned:
            return
        shutil.rmtree(dest)  # the branch moved since ls-remote; fetch the commit itself below
    dest.mkdir()
    _git("init", "--quiet", cwd=dest)
    _git("remote", "add", "origin", url, cwd=dest)
    status, _, _ = _git_run("fetch", "--quiet", "--depth", "1", "origin", pinned, cwd=dest, timeout=NETWORK_TIMEOUT_S)
    if status == 0:
        _git("checkout", "--quiet", "--detach", "FETCH_HEAD", cwd=dest)
        return
    # Some servers refuse to send a commit by SHA; a full clone always works.
    shutil.rmtree(dest)
    _git("clone", "--quiet", "--no-checkout", "--", url, str(dest), timeout=NETWORK_TIMEOUT_S,
         reason="source_unreachable", failure=f"cannot clone git repository {url}")  # fmt: skip
    status, _, _ = _git_run("checkout", "--quiet", "--detach", f"{pinned}^{{commit}}", cwd=dest)
    if status != 0:
        raise SourceError(f"git repository {url} has no commit {pinned}", reason="source_invalid")


# --- local folders -------------------------------------------------------------------------------


def _fetch_local(path: Path, *, cache: Path) -> Snapshot:
    if not path.exists():
        raise SourceError(f"local source {path} does not exist", reason="source_not_found")
    if not path.is_dir():
        raise SourceError(f"local source {path} is not a directory", reason="source_invalid")

    def snapshot(commit: str, entry: Path) -> Snapshot:
        return Snapshot(
            name=path.name, source=str(path), kind="local", commit=commit, path=entry / "repo", version=None
        )

    if (path / ".git").exists():
        return _fetch_local_git(path, cache=cache, snapshot=snapshot)

    files = _scan_plain_folder(path)
    if not files:
        raise SourceError(f"local source {path} holds no files", reason="source_invalid")
    entry = cache / "local" / cache_key("plain", _content_hash(path, files))[:32]
    if commit := _stored_commit(entry):
        return snapshot(commit, entry)
    with _staging(cache) as tmp:
        for rel in files:
            _copy_entry(path / rel, tmp / "repo" / rel)
        commit = _commit_new_repo(tmp / "repo", message="Snapshot of a folder")
        return _publish(tmp, entry, snapshot(commit, entry))


def _fetch_local_git(path: Path, *, cache: Path, snapshot: Callable[[str, Path], Snapshot]) -> Snapshot:
    status, head, _ = _git_run("rev-parse", "--verify", "--quiet", "HEAD^{commit}", cwd=path)
    if status != 0:
        raise SourceError(f"local git repository {path} has no commits", reason="source_invalid")
    head = head.strip()
    changed = _uncommitted_paths(path)
    entry = cache / "local" / cache_key("git", head, _content_hash(path, changed) if changed else "")[:32]
    if commit := _stored_commit(entry):
        return snapshot(commit, entry)
    with _staging(cache) as tmp:
        repo = tmp / "repo"
        # A local clone copies (or hard-links) the whole object store, so even a detached HEAD is there.
        _git("clone", "--quiet", "--no-checkout", "--", str(path), str(repo), failure=f"cannot clone {path}")
        _git("checkout", "--quiet", "--detach", head, cwd=repo)
        _git("remote", "remove", "origin", cwd=repo)  # the entry is keyed by content, not by this path
        commit = head
        if changed:
            for rel in changed:
                _sync_entry(path / rel, repo / rel)
            _git("add", "--all", "--force", cwd=repo)
            _git("commit", "--quiet", "--no-verify", "--allow-empty", "-m", "Snapshot of uncommitted changes",
                 cwd=repo, env=_SNAPSHOT_COMMIT_ENV)  # fmt: skip
            commit = _head(repo)
        return _publish(tmp, entry, snapshot(commit, entry))


def _uncommitted_paths(repo: Path) -> list[str]:
    """Paths whose work-tree state differs from HEAD: changed, added, deleted, untracked-not-ignored.

    Submodules are left out: the snapshot keeps whatever commit HEAD records for them.
    """
    diff = _git("diff", "--no-renames", "--name-only", "-z", "--ignore-submodules=all", "HEAD", cwd=repo)
    untracked = _git("ls-files", "--others", "--exclude-standard", "-z", cwd=repo)
    paths = {p for p in (diff + "\0" + untracked).split("\0") if p}
    # ls-files lists a nested repository as "dir/"; its content is not part of this snapshot.
    return sorted(p for p in paths if not p.endswith("/"))


def _scan_plain_folder(root: Path) -> list[str]:
    """Relative paths of the files and symlinks under ``root``, skipping .git and special files."""
    found: list[str] = []
    pending = [root]
    while pending:
        folder = pending.pop()
        with os.scandir(folder) as entries:
            for item in entries:
                if item.name == ".git":
                    continue
                if item.is_symlink() or item.is_file(follow_symlinks=False):
                    found.append(Path(item.path).relative_to(root).as_posix())
                elif item.is_dir(follow_symlinks=False):
                    pending.append(Path(item.path))
    return sorted(found)


def _content_hash(root: Path, rels: list[str]) -> str:
    """Hash of what ``rels`` hold under ``root``, as git would record it (bytes, link target, exec bit)."""
    digest = hashlib.sha256()
    for rel in rels:
        path = root / rel
        if path.is_symlink():
            state = f"link {os.readlink(path)}"
        elif path.is_file():
            mode = "exec" if os.access(path, os.X_OK) else "file"
            state = f"{mode} {hashlib.sha256(path.read_bytes()).hexdigest()}"
        else:
            state = "absent"
        digest.update(f"{rel}\0{state}\0".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def _copy_entry(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_symlink():
        os.symlink(os.readlink(src), dst)
    else:
        shutil.copy2(src, dst)


def _sync_entry(src: Path, dst: Path) -> None:
    """Make ``dst`` hold what ``src`` holds in the work tree: a file, a symlink, or nothing."""
    if dst.is_dir() and not dst.is_symlink():
        if src.is_dir() and not src.is_symlink():
            return  # still a folder; the files inside come as their own paths
        shutil.rmtree(dst)
    elif dst.is_symlink() or dst.is_file():
        dst.unlink()
    if src.is_symlink() or src.is_file():
        _copy_entry(src, dst)


# --- git plumbing --------------------------------------------------------------------------------


def _commit_new_repo(repo: Path, *, message: str) -> str:
    """Make ``repo`` a git repository with everything in it as one deterministic commit; return its SHA."""
    _git("init", "--quiet", "--initial-branch", "main", cwd=repo)
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "attributes").write_text(_RAW_ATTRIBUTES)
    _git("add", "--all", "--force", cwd=repo)  # the content is the snapshot, .gitignore or not
    _git("commit", "--quiet", "--no-verify", "-m", message, cwd=repo, env=_SNAPSHOT_COMMIT_ENV)
    return _head(repo)


def _head(repo: Path) -> str:
    return _git("rev-parse", "HEAD", cwd=repo).strip()


def _git_run(
    *args: str, cwd: Path | None = None, timeout: float = LOCAL_GIT_TIMEOUT_S, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """Run git (:func:`taskforge.repo.git.run_git`, the user's own configuration kept: credentials,
    proxies); return (status, stdout, stderr)."""
    result = run_git(*args, cwd=cwd, env=env, timeout=timeout)
    return result.status, result.stdout, result.stderr


def _git(
    *args: str,
    cwd: Path | None = None,
    timeout: float = LOCAL_GIT_TIMEOUT_S,
    env: dict[str, str] | None = None,
    reason: str = "source_invalid",
    failure: str | None = None,
) -> str:
    """Run git and return its stdout; on failure raise SourceError(``failure``: git's error, ``reason``)."""
    status, out, err = _git_run(*args, cwd=cwd, timeout=timeout, env=env)
    if status != 0:
        what = failure or f"git {args[0]} failed in {cwd}"
        raise SourceError(f"{what}: {_last_error_line(err)}", reason=reason)
    return out


def _last_error_line(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(("fatal:", "error:", "ERROR:", "Timeout:"))]
    line = (errors or lines or ["no error output"])[-1]
    return re.sub(r"^(fatal|error|ERROR):\s*", "", line)
