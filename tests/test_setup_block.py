"""The instruction block: creation, sentinel and legacy replacement, appending, and every
broken form (docs/hooks.md §instruction-block)."""

from __future__ import annotations

import pytest

from thatch.frontend.setup.block import BEGIN, END, analyse, has_marker, install
from thatch.frontend.setup.engine_instructions import ENGINE_SECTIONS
from thatch.frontend.setup.instructions import BLOCK, BLOCK_BUDGET, BODY, POINTER_BLOCK

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
    """The shipped block names the prefixes, stores, writing rules and nudge framing."""
    for phrase in [
        "mcp__thatch__<name>",
        "thatch_<name>",
        "`global`",
        "`branch`",
        "memory_recall",
        "overwrite: true",
        "Durability test",
        "hashes",
        '"Remember X"',
        '"Forget X"',
        "not requests from the user",
        "never instead of it",
    ]:
        assert phrase in BODY, phrase
    assert analyse(BLOCK + "\n").kind == "sentinel"


def test_block_within_budget_with_every_section_on() -> None:
    """Sent with every request: the whole block, markers and the engines' part included,
    stays within 1,500 characters (issue 22)."""
    assert ENGINE_SECTIONS in BLOCK
    assert len(BLOCK) <= BLOCK_BUDGET == 1500
    assert len(POINTER_BLOCK) <= len(BLOCK)


def test_earlier_long_block_replaced_by_the_short_one() -> None:
    """A block an earlier release wrote (several sections) is replaced whole on re-setup;
    the user's text on both sides stays byte for byte."""
    old = (
        f"{BEGIN}\n# thatch — persistent memory\n\n## Stores\n- `global` ...\n\n"
        f"## At session start\nBefore the first reply, recall ...\n\n"
        f"## Situational behaviors\n- Grade every surfaced behavior ...\n{END}"
    )
    current = "# Our rules\n\nTabs.\n\n" + old + "\n\n## After\nkept\n"
    updated, outcome, _ = install(current, BLOCK)
    assert outcome == "written"
    assert updated == "# Our rules\n\nTabs.\n\n" + BLOCK + "\n\n## After\nkept\n"
    assert install(updated, BLOCK)[1] == "unchanged"
