"""The template statement writer and the leak check every statement must pass."""

from __future__ import annotations

import pytest

from taskforge.mining.statements.template import (
    RemovedSymbol,
    StatementContext,
    TemplateStatementWriter,
    implementation_lines,
    leaked_lines,
    load_writer,
)

REMOVED = '''
def slugify(text, sep="-"):
    """Lower-case ``text`` and join its words with ``sep``."""
    words = [w for w in text.lower().split() if w]
    return sep.join(words)
'''


def _context(**overrides: object) -> StatementContext:
    fields: dict[str, object] = dict(
        repo="demo",
        strategy="body",
        target="demo.text:slugify",
        module_path="demo/text.py",
        symbols=(RemovedSymbol(qualname="demo.text:slugify", kind="function",
                               signature='def slugify(text, sep="-")',
                               docstring="Lower-case ``text`` and join its words with ``sep``."),),
        hidden_tests=("tests/test_text.py::test_slugify_joins_words[a b]", "tests/test_text.py::TestSlug::test_empty"),
        removed_code={"demo.text:slugify": REMOVED},
    )
    fields.update(overrides)
    return StatementContext(**fields)  # type: ignore[arg-type]


def test_implementation_lines_skip_signature_and_docstring() -> None:
    assert implementation_lines(REMOVED) == ["words = [w for w in text.lower().split() if w]", "return sep.join(words)"]


def test_template_names_interface_and_behaviour_without_code() -> None:
    statement = TemplateStatementWriter().write(_context())
    assert 'def slugify(text, sep="-")' in statement
    assert "join its words" in statement
    assert "- slugify joins words" in statement and "- slug: empty" in statement
    assert "NotImplementedError" in statement
    assert leaked_lines(statement, {"x": REMOVED}) == []


@pytest.mark.parametrize("strategy", ["symbol", "module"])
def test_template_other_strategies(strategy: str) -> None:
    statement = TemplateStatementWriter().write(_context(strategy=strategy))
    assert "missing" in statement


def test_leak_check_catches_a_quoted_body_line_despite_whitespace() -> None:
    statement = "Implement it like this:\n    return   sep.join(words)\n"
    assert leaked_lines(statement, {"x": REMOVED}) == ["return sep.join(words)"]


def test_unknown_writer_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="known: llm, template"):
        load_writer("gpt")
