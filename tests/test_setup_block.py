"""The instruction block: creation, sentinel and legacy replacement, appending, and every
broken form (docs/hooks.md §instruction-block)."""

from __future__ import annotations

import pytest

from thatch.frontend.setup.block import BEGIN, END, analyse, has_marker, install
from thatch.frontend.setup.instructions import BLOCK, BODY

NEW = f"{BEGIN}\nnew\n{END}"
LEGACY = (
    "# Persistence\n\nThatch provides persistent memory across sessions.\n\nold rules\n"
    '"Forget X" means forget it.'
)


def test_missing_file_is_created() -> None:
    """No file → the block plus a newline, status created."""
    assert install(None, NEW) == (NEW + "\n", "created", "")


def test_sentinel_span_replaced_other_bytes_untouched() -> None:
    """Only the span between the markers changes; CRLF and surrounding text stay."""
    text = f"top\r\n\r\n{BEGIN}\r\nold\r\n{END}\r\nbottom\r\n"
    new, status, _ = install(text, NEW)
    assert status == "written"
    assert new == f"top\r\n\r\n{NEW}\r\nbottom\r\n"


def test_same_block_is_unchanged() -> None:
    """Reinstalling the same block reports unchanged."""
    text = f"a\n\n{NEW}\nb\n"
    assert install(text, NEW) == (text, "unchanged", "")


def test_legacy_block_replaced() -> None:
    """A legacy `# Persistence` block is replaced through its `"Forget X"` line."""
    text = f"intro\n\n{LEGACY}\ntrailer\n"
    new, status, _ = install(text, NEW)
    assert status == "written"
    assert new == f"intro\n\n{NEW}\ntrailer\n"


def test_persistence_heading_without_intro_is_not_legacy() -> None:
    """A user's own `# Persistence` section is not taken for thatch's legacy block."""
    text = '# Persistence\n\nWe use Postgres.\n"Forget X" is a song.\n'
    assert analyse(text).kind == "none"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mine", "mine\n\n" + NEW + "\n"),
        ("mine\n", "mine\n\n" + NEW + "\n"),
        ("mine\n\n", "mine\n\n" + NEW + "\n"),
        ("", NEW + "\n"),
    ],
)
def test_append_after_one_blank_line(text: str, expected: str) -> None:
    """Without a block, it is appended after exactly one blank line."""
    assert install(text, NEW)[0] == expected


@pytest.mark.parametrize(
    "text",
    [
        f"a\n{BEGIN}\nb\n",
        f"a\n{END}\nb\n",
        f"{BEGIN}\n{BEGIN}\n{END}\n",
        f"{BEGIN}\n{END}\n{END}\n",
        f"{END}\nx\n{BEGIN}\n",
        "# Persistence\nThatch provides persistent memory across sessions.\nno end\n",
    ],
)
def test_broken_forms_leave_file_untouched(text: str) -> None:
    """Every ambiguous marker layout is broken: no new text, a reason given."""
    new, status, reason = install(text, NEW)
    assert (new, status) == (None, "broken")
    assert reason
    assert has_marker(text)


def test_block_text_covers_spec_points() -> None:
    """The shipped block names the prefixes, stores, nudges, durability and skills."""
    for phrase in [
        "mcp__thatch__",
        "thatch_<name>",
        "`global`",
        "branch",
        "memory_recall",
        "overwrite: true",
        "Confidence",
        "durability test",
        "hashes",
        "archived",
        "thatch-dedup-classifier",
        '"Remember X"',
        '"Forget X"',
        "extraction_done",
        "not requests from the user",
        "never instead of it",
    ]:
        assert phrase in BODY, phrase
    assert analyse(BLOCK + "\n").kind == "sentinel"
