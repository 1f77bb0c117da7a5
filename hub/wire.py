"""Between the hub's gRPC messages (``thatch.hub.v1``) and the store's value types.

Both sides use it: the hub's servicer answers with these messages, a machine's sync
process reads them back into ``Memory`` (plus the exact float32 vector) and feed
``Change``s. No database driver here (tests/test_proto.py: the client side loads without
psycopg).
"""

from __future__ import annotations

from thatch.frontend.store.memory import Match, Memory
from thatch.hub.v1 import hub_pb2 as pb
from thatch.hub.values import Change, Cursor, Outcome, Page, Written

__all__ = [
    "ack_forgotten",
    "ack_refused",
    "ack_written",
    "change_from_pb",
    "change_to_pb",
    "cursor_from_pb",
    "cursor_to_pb",
    "match_to_pb",
    "memory_from_pb",
    "memory_to_pb",
    "page_from_pb",
    "page_to_pb",
]

_OUTCOMES = {Outcome.SAVED: pb.Ack.SAVED, Outcome.CONFLICT: pb.Ack.CONFLICT}


def memory_to_pb(memory: Memory, vector: bytes | None) -> pb.Memory:
    message = pb.Memory(
        store=memory.store,
        slug=memory.slug,
        label=memory.label,
        content=memory.content,
        model=memory.model or "",
        archived=memory.archived,
        created_at=memory.created_at,
        updated_at=memory.updated_at,
        vector=vector or b"",
    )
    if memory.branch is not None:
        message.branch = memory.branch
    if memory.confidence is not None:
        message.confidence = memory.confidence
    return message


def memory_from_pb(message: pb.Memory) -> tuple[Memory, bytes | None]:
    """The memory and its float32 little-endian vector (None when pending). Telemetry is
    not carried: a replica counts its own recalls."""
    vector = bytes(message.vector) or None
    memory = Memory(
        slug=message.slug,
        store=message.store,
        label=message.label,
        content=message.content,
        model=message.model or None,
        branch=message.branch if message.HasField("branch") else None,
        confidence=message.confidence if message.HasField("confidence") else None,
        archived=message.archived,
        created_at=message.created_at,
        updated_at=message.updated_at,
        recall_count=0,
        last_recalled_at=None,
        dim=None if vector is None else len(vector) // 4,
    )
    return memory, vector


def cursor_to_pb(cursor: Cursor) -> pb.Cursor:
    return pb.Cursor(txid=cursor.txid, seq=cursor.seq)


def cursor_from_pb(message: pb.Cursor) -> Cursor:
    return Cursor(int(message.txid), int(message.seq))


def change_to_pb(change: Change) -> pb.Change:
    message = pb.Change(
        store=change.store,
        slug=change.slug,
        rev=change.rev,
        conflict_of=change.conflict_of or "",
        author=change.author,
    )
    if change.memory is not None:
        message.memory.CopyFrom(memory_to_pb(change.memory, change.vector))
    return message


def change_from_pb(message: pb.Change) -> Change:
    memory, vector = memory_from_pb(message.memory) if message.HasField("memory") else (None, None)
    return Change(
        store=message.store,
        slug=message.slug,
        rev=int(message.rev),
        conflict_of=message.conflict_of or None,
        author=message.author,
        memory=memory,
        vector=vector,
    )


def page_to_pb(page: Page) -> pb.PullResponse:
    return pb.PullResponse(
        changes=[change_to_pb(change) for change in page.changes],
        next=cursor_to_pb(page.cursor),
        reset=page.reset,
    )


def page_from_pb(message: pb.PullResponse) -> Page:
    return Page(
        [change_from_pb(change) for change in message.changes],
        cursor_from_pb(message.next),
        reset=message.reset,
    )


def match_to_pb(match: Match) -> pb.RecallMatch:
    """A recall match; its memory carries no vector (the caller has the query's answer,
    not a replica to fill)."""
    return pb.RecallMatch(memory=memory_to_pb(match.memory, None), score=match.score)


def ack_written(write_id: str, written: Written) -> pb.Ack:
    return pb.Ack(
        write_id=write_id, outcome=_OUTCOMES[written.outcome], slug=written.slug, rev=written.rev
    )


def ack_refused(write_id: str, reason: str) -> pb.Ack:
    return pb.Ack(write_id=write_id, outcome=pb.Ack.REFUSED, reason=reason)


def ack_forgotten(write_id: str, slug: str, rev: int | None = None) -> pb.Ack:
    """``rev``: the tombstone's (none when there was nothing to forget)."""
    return pb.Ack(write_id=write_id, outcome=pb.Ack.FORGOTTEN, slug=slug, rev=rev or 0)
