"""What every command shares: one line per error, and status lines on stderr."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import click

from taskforge.errors import TaskforgeError

__all__ = ["one_line_errors", "status"]

F = TypeVar("F", bound=Callable[..., Any])


def one_line_errors(func: F) -> F:
    """A ``TaskforgeError`` becomes one line on stderr (``error: <message> [<reason>]``) and exit status 1."""
    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except TaskforgeError as err:
            click.echo(f"error: {err} [{err.reason}]", err=True)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


def status(message: str) -> None:
    """A progress or status line, on stderr (stdout carries the command's result)."""
    click.echo(message, err=True)
