"""Team and member ids given to ``thatch hub`` are short words, refused otherwise before
any database is reached (no THATCH_HUB_OWNER_URL is set here: a refusal cannot come from
a connection)."""

from __future__ import annotations

from pathlib import Path

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


def test_a_token_that_cannot_be_one_is_refused_before_the_hub_is_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A binary token file gave a traceback; a non-ASCII or 20,000-character token was
    sent, and failed as "the hub is unavailable (Invalid metadata)" with a fix about the
    address. The address is nobody's: a token that got that far would say so instead."""
    import os

    binary = tmp_path / "binary.tok"
    binary.write_bytes(os.urandom(64) + b"\xff")
    accented = tmp_path / "accented.tok"
    accented.write_text("thatch_é-not-ascii\n")
    huge = tmp_path / "huge.tok"
    huge.write_text("x" * 20_000)
    join = ["team", "join", "127.0.0.1:9", "--store", "acme/app", "--token-file"]
    for path, message in [
        (binary, f"Error: cannot read the token file {binary}: it is not text"),
        (accented, f"Error: the token file {accented} does not hold a team token"),
        (huge, f"Error: cannot read the token file {huge}: larger than 8192 bytes"),
        (Path("/dev/zero"), "Error: cannot read the token file /dev/zero: not a regular file"),
    ]:
        result = CliRunner().invoke(cli, [*join, str(path)])
        assert result.exit_code == 1 and result.stderr.startswith(message), result.output
    monkeypatch.setenv("THATCH_HUB_TOKEN", "t" * 5_000)
    result = CliRunner().invoke(cli, join[:-1])
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("Error: THATCH_HUB_TOKEN does not hold a team token")


def test_a_loopback_hub_is_spoken_to_over_tls_when_a_ca_is_given() -> None:
    """A TLS hub port-forwarded to localhost was always spoken to in plaintext: its join
    failed with "Socket closed", blamed on the address."""
    from thatch.hub.client import parse_hub_address, plaintext_to

    local = parse_hub_address("localhost:7472")
    assert plaintext_to(local, {}) is True
    assert plaintext_to(local, {"THATCH_HUB_CA": "/etc/ca.pem"}) is False
    assert plaintext_to(parse_hub_address("hub.example:443"), {}) is False
    assert plaintext_to(parse_hub_address("unix:///run/hub.sock"), {}) is False
    for target in ("ipv4:127.0.0.1:50051", "ipv6:[::1]:50051"):  # gRPC's schemes, now taken
        assert plaintext_to(parse_hub_address(target), {}) is True, target


def test_a_hub_address_with_a_scheme_or_odd_host_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`http://host:port` passed, then failed in gRPC as a "Misformatted domain name"."""
    monkeypatch.setenv("THATCH_HUB_TOKEN", "thatch_" + "t" * 43)
    for url, words in [
        ("http://127.0.0.1:7471", "give host:port without a scheme"),
        ("a b:7471", "expected host:port or unix:///path"),
        ("hub/x:7471", "expected host:port or unix:///path"),
        ("hub\x00.example:7471", "expected host:port or unix:///path"),
        ("hub\x1b[2J:7471", "expected host:port or unix:///path"),
        ("unix:///run/hub\x00.sock", "expected host:port or unix:///path"),
        ("unix:///run/hub\n.sock", "expected host:port or unix:///path"),
        ("hub\x9b2J.example:7471", "expected host:port or unix:///path"),
    ]:
        result = CliRunner().invoke(cli, ["team", "join", url, "--store", "acme/app"])
        assert result.exit_code == 2 and words in result.stderr, result.output


def test_the_missing_roles_fix_quotes_it_as_the_grants_do() -> None:
    """``hub migrate --hub-role R`` without R: the fix's CREATE ROLE names R as the grants
    will (``sql.Identifier``): ``Hub`` unquoted created ``hub``, and the migration looked
    for ``Hub`` again; a ``;`` in R ended the statement there."""
    from thatch.hub.admin import create_role_fix

    tail = "LOGIN NOSUPERUSER NOBYPASSRLS"
    assert create_role_fix("thatch_hub").endswith(f': CREATE ROLE "thatch_hub" {tail}')
    assert create_role_fix("user").endswith(f': CREATE ROLE "user" {tail}')
    assert create_role_fix("select").endswith(f': CREATE ROLE "select" {tail}')
    assert create_role_fix("Hub").endswith(f': CREATE ROLE "Hub" {tail}')
    hostile = 'x"; DROP TABLE members; --'
    assert create_role_fix(hostile).endswith(f': CREATE ROLE "x""; DROP TABLE members; --" {tail}')
