"""Team and member ids given to ``thatch hub`` are short words, refused otherwise before
any database is reached (no THATCH_HUB_OWNER_URL is set here: a refusal cannot come from
a connection)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from thatch.cli.main import cli

BAD_IDS = ["", " ", "a b", "a\nb", "../x", "_lead", "x" * 65, "naïve", "a;b", "[thatch]"]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_a_bad_team_or_member_id_is_a_usage_error_naming_the_rule(
    bad: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("THATCH_HUB_OWNER_URL", raising=False)
    for argv in (
        ["hub", "team", "add", bad, "Some name"],
        ["hub", "member", "add", bad, "alice"],
        ["hub", "member", "add", "acme", bad],
        ["hub", "member", "revoke", "acme", bad],
    ):
        result = CliRunner().invoke(cli, argv)
        assert result.exit_code == 2, (argv, result.output)
        assert "is not an id: 1-64 of A-Z a-z 0-9 _ . -" in result.output
        assert "Traceback" not in result.output


def test_a_good_id_passes_on_to_the_owner_url_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """``acme.core_2`` is an id: the command goes on and asks for the owner's URL."""
    monkeypatch.delenv("THATCH_HUB_OWNER_URL", raising=False)
    result = CliRunner().invoke(cli, ["hub", "team", "add", "acme.core_2", "Core"])
    assert result.exit_code == 1, result.output
    assert "THATCH_HUB_OWNER_URL" in result.output
