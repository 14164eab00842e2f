"""Problem statements: what to build, without a line of how it was built.

The default writer fills a template from what the task may reveal: the names and signatures
the hidden tests need, the docstrings, and the behaviour the hidden tests' names describe. The
``"llm"`` writer (:mod:`taskforge.mining.statements.llm`) asks a model for a natural statement instead.
``leaked_lines`` is the check every statement must pass, whoever wrote it: no non-trivial line of
the removed implementation may appear in it.
"""

from __future__ import annotations

import ast
import importlib
import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from taskforge.repo.text import source_lines

__all__ = [
    "STATEMENT_WRITERS",
    "StatementContext",
    "StatementWriter",
    "TemplateStatementWriter",
    "implementation_lines",
    "leaked_lines",
    "load_writer",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class RemovedSymbol:
    qualname: str
    kind: str
    signature: str
    docstring: str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class StatementContext:
    """What a statement writer may know about a task."""

    repo: str
    strategy: str
    target: str
    module_path: str
    """Repo-relative path of the file (or module) the feature lived in."""
    symbols: tuple[RemovedSymbol, ...]
    """The public symbols the hidden tests need, target first (private helpers are left out)."""
    hidden_tests: tuple[str, ...]
    removed_code: Mapping[str, str]
    """The removed source, for checks only: writers must not quote it."""
    files: tuple[str, ...] = ()
    """For a ``feature``: the source files the removal changed or deleted."""
    remaining: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """For a ``feature``: file -> the public names it still defines, the interface that stays."""
    options: tuple[str, ...] = ()
    """For a ``feature``: the command-line options that ran it, removed with it (``--yaml``)."""


class StatementWriter(Protocol):
    name: str

    def write(self, context: StatementContext) -> str: ...


def _display(qualname: str) -> str:
    module, _, inner = qualname.partition(":")
    return f"{module}.{inner}" if inner else module


def _behaviour(test_id: str) -> str:
    """``tests/test_x.py::TestParse::test_empty_section[a]`` → ``parse: empty section``."""
    parts = test_id.split("::")[1:]
    words = []
    for part in parts:
        part = re.sub(r"\[.*\]$", "", part)
        part = re.sub(r"^(Test|test_?)", "", part)
        part = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", part).replace("_", " ").strip()
        if part:
            words.append(part.lower())
    return ": ".join(words)


class TemplateStatementWriter:
    """The deterministic default."""

    name = "template"

    def write(self, context: StatementContext) -> str:
        target = _display(context.target)
        lines: list[str] = []
        if context.strategy == "body":
            lines.append(f"`{target}` in `{context.module_path}` is not implemented: it raises `NotImplementedError`.")
            lines.append("Implement it so that it behaves as its signature and docstring describe.")
        elif context.strategy == "symbol":
            lines.append(f"`{target}` is missing from `{context.module_path}`. Add it, with the behaviour below.")
        elif context.strategy == "feature":
            where = ", ".join(f"`{f}`" for f in context.files) or f"`{context.module_path}`"
            lines.append(f"A feature of this package is missing: `{target}` and the code that works with it, which "
                         f"lived in {where}. Build it again, with the interface and the behaviour below: where the "
                         f"code goes and how it is organised is up to you.")
        else:
            lines.append(f"The module `{target}` (`{context.module_path}`) is missing. Create it, with the behaviour below.")
        lines.append("The rest of the package already works; keep its public API as it is.")
        if context.symbols:
            lines.append("")
            lines.append("## Interface")
            for symbol in context.symbols:
                lines.append("")
                lines.append(f"`{_display(symbol.qualname)}` ({symbol.kind}):")
                lines.append("")
                lines.append("```python")
                lines.append(symbol.signature)
                if symbol.docstring:
                    lines.append(textwrap.indent(f'"""{symbol.docstring}"""', "    "))
                lines.append("```")
        if context.remaining or context.options:
            lines.append("")
            lines.append("## Where it fits")
            lines.append("")
            if context.options:
                named = ", ".join(f"`{o}`" for o in context.options)
                lines.append(f"- The command line ran it through {named}, which went with it: "
                             f"{'that option' if len(context.options) == 1 else 'those options'} must work again.")
            for path, names in sorted(context.remaining.items()):
                shown = ", ".join(f"`{n}`" for n in names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
                lines.append(f"- `{path}` still has {shown}." if names else f"- `{path}` has no other public names.")
        behaviours = sorted({b for b in (_behaviour(t) for t in context.hidden_tests) if b})
        if behaviours:
            lines.append("")
            lines.append("## Behaviour the tests check")
            lines.append("")
            lines.extend(f"- {b}" for b in behaviours[:40])
            if len(behaviours) > 40:
                lines.append(f"- … and {len(behaviours) - 40} more")
        return "\n".join(lines) + "\n"


STATEMENT_WRITERS: dict[str, str] = {
    "template": "taskforge.mining.statements.template:TemplateStatementWriter",
    "llm": "taskforge.mining.statements.llm:LLMStatementWriter",
}
"""Statement writers by short name, as ``module:Class``."""


def load_writer(name: str, **kwargs: Any) -> StatementWriter:
    if name not in STATEMENT_WRITERS:
        raise ValueError(f"unknown statement writer {name!r}; known: {', '.join(sorted(STATEMENT_WRITERS))}")
    module, _, cls = STATEMENT_WRITERS[name].partition(":")
    return getattr(importlib.import_module(module), cls)(**kwargs)  # type: ignore[no-any-return]


_TRIVIAL = re.compile(r"^(return|pass|else:|try:|finally:|break|continue|raise|[\)\]\}]+[,:]?|return None|return self|yield)$")


def implementation_lines(source: str) -> list[str]:
    """Non-trivial lines of the bodies in ``source``: no signatures, decorators or docstrings."""
    text = textwrap.dedent(source)
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return [line.strip() for line in text.splitlines() if _non_trivial(line.strip())]
    src_lines = source_lines(text)
    found: list[str] = []
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Module) or not body:
            continue
        if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            body = body[1:]
        for stmt in body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue  # walked on its own
            for line in src_lines[stmt.lineno - 1 : (stmt.end_lineno or stmt.lineno)]:
                if _non_trivial(line.strip()):
                    found.append(line.strip())
    return found


def _non_trivial(line: str) -> bool:
    return len(line) >= 10 and not line.startswith("#") and not _TRIVIAL.match(line)


_SQUEEZED_MIN = 20
"""Shorter lines are matched in code only as written: ``encoding = 'utf-8'`` in a body also reads
``encoding='utf-8'`` in a signature that a statement may show."""
_FENCED = re.compile(r"```[^\n]*\n(.*?)(?:```|$)", re.DOTALL)
_INLINE = re.compile(r"`([^`\n]+)`")


def _code_spans(statement: str) -> list[str]:
    """The code a Markdown statement shows: fenced blocks, then inline spans outside them."""
    fenced = _FENCED.findall(statement)
    return [*fenced, *_INLINE.findall(_FENCED.sub("", statement))]


def leaked_lines(statement: str, removed_code: Mapping[str, str]) -> list[str]:
    """Lines of the removed implementation that appear in ``statement``: anywhere, with runs of
    whitespace taken as one space; and inside its code (fenced blocks, inline spans) whatever the
    spacing, for lines of 20 characters or more, since a model that quotes code tends to reformat it
    (``x=f(a,b)`` for ``x = f(a, b)``)."""
    normalized = " ".join(statement.split())
    squeezed_code = "\n".join("".join(span.split()) for span in _code_spans(statement))
    leaks = []
    for source in removed_code.values():
        for line in implementation_lines(source):
            squeezed = "".join(line.split())
            if " ".join(line.split()) in normalized or (len(squeezed) >= _SQUEEZED_MIN and squeezed in squeezed_code):
                leaks.append(line)
    return sorted(set(leaks))


def removed_symbols(symbols: Sequence[Any], removed: Sequence[str]) -> tuple[RemovedSymbol, ...]:
    """The public ones among the removed symbols (``taskforge.repo.symbols.Symbol``), as statement input."""
    return tuple(
        RemovedSymbol(qualname=s.qualname, kind=s.kind, signature=s.signature, docstring=s.docstring)
        for s in symbols
        if s.qualname in removed and not s.is_private
    )
