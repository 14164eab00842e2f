"""A dependency's own file is a finding only where it holds the removed code itself
(``taskforge.mining.audit.scan.shipped``), with the real scanner over a site-packages tree."""

from __future__ import annotations

import ast
from pathlib import Path

from taskforge.guest import scanner
from taskforge.mining.audit.fingerprint import build_fingerprint
from taskforge.mining.audit.scan import holds_the_code, shipped
from taskforge.mining.audit.vocabulary import Interfaces, format_signature

SITE = "opt/venv/lib/python3.11/site-packages"

BASE = '''\
class Field:
    def get_prep_value(self, value):
        """Python value to the database's."""
        if value is None:
            return value
        return self.to_python(value)

    def from_db_value(self, value, expression, connection):
        return self.to_python(value)
'''

# A removed module whose field overrides the dependency's methods: their signature lines are what
# it shares with Field, the rest is its own.
REMOVED = '''\
from dep.base import Field


class VersionField(Field):
    def get_prep_value(self, value):
        return None if value is None else str(value)

    def from_db_value(self, value, expression, connection):
        return Version.coerce(value) if self.coerce else Version(value, partial=self.partial)

    def to_python(self, value):
        if isinstance(value, Version) or value is None:
            return value
        parts = [int(part) for part in str(value).split(".")]
        major, minor, patch = (parts + [0, 0, 0])[:3]
        return Version(major=major, minor=minor, patch=patch, partial=len(parts) < 3)

    def deconstruct(self):
        name, path, args, kwargs = super().deconstruct()
        kwargs["partial"] = self.partial
        kwargs["coerce"] = self.coerce
        return name, path, args, kwargs
'''


def _scan(root: Path, interfaces: Interfaces | None, removed: str = REMOVED) -> dict[str, dict]:  # type: ignore[type-arg]
    fingerprint = build_fingerprint(before={"pkg/fields.py": removed}, after={"pkg/fields.py": None}, visible={},
                                    strategy="module", interfaces=interfaces)
    reply = scanner.scan({"fingerprints": {"task": fingerprint.to_json()}, "roots": [str(root)]})
    found = [{**f, "path": "/" + Path(f["path"]).relative_to(root).as_posix()} for f in reply["findings"]["task"]]
    return {f["path"]: f for f in found}


def _interfaces(*sources: str, files: frozenset[str]) -> Interfaces:
    signatures = frozenset(format_signature(node) for source in sources for node in ast.walk(ast.parse(source))
                           if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return Interfaces(signatures=signatures, files=files)


def test_a_dependencys_file_that_shares_an_interface_is_no_finding(tmp_path: Path) -> None:
    """A removed Django field module overrides ``Field`` methods; Django's own files share the
    n-grams of their ``def`` lines (3 of 1,497), which rejected the task. In a file a dependency
    installs those n-grams are no evidence; a dependency that vendors a copy of the removed code,
    and a copy anywhere else, stay findings."""
    dep = tmp_path / SITE / "dep"
    dep.mkdir(parents=True)
    (dep / "base.py").write_text(BASE)
    (dep / "vendored.py").write_text(REMOVED)  # a copy, as setuptools vendors zipp
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "fields.py").write_text(REMOVED)
    base, vendored, home = f"/{SITE}/dep/base.py", f"/{SITE}/dep/vendored.py", "/home/fields.py"
    interfaces = _interfaces(BASE, files=frozenset({"dep/base.py", "dep/vendored.py"}))
    findings = _scan(tmp_path, interfaces)
    assert set(findings) == {base, vendored, home}, findings
    assert [e["value"] for e in findings[base]["evidence"] if e["match"] == "ngram"] == [
        "5 of 63 n-grams (5 at an interface's header), 16 tokens"]
    assert shipped(findings[base], interfaces), findings[base]["evidence"]
    assert not shipped(findings[vendored], interfaces), findings[vendored]["evidence"]
    assert not shipped(findings[home], interfaces)
    assert not shipped(findings[base], None)  # without the environment's interfaces, every finding stays


def test_the_fingerprint_keeps_every_n_gram_of_an_interfaces_header(tmp_path: Path) -> None:
    """Found by a red team: cutting a header's n-grams out of the fingerprint (a first version)
    left nothing of one-line methods whose signatures pytest also defines (``__len__(self)``), and
    a verbatim copy in a home folder went unseen; and it cut every ``__init__`` header once one
    ``__init__(self)`` was an interface. Only a dependency's own file is judged without them, and
    only the headers whose own signature the dependency defines count."""
    removed = ("class Spans:\n    def __init__(self, starts, stops, *, merge_adjacent=True):\n"
               "        self._starts, self._stops = list(starts), list(stops)\n\n"
               "    def __len__(self):\n        return len(self._starts)\n\n"
               "    def __iter__(self):\n        return zip(self._starts, self._stops)\n")
    interfaces = _interfaces("class Node:\n    def __init__(self):\n        pass\n\n    def __len__(self):\n        return 0\n\n"
                             "    def __iter__(self):\n        return iter(())\n", files=frozenset())
    plain = build_fingerprint(before={"pkg/spans.py": removed}, after={"pkg/spans.py": None}, visible={},
                              strategy="module")
    aware = build_fingerprint(before={"pkg/spans.py": removed}, after={"pkg/spans.py": None}, visible={},
                              strategy="module", interfaces=interfaces)
    assert aware.ngrams == plain.ngrams and plain.interface_ngrams == []
    assert 0 < len(aware.interface_ngrams) < len(aware.ngrams)
    # __init__(self, starts, stops, *, merge_adjacent=...) is no interface: its header's n-grams
    # that touch no other header are not among the interface's.
    tokens = [t for _, t in scanner.iter_tokens(removed)]
    windows = scanner.ngram_hashes(tokens, aware.n)
    own_header = set(windows[tokens.index("starts") - 4:tokens.index("starts") + 1])  # "def __init__ ( self , starts"
    assert own_header & set(aware.ngrams) and not own_header & set(aware.interface_ngrams)
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "spans.py").write_text(removed)
    found = scanner.scan({"fingerprints": {"task": aware.to_json()}, "roots": [str(tmp_path)]})["findings"]["task"]
    assert len(found) == 1 and found[0]["match"] == "ngram", found


def test_what_holds_the_code() -> None:
    assert holds_the_code({"match": "body", "value": "compiled"})
    assert holds_the_code({"match": "ngram", "value": "12 of 1497 n-grams, 23 tokens"})
    assert holds_the_code({"match": "ngram", "value": "15 of 63 n-grams (3 at an interface's header), 26 tokens"})
    assert not holds_the_code({"match": "ngram", "value": "14 of 63 n-grams (3 at an interface's header), 25 tokens"})
    assert not holds_the_code({"match": "ngram", "value": "3 of 1497 n-grams (3 at an interface's header), 27 tokens"})
    # What pandas' own files shared with a held-out diffing library's tasks, as the scan wrote it.
    assert not holds_the_code({"match": "ngram", "value": "4 of 7172 n-grams, 30 tokens"})
    assert not holds_the_code({"match": "ngram", "value": "7 of 14862 n-grams, 381 tokens"})
    assert holds_the_code({"match": "ngram", "value": "something else"})  # unknown wording: fail closed
    assert not holds_the_code({"match": "signature", "value": "def from_db_value(self, value, expression, connection)"})
