"""The guard of a local page that can delete data (docs/ui.md §security).

Every request must name an allowed ``Host`` (a page served under a foreign name is a DNS
rebinding attack) and carry the per-run token, in the URL once and then in an HttpOnly,
SameSite=Strict cookie. Changes come only by POST with the per-run CSRF token in the form.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import socket
from dataclasses import dataclass, field

__all__ = ["Guard", "is_loopback"]

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the page on this machine."""
    name = host.strip("[]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def is_wildcard(host: str) -> bool:
    return host.strip("[]") in ("0.0.0.0", "::", "")


def new_token() -> str:
    return secrets.token_urlsafe(32)


def _split_host(value: str) -> tuple[str, int | None] | None:
    """``name[:port]`` or ``[v6][:port]`` → (lowercase name, port); None when malformed."""
    value = value.strip().lower()
    if not value:
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[1:end], value[end + 1 :]
        if rest and not rest.startswith(":"):
            return None
        port_text = rest[1:] if rest else ""
    elif value.count(":") == 1:
        name, port_text = value.split(":")
    elif ":" in value:
        return None  # a bare IPv6 address must be bracketed in a Host header
    else:
        name, port_text = value, ""
    if port_text:
        if not port_text.isdigit() or len(port_text) > 5:
            return None
        return name, int(port_text)
    return name, None


@dataclass(frozen=True)
class Guard:
    """The per-run secrets and the names this server answers to."""

    token: str
    port: int
    host_names: frozenset[str]
    csrf: str = field(default_factory=new_token)

    @classmethod
    def for_bind(cls, host: str, port: int, token: str | None = None) -> Guard:
        """Loopback names always; the bound address itself; for a wildcard bind also this
        machine's host names (a browser elsewhere can only name the machine somehow)."""
        names = set(LOOPBACK_NAMES)
        names.add(host.strip("[]").lower())
        if is_wildcard(host):
            names.discard("")
            for name in (socket.gethostname(), socket.getfqdn()):
                if name:
                    names.add(name.lower())
        return cls(token=token or new_token(), port=port, host_names=frozenset(names))

    @property
    def cookie_name(self) -> str:
        # One cookie per port: two runs on one machine do not overwrite each other's.
        return f"thatch_ui_{self.port}"

    def host_allowed(self, header: str | None) -> bool:
        if header is None:
            return False
        split = _split_host(header)
        if split is None:
            return False
        name, port = split
        return name in self.host_names and port in (None, self.port)

    def token_ok(self, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(
            presented.encode("utf-8", "replace"), self.token.encode()
        )

    def csrf_ok(self, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(
            presented.encode("utf-8", "replace"), self.csrf.encode()
        )

    def origin_allowed(self, origin: str | None) -> bool:
        """A POST's Origin, when the browser sends one, must be this page's."""
        if origin is None:
            return True
        if origin == "null":
            return False
        scheme, _, rest = origin.partition("://")
        default_port = {"http": 80, "https": 443}.get(scheme)
        split = _split_host(rest)
        if default_port is None or split is None:
            return False
        # A browser names any port but its scheme's default, so an Origin without one is
        # a page on port 80 (or 443): another server, even on this host.
        name, port = split
        return name in self.host_names and (port or default_port) == self.port
