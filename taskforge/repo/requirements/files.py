"""Reading a repository's files, never fatally, and ``setup.py``'s literal arguments without running it."""

from __future__ import annotations

import ast
import configparser
import email.message
import email.parser
import re
import tomllib
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "NotLiteral",
    "called_name",
    "ini_lines",
    "literal",
    "logical_lines",
    "parse_ini",
    "parse_python",
    "read_ini",
    "read_pkg_info",
    "read_setup_py",
    "read_text",
    "read_toml",
    "setup_py_list",
    "strings",
    "strip_comment",
    "table",
]


# --------------------------------------------------------------------------------------------
# Reading files (never fatal: an unreadable or malformed file counts as absent)
# --------------------------------------------------------------------------------------------


def read_text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def read_toml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return tomllib.loads(read_text(path))
    except tomllib.TOMLDecodeError:
        return {}


def read_ini(path: Path) -> configparser.ConfigParser | None:
    if not path.is_file():
        return None
    return parse_ini(read_text(path))


def parse_ini(text: str) -> configparser.ConfigParser | None:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keep key case (DJANGO_SETTINGS_MODULE)
    try:
        parser.read_string(text)
    except configparser.Error:
        return None
    return parser


def read_pkg_info(path: Path) -> email.message.Message | None:
    if not path.is_file():
        return None
    return email.parser.Parser().parsestr(read_text(path), headersonly=True)


def strip_comment(line: str) -> str:
    if line.lstrip().startswith("#"):
        return ""
    return re.split(r"\s+#", line, maxsplit=1)[0]


def logical_lines(text: str) -> Iterator[str]:
    """Lines of a requirements file, with backslash continuations joined."""
    pending = ""
    for raw in text.splitlines():
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        yield pending + raw
        pending = ""
    if pending:
        yield pending


def ini_lines(value: str) -> list[str]:
    return [line.strip() for line in value.splitlines() if strip_comment(line).strip()]


def strings(value: Any) -> list[str]:
    """The strings of a TOML array (other items, such as tables, are skipped)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [item for item in value if isinstance(item, str)]
    return []


def table(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# --------------------------------------------------------------------------------------------
# setup.py, read without running it
# --------------------------------------------------------------------------------------------


def setup_py_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [line.strip() for line in value.splitlines() if line.strip()]
    if isinstance(value, (list, tuple)):
        return [item for item in value if isinstance(item, str)]
    return []


class NotLiteral(Exception):
    """An expression in setup.py that is not built from literals."""


def read_setup_py(path: Path) -> dict[str, Any]:
    """The literal keyword arguments of the ``setup(...)`` call in setup.py, without running it.

    Names bound at module level to literals (``tests_require = ["pytest"]``) are resolved, and so
    are ``+`` of lists and ``dict(key=...)``; anything else is left out.
    """
    if not path.is_file():
        return {}
    tree = parse_python(read_text(path))
    if tree is None:
        return {}
    names: dict[str, Any] = {}
    for statement in tree.body:
        target, value = None, None
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target, value = statement.targets[0], statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            target, value = statement.target, statement.value
        if isinstance(target, ast.Name) and value is not None:
            try:
                names[target.id] = literal(value, names)
            except NotLiteral:
                names.pop(target.id, None)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and called_name(node.func) == "setup":
            keywords: dict[str, Any] = {}
            for keyword in node.keywords:
                if keyword.arg in ("name", "install_requires", "tests_require", "extras_require"):
                    try:
                        keywords[keyword.arg] = literal(keyword.value, names)
                    except NotLiteral:
                        continue
            return keywords
    return {}


def called_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def literal(node: ast.expr, names: Mapping[str, Any]) -> Any:
    match node:
        case ast.Constant(value=value):
            return value
        case ast.List(elts=elements) | ast.Tuple(elts=elements) | ast.Set(elts=elements):
            return [literal(element, names) for element in elements]
        case ast.Dict(keys=keys, values=values):
            if any(key is None for key in keys):
                raise NotLiteral
            return {literal(key, names): literal(value, names) for key, value in zip(keys, values) if key is not None}
        case ast.Name(id=name) if name in names:
            return names[name]
        case ast.BinOp(left=left, op=ast.Add(), right=right):
            left_value, right_value = literal(left, names), literal(right, names)
            if type(left_value) is not type(right_value) or not isinstance(left_value, (list, str)):
                raise NotLiteral
            return left_value + right_value
        case ast.Call(func=ast.Name(id="dict"), args=[], keywords=keywords) if all(k.arg for k in keywords):
            return {keyword.arg: literal(keyword.value, names) for keyword in keywords}
    raise NotLiteral


def parse_python(source: str) -> ast.Module | None:
    """Parse without running; old syntax (Python 2) gives None. Warnings (bad escapes) are muted."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return ast.parse(source)
        except (SyntaxError, ValueError):  # ValueError: source with NUL bytes
            return None
