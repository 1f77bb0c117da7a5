"""What looks like a secret in a memory's text (docs/team.md §secrets-never-leave-the-machine).

Team stores leave the machine; a memory holding a key, token or password must not. ``scan``
finds each of the documented kinds below; ``refuse_secrets`` raises ``SecretFound`` naming
the first kind and its line (never the value: the error is printed to agents and logs);
``redact`` replaces each finding with ``[redacted <kind>]`` for callers that prefer to
upload the rest. Standard library only: the sync process and the hub both run it.

Kinds, and why each pattern is specific enough not to flag ordinary notes:
- AWS access key id: ``AKIA``/``ASIA``/``ABIA``/``ACCA`` then 16 upper-case letters or digits;
- AWS secret access key: an ``aws_secret_access_key`` assignment of 40 base64 characters;
- GitHub token: ``ghp_ gho_ ghu_ ghs_ ghr_`` then ≥ 36 alphanumerics, or ``github_pat_``;
- GitLab token: ``glpat-`` and GitLab's other ``gl…-`` prefixes then ≥ 20 characters;
- Slack token: ``xoxb-``/``xoxp-``/``xoxa-``/``xoxr-``/``xoxs-``/``xoxo-``;
- private key: a PEM ``-----BEGIN … PRIVATE KEY-----`` line;
- JWT: three base64url parts whose first decodes to a JSON header naming ``alg``;
- password/token assignment: a key containing password, passwd, pwd, secret, token,
  api key, access key, private key or client secret, then ``=``, ``:`` or ``=>``, then a
  value of ≥ 12 characters mixing letters and digits with ≥ 3.0 bits of entropy per
  character (``password=changeme``, ``token=<your token>``, ``${DB_PASSWORD}`` and
  ``token: getTokenFromEnv`` pass).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from thatch.frontend.errors import InvalidInputError

__all__ = ["KINDS", "Finding", "SecretFound", "redact", "refuse_secrets", "scan"]


@dataclass(frozen=True)
class Finding:
    kind: str
    start: int
    end: int

    def line(self, text: str) -> int:
        return text.count("\n", 0, self.start) + 1


class SecretFound(InvalidInputError):
    """A team write holds what looks like a secret; the message names the kind and the fix."""

    fix = (
        "keep the value out of the memory (say where it lives instead, e.g. 'in the team "
        "vault, item deploy-key'), or save it to a personal store, which never leaves "
        "this machine"
    )

    def __init__(self, store: str, finding: Finding, where: str, line: int) -> None:
        self.finding = finding
        super().__init__(
            f"refused for team store {store!r}: the memory's {where} holds what looks like "
            f"{finding.kind} (line {line}); secrets never leave this machine. Fix: {self.fix}"
        )


MIN_ENTROPY = 3.0  # bits per character of an assigned value
_ASSIGNED_VALUE = 12  # characters, at least
ASSIGNMENT = "a password or token assignment"
_NAME_CHAR = re.compile(r"[\w.-]")
_NAME_REACH = 256  # characters of a name before its keyword


def _entropy(value: str) -> float:
    counts = Counter(value)
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


def _jwt_header(match: re.Match[str]) -> bool:
    head = match.group(0).split(".", 1)[0]
    try:
        header = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    except (binascii.Error, ValueError):
        return False
    return isinstance(header, dict) and "alg" in header


def _random_value(match: re.Match[str]) -> bool:
    value = match.group("value")
    return (
        any(char.isdigit() for char in value)
        and any(char.isalpha() for char in value)
        and _entropy(value) >= MIN_ENTROPY
    )


def _always(match: re.Match[str]) -> bool:
    return True


# (kind, pattern, check of a match), in the order findings are reported.
KINDS: tuple[tuple[str, re.Pattern[str], Callable[[re.Match[str]], bool]], ...] = (
    (
        "a private key",
        re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"),
        _always,
    ),
    ("an AWS access key id", re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b"), _always),
    (
        "an AWS secret access key",
        re.compile(r"(?i)aws_secret_access_key[\"']?\s*[=:]\s*[\"']?[A-Za-z0-9/+=]{40}"),
        _always,
    ),
    (
        "a GitHub token",
        re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})"),
        _always,
    ),
    (
        "a GitLab token",
        re.compile(r"\bgl(?:pat|oas|dt|rt|cbt|ptt|ft|imt|soat|agent)-[A-Za-z0-9_-]{20,}"),
        _always,
    ),
    ("a Slack token", re.compile(r"\bxox[abprso]-[A-Za-z0-9-]{10,}"), _always),
    (
        "a JWT",
        re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"),
        _jwt_header,
    ),
    (
        ASSIGNMENT,
        re.compile(
            r"(?i)(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key"
            r"|private[_-]?key|client[_-]?secret)[\w.-]{0,256}[\"']?\s*(?:=>|=|:)\s*[\"']?"
            rf"(?P<value>[A-Za-z0-9+/=_\-!@#%^&*~.]{{{_ASSIGNED_VALUE},}})"
        ),
        _random_value,
    ),
)


def scan(text: str) -> list[Finding]:
    """Every secret-looking span of ``text``, by position; an overlapped later kind is
    dropped (a JWT assigned to ``token=`` is one finding)."""
    found: list[Finding] = []
    for kind, pattern, check in KINDS:
        for match in pattern.finditer(text):
            start = _name_start(text, match.start()) if kind == ASSIGNMENT else match.start()
            if check(match) and not any(
                start < other.end and other.start < match.end() for other in found
            ):
                found.append(Finding(kind, start, match.end()))
    return sorted(found, key=lambda finding: finding.start)


def _name_start(text: str, keyword: int) -> int:
    """Where the name holding the keyword begins (``db_password``), looked for here and
    not by the pattern: a run of name characters leading the pattern made every scan of a
    long word quadratic (16,000 characters: 40 s, holding the GIL of a hub serving every
    team)."""
    start = keyword
    while start > max(0, keyword - _NAME_REACH) and _NAME_CHAR.match(text, start - 1):
        start -= 1
    return start


def refuse_secrets(store: str, label: str, text: str) -> None:
    """Raise ``SecretFound`` for the first secret in the label, then in the text."""
    for where, value in (("label", label), ("text", text)):
        findings = scan(value)
        if findings:
            raise SecretFound(store, findings[0], where, findings[0].line(value))


def redact(text: str) -> str:
    """``text`` with each finding replaced by ``[redacted <kind>]``."""
    out: list[str] = []
    at = 0
    for finding in scan(text):
        out.append(text[at : finding.start])
        out.append(f"[redacted {finding.kind}]")
        at = finding.end
    out.append(text[at:])
    return "".join(out)
