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


def _scan(root: Path, interfaces: Interfaces | None) -> dict[str, dict]:  # type: ignore[type-arg]
    fingerprint = build_fingerprint(before={"pkg/fields.py": REMOVED}, after={"pkg/fields.py": None}, visible={},
                                    strategy="module", interfaces=interfaces)
    reply = scanner.scan({"fingerprints": {"task": fingerprint.to_json()}, "roots": [str(root)]})
    return {"/" + Path(f["path"]).relative_to(root).as_posix(): f for f in reply["findings"]["task"]}


def test_a_dependencys_file_that_shares_an_interface_is_no_finding(tmp_path: Path) -> None:
    """A removed Django field module overrides ``Field`` methods; Django's own files share their
    header lines (3 of 1,497 n-grams, all at a ``def`` of an overridden method), which rejected
    the task. Those n-grams are no evidence, as the signature is not. A dependency that vendors a
    copy of the removed code stays a finding."""
    dep = tmp_path / SITE / "dep"
    dep.mkdir(parents=True)
    (dep / "base.py").write_text(BASE)
    (dep / "vendored.py").write_text(REMOVED)  # a copy, as setuptools vendors zipp
    base, vendored = f"/{SITE}/dep/base.py", f"/{SITE}/dep/vendored.py"
    blind = _scan(tmp_path, None)  # without the environment's interfaces: the header's n-grams match
    assert set(blind) == {base, vendored}, blind
    assert any(e["match"] == "ngram" for e in blind[base]["evidence"]), blind[base]
    signatures = frozenset(format_signature(node) for node in ast.walk(ast.parse(BASE))
                           if isinstance(node, ast.FunctionDef))
    interfaces = Interfaces(signatures=signatures, files=frozenset({"dep/base.py", "dep/vendored.py"}))
    aware = _scan(tmp_path, interfaces)
    assert not any(e["match"] == "ngram" for e in aware.get(base, {}).get("evidence", ())), aware[base]
    assert base not in aware or shipped(aware[base], interfaces), aware[base]
    assert not shipped(aware[vendored], interfaces), aware[vendored]["evidence"]
    assert not shipped(blind[base], None)  # without the environment's interfaces, every finding stays
    assert not shipped({**blind[base], "path": "/workspace/dep/base.py"}, interfaces)  # not installed


def test_what_holds_the_code() -> None:
    assert holds_the_code({"match": "body", "value": "compiled"})
    assert holds_the_code({"match": "ngram", "value": f"{scanner.NGRAM_HITS} of 1497 n-grams, 40 tokens"})
    assert not holds_the_code({"match": "ngram", "value": f"{scanner.NGRAM_HITS - 1} of 1497 n-grams, 27 tokens"})
    assert holds_the_code({"match": "ngram", "value": "2 of 2 n-grams, 12 tokens"})  # all of a short body
    assert holds_the_code({"match": "ngram", "value": "something else"})  # unknown wording: fail closed
    assert not holds_the_code({"match": "signature", "value": "def from_db_value(self, value, expression, connection)"})
