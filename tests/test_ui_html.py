"""How the UI shows a timestamp (issue 23): how long ago, in one unbreakable token, the
exact UTC time kept in ``datetime`` and on hover."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from thatch.frontend.ui.html import STYLE, moment

NOW = datetime(2026, 12, 4, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("stored", "shown"),
    [
        ("2026-12-04T11:59:30.000Z", "just now"),
        ("2026-12-04T11:15:00.000Z", "45 min ago"),
        ("2026-12-04T02:00:00.000Z", "10 h ago"),
        ("2026-12-03T11:00:00.000Z", "1 day ago"),
        ("2026-11-20T12:00:00.000Z", "14 days ago"),
        ("2026-06-01T08:00:00.000Z", "2026-06-01"),
        ("2027-01-01T08:30:00.000Z", "2027-01-01 08:30"),  # a clock ahead: the date
    ],
)
def test_a_timestamp_reads_as_how_long_ago(stored: str, shown: str) -> None:
    assert moment(stored, NOW) == f'<time datetime="{stored}" title="{stored}">{shown}</time>'


def test_never_and_foreign_formats() -> None:
    assert moment(None, NOW) == '<span class="muted">never</span>'
    assert moment("yesterday<b>", NOW) == "yesterday&lt;b&gt;"  # another tool's text, escaped
    assert "time{white-space:nowrap}" in STYLE
