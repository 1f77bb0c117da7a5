"""Read and write host JSON configuration without losing anything (docs/hooks.md §json-files).

Host files are edited by people, so a file we cannot read as strict JSON is never
discarded: it is copied to ``<file>.bak-<UTC stamp>`` before a fresh document replaces it.
Writes are atomic (temp file + ``os.replace``) and keep the file's mode.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

# Settings files are kilobytes; past this it is no settings file setup may rewrite.
MAX_JSON_BYTES = 16 << 20

__all__ = [
    "JSONCError",
    "Loaded",
    "backup",
    "differences",
    "dump",
    "load_object",
    "parse_jsonc",
    "same_document",
    "write_atomic",
]


class JSONCError(ValueError):
    """The text is not JSON even after removing comments and trailing commas."""


def strip_jsonc(text: str) -> str:
    """``text`` without ``//`` and ``/* */`` comments and trailing commas outside strings."""
    out: list[str] = []
    i, n = 0, len(text)
    pending_comma: int | None = None  # index in ``out`` of a comma that may be trailing
    while i < n:
        ch = text[i]
        if ch == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            pending_comma = None
            i = j + 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise JSONCError("unterminated /* comment")
            out.append(" ")
            i = end + 2
        elif ch == ",":
            pending_comma = len(out)
            out.append(ch)
            i += 1
        elif ch in "]}":
            if pending_comma is not None:
                out[pending_comma] = ""
            pending_comma = None
            out.append(ch)
            i += 1
        else:
            if not ch.isspace():
                pending_comma = None
            out.append(ch)
            i += 1
    return "".join(out)


def parse_jsonc(text: str) -> Any:
    try:
        return json.loads(strip_jsonc(text))
    except json.JSONDecodeError as error:
        raise JSONCError(str(error)) from None


@dataclass(frozen=True)
class Loaded:
    """A JSON object read from disk; ``problem`` says why the original must be backed up."""

    data: dict[str, Any]
    text: str | None  # the file's text, None when the file does not exist
    problem: str | None = None
    unreadable: bool = False  # ``data`` is a stand-in: the file holds no JSON object


def load_object(path: Path) -> Loaded:
    if not path.exists():
        return Loaded({}, None)
    from thatch.frontend.regular_files import read_regular

    raw = read_regular(path, MAX_JSON_BYTES)  # a FIFO or a link to a device: OSError
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return Loaded({}, raw.decode("utf-8", "replace"), "is not UTF-8 text", unreadable=True)
    if not text.strip():
        return Loaded({}, text)
    try:
        data = json.loads(text)
        strict = True
    except json.JSONDecodeError:
        try:
            data = parse_jsonc(text)
        except (JSONCError, RecursionError):
            return Loaded({}, text, "is not valid JSON", unreadable=True)
        strict = False
    except RecursionError:  # arrays nested thousands deep: no settings file
        return Loaded({}, text, "is not valid JSON", unreadable=True)
    if not isinstance(data, dict):
        return Loaded({}, text, "does not hold a JSON object", unreadable=True)
    if not strict:
        return Loaded(data, text, "holds comments or trailing commas (JSONC)")
    return Loaded(data, text)


def dump(data: object) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def same_document(a: object, b: object) -> bool:
    """Equal including key order (dict equality alone ignores order)."""
    return json.dumps(a, ensure_ascii=False) == json.dumps(b, ensure_ascii=False)


def differences(old: object, new: object, path: str = "") -> list[str]:
    """Each place ``new`` differs from ``old``, as key paths such as
    ``hooks.Stop[0].hooks[0].command``, ``new``'s keys first (setup appends what it adds).
    The same keys or list items in another order differ once, at their object or list:
    ``hooks.Stop: order`` (naming an item there would name a value nobody changed)."""
    if isinstance(old, dict) and isinstance(new, dict):
        found: list[str] = []
        for key in [*new, *(k for k in old if k not in new)]:
            inner = _key_path(path, key)
            if key not in old or key not in new:
                found.append(inner)
            else:
                found += differences(old[key], new[key], inner)
        if not found and list(old) != list(new):
            found.append(_reordered(path))
        return found
    if isinstance(old, list) and isinstance(new, list):
        if _sorted_items(old) == _sorted_items(new):
            return [] if same_document(old, new) else [_reordered(path)]
        found = []
        for index, (a, b) in enumerate(zip(old, new, strict=False)):
            found += differences(a, b, f"{path}[{index}]")
        if len(old) != len(new):
            found.append(f"{path}[{min(len(old), len(new))}]")
        return found
    return [] if same_document(old, new) else [path]


def _sorted_items(items: list[Any]) -> list[str]:
    return sorted(json.dumps(item, ensure_ascii=False) for item in items)


def _reordered(path: str) -> str:
    return f"{path}: order" if path else "order"


def _key_path(path: str, key: str) -> str:
    from thatch.frontend.untrusted import has_control, quoted

    # Keys come from the user's file and doctor prints them: one holding an invisible
    # character (\w takes a Hangul filler for a letter) is quoted with it escaped.
    if re.fullmatch(r"[\w$-]+", key) and not has_control(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{quoted(key)}]"  # a dot or a space stays readable


def backup_path(path: Path, now: datetime) -> Path:
    candidate = path.with_name(f"{path.name}.bak-{now.strftime('%Y%m%dT%H%M%SZ')}")
    counter = 1
    while candidate.exists():  # two runs within one second must not overwrite a backup
        candidate = path.with_name(f"{path.name}.bak-{now.strftime('%Y%m%dT%H%M%SZ')}-{counter}")
        counter += 1
    return candidate


def backup(path: Path, now: datetime) -> Path:
    target = backup_path(path, now)
    shutil.copy2(path, target)
    return target


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` in one step, keeping the mode of an existing file."""
    target = Path(os.path.realpath(path))  # editing a symlinked config edits its target
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode: int | None = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        mode = None
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
