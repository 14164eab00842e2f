"""Python source as lines the way the parser counts them."""

from __future__ import annotations

__all__ = ["source_lines"]


def source_lines(text: str, *, keepends: bool = False) -> list[str]:
    """``text``'s lines as ``ast`` and ``tokenize`` number them: split at newlines only.
    ``str.splitlines`` also splits at a form feed (a page break between functions in much older
    code) or another separator inside a string literal, and every line after one would be off."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
        if keepends:
            return [line + "\n" for line in lines]
    elif keepends:
        return [line + "\n" for line in lines[:-1]] + lines[-1:]
    return lines
