"""The client a machine's team sync process uses to reach the hub (docs/team.md §hub-rpcs).

One ``HubClient`` holds one gRPC channel and the member's token, sent as
``authorization: Bearer <token>`` on every call. TCP addresses use TLS: the hub's
certificate must chain to ``ca_file`` (default: the file ``THATCH_HUB_CA`` names, else the
system's roots). Plaintext only to a unix socket, or to a loopback address when asked
(``plaintext=True``): a token never crosses a network in the clear.

Failures are two exceptions, each with the fix in its message:
- ``HubUnavailable``: the hub cannot be used now (unreachable, TLS, its database or
  embedder down, overloaded). Nothing was lost: retry later, the outbox keeps its rows.
- ``HubRefused``: the hub refused the call itself; ``kind`` is ``"auth"`` (no live member
  holds the token) or ``"request"`` (malformed or over a limit). Retrying the same call
  cannot help.

Loads without psycopg or the model runtime (the ``team`` extra is the hub's, not the
machine's): tests/test_proto.py checks.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import thatch.embedder.grpc_env  # noqa: F401  (first: it quiets gRPC's C core before it loads)

# isort: split

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from thatch.common.environment import env_get, expand_user
from thatch.common.shell_words import shell_quote
from thatch.embedder.client.settings import Address
from thatch.hub import wire
from thatch.hub.v1 import hub_pb2 as pb
from thatch.hub.v1 import hub_pb2_grpc as pb_grpc
from thatch.hub.values import Cursor

__all__ = [
    "FIX_CA",
    "FIX_NOT_A_HUB",
    "FIX_REQUEST",
    "FIX_RETRY",
    "HUB_CA",
    "MAX_MESSAGE_BYTES",
    "HubClient",
    "HubError",
    "HubRefused",
    "HubUnavailable",
    "is_loopback",
    "parse_hub_address",
    "plaintext_to",
    "probe_health",
    "token_fix",
]

HUB_CA = "THATCH_HUB_CA"
# A pull page of the hub's maximum rows at its maximum text size fits (hub.servicer.HubLimits).
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
LOOPBACK_HOSTS = {"localhost", "::1", "[::1]"}
# Any host gRPC takes (names, IDN, "ipv4:10.0.0.5", "[fe80::1%eth0]"), but no blank or
# "/": "http://host:port" and "hub/x:1" failed late in gRPC, as a "Misformatted domain
# name" the hub was blamed for.
_HOST = re.compile(r"[^\s/]+")
FIX_RETRY = "nothing was lost: it is retried later (check the address of the hub and that it runs)"

FIX_REQUEST = "the hub refuses this request as sent; retrying it unchanged cannot help"
FIX_CA = f"point {HUB_CA} at the CA that signed the certificate of the hub"
FIX_NOT_A_HUB = "check the address of the hub: the one its server listens on"


def token_fix(
    team: str | None = None, member: str | None = None, then: str = "use it on this machine"
) -> str:
    """A token the hub refuses: the command by which the team's admin makes a new one (the
    ids shell-quoted when known, else placeholders the prose names), then ``then``: how
    this machine uses it (the team sync passes the join that replaces it)."""
    if team is not None and member is not None:
        admin = f"thatch hub member add {shell_quote(team)} {shell_quote(member)}"
        ask = "ask the team admin for a new token; the admin makes one with"
    else:
        admin = "thatch hub member add TEAM MEMBER"
        ask = (
            "ask the team admin for a new token; the admin makes one with your team and "
            "member ids, TEAM and MEMBER"
        )
    return f"{ask}: {admin}; then {then}"


FIX_TOKEN = token_fix()
_TLS_SIGNS = ("andshake", "ssl", "SSL", "certificate", "Socket closed")


class HubError(Exception):
    """``str(error)`` is one line: the cause, then ``Fix:`` and what to do."""

    def __init__(self, cause: str, fix: str) -> None:
        self.cause = cause.rstrip(".")
        self.fix = fix
        super().__init__(f"{self.cause}. Fix: {fix}")


class HubUnavailable(HubError):
    """The hub cannot be used now; retrying later may succeed."""


class HubRefused(HubError):
    """The hub refused the call: ``kind`` "auth" (the token) or "request" (the call)."""

    def __init__(self, cause: str, fix: str, kind: Literal["auth", "request"]) -> None:
        super().__init__(cause, fix)
        self.kind = kind


def _valid_port(port: str, *, zero_ok: bool) -> bool:
    return port.isdigit() and (0 if zero_ok else 1) <= int(port) < 65536


def parse_hub_address(value: str, *, what: str = "hub address", zero_ok: bool = False) -> Address:
    """``host:port``, ``dns:///host:port`` or ``unix:///abs/path`` (``zero_ok``: port 0
    for a server choosing its own); ``ValueError`` naming ``what`` otherwise."""
    value = value.strip()
    bad = ValueError(f"invalid {what} {value!r}: expected host:port or unix:///path")
    if not value.isprintable():  # a NUL or escape failed late in gRPC, the hub blamed
        raise bad
    if value.startswith("unix://"):
        path = value[len("unix://") :]
        if not path.startswith("/") or path == "/":
            raise bad
        return Address("unix", value, Path(path))
    if value.lower().startswith(("http://", "https://", "grpc://", "grpcs://")):
        raise ValueError(
            f"invalid {what} {value!r}: give host:port without a scheme (the hub speaks "
            "gRPC, TLS unless on loopback)"
        )
    rest = value.removeprefix("dns:///")
    host, sep, port = rest.rpartition(":")
    if not sep or not _HOST.fullmatch(host) or not _valid_port(port, zero_ok=zero_ok):
        raise bad
    return Address("dns" if rest != value else "tcp", value)


def is_loopback(address: Address) -> bool:
    """A unix socket, or a TCP address on this machine only."""
    if address.is_unix:
        return True
    host = address.target.removeprefix("dns:///").rpartition(":")[0]
    host = host.removeprefix("ipv4:").removeprefix("ipv6:")  # gRPC's own target schemes
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def _read_ca(path: str | Path, env: Mapping[str, str]) -> bytes:
    try:
        with open(expand_user(str(path), env), "rb") as handle:
            return handle.read()
    except OSError as error:
        raise HubUnavailable(
            f"cannot read the hub's CA file {path}: {error.strerror or error}",
            f"point {HUB_CA} at a readable PEM file",
        ) from None


def plaintext_to(address: Address, env: Mapping[str, str]) -> bool:
    """Whether a member reaches the hub at ``address`` in plaintext: on a loopback address,
    unless THATCH_HUB_CA is set. A TLS hub port-forwarded to localhost (kubectl
    port-forward, docs/deploy.md) was always spoken to in plaintext, and the join failed
    with "Socket closed", blamed on the address."""
    return is_loopback(address) and not address.is_unix and not env_get(env, HUB_CA)


def _channel(
    address: Address, ca_file: str | Path | None, plaintext: bool, env: Mapping[str, str]
) -> grpc.Channel:
    """A channel to the hub: TLS trusting ``ca_file`` (default ``THATCH_HUB_CA``, else the
    system's roots) unless to a unix socket or, when asked, plaintext."""
    options: list[tuple[str, int | str]] = [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_reconnect_backoff_ms", 5000),
        # As the embedder client's: a push crossing a hub replica's GOAWAY was retried by
        # gRPC's core onto the dying connection until its deadline (30 s); without
        # transparent retries it is UNAVAILABLE at once, and the sync retries it later.
        ("grpc.enable_retries", 0),
    ]
    if address.kind == "dns":
        options.append(("grpc.lb_policy_name", "round_robin"))
    if address.is_unix or plaintext:
        return grpc.insecure_channel(address.target, options=options)
    ca = ca_file if ca_file is not None else env_get(env, HUB_CA)
    root = _read_ca(ca, env) if ca else None
    credentials = grpc.ssl_channel_credentials(root_certificates=root)
    return grpc.secure_channel(address.target, credentials, options=options)


def probe_health(
    address: str,
    *,
    ca_file: str | Path | None = None,
    plaintext: bool = False,
    env: Mapping[str, str] | None = None,
    timeout: float = 5.0,
) -> tuple[Literal["SERVING", "NOT_SERVING", "UNREACHABLE"], str | None]:
    """The hub's ``grpc.health.v1`` status, no token needed, and why when it is not
    SERVING (the message names the fix of a TLS mismatch). ``HubRefused`` for a
    malformed address or plaintext off loopback, ``HubUnavailable`` for an unreadable CA."""
    env = dict(os.environ if env is None else env)
    try:
        where = parse_hub_address(address)
    except ValueError as error:
        raise HubRefused(str(error), "give the hub's address as host:port", "request") from None
    if plaintext and not is_loopback(where):
        raise HubRefused(
            f"refusing plaintext to {where}",
            "probe it over TLS, trusting the CA that signed its certificate, FILE: "
            f"thatch hub probe --addr {shell_quote(address)} --ca FILE",
            "request",
        )
    channel = _channel(where, ca_file, plaintext, env)
    try:
        health: Any = health_pb2_grpc.HealthStub(channel)
        answer = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
    except grpc.RpcError as error:
        details = error.details() or error.code().name
        if not where.is_unix and any(sign in details for sign in _TLS_SIGNS):
            return (
                "UNREACHABLE",
                f"cannot reach the hub at {where} over TLS ({details}). Fix: {FIX_CA}",
            )
        return "UNREACHABLE", f"the hub at {where} does not answer ({details})"
    finally:
        channel.close()
    if answer.status == health_pb2.HealthCheckResponse.SERVING:
        return "SERVING", None
    return "NOT_SERVING", (
        f"the hub at {where} is NOT_SERVING (waiting for its database or migrations, or "
        "stopping: its log says which)"
    )


class HubClient:
    """One channel to one hub as one member; ``close`` it (or use ``with``)."""

    def __init__(
        self,
        address: str,
        token: str,
        *,
        ca_file: str | Path | None = None,
        plaintext: bool = False,
        env: Mapping[str, str] | None = None,
        timeout: float = 30.0,
        token_refused: str = FIX_TOKEN,
    ) -> None:
        """``token_refused``: the fix of a token the hub refuses, naming what the caller
        knows (the team and member, the join that replaces the token)."""
        env = dict(os.environ if env is None else env)
        try:
            self.address = parse_hub_address(address)
        except ValueError as error:
            raise HubRefused(str(error), "give the hub's address as host:port", "request") from None
        if not token or any(char.isspace() for char in token):
            raise HubRefused("the team token is empty or holds spaces", token_refused, "auth")
        if plaintext and not is_loopback(self.address):
            raise HubRefused(
                f"refusing to send the team token to {self.address} without TLS",
                "reach the hub over TLS (plaintext only on loopback or a unix socket)",
                "request",
            )
        self.timeout = timeout
        self.token_refused = token_refused
        self._metadata = (("authorization", f"Bearer {token}"),)
        self._channel = _channel(self.address, ca_file, plaintext, env)
        self._stub = pb_grpc.HubStub(self._channel)
        self._health: Any = health_pb2_grpc.HealthStub(self._channel)

    # -- the RPCs

    def push(self, writes: Sequence[pb.Write]) -> list[pb.Ack]:
        """Apply ``writes`` in order; one ack per write, in the same order."""
        response: pb.PushResponse = self._call(self._stub.Push, pb.PushRequest(writes=writes))
        if len(response.acks) != len(writes):
            raise HubUnavailable(
                f"the hub answered {len(response.acks)} acks for {len(writes)} writes",
                FIX_RETRY,
            )
        return list(response.acks)

    def pull(self, after: Cursor | None = None, limit: int = 0) -> pb.PullResponse:
        """The team's changes after ``after`` (None: from the start); ``limit`` 0 is the
        hub's default page. ``hub.wire.page_from_pb`` reads it into feed values."""
        request = pb.PullRequest(limit=limit)
        if after is not None:
            request.after.CopyFrom(wire.cursor_to_pb(after))
        response: pb.PullResponse = self._call(self._stub.Pull, request)
        return response

    def recall(
        self, stores: Sequence[str], text: str, *, limit: int = 10, branch: str | None = None
    ) -> pb.RecallResponse:
        request = pb.RecallRequest(stores=list(stores), text=text, limit=limit)
        if branch is not None:
            request.branch = branch
        response: pb.RecallResponse = self._call(self._stub.Recall, request)
        return response

    def record_recalls(self, events: Sequence[pb.RecallEvent]) -> int:
        """Append recall events; how many named a live memory (the rest are dropped)."""
        response: pb.RecordRecallsResponse = self._call(
            self._stub.RecordRecalls, pb.RecordRecallsRequest(events=events)
        )
        return int(response.recorded)

    def stores(self) -> pb.StoresResponse:
        """The team's stores and counts, who the token is, the hub's model and dimension."""
        response: pb.StoresResponse = self._call(self._stub.Stores, pb.StoresRequest())
        return response

    # -- chat across machines (docs/team.md §chat-across-machines; hub.chat_wire builds
    # the requests and reads the answers)

    def publish_sessions(self, request: pb.PublishSessionsRequest) -> pb.PublishSessionsResponse:
        response: pb.PublishSessionsResponse = self._call(self._stub.PublishSessions, request)
        return response

    def peers(self) -> pb.PeersResponse:
        response: pb.PeersResponse = self._call(self._stub.Peers, pb.PeersRequest())
        return response

    def send_mail(self, request: pb.SendMailRequest) -> pb.SendMailResponse:
        response: pb.SendMailResponse = self._call(self._stub.SendMail, request)
        return response

    def pull_mail(self, machine: str, after: int = 0, limit: int = 0) -> pb.PullMailResponse:
        request = pb.PullMailRequest(machine=machine, after=after, limit=limit)
        response: pb.PullMailResponse = self._call(self._stub.PullMail, request)
        return response

    def mark_delivered(self, machine: str, ids: Sequence[int]) -> int:
        request = pb.MarkDeliveredRequest(machine=machine, ids=list(ids))
        response: pb.MarkDeliveredResponse = self._call(self._stub.MarkDelivered, request)
        return int(response.marked)

    def health(self, *, timeout: float = 2.0) -> Literal["SERVING", "NOT_SERVING", "UNREACHABLE"]:
        try:
            answer = self._health.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
        except grpc.RpcError:
            return "UNREACHABLE"
        serving = answer.status == health_pb2.HealthCheckResponse.SERVING
        return "SERVING" if serving else "NOT_SERVING"

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> HubClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- internals

    def _call(self, method: Any, request: object) -> Any:
        try:
            return method(request, timeout=self.timeout, metadata=self._metadata)
        except grpc.RpcError as error:
            raise self._error(error) from None

    def _error(self, error: grpc.RpcError) -> HubError:
        code = error.code()
        details = error.details() or code.name
        where = f"the hub at {self.address}"
        if code == grpc.StatusCode.UNAUTHENTICATED:
            return HubRefused(f"{where} refused the token: {details}", self.token_refused, "auth")
        if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE) or (
            code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in details
        ):
            return HubRefused(f"{where} refused the request: {details}", FIX_REQUEST, "request")
        if code == grpc.StatusCode.UNIMPLEMENTED:
            return HubUnavailable(
                f"{self.address} does not serve the thatch hub ({details})",
                FIX_NOT_A_HUB,
            )
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return HubUnavailable(f"{where} did not answer within {self.timeout:g} s", FIX_RETRY)
        if not self.address.is_unix and any(sign in details for sign in _TLS_SIGNS):
            return HubUnavailable(f"cannot reach {where} over TLS ({details})", FIX_CA)
        return HubUnavailable(f"{where} is unavailable ({details})", FIX_RETRY)
