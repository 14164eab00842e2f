"""The image audit as mining runs it: the scanner inside a real sandbox of an environment image,
with the sandbox's own Python, fed the fingerprints on stdin."""

from __future__ import annotations

import io
import json
import py_compile
import shutil
import zipfile
from pathlib import Path

import pytest

from taskforge.mining.audit.fingerprint import build_fingerprint
from taskforge.mining.audit.scan import scan_image
from taskforge.repo.environment import build_environment
from taskforge.repo.sources import fetch
from taskforge.sandbox import SandboxLimits

pytestmark = pytest.mark.docker

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "audit"
SPEC = json.loads((FIXTURES / "tasks.json").read_text())["body"]


@pytest.fixture(scope="module")
def stanzakit(tmp_path_factory, backend, base_image, session_cache):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("stanzakit") / "stanzakit"
    shutil.copytree(FIXTURES / "original", root, ignore=shutil.ignore_patterns("conftest.py"))
    snapshot = fetch(str(root))
    env = build_environment(snapshot, backend=backend, base=base_image)
    original = {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("*.py")}
    after = {path: (FIXTURES / src).read_text() for path, src in SPEC["start"].items()}
    visible = {**original, **after}
    fingerprint = build_fingerprint(before={p: original[p] for p in after}, after=after, visible=visible,
                                    strategy="body", test_ids=SPEC["test_ids"])
    return root, env, fingerprint


def test_a_clean_image_has_no_findings(stanzakit, backend) -> None:  # type: ignore[no-untyped-def]
    _, env, fingerprint = stanzakit
    with backend.start(env.image, limits=SandboxLimits.load()) as box:
        findings, totals = scan_image({"task": fingerprint}, sandbox=box)
    assert findings == {"task": []}
    assert totals["files"] > 1000  # the venv's site-packages under /opt were read


def test_a_dependencys_own_file_is_a_finding_only_where_it_holds_the_removed_code(  # type: ignore[no-untyped-def]
        stanzakit, backend) -> None:
    """A file a dependency's wheel installs shares constants with many a removed feature (inflect's
    plural rules say "pound-force per square inch", and so does babel's locale data): with the
    environment's interfaces it is a finding only where it holds the removed code itself. Here the
    removed module quotes three of pluggy's messages (found in pluggy's module and its bytecode
    without the interfaces, in neither with them), and a function copied from pluggy is found
    with them too."""
    import ast

    from taskforge.mining.audit.fingerprint import Fingerprint
    from taskforge.mining.audit.vocabulary import interface_names

    _, env, _ = stanzakit
    wheel = next(Path(env.wheelhouse).glob("pluggy-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        source = archive.read("pluggy/_manager.py").decode()
    tree = ast.parse(source)
    messages = sorted({n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                       and 24 <= len(n.value) <= 70 and n.value[:1].isalpha() and " " in n.value})
    quoted = Fingerprint(constants=messages[:3])
    assert len(quoted.constants) == 3, messages
    longest = max((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)), key=lambda n: n.end_lineno - n.lineno)
    copied = build_fingerprint(before={"stanzakit/copied.py": ast.get_source_segment(source, longest)},
                               after={"stanzakit/copied.py": None}, visible={}, strategy="module")
    interfaces = interface_names(env.wheelhouse, own=env.package_paths)
    with backend.start(env.image, limits=SandboxLimits.load()) as box:
        plain, _ = scan_image({"quoted": quoted}, sandbox=box)
        aware, _ = scan_image({"quoted": quoted, "copied": copied}, sandbox=box, interfaces=interfaces)
    assert any("/site-packages/pluggy/" in f["path"] for f in plain["quoted"]), plain
    assert aware["quoted"] == [], aware["quoted"]
    assert any(f["path"].endswith("/site-packages/pluggy/_manager.py") and f["match"] == "ngram"
               for f in aware["copied"]), aware["copied"]


def test_copies_left_in_the_sandbox_are_found(stanzakit, backend, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Bytecode of the original and a wheel holding it, dropped in /tmp and in a home folder."""
    root, env, fingerprint = stanzakit
    pyc = tmp_path / "headers.cpython-311.pyc"
    py_compile.compile(str(root / "stanzakit/headers.py"), cfile=str(pyc), dfile="stanzakit/headers.py")
    wheel = io.BytesIO()
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(root / "stanzakit/headers.py", "stanzakit/headers.py")
    with backend.start(env.image, limits=SandboxLimits.load()) as box:
        box.put_files({"leftover/__pycache__/headers.cpython-311.pyc": pyc.read_bytes(),
                       "home/stanzakit-0.1-py3-none-any.whl": wheel.getvalue()}, "/tmp")
        findings, _ = scan_image({"task": fingerprint}, sandbox=box)
    kinds = {finding["path"].split("!")[0]: finding["kind"] for finding in findings["task"]}
    assert kinds == {
        "/tmp/leftover/__pycache__/headers.cpython-311.pyc": "pyc",
        "/tmp/home/stanzakit-0.1-py3-none-any.whl": "zip",
    }, findings


def _nested_zip(levels: int, payload: bytes) -> bytes:
    data = payload
    for level in range(levels):
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr(f"level{level}.zip" if level else "inner.txt", data)
        data = buffer.getvalue()
    return data


def test_what_the_image_scan_leaves_unread_makes_every_task_unclean(  # type: ignore[no-untyped-def]
    stanzakit, backend,
) -> None:
    """Fail closed on the image too: an archive over the size limit and archives nested past the
    depth limit may hold any task's code, so every task of the scan gets an ``unscanned``
    finding. What the sandbox's user may not read (/root) the agent may not read either: no
    finding (the clean image test above has /root too)."""
    _, env, fingerprint = stanzakit
    with backend.start(env.image, limits=SandboxLimits.load()) as box:
        box.put_files({"drop/deep.zip": _nested_zip(7, b"nothing to see")}, "/tmp")
        # An archive over the size limit only reads whole; a plain file over it is read in windows.
        made = box.exec(["python", "-c", "f = open('/tmp/drop/huge.zip', 'wb'); f.write(b'PK\\x03\\x04'); "
                         "f.truncate(65 << 20); open('/tmp/drop/huge.bin', 'wb').truncate(65 << 20)"], timeout_s=60)
        assert made.exit_code == 0, made.text()
        findings, _ = scan_image({"body": fingerprint, "again": fingerprint}, sandbox=box)
    for key in ("body", "again"):
        unscanned = {(f["path"].split("!")[0], f["kind"]) for f in findings[key]}
        assert unscanned == {("/tmp/drop/deep.zip", "unscanned"), ("/tmp/drop/huge.zip", "unscanned")}, findings
