"""The leak audit of a task: fingerprint the removed code, search what an agent can read.

An agent's sandbox holds two things: the task's start state at /workspace (its files and its
fresh ``.git``), and the environment image (site-packages under /opt, home folders, /tmp). The
start state is written on the host, byte for byte what goes into the sandbox, so it is scanned
there (:func:`audit_start_state`). The image is the same for every task of a repository, so one
scan inside a sandbox of the image serves all of them at once (:func:`scan_image`); the
fingerprints go in on stdin and never touch the sandbox's disk.

The scanner itself is ``taskforge/guest/scanner.py`` (stdlib only, so the sandbox's Python runs it),
and the fingerprint is built by :mod:`taskforge.mining.audit.fingerprint`.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taskforge import guest
from taskforge.errors import TaskforgeError
from taskforge.guest import scanner
from taskforge.mining.audit.fingerprint import Fingerprint, build_fingerprint
from taskforge.mining.audit.vocabulary import Interfaces
from taskforge.repo.startstate import is_scrubbed, tracked_texts
from taskforge.sandbox import Sandbox

__all__ = ["IMAGE_ROOTS", "WORKSPACE", "AuditResult", "audit_start_state", "audit_task_state", "scan_image"]

WORKSPACE = "/workspace"
IMAGE_ROOTS = ("/opt", "/home", "/tmp", "/var/tmp", "/usr/local", "/srv", "/root")
"""What of the environment image an agent can read and a copy could hide in (the venv is /opt/venv)."""
_SCANNER_DIR = "/tmp/taskforge-audit"
_SCANNER = guest.source_path("scanner")
_FILE_LIST = "<the start state's file names>"


@dataclass(kw_only=True, slots=True)
class AuditResult:
    """One task's audit, as stored in the task row's ``audit`` column (JSON)."""

    findings: list[dict[str, Any]] = field(default_factory=list)
    """Each names its file (sandbox path; ``!`` walks into an archive or git pack), its channel
    (``kind``) and what matched."""
    fingerprint: dict[str, int] = field(default_factory=dict)
    """How many items of each kind were searched for."""
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    """Host time of this task's audit: fingerprint, start-state scan, its share of the image scan."""
    image_scanned: bool = False

    @property
    def clean(self) -> bool:
        return not self.findings

    def to_json(self) -> str:
        return json.dumps(
            {"clean": self.clean, "findings": self.findings, "fingerprint": self.fingerprint, "files": self.files,
             "bytes": self.bytes, "seconds": round(self.seconds, 3), "image_scanned": self.image_scanned},
            sort_keys=True,
        )


def _counts(fingerprint: Fingerprint) -> dict[str, int]:
    return {
        "ngrams": len(fingerprint.ngrams), "signatures": len(fingerprint.signatures), "names": len(fingerprint.names),
        "constants": len(fingerprint.constants), "docstrings": len(fingerprint.docstrings),
        "test_ids": len(fingerprint.test_ids), "bodies": len(fingerprint.bodies),
    }


def unread(reason: str) -> bool:
    """Whether a scan's skip left content unread for a limit or an error of the file system (not a
    damaged container, whose raw bytes were read)."""
    return (reason.startswith(("larger than", "stat:", "list:", "read:", "error:", "decoding past the budget"))
            or reason in ("nested too deep", "member too large") or "inflates past" in reason)


_DENIED = frozenset({"EACCES", "EPERM"})


def _unscanned(skipped: Sequence[Mapping[str, Any]], *, denied_is_unread: bool) -> list[dict[str, Any]]:
    """Fail closed: an ``unscanned`` finding for each thing a scan left unread for its limits (too
    large, nested too deep, inflating or decoding past the budget) or could not open; it may hold a
    copy nobody read. A container that is merely damaged (its raw bytes were read) stays a skip:
    test suites ship broken archives on purpose. ``denied_is_unread``: whether a permission the
    scanning user lacks counts; in a sandbox of the image the scan runs as the agent does, and what
    it may not read, the agent may not read either."""
    return [{"path": s["path"], "kind": "unscanned", "match": s["reason"]} for s in skipped
            if unread(s["reason"]) and (denied_is_unread or s.get("errno") not in _DENIED)]


_NGRAMS = re.compile(r"(\d+) of \d+ n-grams(?: \((\d+) at an interface's header\))?")

SHIPPED_NGRAM_HITS = 12
"""Distinct n-grams of the removed code (beyond those at an interface's header) that make a
dependency's own file hold it: a verbatim stretch of 23 tokens, two to three lines, where the
smallest candidate removes three. A dependency that vendors the project holds hundreds. Fewer are
idioms the removed code and its hidden tests share with a large library as published: pandas'
own test files and ``DataFrame`` docstrings share 4 to 7 of the 2,813 to 14,862 n-grams of a
held-out diffing library's tasks (``np.array([...], dtype=object)``, ``pd.DataFrame({...})``), and
rejected 7 of its 10 tasks."""


def holds_the_code(evidence: Mapping[str, Any]) -> bool:
    """Whether one piece of a finding's evidence is of the removed code itself, not of what it
    shares with others: a compiled body, or at least :data:`SHIPPED_NGRAM_HITS` n-grams other
    than those at the header of a removed function that implements or overrides a dependency's
    interface (``Fingerprint.interface_ngrams``: the dependency's base class holds the same
    ``def`` line)."""
    if evidence.get("match") == "body":
        return True
    if evidence.get("match") != "ngram":
        return False
    counts = _NGRAMS.match(str(evidence.get("value", "")))
    if counts is None:
        return True  # not the scanner's wording: fail closed
    return int(counts[1]) - int(counts[2] or 0) >= SHIPPED_NGRAM_HITS


def shipped(finding: Mapping[str, Any], interfaces: Interfaces | None) -> bool:
    """Whether a finding lies in a file a dependency's wheel installs (or its bytecode) and none
    of its evidence :func:`holds_the_code`: that file holds what it holds as published."""
    return (interfaces is not None and interfaces.installs(str(finding["path"]))
            and not any(holds_the_code(e) for e in finding.get("evidence", ())))


def _brief(finding: Mapping[str, Any]) -> dict[str, Any]:
    return {key: finding[key] for key in ("path", "kind", "match", "detail") if key in finding}


def audit_start_state(
    *,
    start_dir: Path,
    before: Mapping[str, str],
    after: Mapping[str, str | None],
    visible: Mapping[str, str],
    strategy: str,
    test_ids: Sequence[str],
    interfaces: Interfaces | None = None,
) -> tuple[Fingerprint, AuditResult]:
    """Fingerprint what the task removed and scan its start state (``start_dir``, .git included).

    ``before``/``after``: the changed files' original and start-state texts; ``visible``: every
    text file of the start state, compared with the original (what the fingerprint must not
    contain, and the copies it keeps, each a finding with match ``copy``); ``interfaces``: what
    the environment's dependencies define (``taskforge.mining.audit.vocabulary.interface_names``).
    """
    started = time.monotonic()
    fingerprint = build_fingerprint(before=before, after=after, visible=visible, strategy=strategy, test_ids=test_ids,
                                    interfaces=interfaces)
    # The start state's texts were read already, compared with the original: the fingerprint holds
    # nothing found where they may show it, and the copies they keep are findings. Only what else
    # lies there is read, git's objects and any file that is not plain text.
    encoded = {path: text.encode("utf-8") for path, text in visible.items() if path != _FILE_LIST}
    clean = [data for path, data in encoded.items() if scanner.reads_alike(path, data)]
    reply = scanner.scan({"fingerprints": {"task": fingerprint.to_json()}, "roots": [str(start_dir)],
                             "clean_texts": clean})
    prefix = str(start_dir)
    findings = [{"path": f"{WORKSPACE}/{copy['path']}", "kind": copy["kind"], "match": "copy", "detail": copy["detail"]}
                for copy in fingerprint.copies]
    findings += [
        {**_brief(f), "path": WORKSPACE + str(f["path"]).removeprefix(prefix)} for f in reply["findings"]["task"]
    ]
    # The host reads the start state with its own permissions, which are not the agent's: fail
    # closed on every error.
    findings += [{**f, "path": WORKSPACE + str(f["path"]).removeprefix(prefix)}
                 for f in _unscanned(reply.get("skipped", []), denied_is_unread=True)]
    result = AuditResult(findings=findings, fingerprint=_counts(fingerprint), files=reply["files"],
                         bytes=reply["bytes"], seconds=time.monotonic() - started)
    return fingerprint, result


def audit_task_state(
    *, source_dir: Path, start_dir: Path, start_changes: Mapping[str, str | None], strategy: str, test_ids: Sequence[str],
    interfaces: Interfaces | None = None,
) -> tuple[Fingerprint, AuditResult]:
    """:func:`audit_start_state` for a start state written from ``source_dir`` with ``start_changes``."""
    changed = [p for p in start_changes if not is_scrubbed(p)]
    files = sorted(p.relative_to(start_dir).as_posix() for p in start_dir.rglob("*") if p.is_file())
    visible = tracked_texts(start_dir, (f for f in files if not f.startswith(".git/")))
    # The names of the files are visible too (and git's index lists them): a removed constant
    # such as "/data/sample.txt" that names a file still there is no evidence of a copy.
    visible[_FILE_LIST] = "\n".join(f for f in files if not f.startswith(".git/"))
    return audit_start_state(
        start_dir=start_dir,
        before=tracked_texts(source_dir, changed),
        after={p: start_changes[p] for p in changed},
        visible=visible,
        strategy=strategy,
        test_ids=test_ids,
        interfaces=interfaces,
    )


def scan_image(
    fingerprints: Mapping[str, Fingerprint], *, sandbox: Sandbox, roots: Sequence[str] = IMAGE_ROOTS,
    timeout_s: float = 600.0, interfaces: Interfaces | None = None,
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """Scan ``roots`` of a sandbox of the environment image for every fingerprint at once.

    The image's folders are read-only in every sandbox, so any sandbox of the image shows the same
    files there: a fresh one, or a repository's warm one (whose /tmp holds taskforge's own tools
    and is left out). Returns findings per fingerprint key, and the scan's totals (files, bytes,
    seconds). A scan that fails or answers nothing raises: an audit that did not run is not clean.
    It fails closed as the start state's scan does: what it left unread, but for what the
    sandbox's user (the agent's) may not read, is an ``unscanned`` finding of every task.

    A file a dependency's wheel installs (``interfaces``: the environment's, with the bytecode
    compiled from them) is a finding only where it holds the removed code itself (a verbatim
    stretch of it, :func:`holds_the_code`, or a compiled function that uses the names its body used): the rest of what it shares with the
    task (a constant, a name, a signature, a docstring) it held as published, whatever the task
    removed. inflect's image audit rejected candidates on babel's locale data (``"pound-force per
    square inch"``) and on a word list (``"glasses"``, ``"losses"``) that other packages ship.
    """
    if not fingerprints:
        return {}, {"files": 0, "bytes": 0, "seconds": 0.0}
    request = {
        "fingerprints": {key: fp.to_json() for key, fp in fingerprints.items()},
        "roots": list(roots),
        "exclude": [_SCANNER_DIR],
    }
    sandbox.put_files({"taskforge-audit/audit_scan.py": _SCANNER.read_bytes()}, "/tmp")
    result = sandbox.exec(["python", f"{_SCANNER_DIR}/audit_scan.py", "-"], timeout_s=timeout_s, workdir="/tmp",
                          stdin=json.dumps(request).encode())
    if result.exit_code != 0 or result.timed_out or result.limit_hit is not None:
        raise TaskforgeError(f"the image audit failed ({result.exit_code}): {result.text()[-300:]}", reason="audit_failed")
    try:
        reply = json.loads(result.stdout)
    except json.JSONDecodeError as err:
        raise TaskforgeError(f"the image audit gave no report: {err}", reason="audit_failed") from err
    # What the scan left unread may hold a copy of any task's code: every task's audit is unclean.
    unscanned = _unscanned(reply.get("skipped", []), denied_is_unread=False)
    findings = {key: [_brief(f) for f in reply["findings"].get(key, []) if not shipped(f, interfaces)] + unscanned
                for key in fingerprints}
    return findings, {"files": reply["files"], "bytes": reply["bytes"], "seconds": reply["seconds"]}
