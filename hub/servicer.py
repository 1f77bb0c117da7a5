"""The Hub gRPC service (proto/thatch/hub/v1/hub.proto, docs/team.md §hub-rpcs).

Every call reads ``authorization: Bearer <token>``, maps it to (team, member) with
``session.authenticate`` and runs as that member on one pooled connection; the team and
the member never come from a request's body, so row-level security confines the call
whatever it names. Nothing is kept between calls: any hub replica serves any request.

Status codes the machine's sync process acts on:
- ``UNAUTHENTICATED``: no token, or one no live member holds (which of the two is not
  said beyond that).
- ``INVALID_ARGUMENT``: the request itself is malformed or over a limit (``HubLimits``);
  retrying the same request cannot help. A single bad write in a push is not that: it
  gets a ``REFUSED`` ack with the reason, and the rest of the batch is applied.
- ``UNAVAILABLE``: the database or the embedder cannot be used now; nothing of the push
  was written, so the machine keeps its outbox and retries.
"""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import numpy as np
import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from thatch.embedder.client.embedder_client import EmbedderClient
from thatch.embedder.client.errors import EmbedderUnavailable, EmbedRequestError
from thatch.embedder.client.kind import Kind
from thatch.frontend.errors import InvalidInputError
from thatch.frontend.secret_scan import SecretFound, refuse_secrets
from thatch.frontend.store.slugs import slugify
from thatch.frontend.timefmt import Clock, parse_timestamp
from thatch.hub import chat_service, wire
from thatch.hub.feed import changes_after
from thatch.hub.memories import DIMENSION, EXACT_SCAN_MAX, HubMemories
from thatch.hub.session import Member, UnknownToken, authenticate
from thatch.hub.v1 import hub_pb2 as pb
from thatch.hub.v1 import hub_pb2_grpc as pb_grpc
from thatch.hub.values import START

__all__ = ["PINNED_MODEL", "Abort", "Caller", "HubLimits", "HubServicer", "bearer_token"]

# The model every team vector comes from (docs/team.md §vectors): members' vectors compare
# only because one model made them all.
PINNED_MODEL = "sentence-transformers/all-MiniLM-L6-v2"

NO_TOKEN = (
    "no team token: send 'authorization: Bearer <token>' (the token thatch hub member add "
    "printed for you)"
)
DATABASE_DOWN = "the hub's database is unreachable; retry later"
HUB_FAILED = "the hub failed on this call (its log says why)"
T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class HubLimits:
    """What one request may carry; over a limit is INVALID_ARGUMENT (or a REFUSED ack for
    one write of a push). A pull page is at most ``max_pull`` rows of at most
    ``max_text_chars`` each, which keeps a reply within the message size."""

    max_writes: int = 100
    max_text_chars: int = 32_000
    max_label_chars: int = 500
    max_name_chars: int = 200  # store names, branches, slugs, write ids
    default_pull: int = 200
    max_pull: int = 500
    max_query_chars: int = 10_000
    max_recall: int = 100
    max_events: int = 1000
    max_token_chars: int = 512
    embed_timeout: float = 60.0


class Abort(Exception):
    """End the call with ``code`` and ``message`` (raised inside a call, turned into
    ``context.abort`` outside every ``try``)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Caller:
    """The authenticated member of one call. ``memories`` takes a pooled connection only
    while the database is used: a call embedding text holds none meanwhile."""

    who: Member
    pool: ConnectionPool
    clock: Clock
    exact_scan_max: int | None = EXACT_SCAN_MAX

    @contextmanager
    def memories(self) -> Iterator[HubMemories]:
        with self.pool.connection() as conn:
            yield HubMemories(conn, self.who, self.clock, exact_scan_max=self.exact_scan_max)


def bearer_token(metadata: Sequence[tuple[str, str | bytes]] | None) -> str | None:
    """The token of ``authorization: Bearer <token>``, or None."""
    for key, value in metadata or ():
        if key.lower() == "authorization" and isinstance(value, str):
            scheme, _, token = value.strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


def _text_problem(what: str, value: str, limit: int) -> str | None:
    if not value:
        return f"{what} is empty"
    if len(value) > limit:
        return f"{what} too long: {len(value)} characters (maximum {limit})"
    if "\x00" in value:
        return f"{what} holds a NUL character"
    return None


def _name_problem(what: str, value: str, limit: int) -> str | None:
    problem = _text_problem(what, value, limit)
    if problem is None and any(unicodedata.category(char) == "Cc" for char in value):
        return f"{what} holds a control character"
    return problem


def _confidence(write: pb.Write) -> int | None:
    """The write's confidence within the tools' 1-10: every machine copies what the hub
    keeps (2147483647 was), and refusing it would set aside every later edit of a memory
    already holding such a value (the overwrite keeps it) or of an earlier release's row."""
    if not write.HasField("confidence"):
        return None
    return min(max(write.confidence, 1), 10)


def _write_id_problem(write_id: str, limit: int) -> str | None:
    if not write_id:
        return "no write id: each write carries '<machine id>:<outbox row id>'"
    if len(write_id) > limit or not all("!" <= char <= "~" for char in write_id):
        return f"malformed write id: printable ASCII without spaces, at most {limit} characters"
    return None


def _secret_reason(error: SecretFound) -> str:
    """The kind, never the value (the error's own message does not hold it either)."""
    return f"secret ({error.finding.kind}): {error}"


class HubServicer(pb_grpc.HubServicer):
    """The hub's RPCs over ``pool``; ``embedder`` embeds with the pinned model."""

    def __init__(
        self,
        pool: ConnectionPool,
        embedder: EmbedderClient,
        clock: Clock,
        *,
        logger: logging.Logger,
        limits: HubLimits | None = None,
        model: str = PINNED_MODEL,
    ) -> None:
        self.pool = pool
        self.embedder = embedder
        self.clock = clock
        self.logger = logger
        self.limits = limits or HubLimits()
        self.model = model
        # None once serve() finds a pgvector without iterative index scans: exact scans only.
        self.exact_scan_max: int | None = EXACT_SCAN_MAX

    # -- the RPCs

    def Push(self, request: pb.PushRequest, context: grpc.ServicerContext) -> pb.PushResponse:
        return self._serve(context, lambda caller: self._push(caller, request.writes))

    def Pull(self, request: pb.PullRequest, context: grpc.ServicerContext) -> pb.PullResponse:
        def pull(caller: Caller) -> pb.PullResponse:
            limit = request.limit or self.limits.default_pull
            if limit > self.limits.max_pull:
                raise Abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"pull limit {limit} is over the maximum {self.limits.max_pull}",
                )
            after = wire.cursor_from_pb(request.after) if request.HasField("after") else START
            with caller.memories() as hub:
                return wire.page_to_pb(changes_after(hub.conn, hub.who, after, limit))

        return self._serve(context, pull)

    def Recall(self, request: pb.RecallRequest, context: grpc.ServicerContext) -> pb.RecallResponse:
        return self._serve(context, lambda caller: self._recall(caller, request))

    def RecordRecalls(
        self, request: pb.RecordRecallsRequest, context: grpc.ServicerContext
    ) -> pb.RecordRecallsResponse:
        return self._serve(context, lambda caller: self._record(caller, request.events))

    def Stores(self, request: pb.StoresRequest, context: grpc.ServicerContext) -> pb.StoresResponse:
        def stores(caller: Caller) -> pb.StoresResponse:
            with caller.memories() as hub:
                counts = hub.store_counts()
            return pb.StoresResponse(
                stores=[pb.StoreCount(name=name, count=count) for name, count in counts.items()],
                team=caller.who.team,
                member=caller.who.member,
                model=self.model,
                dim=DIMENSION,
            )

        return self._serve(context, stores)

    # -- chat across machines (docs/team.md §chat-across-machines)

    def PublishSessions(
        self, request: pb.PublishSessionsRequest, context: grpc.ServicerContext
    ) -> pb.PublishSessionsResponse:
        return self._chat(context, chat_service.publish_sessions, request)

    def Peers(self, request: pb.PeersRequest, context: grpc.ServicerContext) -> pb.PeersResponse:
        return self._chat(context, chat_service.list_peers, request)

    def SendMail(
        self, request: pb.SendMailRequest, context: grpc.ServicerContext
    ) -> pb.SendMailResponse:
        return self._chat(context, chat_service.send_mail, request)

    def PullMail(
        self, request: pb.PullMailRequest, context: grpc.ServicerContext
    ) -> pb.PullMailResponse:
        return self._chat(context, chat_service.pull_mail, request)

    def MarkDelivered(
        self, request: pb.MarkDeliveredRequest, context: grpc.ServicerContext
    ) -> pb.MarkDeliveredResponse:
        return self._chat(context, chat_service.mark_delivered, request)

    def _chat(
        self,
        context: grpc.ServicerContext,
        rpc: Callable[[psycopg.Connection[Any], Member, R, Clock], T],
        request: R,
    ) -> T:
        """A chat RPC as the token's member on one pooled connection (each function opens
        its own transaction as that member)."""

        def call(caller: Caller) -> T:
            try:
                with self.pool.connection() as conn:
                    return rpc(conn, caller.who, request, caller.clock)
            except InvalidInputError as error:
                raise Abort(grpc.StatusCode.INVALID_ARGUMENT, str(error)) from None

        return self._serve(context, call)

    # -- one call

    def _serve(self, context: grpc.ServicerContext, body: Callable[[Caller], T]) -> T:
        """``body`` as the token's member on one pooled connection; failures as statuses."""
        try:
            return self._as_member(context, body)
        except Abort as abort:
            return self._abort(context, abort)

    def _abort(self, context: grpc.ServicerContext, abort: Abort) -> Any:
        if abort.code != grpc.StatusCode.UNAUTHENTICATED:
            self.logger.warning("%s: %s", abort.code.name, abort.message)
        context.abort(abort.code, abort.message)

    def _as_member(self, context: grpc.ServicerContext, body: Callable[[Caller], T]) -> T:
        token = bearer_token(context.invocation_metadata())
        if token is None:
            raise Abort(grpc.StatusCode.UNAUTHENTICATED, NO_TOKEN)
        if len(token) > self.limits.max_token_chars:
            raise Abort(grpc.StatusCode.UNAUTHENTICATED, str(UnknownToken()))
        try:
            with self.pool.connection() as conn:
                who = authenticate(conn, token)
            return body(Caller(who, self.pool, self.clock, self.exact_scan_max))
        except UnknownToken as error:
            raise Abort(grpc.StatusCode.UNAUTHENTICATED, str(error)) from None
        except (psycopg.OperationalError, PoolTimeout) as error:
            # Unreachable, restarting, a deadlock or a cancelled query: worth a retry.
            self.logger.warning("database: %s", error)
            raise Abort(grpc.StatusCode.UNAVAILABLE, DATABASE_DOWN) from None
        except psycopg.Error:
            self.logger.exception("database error")
            raise Abort(grpc.StatusCode.INTERNAL, HUB_FAILED) from None

    def _embed(self, texts: list[str], kind: Kind) -> np.ndarray[Any, Any]:
        """The pinned model's vectors for ``texts``; UNAVAILABLE when the embedder cannot
        give them (the caller wrote nothing yet, so a retry loses nothing)."""
        try:
            result = self.embedder.embed(texts, kind, timeout=self.limits.embed_timeout)
        except EmbedderUnavailable as error:
            raise Abort(
                grpc.StatusCode.UNAVAILABLE, f"the hub's embedder is unavailable ({error})"
            ) from None
        except EmbedRequestError as error:
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"cannot embed: {error}") from None
        dim = int(result.vectors.shape[1])
        if result.model_id != self.model or dim != DIMENSION:
            self.logger.error(
                "the embedder serves %s (%d dimensions), not the pinned %s",
                result.model_id,
                dim,
                self.model,
            )
            raise Abort(
                grpc.StatusCode.UNAVAILABLE,
                f"the hub's embedder serves {result.model_id} ({dim} dimensions), not the "
                f"team's pinned {self.model} ({DIMENSION}): the hub's operator must point "
                "--embedder at an embedder serving it",
            )
        return result.vectors

    # -- Push

    def _write_problem(self, write: pb.Write) -> str | None:
        limits = self.limits
        if write.op not in (pb.Write.REMEMBER, pb.Write.FORGET):
            return "unknown op: REMEMBER or FORGET"
        if write.op == pb.Write.REMEMBER or write.write_id:
            problem = _write_id_problem(write.write_id, limits.max_name_chars)
            if problem is not None:
                return problem
        problem = _name_problem("store name", write.store, limits.max_name_chars)
        problem = problem or _text_problem("label", write.label, limits.max_label_chars)
        if write.op == pb.Write.FORGET:
            return problem
        problem = problem or _text_problem("stored text", write.stored_text, limits.max_text_chars)
        if problem is None and write.HasField("branch"):
            problem = _name_problem("branch", write.branch, limits.max_name_chars)
        if problem is None and write.HasField("base_rev") and write.base_rev < 1:
            problem = f"base_rev {write.base_rev} is not a revision (revisions start at 1)"
        return problem

    def _push(self, caller: Caller, writes: Sequence[pb.Write]) -> pb.PushResponse:
        if not writes:
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "empty push: send at least one write")
        if len(writes) > self.limits.max_writes:
            raise Abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{len(writes)} writes in one push (maximum {self.limits.max_writes}): "
                "send them in several pushes",
            )
        # A push whose reply was lost comes again: what it applied is answered from the
        # recorded outcomes, not embedded again (nor failed when the embedder is down by
        # then).
        with caller.memories() as hub:
            applied = hub.applied([write.write_id for write in writes if write.write_id])
        refused: dict[int, str] = {}
        for index, write in enumerate(writes):
            problem = self._write_problem(write)
            if problem is None and write.op == pb.Write.REMEMBER and write.write_id not in applied:
                try:
                    refuse_secrets(write.store, write.label, write.stored_text)
                except SecretFound as error:
                    problem = _secret_reason(error)
            if problem is not None:
                refused[index] = problem
        to_embed = [
            index
            for index, write in enumerate(writes)
            if write.op == pb.Write.REMEMBER
            and index not in refused
            and write.write_id not in applied
        ]
        vectors = (
            self._embed([writes[index].stored_text for index in to_embed], Kind.PASSAGE)
            if to_embed
            else None
        )
        vector_of = {index: row for row, index in enumerate(to_embed)}
        acks: list[pb.Ack] = []
        with caller.memories() as hub:
            for index, write in enumerate(writes):
                if index in refused:
                    acks.append(wire.ack_refused(write.write_id, refused[index]))
                elif write.op == pb.Write.FORGET:
                    _, rev = hub.tombstone(write.store, write.label)
                    acks.append(wire.ack_forgotten(write.write_id, slugify(write.label), rev))
                elif index in vector_of:
                    assert vectors is not None
                    acks.append(self._remember(hub, write, vectors[vector_of[index]]))
                else:  # applied before: remember answers with the recorded outcome
                    acks.append(self._remember(hub, write, None))
        return pb.PushResponse(acks=acks)

    def _remember(self, hub: HubMemories, write: pb.Write, vector: Any) -> pb.Ack:
        try:
            written = hub.remember(
                write.store,
                write.label,
                write.stored_text,
                vector,
                self.model,
                base_rev=write.base_rev if write.HasField("base_rev") else None,
                branch=write.branch if write.HasField("branch") else None,
                confidence=_confidence(write),
                archived=write.archived if write.HasField("archived") else None,
                write_id=write.write_id,
            )
        except SecretFound as error:
            return wire.ack_refused(write.write_id, _secret_reason(error))
        except InvalidInputError as error:
            return wire.ack_refused(write.write_id, str(error))
        return wire.ack_written(write.write_id, written)

    # -- Recall and its telemetry

    def _recall(self, caller: Caller, request: pb.RecallRequest) -> pb.RecallResponse:
        limits = self.limits
        limit = request.limit or 10
        problems = [
            _name_problem("store name", store, limits.max_name_chars) for store in request.stores
        ]
        problems.append(_text_problem("recall text", request.text, limits.max_query_chars))
        if not request.stores:
            problems.append("no stores to recall from")
        if limit > limits.max_recall:
            problems.append(f"recall limit {limit} is over the maximum {limits.max_recall}")
        if request.HasField("branch"):
            problems.append(_name_problem("branch", request.branch, limits.max_name_chars))
        found = [problem for problem in problems if problem is not None]
        if found:
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, found[0])
        vector = self._embed([request.text], Kind.QUERY)[0]
        with caller.memories() as hub:
            matches = hub.recall(
                list(request.stores),
                vector,
                text=request.text,
                branch=request.branch if request.HasField("branch") else None,
                limit=limit,
            )
        return pb.RecallResponse(matches=[wire.match_to_pb(match) for match in matches])

    def _record(self, caller: Caller, events: Sequence[pb.RecallEvent]) -> pb.RecordRecallsResponse:
        limits = self.limits
        if len(events) > limits.max_events:
            raise Abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{len(events)} recall events in one call (maximum {limits.max_events})",
            )
        rows = []
        for event in events:
            problem = _name_problem("store name", event.store, limits.max_name_chars)
            problem = problem or _name_problem("slug", event.slug, limits.max_name_chars)
            try:
                at = parse_timestamp(event.at)
            except ValueError:
                when = event.at[:40]
                problem = problem or f"recall event time {when!r} is not YYYY-MM-DDTHH:MM:SS.mmmZ"
            if problem is not None:
                raise Abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
            rows.append((event.store, event.slug, at))
        with caller.memories() as hub:
            return pb.RecordRecallsResponse(recorded=hub.record_recall_events(rows))
