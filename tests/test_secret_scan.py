"""The secrets detector (frontend/secret_scan.py, docs/team.md §secrets): each documented
kind is found, ordinary notes about credentials are not, and the refusal names the kind,
the line and the fix without repeating the value."""

from __future__ import annotations

import base64
import json

import pytest

from thatch.frontend.secret_scan import SecretFound, redact, refuse_secrets, scan


def _jwt() -> str:
    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return (
        f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part({'sub': '1234567890'})}.c2lnbmF0dXJlLXZhbHVl"
    )


SECRETS = [
    ("an AWS access key id", "aws key AKIAIOSFODNN7EXAMPLE in the env"),
    (
        "an AWS secret access key",
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    ),
    ("a GitHub token", "push with ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"),
    ("a GitHub token", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuv"),
    ("a GitLab token", "CI uses glpat-xY7zK2mN9pQ4rS6tU8vW"),
    ("a Slack token", "bot: xoxb-1234567890-abcdefghij"),
    ("a private key", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"),
    ("a private key", "-----BEGIN RSA PRIVATE KEY-----"),
    ("a JWT", "session cookie " + _jwt()),
    ("a password or token assignment", "DB_PASSWORD=Xk3v9QpL2mZr7Tw"),
    ("a password or token assignment", '{"api_key": "sk4Tq9ZxL2mN8vR3pW"}'),
    ("a password or token assignment", "auth_token: 9f8e7d6c5b4a3f2e1d0c"),
]

HARMLESS = [
    "password=changeme is the default on the dev box",
    "token=<your token> goes in ~/.netrc",
    "export DB_PASSWORD=${DB_PASSWORD}",
    "token: getTokenFromEnv is the helper to call",
    "the API key lives in 1Password, item deploy-key",
    "rotate the GitHub token every 90 days (ghp_ prefix means a classic token)",
    "JWTs start with eyJ and have three parts",
    "-----BEGIN PUBLIC KEY----- blocks are fine to share",
    "password_min_length: 12",
]


@pytest.mark.parametrize(("kind", "text"), SECRETS)
def test_each_documented_kind_is_found(kind: str, text: str) -> None:
    assert [finding.kind for finding in scan(text)] == [kind]


@pytest.mark.parametrize("text", HARMLESS)
def test_notes_about_credentials_are_not_secrets(text: str) -> None:
    assert scan(text) == []


def test_the_refusal_names_kind_line_and_fix_but_not_the_value() -> None:
    secret = "ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    with pytest.raises(SecretFound) as raised:
        refuse_secrets("team/repo", "CI", f"# CI\n\nthe runner pushes\nwith {secret}")
    message = str(raised.value)
    assert "team store 'team/repo'" in message
    assert "a GitHub token (line 4)" in message
    assert "personal store" in message and "Fix:" in message
    assert secret not in message
    with pytest.raises(SecretFound, match="label holds"):
        refuse_secrets("team/repo", "key AKIAIOSFODNN7EXAMPLE", "# x")
    refuse_secrets("team/repo", "Build", "# Build\n\nrun make")  # nothing to refuse


def test_redact_replaces_each_secret_and_keeps_the_rest() -> None:
    text = "login with DB_PASSWORD=Xk3v9QpL2mZr7Tw and key AKIAIOSFODNN7EXAMPLE."
    assert redact(text) == (
        "login with [redacted a password or token assignment] and key "
        "[redacted an AWS access key id]."
    )
    assert scan(redact(text)) == []


def test_names_long_before_or_after_the_keyword_are_one_finding_from_the_name() -> None:
    """The pattern starts at its keyword now (a leading run of name characters made every
    long word quadratic: bench/secret_scan.py); the name before it is found by a walk
    back, and a name after it may be as long as before."""
    value = "Xk9mQ2vL7pR4tZa8"
    after = "PASSWORD_OF_THE_PRODUCTION_DATABASE_THAT_THE_BILLING_SERVICE_USES_AT_NIGHT"
    before = "THE_BILLING_SERVICE_NIGHTLY_JOB_DATABASE_PASSWORD"
    for name in (after, before, "x" * 200 + "_token", "token_" + "x" * 200):
        text = f"set {name} = '{value}' in the vault"
        (finding,) = scan(text)
        assert text[finding.start : finding.end] == f"{name} = '{value}", name
    assert scan("y" * 20_000) == [] and scan("token" * 4_000) == []
