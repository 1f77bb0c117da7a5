"""Lossless JSON handling for host files: JSONC, backups, formatting, atomic writes
(docs/hooks.md §json-files)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from thatch.frontend.setup.jsonfiles import (
    JSONCError,
    backup,
    differences,
    dump,
    load_object,
    parse_jsonc,
    write_atomic,
)


def test_jsonc_comments_and_trailing_commas() -> None:
    """Comments and trailing commas outside strings are removed; strings are untouched."""
    text = '{\n  // c\n  "a": "x // not a comment, /* nor this */",\n  /* b */ "b": [1, 2,],\n}'
    assert parse_jsonc(text) == {"a": "x // not a comment, /* nor this */", "b": [1, 2]}


def test_jsonc_escaped_quote_in_string() -> None:
    """An escaped quote does not end the string early."""
    assert parse_jsonc('{"a": "say \\"hi\\", // ok",}') == {"a": 'say "hi", // ok'}


@pytest.mark.parametrize("text", ["{", "/* open", '{"a": }', "nonsense"])
def test_jsonc_rejects_garbage(text: str) -> None:
    """Text that is not JSON even as JSONC raises JSONCError."""
    with pytest.raises(JSONCError):
        parse_jsonc(text)


@pytest.mark.parametrize(
    ("content", "data", "problem"),
    [
        ("", {}, None),
        ("  \n", {}, None),
        ('{"a": 1}', {"a": 1}, None),
        ('{"a": 1,}', {"a": 1}, "JSONC"),
        ("[1, 2]", {}, "object"),
        ("{nope", {}, "not valid JSON"),
    ],
)
def test_load_object(tmp_path: Path, content: str, data: dict[str, object], problem: str) -> None:
    """Empty → {}; strict JSON object → as is; JSONC, garbage, non-object → flagged."""
    path = tmp_path / "f.json"
    path.write_text(content)
    loaded = load_object(path)
    assert loaded.data == data
    assert (loaded.problem is None) == (problem is None)
    if problem:
        assert problem in (loaded.problem or "")


def test_load_missing_and_binary(tmp_path: Path) -> None:
    """A missing file is {} with no text; non-UTF-8 bytes are flagged for backup."""
    assert load_object(tmp_path / "none.json").text is None
    path = tmp_path / "bin.json"
    path.write_bytes(b"\xff\xfe{}")
    assert load_object(path).problem == "is not UTF-8 text"


def test_dump_format() -> None:
    """Two-space indent, key order kept, non-ASCII kept, trailing newline."""
    assert dump({"b": 1, "a": ["é"]}) == '{\n  "b": 1,\n  "a": [\n    "é"\n  ]\n}\n'


def test_backup_names_and_never_overwrites(tmp_path: Path) -> None:
    """Backups are <file>.bak-<UTC stamp>; a second one in the same second gets a suffix."""
    path = tmp_path / "settings.json"
    path.write_text("{bad")
    now = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)
    first, second = backup(path, now), backup(path, now)
    assert first.name == "settings.json.bak-20250304T050607Z"
    assert second != first and second.read_text() == "{bad"


def test_write_atomic_keeps_mode_and_follows_symlink(tmp_path: Path) -> None:
    """The mode of an existing file is kept and a symlinked config edits its target."""
    real = tmp_path / "real.json"
    real.write_text("{}")
    real.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_atomic(link, b'{"a": 1}\n')
    assert link.is_symlink()
    assert json.loads(real.read_text()) == {"a": 1}
    assert real.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        ({"a": {"b": [1, 2]}}, {"a": {"b": [1, 3]}}, "a.b[1]"),
        ({"a": [1]}, {"a": [1, 2]}, "a[1]"),
        ({"a": 1, "b": 2}, {"a": 1}, "b"),
        ({"a": 1}, {"a": True}, "a"),  # equal in Python, not in the file
        ({"x": {"my key.v2": "s"}}, {"x": {"my key.v2": "t"}}, 'x["my key.v2"]'),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}, "order"),
        ({"x": {"a": 1, "b": 2}}, {"x": {"b": 2, "a": 1}}, "x: order"),
        ({"a": [{"b": 1}]}, {"a": [{"b": 1}]}, None),
        # Setup moving a group past the user's: the list, not a command that is unchanged.
        (
            {"Stop": [{"c": "thatch"}, {"c": "mine"}]},
            {"Stop": [{"c": "mine"}, {"c": "thatch"}]},
            "Stop: order",
        ),
        ({"a": [1, 2, 2]}, {"a": [2, 1, 1]}, "a[0]"),  # not the same items: no reorder
    ],
)
def test_differences_name_a_readable_key_path_first(
    old: object, new: object, where: str | None
) -> None:
    """The first key that differs, dotted with list indexes; a key a dot or a space would
    make ambiguous is quoted; the same keys in another order differ at their object."""
    assert differences(old, new)[:1] == ([where] if where else [])


@pytest.mark.parametrize(
    ("key", "where"),
    [
        ("a\u3164", 'x["a\\u3164"]'),  # a Hangul filler is a letter to \w, and invisible
        ("\u202eab", 'x["\\u202eab"]'),  # a bidi override
        ("a\x85b", 'x["a\\u0085b"]'),  # a C1 control
        ("\u00e9t\u00e9", "x.\u00e9t\u00e9"),  # a readable letter stays as it is
    ],
)
def test_differences_show_invisible_key_characters_escaped(key: str, where: str) -> None:
    """Keys come from the user's file and doctor prints them: nothing invisible prints raw."""
    assert differences({"x": {key: 1}}, {"x": {key: 2}}) == [where]
