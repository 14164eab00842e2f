"""Wheels are chosen for the image's full Python version, not the host's.

The host resolves with its own ``python3.11`` (say 3.11.7) while the offline base image has
3.11.2; a release whose Requires-Python is ``>=3.11.5`` resolves on the host and then fails to
install in the image (seen on a held-out project through soupsieve). Real pip, local wheels only.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest

from taskforge.errors import DependencyError
from taskforge.repo.environment import _fits, _ProjectWheel, _resolve_for_image
from taskforge.repo.requirements import DetectedRequirement


def _wheel(folder: Path, name: str, version: str, *, requires_python: str = "", depends: str = "") -> Path:
    dist = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    if requires_python:
        metadata += f"Requires-Python: {requires_python}\n"
    if depends:
        metadata += f"Requires-Dist: {depends}\n"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name}/__init__.py", f"VERSION = {version!r}\n")
        archive.writestr(f"{dist}/METADATA", metadata)
        archive.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{dist}/RECORD", "")
    return path


def test_fits_reads_requires_python(tmp_path: Path) -> None:
    assert _fits(_wheel(tmp_path, "a", "1.0", requires_python=">=3.11.5"), "3.11.7")
    assert not _fits(_wheel(tmp_path, "b", "1.0", requires_python=">=3.11.5"), "3.11.2")
    assert _fits(_wheel(tmp_path, "c", "1.0"), "3.11.2")
    assert _fits(_wheel(tmp_path, "d", "1.0", requires_python=">=3.8,<4"), "3.11.2")


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A find-links folder that is the only place pip looks."""
    links = tmp_path / "links"
    links.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    return links


def test_a_release_too_new_for_the_image_is_replaced_by_one_that_fits(tmp_path: Path, index: Path) -> None:
    _wheel(index, "helper", "1.0", requires_python=">=3.8")
    _wheel(index, "helper", "2.0", requires_python=">=3.11.5")
    _wheel(index, "helper", "3.0", requires_python=">=3.11.6")
    project = _ProjectWheel(path=_wheel(tmp_path, "proj", "0.1", depends="helper"), name="proj",
                            provides_extra=frozenset(), dist_info={}, top_level=("proj",), console_scripts={})
    host = f"{sys.version_info[0]}.{sys.version_info[1]}.99"
    wheelhouse = tmp_path / "wheels"
    _resolve_for_image(sys.executable, host, project, [], [], wheelhouse)
    assert sorted(w.name.split("-")[1] for w in wheelhouse.glob("helper-*")) == ["3.0"]

    _resolve_for_image(sys.executable, "3.11.2", project, [], [], wheelhouse)
    assert sorted(w.name.split("-")[1] for w in wheelhouse.glob("helper-*")) == ["1.0"]


def test_many_releases_too_new_are_skipped_in_one_step(tmp_path: Path, index: Path) -> None:
    """A dependency with a dozen releases too new for the image (pydash's test requirements reach
    one): the first misfit caps the package, so the next resolution picks the newest that fits."""
    _wheel(index, "helper", "1.0", requires_python=">=3.8")
    for minor in range(1, 13):
        _wheel(index, "helper", f"2.{minor}", requires_python=">=3.11.5")
    project = _ProjectWheel(path=_wheel(tmp_path, "proj", "0.1", depends="helper"), name="proj",
                            provides_extra=frozenset(), dist_info={}, top_level=("proj",), console_scripts={})
    wheelhouse = tmp_path / "wheels"
    _resolve_for_image(sys.executable, "3.11.2", project, [], [], wheelhouse)
    assert sorted(w.name.split("-")[1] for w in wheelhouse.glob("helper-*")) == ["1.0"]


def test_a_project_too_new_for_the_image_names_the_newest_release_that_fits(tmp_path: Path, index: Path) -> None:
    _wheel(index, "proj", "0.9", requires_python=">=3.8")
    _wheel(index, "proj", "1.0", requires_python=">=3.11.5")
    project = _ProjectWheel(path=_wheel(tmp_path, "proj", "1.1", requires_python=">=3.11.5"), name="proj",
                            provides_extra=frozenset(), dist_info={}, top_level=("proj",), console_scripts={})
    with pytest.raises(DependencyError) as caught:
        _resolve_for_image(sys.executable, "3.11.2", project, [], [], tmp_path / "wheels")
    assert caught.value.reason == "python_mismatch"
    assert str(caught.value) == ("proj 1.1 requires Python >=3.11.5 and the environment image has 3.11.2: mine an "
                                 "older release (on the package index, the newest release of that name that fits is "
                                 "proj==0.9)")


_BACKEND = """
import base64, hashlib, os, zipfile

NAME, VERSION = open("NAME").read().split()


def _metadata():
    return f"Metadata-Version: 2.1\\nName: {NAME}\\nVersion: {VERSION}\\n"


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(directory, config_settings=None):
    info = os.path.join(directory, f"{NAME}-{VERSION}.dist-info")
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write(_metadata())
    return os.path.basename(info)


def build_wheel(directory, config_settings=None, metadata_directory=None):
    name = f"{NAME}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(directory, name), "w") as archive:
        archive.writestr(f"{NAME}/__init__.py", "")
        archive.writestr(f"{NAME}-{VERSION}.dist-info/METADATA", _metadata())
        archive.writestr(f"{NAME}-{VERSION}.dist-info/WHEEL", "Wheel-Version: 1.0\\nGenerator: t\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n")
        archive.writestr(f"{NAME}-{VERSION}.dist-info/RECORD", "")
    return name
"""


def _sdist(folder: Path, name: str, version: str) -> Path:
    """An sdist that pip builds offline: its own in-tree build backend, no build requirements."""
    import io
    import tarfile

    base = f"{name}-{version}"
    files = {
        "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n',
        "backend.py": _BACKEND,
        "NAME": f"{name} {version}",
        "PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
    }
    path = folder / f"{base}.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for rel, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{base}/{rel}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_a_newer_fitting_release_that_only_ships_an_sdist_is_not_capped_away(tmp_path: Path, index: Path) -> None:
    """The wheel-found cap (helper<=2.4) would rule out 2.6, an sdist that fits and that the project
    needs (helper>=2.5); the set then fails, and the cap falls back to helper<3.0."""
    _wheel(index, "helper", "2.4", requires_python=">=3.8")
    _sdist(index, "helper", "2.6")
    _wheel(index, "helper", "3.0", requires_python=">=3.11.5")
    project = _ProjectWheel(path=_wheel(tmp_path, "proj", "0.1", depends="helper>=2.5"), name="proj",
                            provides_extra=frozenset(), dist_info={}, top_level=("proj",), console_scripts={})
    wheelhouse = tmp_path / "wheels"
    _resolve_for_image(sys.executable, "3.11.2", project, [], [], wheelhouse)
    assert sorted(w.name.split("-")[1] for w in wheelhouse.glob("helper-*")) == ["2.6"]


def test_no_release_fits_fails_the_build_or_drops_a_test_requirement(tmp_path: Path, index: Path) -> None:
    """A run-time dependency with no fitting release fails the build with pip's reason; a test
    requirement with none is dropped and recorded, as any test requirement that will not resolve."""
    _wheel(index, "helper", "2.0", requires_python=">=3.11.5")
    _wheel(index, "tool", "2.0", requires_python=">=3.11.5")
    project = _ProjectWheel(path=_wheel(tmp_path, "proj", "0.1", depends="helper"), name="proj",
                            provides_extra=frozenset(), dist_info={}, top_level=("proj",), console_scripts={})
    with pytest.raises(DependencyError) as caught:
        _resolve_for_image(sys.executable, "3.11.2", project, [], [], tmp_path / "wheels")
    assert caught.value.reason == "python_mismatch"
    assert "helper<2.0" in str(caught.value) and "3.11.2" in str(caught.value)

    plain = _ProjectWheel(path=_wheel(tmp_path, "plain", "0.1"), name="plain", provides_extra=frozenset(),
                          dist_info={}, top_level=("plain",), console_scripts={})
    requirement = DetectedRequirement(requirement="tool", origin="tox.ini [testenv] deps", declared=True)
    kept, dropped = _resolve_for_image(sys.executable, "3.11.2", plain, [], [requirement], tmp_path / "wheels")
    assert kept == [] and [d.requirement for d in dropped] == ["tool"]
