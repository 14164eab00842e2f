"""A definition's header as written, on one line (``def f(a, b=1) -> int``)."""

from __future__ import annotations

import io
import re
import tokenize

import libcst as cst

__all__ = ["signature_of"]


_OPENERS = frozenset("([{")
_CLOSERS = frozenset(")]}")


_PLACEHOLDER = re.compile(r":[ \t]*pass[ \t]*(\r\n|\r|\n)?\Z")


def signature_of(tree: cst.Module, node: cst.FunctionDef | cst.ClassDef) -> str:
    """The header as written (``def f(a, b=1) -> int``), on one line, without comments."""
    placeholder = cst.SimpleStatementSuite(body=[cst.Pass()])
    header = tree.code_for_node(node.with_changes(decorators=(), leading_lines=(), body=placeholder))
    # The module's own newline ends the placeholder: "\r\n" in a CRLF file.
    match = _PLACEHOLDER.search(header)
    if match is None:
        raise ValueError(f"cannot find the header of {header!r}")
    header = header[: match.start()].replace("\r\n", "\n").replace("\r", "\n")
    return _one_line(header.rstrip())


def _one_line(text: str) -> str:
    """Join a multi-line header: drop comments and line breaks, keep same-line spacing, drop a
    trailing comma that a line break separated from its closing bracket (``(\\n a,\\n)`` -> ``(a)``)."""
    tokens = [
        t
        for t in tokenize.generate_tokens(io.StringIO(text + "\n").readline)
        if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER, tokenize.INDENT)
        and t.type != tokenize.DEDENT
    ]
    out: list[str] = []
    previous: tokenize.TokenInfo | None = None
    for i, token in enumerate(tokens):
        following = tokens[i + 1] if i + 1 < len(tokens) else None
        if (
            token.string == ","
            and following is not None
            and following.string in _CLOSERS
            and following.start[0] != token.end[0]
        ):
            continue  # a magic trailing comma
        if previous is not None:
            if previous.end[0] == token.start[0]:
                if token.start[1] > previous.end[1]:
                    out.append(" ")
            elif previous.string not in _OPENERS and token.string not in _CLOSERS:
                out.append(" ")
        out.append(token.string)
        previous = token
    return "".join(out)
