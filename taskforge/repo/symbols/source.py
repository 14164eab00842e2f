"""Reading and writing source with libcst: exact text, parsing, rendering an edited tree, and small
helpers on syntax nodes (dotted names, literal strings, relative imports, definition spans)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import libcst as cst
from libcst.metadata import CodeRange

from taskforge.errors import TaskforgeError

__all__ = [
    "absolute_module",
    "definition_span",
    "dotted_name",
    "literal_strings",
    "parse_source",
    "read_source",
    "render_module",
]


def absolute_module(module: str, *, is_package: bool, level: int, name: str | None) -> str | None:
    """The dotted module a (possibly relative) ``from ... import`` names; None if it climbs out."""
    if level == 0:
        return name
    parts = module.split(".")
    if not is_package:
        parts.pop()
    if level > 1:
        if level - 1 > len(parts):
            return None
        parts = parts[: len(parts) - (level - 1)]
    if not parts and not name:
        return None
    return ".".join([*parts, *([name] if name else [])])


def dotted_name(node: cst.BaseExpression) -> str | None:
    """``a.b.c`` for a chain of names and attributes, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = dotted_name(node.value)
        return None if head is None else f"{head}.{node.attr.value}"
    return None


def literal_strings(node: cst.BaseExpression) -> list[str] | None:
    """The strings of a list or tuple literal made only of plain strings, else None."""
    if not isinstance(node, (cst.List, cst.Tuple)):
        return None
    out = []
    for element in node.elements:
        value = element.value
        if not isinstance(value, cst.SimpleString) or isinstance(element, cst.StarredElement):
            return None
        evaluated = value.evaluated_value
        if not isinstance(evaluated, str):
            return None
        out.append(evaluated)
    return out


def parse_source(text: str, rel: str) -> cst.Module:
    """Parse a file with libcst; a syntax error becomes ``TaskforgeError(reason="syntax_error")``."""
    try:
        return cst.parse_module(text)
    except cst.ParserSyntaxError as err:
        message = f"{rel}: syntax error at line {err.raw_line}: {err.message}"
        raise TaskforgeError(message, reason="syntax_error") from err


def render_module(tree: cst.Module, original: str) -> str:
    """The text of an edited tree, faithful to the original file's framing: a byte-order mark
    (libcst drops it) stays, and when the original lacks a final newline and its tail was
    removed, the line that is now last keeps the newline it had."""
    text = tree.code
    if original.startswith("\ufeff") and not text.startswith("\ufeff"):
        text = "\ufeff" + text
    if not original.endswith("\n") and not text.endswith(original.rpartition("\n")[2]):
        text += "\n"
    return text


def read_source(path: Path, rel: str) -> str:
    """A source file's text, exactly (no newline translation)."""
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise TaskforgeError(f"{rel}: not UTF-8 ({err.reason})", reason="syntax_error") from err


def definition_span(
    node: cst.FunctionDef | cst.ClassDef, position: Callable[[cst.CSTNode], CodeRange]
) -> tuple[int, int]:
    """(first line including decorators, last line of code) of a definition."""
    start = min([position(node).start.line, *(position(d).start.line for d in node.decorators)])
    return start, position(node).end.line
