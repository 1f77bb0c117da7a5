"""The ``pip install`` lines thatch's fixes print.

Always this interpreter's pip (``python -m pip``, its path shell-quoted): a bare ``pip`` on
PATH may belong to another Python, and following a fix that names it changes nothing here.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

__all__ = ["editable_source", "pip_install", "thatch_requirement"]


def pip_install(*arguments: str) -> str:
    """``<this interpreter> -m pip install ARGUMENTS``, every part shell-quoted."""
    parts = (sys.executable, "-m", "pip", "install", *arguments)
    return " ".join(shlex.quote(part) for part in parts)


def thatch_requirement(extra: str) -> tuple[str, ...]:
    """pip's arguments for thatch with one extra: ``-e <clone>[extra]`` when this thatch is
    an editable install (PEP 610: its ``direct_url.json`` says ``dir_info.editable``), so
    adding the extra keeps the install editable instead of replacing it with a copy; else
    the package name (PyPI)."""
    clone = editable_source()
    if clone is not None:
        return ("-e", f"{clone}[{extra}]")
    return (f"thatch[{extra}]",)


def editable_source() -> Path | None:
    """The directory this thatch is installed editable from, else None: the thatch
    distribution whose PEP 610 record is an editable local directory holding this file."""
    import json
    from importlib import metadata
    from urllib.parse import urlsplit
    from urllib.request import url2pathname

    here = Path(__file__).resolve()
    for dist in metadata.distributions(name="thatch"):
        try:
            record = json.loads(dist.read_text("direct_url.json") or "null")
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict):
            continue
        info, url = record.get("dir_info"), record.get("url")
        if not (isinstance(info, dict) and info.get("editable") is True):
            continue
        if not (isinstance(url, str) and url.startswith("file:")):
            continue
        source = Path(url2pathname(urlsplit(url).path)).resolve()
        if here.is_relative_to(source):
            return source
    return None
