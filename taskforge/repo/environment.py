"""One environment image per repository: its dependencies, and none of its code.

    snapshot ──► detect test requirements (taskforge.repo.requirements)
             ──► build the project's own wheel on the host, in a scratch copy
             ──► resolve project + extras + test requirements into a wheelhouse (pip wheel, host)
             ──► docker build FROM the base image: install the wheelhouse offline, plus the
                 project's metadata (dist-info, console scripts) and a .pth naming its import
                 roots under /workspace
             ──► Environment record (JSON, in the cache)

The image tag is a hash of the base image and everything that went into the image, so a second
build of the same dependency set reuses it. The repository's code is never in any layer: it is
copied into /workspace at run time, and the .pth makes it importable from there.

A requirement the project declares for running (``[project] dependencies``) must resolve, or the
build fails with ``DependencyError``. Test requirements that cannot be resolved are dropped one by
one and recorded with pip's reason, because projects often list tools that no longer install.
"""

from __future__ import annotations

import email.parser
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from taskforge.errors import DependencyError, EnvironmentBuildError, SandboxError
from taskforge.paths import cache_key, cache_root, sandboxes_dir
from taskforge.repo.requirements import DetectedRequirement, detect_test_requirements
from taskforge.repo.sources import Snapshot
from taskforge.sandbox import SandboxBackend
from taskforge.sandbox.base_image import BaseImage

__all__ = ["DroppedRequirement", "Environment", "WORKSPACE", "build_environment", "ensure_image", "host_python"]

WORKSPACE = "/workspace"
"""Where a repository's code is copied inside a sandbox."""

_PIP_TIMEOUT_S = 900
_SKIP_DIRS = {".git", ".hg", ".tox", ".nox", ".venv", "venv", "build", "dist", "node_modules", "__pycache__"}


@dataclass(frozen=True, kw_only=True, slots=True)
class DroppedRequirement:
    requirement: str
    origin: str
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Environment:
    """Everything needed to run a repository's tests: the image, and how its code is laid out."""

    name: str
    """Repository name (from the snapshot)."""
    image: str
    """Docker tag of the environment image."""
    image_id: str
    base_image: str
    python: str
    import_roots: tuple[str, ...]
    """Directories, relative to the repository root, that the .pth puts on sys.path."""
    package_paths: tuple[str, ...]
    """The project's top-level packages and modules, relative to the repository root."""
    pytest_args: tuple[str, ...]
    """Arguments every run adds: ``--no-cov`` where pytest-cov is installed, and the like."""
    extras: tuple[str, ...]
    """The project's own extras whose requirements were installed."""
    installed: tuple[str, ...]
    """``name==version`` of every wheel in the image, sorted."""
    requirements: tuple[str, ...]
    """The test requirements that resolved, with where each was found."""
    dropped: tuple[DroppedRequirement, ...]
    wheelhouse: str
    """Host path of the resolved wheels (the host reference run installs the same set)."""
    project_dir: str
    """Host path of the project metadata folder copied into the image."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Environment:
        data = dict(data)
        data["dropped"] = tuple(DroppedRequirement(**d) for d in data["dropped"])
        for key in ("import_roots", "package_paths", "pytest_args", "extras", "installed", "requirements"):
            data[key] = tuple(data[key])
        return cls(**data)


def host_python(version: str) -> str:
    """A host interpreter of ``major.minor`` ``version`` for resolving wheels that fit the image."""
    if "%d.%d" % sys.version_info[:2] == version:
        return sys.executable
    found = shutil.which(f"python{version}")
    if found is None:
        raise DependencyError(
            f"the base image has Python {version} but the host has no python{version} to resolve "
            "wheels with; install it or build the base image from a matching Python",
            reason="python_mismatch",
        )
    return found




def _pip(python: str, args: Sequence[str], *, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    return subprocess.run(
        [python, "-m", "pip", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=_PIP_TIMEOUT_S,
        check=False,
    )


def _pip_error(proc: subprocess.CompletedProcess[str]) -> str:
    """The most telling line of a failed pip run."""
    lines = [line.strip() for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
    for marker in ("ERROR: No matching distribution", "ERROR: Could not find a version", "ResolutionImpossible", "ERROR:"):
        for line in lines:
            if marker in line and "pip's dependency resolver" not in line:
                return line.removeprefix("ERROR: ")[:300]
    return (lines[-1] if lines else f"pip exited with {proc.returncode}")[:300]


# -- the project's own wheel ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class _ProjectWheel:
    path: Path
    name: str
    provides_extra: frozenset[str]
    dist_info: dict[str, bytes]
    """dist-info files other than RECORD, by path inside the wheel."""
    top_level: tuple[str, ...]
    console_scripts: dict[str, str]


def _build_project_wheel(snapshot: Snapshot, python: str, out: Path) -> _ProjectWheel:
    with tempfile.TemporaryDirectory(prefix="taskforge-src-") as scratch:
        src = Path(scratch) / snapshot.name
        # Build from a scratch copy: setuptools writes build/ and *.egg-info into the source tree.
        shutil.copytree(snapshot.path, src, ignore=shutil.ignore_patterns(".git"))
        proc = _pip(python, ["wheel", "--no-deps", "--wheel-dir", str(out), str(src)])
    wheels = list(out.glob("*.whl"))
    if proc.returncode != 0 or len(wheels) != 1:
        raise DependencyError(
            f"cannot build {snapshot.name} itself: {_pip_error(proc)}", reason="project_build_failed"
        )
    with zipfile.ZipFile(wheels[0]) as zf:
        names = zf.namelist()
        dist_info_dir = next(n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info"))
        dist_info = {
            n: zf.read(n) for n in names if n.startswith(dist_info_dir + "/") and not n.endswith("/RECORD")
        }
    metadata = email.parser.BytesParser().parsebytes(dist_info[f"{dist_info_dir}/METADATA"])
    top_level = sorted(
        {
            n.split("/")[0].removesuffix(".py")
            for n in names
            if not n.split("/")[0].endswith((".dist-info", ".data"))
            and (n.endswith(".py") or "/" in n)
            and not n.split("/")[0].endswith((".so", ".pyd", ".pth"))
        }
    )
    return _ProjectWheel(
        path=wheels[0],
        name=str(metadata["Name"]),
        provides_extra=frozenset(canonicalize_name(e) for e in metadata.get_all("Provides-Extra") or []),
        dist_info=dist_info,
        top_level=tuple(top_level),
        console_scripts=_console_scripts(dist_info.get(f"{dist_info_dir}/entry_points.txt", b"").decode()),
    )


def _console_scripts(entry_points: str) -> dict[str, str]:
    scripts: dict[str, str] = {}
    section = ""
    for raw in entry_points.splitlines():
        line = raw.strip()
        if line.startswith("["):
            section = line.strip("[]").strip()
        elif section == "console_scripts" and "=" in line:
            name, _, target = line.partition("=")
            scripts[name.strip()] = re.sub(r"\s*\[.*\]\s*$", "", target.strip())
    return scripts


def _package_paths(repo: Path, top_level: Sequence[str]) -> tuple[str, ...]:
    """Repo-relative paths of the wheel's top-level packages and modules (``src/pkg``, ``six.py``)."""
    paths: list[str] = []
    for name in top_level:
        best: Path | None = None
        for dirpath, dirnames, filenames in os.walk(repo):
            rel = Path(dirpath).relative_to(repo)
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
            if len(rel.parts) > 3:
                dirnames[:] = []
                continue
            for candidate in (name, f"{name}.py"):
                if (candidate in dirnames or candidate in filenames) and (
                    best is None or len(rel.parts) < len(best.parts) - 1
                ):
                    best = rel / candidate
        if best is not None and best.as_posix() not in paths:
            paths.append(best.as_posix())
    return tuple(paths)


def _import_roots(package_paths: Sequence[str]) -> tuple[str, ...]:
    """The directories that must be on sys.path for the packages to import."""
    roots: list[str] = []
    for path in package_paths:
        root = Path(path).parent.as_posix()
        if root not in roots:
            roots.append(root)
    return tuple(roots or ["."])


# Tools that taskforge itself needs inside every environment.
_TOOL_REQUIREMENTS = (DetectedRequirement(requirement="coverage>=7", origin="taskforge: per-test coverage map", declared=False),)

# Plugins that would change what a run means; switched off when the environment has them.
_PLUGIN_OVERRIDES = {"pytest-cov": ("--no-cov",), "pytest-randomly": ("-p", "no:randomly")}


# -- the wheelhouse ------------------------------------------------------------------------------


def _resolve(
    python: str,
    project: _ProjectWheel,
    extras: Sequence[str],
    requirements: Sequence[DetectedRequirement],
    wheelhouse: Path,
    *,
    excluded: Sequence[str] = (),
) -> tuple[list[DetectedRequirement], list[DroppedRequirement]]:
    """Fill ``wheelhouse`` with wheels for the project's dependencies and the test requirements;
    ``excluded`` are constraints (``name<version``) that keep out releases the image's Python
    cannot install."""
    project_req = f"{project.path}[{','.join(extras)}]" if extras else str(project.path)
    constraints = wheelhouse.parent / "constraints.txt"
    constraints.write_text("".join(f"{line}\n" for line in excluded))

    def attempt(reqs: Sequence[DetectedRequirement]) -> subprocess.CompletedProcess[str]:
        return _pip(python, ["wheel", "--wheel-dir", str(wheelhouse), "-c", str(constraints), project_req,
                             *(r.requirement for r in reqs)])

    proc = attempt(requirements)
    if proc.returncode == 0:
        return list(requirements), []
    # Declared requirements go in together when they can; inferred ones (imports in test files,
    # pytest plugins) may be wrong guesses, so after a failure each is tried on its own.
    declared = [r for r in requirements if r.declared]
    if attempt(declared).returncode == 0:
        kept, candidates = declared, [r for r in requirements if not r.declared]
    else:
        kept = [r for r in requirements if canonicalize_name(r.name) == "pytest"]
        proc = attempt(kept)
        if proc.returncode != 0:
            raise DependencyError(
                f"cannot resolve the dependencies of {project.name}: {_pip_error(proc)}",
                reason="dependency_unresolvable",
            )
        candidates = [r for r in requirements if r not in kept]
    dropped = []
    for req in candidates:
        proc = attempt([*kept, req])
        if proc.returncode == 0:
            kept.append(req)
        else:
            dropped.append(DroppedRequirement(requirement=req.requirement, origin=req.origin, reason=_pip_error(proc)))
    # The failed attempts may have left wheels of dropped requirements behind; start clean.
    shutil.rmtree(wheelhouse)
    wheelhouse.mkdir()
    proc = attempt(kept)
    if proc.returncode != 0:
        raise DependencyError(f"cannot resolve the test requirements of {project.name}: {_pip_error(proc)}")
    return kept, dropped


_MAX_PYTHON_RETRIES = 8


def _resolve_for_image(
    python: str,
    image_python: str,
    project: _ProjectWheel,
    extras: Sequence[str],
    requirements: Sequence[DetectedRequirement],
    wheelhouse: Path,
) -> tuple[list[DetectedRequirement], list[DroppedRequirement]]:
    """:func:`_resolve`, then every wheel's Requires-Python is checked against the image's full
    Python version (the host's ``python3.11`` may be 3.11.7 where the image has 3.11.2): a release
    that does not fit is kept out and the set resolved again, so pip picks an older one.

    The cap is the newest release that fits (:func:`_newest_fitting`, pip asked for the image's
    version), so a package with a dozen releases too new costs one more resolution, not a dozen
    (excluding them one at a time ran out of tries on a held-out project); without a fitting wheel
    to ask about, it is ``name<version``. A ``<=`` cap rules out newer releases that only ship an
    sdist (pip cannot be asked about those without building them); if the set then fails to
    resolve, those caps fall back to ``name<version`` and it is tried again."""
    excluded: list[str] = []
    looser: dict[str, str] = {}  # a wheel-found cap -> the plain one it may fall back to
    for _ in range(_MAX_PYTHON_RETRIES):
        shutil.rmtree(wheelhouse, ignore_errors=True)
        wheelhouse.mkdir()
        try:
            kept, dropped = _resolve(python, project, extras, requirements, wheelhouse, excluded=excluded)
        except DependencyError as err:
            if looser:
                excluded = [looser.get(c, c) for c in excluded]
                looser = {}
                continue
            if not excluded:
                raise
            raise DependencyError(
                f"{err}; the releases that resolve on the host need a newer Python than the image's "
                f"{image_python} (tried with {', '.join(excluded)})",
                reason="python_mismatch",
            ) from err
        misfits = [w for w in sorted(wheelhouse.glob("*.whl")) if not _fits(w, image_python)]
        if not misfits or not image_python:
            return kept, dropped
        if own := [w for w in misfits if _wheel_dist(w.name)[0] == canonicalize_name(project.name)]:
            name, version = _wheel_dist(own[0].name)
            older = _newest_fitting(python, image_python, name, version)
            hint = (f"mine an older release (on the package index, the newest release of that name that fits is "
                    f"{name}=={older.split('<=', 1)[1]})" if "<=" in older else "no release of that name on the "
                    "package index fits")
            raise DependencyError(
                f"{project.name} {version} requires Python {_requires_python(own[0])} and the environment image "
                f"has {image_python}: {hint}", reason="python_mismatch")
        for wheel in misfits:
            name, version = _wheel_dist(wheel.name)
            cap = _newest_fitting(python, image_python, name, version)
            excluded.append(cap)
            if "<=" in cap:
                looser[cap] = f"{name}<{version}"
    raise DependencyError(
        f"cannot resolve the dependencies of {project.name} for the image's Python {image_python}: "
        f"every release tried requires a newer one (tried last with {', '.join(excluded[-3:])})",
        reason="python_mismatch",
    )


def _requires_python(wheel: Path) -> str:
    """The wheel's Requires-Python ("" when it has none)."""
    with zipfile.ZipFile(wheel) as archive:
        name = next((n for n in archive.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1), None)
        if name is None:
            return ""
        metadata = email.parser.BytesHeaderParser().parsebytes(archive.read(name))
    return str(metadata.get("Requires-Python") or "")


def _fits(wheel: Path, image_python: str) -> bool:
    """Whether the wheel's Requires-Python admits ``image_python`` (a wheel without one does)."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    if not image_python:
        return True
    requires = _requires_python(wheel)
    if not requires:
        return True
    try:
        return SpecifierSet(str(requires)).contains(image_python, prereleases=True)
    except InvalidSpecifier:
        return True  # pip installs what it cannot parse the same way


def _newest_fitting(python: str, image_python: str, name: str, version: str) -> str:
    """A constraint that keeps ``name`` below ``version``, at the newest release whose
    Requires-Python admits the image's Python: ``name<=FOUND`` when pip, told the image's version
    (``--python-version``, which needs wheels), finds one; else ``name<version``."""
    with tempfile.TemporaryDirectory(prefix="taskforge-fit-") as folder:
        proc = _pip(python, ["download", "--no-deps", "--only-binary=:all:", "--python-version", image_python,
                             "--dest", folder, f"{name}<{version}"])
        found = sorted(Path(folder).glob("*.whl"))
        if proc.returncode == 0 and len(found) == 1:
            return f"{name}<={_wheel_dist(found[0].name)[1]}"
    return f"{name}<{version}"


def _wheel_dist(filename: str) -> tuple[str, str]:
    name, version = filename.split("-")[:2]
    return canonicalize_name(name), version


# -- the image -----------------------------------------------------------------------------------


def build_environment(
    snapshot: Snapshot, *, backend: SandboxBackend, base: BaseImage, cache_dir: Path | None = None
) -> Environment:
    """Build (or reuse) the environment image for ``snapshot``."""
    cache = cache_dir or cache_root() / "envs"
    python = host_python(base.python)
    detected = detect_test_requirements(snapshot.path)
    templates = sandboxes_dir() / "templates"
    key = cache_key(
        snapshot.commit,
        base.image_id,
        json.dumps(detected.to_json(), sort_keys=True),
        *(r.requirement for r in _TOOL_REQUIREMENTS),
        (templates / "env.Dockerfile").read_bytes(),
        (templates / "install_metadata.py").read_bytes(),
    )[:20]
    record = cache / f"{canonicalize_name(snapshot.name)}-{key}.json"
    if record.is_file():
        env = Environment.from_json(json.loads(record.read_text()))
        if backend.image_exists(env.image):
            return env

    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".tmp-", dir=cache))
    try:
        project = _build_project_wheel(snapshot, python, work / "project-wheel")
        extras = sorted(e for e in detected.extras if canonicalize_name(e) in project.provides_extra)
        wheelhouse = work / "wheels"
        requirements = list(detected.requirements)
        names = {r.name for r in requirements}
        requirements += [r for r in _TOOL_REQUIREMENTS if r.name not in names]
        kept, dropped = _resolve_for_image(python, base.python_full, project, extras, requirements, wheelhouse)
        own = canonicalize_name(project.name)
        for wheel in wheelhouse.glob("*.whl"):
            if _wheel_dist(wheel.name)[0] == own:
                wheel.unlink()  # the project's code must not enter the image
        package_paths = _package_paths(snapshot.path, project.top_level)
        import_roots = _import_roots(package_paths)

        context = work / "context"
        (context / "project" / "dist-info").mkdir(parents=True)
        for name, content in project.dist_info.items():
            target = context / "project" / "dist-info" / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        metadata = {
            "import_roots": list(import_roots),
            "console_scripts": project.console_scripts,
        }
        (context / "project" / "metadata.json").write_text(json.dumps(metadata, indent=2, sort_keys=True))
        shutil.copy(templates / "install_metadata.py", context / "project")
        shutil.copytree(wheelhouse, context / "wheels")

        wheel_digests = sorted(
            f"{w.name}:{hashlib.sha256(w.read_bytes()).hexdigest()}" for w in wheelhouse.glob("*.whl")
        )
        dist_digest = cache_key(*(f"{n}:{hashlib.sha256(c).hexdigest()}" for n, c in sorted(project.dist_info.items())))
        template = (templates / "env.Dockerfile").read_text()
        image_hash = cache_key(base.image_id, template, *wheel_digests, dist_digest, json.dumps(metadata, sort_keys=True))
        tag = f"taskforge-env-{own}:{image_hash[:16]}"
        labels = {"taskforge.env.repo": snapshot.name, "taskforge.env.base": base.tag}
        label_text = " ".join(f'{k}="{v}"' for k, v in labels.items())
        (context / "Dockerfile").write_text(template.format(base_image=base.tag, labels=label_text))
        if not backend.image_exists(tag):
            try:
                backend.build_image(context, tag=tag, labels=labels)
            except SandboxError as err:
                raise EnvironmentBuildError(f"environment image for {snapshot.name}: {err}") from err

        final = cache / f"{canonicalize_name(snapshot.name)}-{key}"
        if final.exists():
            shutil.rmtree(final)
        final.mkdir()
        shutil.move(str(wheelhouse), str(final / "wheels"))
        shutil.move(str(context / "project"), str(final / "project"))
        installed_names = {_wheel_dist(w.name)[0] for w in (final / "wheels").glob("*.whl")}
        env = Environment(
            name=snapshot.name,
            image=tag,
            image_id=backend.image_id(tag),
            base_image=base.tag,
            python=base.python,
            import_roots=import_roots,
            package_paths=package_paths,
            pytest_args=tuple(arg for dist, args in _PLUGIN_OVERRIDES.items() if dist in installed_names for arg in args),
            extras=tuple(extras),
            installed=tuple(sorted("%s==%s" % _wheel_dist(w.name) for w in (final / "wheels").glob("*.whl"))),
            requirements=tuple(f"{r.requirement}  # {r.origin}" for r in kept),
            dropped=tuple(dropped),
            wheelhouse=str(final / "wheels"),
            project_dir=str(final / "project"),
        )
        tmp_record = record.with_suffix(".json.tmp")
        tmp_record.write_text(json.dumps(env.to_json(), indent=2))
        tmp_record.replace(record)
        return env
    finally:
        shutil.rmtree(work, ignore_errors=True)


def ensure_image(source: str, image: str, *, backend: SandboxBackend) -> bool:
    """Make sure the image ``image`` that a task row names exists; returns whether it had to be built.

    A dataset travels without its images: on another machine, or after ``docker image prune`` or a
    new base image, the row's ``image_name`` is missing. It is then rebuilt the way mining built it,
    from the row's ``source`` on the current base image, and tagged with the row's name (the SWE-bench
    harness likewise builds an instance's image from its spec when it is not there).
    """
    from taskforge.repo.sources import fetch
    from taskforge.sandbox.base_image import current_base

    if backend.image_exists(image):
        return False
    env = build_environment(fetch(source), backend=backend, base=current_base(backend))
    if env.image != image:
        backend.tag_image(env.image, image)
    return True
