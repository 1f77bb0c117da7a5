"""The ``pip install`` lines thatch's fixes print.

Always this interpreter's pip (``python -m pip``, its path shell-quoted): a bare ``pip`` on
PATH may belong to another Python, and following a fix that names it changes nothing here.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

__all__ = ["pip_install", "thatch_requirement"]


def pip_install(*arguments: str) -> str:
    """``<this interpreter> -m pip install ARGUMENTS``, every part shell-quoted."""
    parts = (sys.executable, "-m", "pip", "install", *arguments)
    return " ".join(shlex.quote(part) for part in parts)


def thatch_requirement(extra: str) -> str:
    """thatch with one extra: from the clone this interpreter runs it from (an editable
    install), else the package name."""
    root = Path(__file__).resolve().parents[1]
    source = str(root) if (root / "pyproject.toml").is_file() else "thatch"
    return f"{source}[{extra}]"
