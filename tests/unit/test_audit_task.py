"""The audit of a whole start state as mining writes it: no finding on what an agent may see."""

from __future__ import annotations

import subprocess
from pathlib import Path

from taskforge.guest.scanner import scan
from taskforge.mining.audit.scan import audit_task_state
from taskforge.mining.checks import finding_detail
from taskforge.repo.sources import fetch
from taskforge.repo.startstate import write_start_state

MODULE = '''"""Read line-delimited records for the ledger reconciliation report."""

import os

SAMPLE = os.path.join(os.path.dirname(__file__), "fixtures_dir", "/reconciliation_sample_rows.jsonl")


def reconcile_ledger_rows(path, *, strict_ordering=False):
    """Yield each reconciliation row of a JSON-lines ledger export, in file order."""
    with open(path) as handle:
        for number, line in enumerate(handle, 1):
            if strict_ordering and not line.strip():
                raise ValueError("blank reconciliation row at line %d" % number)
            yield line.rstrip("\\n")
'''


def test_a_constant_naming_a_file_that_is_still_there_is_not_a_finding(tmp_path: Path) -> None:
    repo = tmp_path / "proj"
    files = {
        "pkg/__init__.py": "",
        "pkg/ledgerio.py": MODULE,
        "pkg/other.py": "def unrelated():\n    return 1\n",
        "tests/reconciliation_sample_rows.jsonl": "{}\n",
        "tests/test_other.py": "from pkg.other import unrelated\n\ndef test_unrelated():\n    assert unrelated() == 1\n",
    }
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"], cwd=repo, check=True)
    snapshot = fetch(str(repo), cache_dir=tmp_path / "cache")
    changes = {"pkg/ledgerio.py": None}  # a module task
    start = tmp_path / "start"
    write_start_state(snapshot, changes, start)
    fingerprint, audit = audit_task_state(source_dir=snapshot.path, start_dir=start, start_changes=changes,
                                          strategy="module", test_ids=())
    assert not fingerprint.empty  # the module's docstrings, names and n-grams are searched for
    assert "/reconciliation_sample_rows.jsonl" not in fingerprint.constants  # .git/index lists that file
    assert audit.findings == []
    # The same fingerprint finds a copy of the module left behind.
    (start / "pkg" / "ledgerio.py.orig").write_text(MODULE)
    leaked = scan({"fingerprints": {"task": fingerprint.to_json()}, "roots": [str(start)]})["findings"]["task"]
    assert [f["path"] for f in leaked] == [str(start / "pkg" / "ledgerio.py.orig")]
    # A rejection names the file, the channel and what matched there, item by item.
    detail = finding_detail(leaked)
    assert detail.startswith(f"{start / 'pkg' / 'ledgerio.py.orig'} (text): "), detail
    assert "docstring: Yield each reconciliation row" in detail, detail


def _nested_zip(levels: int, payload: bytes) -> bytes:
    import io
    import zipfile

    data = payload
    for level in range(levels):
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr(f"level{level}.zip" if level else "inner.txt", data)
        data = buffer.getvalue()
    return data


def test_what_the_scan_leaves_unread_makes_the_start_state_unclean(tmp_path: Path) -> None:
    """Fail closed: a file over the size limit or archives nested past the depth limit may hold a
    copy nobody read; a merely damaged archive (its raw bytes were read) stays a skip."""
    repo = tmp_path / "proj"
    for rel, text in {"pkg/__init__.py": "", "pkg/ledgerio.py": MODULE,
                      "tests/test_x.py": "import pkg\n\ndef test_the_package_imports():\n    assert pkg.__name__ == 'pkg'\n"}.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"], cwd=repo, check=True)
    snapshot = fetch(str(repo), cache_dir=tmp_path / "cache")
    changes = {"pkg/ledgerio.py": None}
    start = tmp_path / "start"
    write_start_state(snapshot, changes, start)
    _, audit = audit_task_state(source_dir=snapshot.path, start_dir=start, start_changes=changes,
                                strategy="module", test_ids=())
    assert audit.findings == []

    (start / "tests" / "broken.zip").write_bytes(b"PK\x03\x04 not really a zip")  # damaged: read raw
    (start / "tests" / "deep.zip").write_bytes(_nested_zip(7, MODULE.encode()))
    with open(start / "tests" / "huge.zip", "wb") as huge:  # sparse: past the 64 MiB limit, costs nothing
        huge.write(b"PK\x03\x04")  # an archive only reads whole
        huge.truncate(65 * 1024 * 1024)
    with open(start / "tests" / "huge.bin", "wb") as huge:  # a plain file is read in windows
        huge.truncate(65 * 1024 * 1024)
    _, audit = audit_task_state(source_dir=snapshot.path, start_dir=start, start_changes=changes,
                                strategy="module", test_ids=())
    unscanned = sorted((f["path"].split("!")[0].rsplit("/", 1)[-1], f["kind"]) for f in audit.findings)
    assert unscanned == [("deep.zip", "unscanned"), ("huge.zip", "unscanned")], audit.findings
    assert not audit.clean
    # The removed module, past the first window of a plain file over the limit, is found there.
    (start / "tests" / "deep.zip").unlink()
    (start / "tests" / "huge.zip").unlink()
    with open(start / "tests" / "huge.bin", "r+b") as huge:
        huge.seek(64 * 1024 * 1024 + 12345)
        huge.write(MODULE.encode())
    _, audit = audit_task_state(source_dir=snapshot.path, start_dir=start, start_changes=changes,
                                strategy="module", test_ids=())
    found = {f["path"].rsplit("/", 1)[-1].split("!")[0] for f in audit.findings}
    assert found == {f"huge.bin@{63 * 1024 * 1024}"}, audit.findings
