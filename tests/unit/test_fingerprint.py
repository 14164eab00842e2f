"""taskforge.mining.audit.fingerprint on the stanzakit fixture project: what each strategy's fingerprint holds,
what it must leave out (anything the start state still shows), and the shared tokenizer, hash and
signature keys of taskforge.guest.scanner."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from taskforge.guest import scanner
from taskforge.guest.scanner import (
    code_signature_key,
    iter_tokens,
    ngram_hashes,
    parse_signature,
    token_words,
)
from taskforge.mining.audit.fingerprint import Fingerprint, build_fingerprint

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "audit"
ORIGINAL = FIXTURES / "original"
TASKS = json.loads((FIXTURES / "tasks.json").read_text())


def project_files() -> dict[str, str]:
    return {p.relative_to(ORIGINAL).as_posix(): p.read_text() for p in sorted(ORIGINAL.rglob("*")) if p.is_file()}


def task_inputs(strategy: str) -> tuple[dict[str, str], dict[str, str | None], dict[str, str]]:
    """(before, after, visible) of one fixture task, as the miner hands them over."""
    original = project_files()
    changes = TASKS[strategy]["start"]
    before = {path: original[path] for path in changes}
    after = {path: None if src is None else (FIXTURES / src).read_text() for path, src in changes.items()}
    visible = {path: text for path, text in original.items() if path not in after}
    visible.update({path: text for path, text in after.items() if text is not None})
    return before, after, visible


def fingerprint(strategy: str, **overrides: object) -> Fingerprint:
    before, after, visible = task_inputs(strategy)
    arguments: dict[str, object] = {
        "before": before, "after": after, "visible": visible,
        "strategy": strategy, "test_ids": TASKS[strategy]["test_ids"],
    }
    arguments.update(overrides)
    return build_fingerprint(**arguments)  # type: ignore[arg-type]


def test_body_fingerprint_leaves_out_the_signature_and_docstring_that_stay() -> None:
    fp = fingerprint("body")
    # The hollowed function keeps its signature and docstring in the start state on purpose.
    assert not any("fold_widget_header(" in s for s in fp.signatures)
    assert "fold_widget_header" not in fp.names
    assert fp.docstrings == []
    # Its body's constants and names are the evidence (bytecode keeps both).
    body_constants = {
        "widget header lacks a stanza separator", "#widget-remark", "continued-stanza", "stanza-overflow:",
    }
    assert body_constants <= set(fp.constants)
    assert {"split_stanza", "_merge_continuations", "SEPARATOR", "overflow"} <= set(fp.bodies["fold_widget_header"])
    # Hidden tests are removed code too.
    assert "test_fold_widget_header_merges_continuations" in fp.names
    assert fp.test_ids == sorted(TASKS["body"]["test_ids"])
    assert len(fp.ngrams) > 50


def test_symbol_fingerprint_holds_the_removed_function_and_its_helper() -> None:
    fp = fingerprint("symbol")
    assert {"fold_widget_header", "_merge_continuations", "stanzakit.headers.fold_widget_header"} <= set(fp.names)
    assert "def fold_widget_header(line, *, strict=..., limit=...)" in fp.signatures
    assert "def _merge_continuations(parts, *, marker)" in fp.signatures
    assert "Glue every part that starts with the continuation marker onto the part before it." in fp.docstrings
    # split_stanza and StanzaParser stay in the start state: no evidence.
    assert not {"split_stanza", "StanzaParser", "stanzakit.headers.split_stanza"} & set(fp.names)
    assert not any("split_stanza" in s for s in fp.signatures)
    assert fp.bodies == {}


def test_module_fingerprint_holds_the_module_name_and_docstring() -> None:
    fp = fingerprint("module")
    assert {"stanzakit.ledger", "WidgetLedger", "tally_widget_counts", "record_manifest_line"} <= set(fp.names)
    assert "Widget ledgers: tally how many widgets of each kind a manifest declares." in fp.docstrings
    assert "def tally_widget_counts(lines, *, default_kind=...)" in fp.signatures
    assert {"ledger amounts cannot be negative", "unlabelled-widget"} <= set(fp.constants)
    # __init__ is defined everywhere; split_stanza (imported by the module) is still there.
    assert not {"__init__", "split_stanza"} & set(fp.names)


def test_text_the_start_state_still_shows_is_no_evidence() -> None:
    before, after, visible = task_inputs("symbol")
    # A docs page that quotes one constant, and an example of the project's own that shares a
    # line of the body (two lines are no copy of it).
    visible = {
        **visible,
        "docs/notes.md": "Folding merges parts that start with `continued-stanza`.\n",
        "examples/fold.py": (
            "from stanzakit import SEPARATOR\n\n\ndef fold_all(lines, strict):\n    for line in lines:\n"
            "        if strict and SEPARATOR not in line:\n"
            "            raise ValueError(\"widget header lacks a stanza separator\")\n        yield line\n"
        ),
    }
    fp = build_fingerprint(before=before, after=after, visible=visible, strategy="symbol")
    full = fingerprint("symbol")
    assert "continued-stanza" in full.constants and "continued-stanza" not in fp.constants
    assert "widget header lacks a stanza separator" not in fp.constants
    example_hashes = set(ngram_hashes([t for _, t in iter_tokens(visible["examples/fold.py"])], fp.n))
    assert example_hashes & set(full.ngrams)
    assert not example_hashes & set(fp.ngrams)
    assert 0 < len(fp.ngrams) < len(full.ngrams)
    assert fp.copies == []


def test_trivial_and_standard_library_items_are_left_out() -> None:
    before = {"pkg/codec.py": (
        'def _zq_frobnicate(data):\n'
        '    head = data.get("Content-Type", "utf-8")\n'
        '    if not head.isdigit():\n'
        '        raise ValueError("invalid literal for int")\n'
        '    return head + "zq-frobnicated-widget" + "::"\n'
        '\n'
        'def close(stream):\n'
        '    return stream\n'
    )}
    after = {"pkg/codec.py": ""}
    fp = build_fingerprint(before=before, after=after, visible={"pkg/__init__.py": ""}, strategy="symbol")
    # Too short ("utf-8", "::"), or common in the standard library ("Content-Type", close, and
    # CPython's own error message, which its tests quote).
    assert fp.constants == ["zq-frobnicated-widget"]
    assert "close" not in fp.names and not any("close(" in s for s in fp.signatures)
    assert {"_zq_frobnicate", "pkg.codec._zq_frobnicate"} <= set(fp.names)


def test_a_stale_copy_of_the_changed_module_is_a_copy_of_the_answer() -> None:
    # A second, whole copy of the original module under another Python name (legacy.py beside
    # headers.py): not code the project needs, but the answer kept. The comparison with the
    # original names it, and keeps the n-grams it holds.
    before, after, visible = task_inputs("body")
    visible = {**visible, "stanzakit/legacy.py": before["stanzakit/headers.py"]}
    fp = build_fingerprint(before=before, after=after, visible=visible, strategy="body")
    assert [(c["path"], c["kind"]) for c in fp.copies] == [("stanzakit/legacy.py", "text")]
    assert "repeats stanzakit/headers.py" in fp.copies[0]["detail"]
    legacy = ngram_hashes([t for _, t in iter_tokens(visible["stanzakit/legacy.py"])], fp.n)
    assert set(fp.ngrams) & set(legacy)


def test_code_the_project_shares_with_the_removed_body_is_no_copy() -> None:
    # Another function of the project that repeats the body (the same loop in two methods): the
    # start state must keep it, so it is no evidence, and no copy.
    before, after, visible = task_inputs("body")
    body = before["stanzakit/headers.py"].split('    """\n', 1)[1].split("\n\n\ndef ", 1)[0]
    module = "from stanzakit.headers import SEPARATOR, split_stanza, _merge_continuations\n\n\n"
    module += "def render_manifest(manifest):\n    print(manifest)\n    return manifest.strip()\n\n\n"
    module += "def fold_lenient(line, *, strict=False, limit=3):\n" + body + "\n"
    visible = {**visible, "stanzakit/lenient.py": module}
    fp = build_fingerprint(before=before, after=after, visible=visible, strategy="body")
    assert fp.copies == []
    assert set(fp.constants) == {"gear :: continued-stanza teeth :: 3", "gear teeth"}  # hidden tests'
    lenient = ngram_hashes([t for _, t in iter_tokens(module)], fp.n)
    assert fp.ngrams and not set(fp.ngrams) & set(lenient)


def test_a_trivial_body_leaves_an_empty_fingerprint() -> None:
    before = {"pkg/box.py": "class Box:\n    def size(self):\n        return len(self.items)\n"}
    after = {"pkg/box.py": "class Box:\n    def size(self):\n        raise NotImplementedError\n"}
    fp = build_fingerprint(before=before, after=after, visible={**after, "pkg/__init__.py": ""}, strategy="body")
    assert fp.empty
    assert not fingerprint("body").empty


def test_test_ids_that_stay_collectable_are_dropped() -> None:
    visible_test = "tests/test_headers.py::test_split_stanza_trims_parts"
    fp = fingerprint("body", test_ids=[*TASKS["body"]["test_ids"], visible_test])
    assert visible_test not in fp.test_ids
    assert set(TASKS["body"]["test_ids"]) == set(fp.test_ids)


def test_every_ngram_holds_all_words_of_an_anchor() -> None:
    # The audit tokenizes only files holding all words of an anchor: an n-gram without one would
    # be missed.
    fp = fingerprint("symbol")
    tokens = [t for _, t in iter_tokens((ORIGINAL / "stanzakit/headers.py").read_text())]
    anchors = [set(words) for words in fp.anchors]
    seen = 0
    for start, h in enumerate(ngram_hashes(tokens, fp.n)):
        if h in fp.ngrams:
            seen += 1
            words = {w for t in tokens[start:start + fp.n] for w in token_words(t)}
            assert any(anchor <= words for anchor in anchors)
    assert seen > 50  # stanzakit's own code, idioms of the standard library left out
    assert all(len(anchor) >= 1 for anchor in anchors)


def test_ngrams_of_common_words_only_are_left_out() -> None:
    # "for key, value in sorted(items.items()): result.append(...)" could be any package's code:
    # the audit would tokenize half of site-packages for it.
    before = {"pkg/util.py": (
        "def _zq_flatten(items):\n"
        "    result = []\n"
        "    for key, value in sorted(items.items()):\n"
        "        result.append(str(key) + '=' + str(value))\n"
        "    return ';'.join(result)\n"
    )}
    fp = build_fingerprint(before=before, after={"pkg/util.py": ""}, visible={"pkg/__init__.py": ""},
                           strategy="symbol")
    tokens = [t for _, t in iter_tokens(before["pkg/util.py"])]
    hashes = ngram_hashes(tokens, fp.n)
    kept = [i for i, h in enumerate(hashes) if h in fp.ngrams]
    assert kept and len(kept) < len(hashes)
    # What is kept holds the function's own name: the windows of the first line or two.
    assert all("_zq_flatten" in tokens[i:i + fp.n] for i in kept)


def test_json_round_trip() -> None:
    fp = fingerprint("module")
    data = json.loads(json.dumps(fp.to_json()))
    assert Fingerprint.from_json(data) == fp


def test_arguments_are_checked() -> None:
    before, after, visible = task_inputs("body")
    with pytest.raises(ValueError, match="strategy"):
        build_fingerprint(before=before, after=after, visible=visible, strategy="file")
    with pytest.raises(ValueError, match="n must be"):
        build_fingerprint(before=before, after=after, visible=visible, strategy="body", n=2)
    with pytest.raises(ValueError, match="n must be"):
        Fingerprint(n=1)


def test_tokens_ignore_layout_comments_and_quote_style() -> None:
    a = "x = f(r'a b',\n      2)  # a comment\n"
    b = 'x=f("a b", 2)\n'
    expected = ["x", "=", "f", "(", '"a b"', ",", "2", ")"]
    assert [t for _, t in iter_tokens(a)] == [t for _, t in iter_tokens(b)] == expected


def test_fast_tokenizer_agrees_with_the_plain_one() -> None:
    # The scanner's cached tokenizer against iter_tokens, which the fingerprint uses.
    for path in (ORIGINAL / "stanzakit/headers.py", Path(scanner.__file__), Path(__file__)):
        text = path.read_text()
        assert scanner._tokens(text) == [t for _, t in iter_tokens(text)]


def test_rolling_ngram_hash_agrees_with_hashing_each_window() -> None:
    tokens = [t for _, t in iter_tokens((ORIGINAL / "stanzakit/ledger.py").read_text())]
    n, modulus, base = 12, (1 << 61) - 1, scanner._HASH_BASE
    naive = [
        sum(scanner._token_value(t) * pow(base, n - 1 - i, modulus) for i, t in enumerate(tokens[start:start + n]))
        % modulus
        for start in range(len(tokens) - n + 1)
    ]
    assert ngram_hashes(tokens, n) == naive and len(naive) > 100


def test_ngram_hash_is_pinned_and_independent_of_the_process() -> None:
    tokens = ["def", "fold", "(", "line", ")", ":"]
    here = ngram_hashes(tokens, 4)
    # Pinned: the host and every sandbox must agree forever (a fingerprint outlives its process).
    assert here == [2265512467385989387, 167571704067756576, 1158961524592652832]
    code = f"from taskforge.guest.scanner import ngram_hashes; print(ngram_hashes({tokens!r}, 4))"
    env = {"PYTHONHASHSEED": "12345", "PYTHONPATH": str(Path(scanner.__file__).parents[1])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == here


def test_signature_keys_agree_between_source_bytecode_and_mypy() -> None:
    source = "def fold(a, /, b=1, *rest, c, d=2, **options): pass"
    code = next(c for c in compile(source, "<x>", "exec").co_consts if hasattr(c, "co_varnames"))
    from_text = parse_signature(source)
    assert from_text is not None
    assert from_text == ("fold", code_signature_key(code))
    assert parse_signature("def fold(a, /, b=..., *rest, c, d=..., **options)") == from_text
    # The recorded mypy cache (a real mypy run) spells the same signature with argument kinds.
    data = json.loads((FIXTURES / "mypy/headers.data.json").read_text())
    node = data["names"]["fold_widget_header"]["node"]
    key = scanner._mypy_signature_key(node["name"], node["arg_names"], node["arg_kinds"])
    assert (node["name"], key) == parse_signature("def fold_widget_header(line, *, strict=..., limit=...)")


def test_audit_scan_imports_only_the_standard_library() -> None:
    tree = ast.parse(Path(scanner.__file__).read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0
            imported.add((node.module or "").split(".")[0])
    assert imported and imported <= set(sys.stdlib_module_names) | {"__future__"}


def test_a_dependencys_interface_is_no_evidence(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Hidden tests that implement a pytest hook lose ``def pytest_generate_tests(metafunc)``;
    pytest's hookspec in the image declares the same signature. The wheels of the environment
    (here two wheels, built as pip would find them) name their interfaces, and those are dropped,
    but not the body's n-grams, and not what a dependency's copy of the project defines."""
    import zipfile

    from taskforge.mining.audit.vocabulary import Interfaces, interface_names

    monkeypatch.setenv("TASKFORGE_CACHE", str(tmp_path / "cache"))
    wheelhouse = tmp_path / "wheels"
    wheelhouse.mkdir()
    with zipfile.ZipFile(wheelhouse / "hookish-1.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr("hookish/hookspec.py", "def pytest_generate_tests(metafunc: 'Metafunc') -> None:\n"
                                              "    \"\"\"Generate tests.\"\"\"\n\nclass BaseVisitor:\n"
                                              "    async def visit_statement_node(self, node, *, depth=0):\n        pass\n")
        wheel.writestr("hookish-1.0.dist-info/METADATA", "Name: hookish\nVersion: 1.0\n")
    with zipfile.ZipFile(wheelhouse / "vendorer-1.0-py3-none-any.whl", "w") as wheel:  # vendors the project
        wheel.writestr("vendorer/_vendor/pkg/__init__.py", "def reverse_phrase_words(p):\n    return p\n")
    interfaces = interface_names(wheelhouse, own=["pkg"])
    assert {"def pytest_generate_tests(metafunc)",
            "async def visit_statement_node(self, node, *, depth=...)"} <= interfaces.signatures
    assert "def reverse_phrase_words(p)" not in interfaces.signatures  # a copy of the project is no interface
    assert not interfaces.installs("/opt/venv/lib/python3.11/site-packages/vendorer/_vendor/pkg/__init__.py")
    assert interfaces.installs("/opt/venv/lib/python3.11/site-packages/hookish/hookspec.py")
    assert "def reverse_phrase_words(p)" in interface_names(wheelhouse).signatures
    assert interface_names(wheelhouse, own=["pkg"]) == interfaces  # read back from the cache
    assert interface_names(tmp_path / "absent") == Interfaces()

    hidden = ("from pkg import reverse_phrase_words\n\n\ndef pytest_generate_tests(metafunc):\n"
              "    if 'phrase' in metafunc.fixturenames:\n        metafunc.parametrize('phrase', ['a b'])\n\n\n"
              "def test_reversing_twice_gives_the_phrase(phrase):\n"
              "    assert reverse_phrase_words(reverse_phrase_words(phrase)) == phrase\n")
    inputs = {"before": {"pkg/check_generated.py": hidden}, "after": {"pkg/check_generated.py": None},
              "visible": {"pkg/__init__.py": "def reverse_phrase_words(p):\n    return ' '.join(p.split()[::-1])\n"},
              "strategy": "symbol"}
    plain = build_fingerprint(**inputs)  # type: ignore[arg-type]
    assert "def pytest_generate_tests(metafunc)" in plain.signatures and "pytest_generate_tests" in plain.names
    aware = build_fingerprint(**inputs, interfaces=interfaces)  # type: ignore[arg-type]
    assert not any("pytest_generate_tests" in item for item in aware.signatures)
    assert "pytest_generate_tests" not in aware.names
    assert "pkg.check_generated.pytest_generate_tests" in aware.names  # the project's own dotted name stays
    assert "def test_reversing_twice_gives_the_phrase(phrase)" in aware.signatures  # the rest is still searched
    assert aware.ngrams == plain.ngrams  # a copy of the body is found either way


def test_the_files_a_dependency_installs_are_known_and_its_words_stay_evidence(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """glom's hidden test looks up ``'_some_str'`` and formats ``'<unprintable ...'``; boltons, a
    dependency the image installs, says both in ``tbutils.py``. The image audit weighs that file as
    a dependency's own (``Interfaces.installs``: only the removed code itself is a finding there);
    the fingerprint keeps both, for every other place a copy could hide. The project's own wheel
    installs nothing the audit counts as a dependency's."""
    import zipfile

    from taskforge.mining.audit.vocabulary import interface_names

    monkeypatch.setenv("TASKFORGE_CACHE", str(tmp_path / "cache"))
    wheelhouse = tmp_path / "wheels"
    wheelhouse.mkdir()
    with zipfile.ZipFile(wheelhouse / "tbtools-1.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr("tbtools/tb.py", "def _some_str(value):\n    try:\n        return str(value)\n"
                                        "    except Exception:\n        return '<unprintable %s object>' % type(value)\n")
    with zipfile.ZipFile(wheelhouse / "pkg-1.0-py3-none-any.whl", "w") as wheel:  # the project's own wheel
        wheel.writestr("pkg/errors.py", "MESSAGE = 'stack frames of the failing glomspec'\n")
    interfaces = interface_names(wheelhouse, own=["pkg"])
    site = "/opt/venv/lib/python3.11/site-packages"
    assert interfaces.installs(f"{site}/tbtools/tb.py")
    assert interfaces.installs(f"{site}/tbtools/__pycache__/tb.cpython-311.pyc")  # compiled at install
    assert interfaces.installs(f"{site}/tbtools/tb.py!base64@10")  # what the scan read inside it
    assert not interfaces.installs(f"{site}/pkg/errors.py")  # the project's own wheel
    assert not interfaces.installs(f"{site}/tbtools/other.py")  # a file no wheel holds
    assert not interfaces.installs("/tmp/site-packages/tbtools/tb.py")  # not the image's venv
    assert not interfaces.installs("/workspace/tbtools/tb.py")

    hidden = ("import traceback\n\n\ndef _make_stack(spec):\n    original = getattr(traceback, '_some_str', None)\n\n"
              "    def _debug_some_str(value):\n        return f'<unprintable {type(value).__name__} object>'\n\n"
              "    traceback._some_str = _debug_some_str\n    try:\n        return glom_stack(spec)\n"
              "    finally:\n        traceback._some_str = original\n\n\n"
              "def test_stack_frames_of_the_failing_glomspec():\n"
              "    assert _make_stack('a.b') == 'stack frames of the failing glomspec'\n")
    inputs = {"before": {"pkg/test/test_error.py": hidden}, "after": {"pkg/test/test_error.py": None},
              "visible": {"pkg/__init__.py": "def glom_stack(spec):\n    return spec\n"}, "strategy": "symbol"}
    aware = build_fingerprint(**inputs, interfaces=interfaces)  # type: ignore[arg-type]
    assert {"_some_str", "<unprintable "} <= set(aware.constants), aware.constants
    assert aware == build_fingerprint(**inputs)  # type: ignore[arg-type]


def test_removed_lines_are_numbered_as_the_ast_numbers_them_past_a_form_feed() -> None:
    """A page break (form feed) between functions is one line to the parser and two to
    ``str.splitlines``: the removed lines must be the ast's, or the interface lines of the
    fingerprint are off by one below it."""
    import ast

    from taskforge.mining.audit.fingerprint import _removed_lines
    from taskforge.repo.text import source_lines

    before = "def a():\n    return 1\n\x0c\ndef b(x):\n    y = x * 2\n    return y + 1\n"
    after = "def a():\n    return 1\n\x0c\ndef b(x):\n    raise NotImplementedError\n"
    body = ast.parse(before).body[1].body
    assert _removed_lines(before, after) == {body[0].lineno, body[1].lineno}
    assert source_lines(before)[body[0].lineno - 1] == "    y = x * 2"
    assert "".join(source_lines(before, keepends=True)) == before
    assert "".join(source_lines("a\nb", keepends=True)) == "a\nb"
