"""The one line of an exception that an error message quotes."""

from __future__ import annotations

__all__ = ["first_line"]


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s text, or its type's name when it has none: messages
    stay one line (a driver's error may carry a DETAIL or a traceback below it)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
