from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Memory(_message.Message):
    __slots__ = ("store", "slug", "label", "content", "model", "branch", "confidence", "archived", "created_at", "updated_at", "vector")
    STORE_FIELD_NUMBER: _ClassVar[int]
    SLUG_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    VECTOR_FIELD_NUMBER: _ClassVar[int]
    store: str
    slug: str
    label: str
    content: str
    model: str
    branch: str
    confidence: int
    archived: bool
    created_at: str
    updated_at: str
    vector: bytes
    def __init__(self, store: _Optional[str] = ..., slug: _Optional[str] = ..., label: _Optional[str] = ..., content: _Optional[str] = ..., model: _Optional[str] = ..., branch: _Optional[str] = ..., confidence: _Optional[int] = ..., archived: _Optional[bool] = ..., created_at: _Optional[str] = ..., updated_at: _Optional[str] = ..., vector: _Optional[bytes] = ...) -> None: ...

class Write(_message.Message):
    __slots__ = ("write_id", "op", "store", "label", "stored_text", "base_rev", "branch", "confidence", "archived")
    class Op(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        OP_UNSPECIFIED: _ClassVar[Write.Op]
        REMEMBER: _ClassVar[Write.Op]
        FORGET: _ClassVar[Write.Op]
    OP_UNSPECIFIED: Write.Op
    REMEMBER: Write.Op
    FORGET: Write.Op
    WRITE_ID_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    STORED_TEXT_FIELD_NUMBER: _ClassVar[int]
    BASE_REV_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    write_id: str
    op: Write.Op
    store: str
    label: str
    stored_text: str
    base_rev: int
    branch: str
    confidence: int
    archived: bool
    def __init__(self, write_id: _Optional[str] = ..., op: _Optional[_Union[Write.Op, str]] = ..., store: _Optional[str] = ..., label: _Optional[str] = ..., stored_text: _Optional[str] = ..., base_rev: _Optional[int] = ..., branch: _Optional[str] = ..., confidence: _Optional[int] = ..., archived: _Optional[bool] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("write_id", "outcome", "slug", "rev", "reason")
    class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        OUTCOME_UNSPECIFIED: _ClassVar[Ack.Outcome]
        SAVED: _ClassVar[Ack.Outcome]
        CONFLICT: _ClassVar[Ack.Outcome]
        REFUSED: _ClassVar[Ack.Outcome]
        FORGOTTEN: _ClassVar[Ack.Outcome]
    OUTCOME_UNSPECIFIED: Ack.Outcome
    SAVED: Ack.Outcome
    CONFLICT: Ack.Outcome
    REFUSED: Ack.Outcome
    FORGOTTEN: Ack.Outcome
    WRITE_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    SLUG_FIELD_NUMBER: _ClassVar[int]
    REV_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    write_id: str
    outcome: Ack.Outcome
    slug: str
    rev: int
    reason: str
    def __init__(self, write_id: _Optional[str] = ..., outcome: _Optional[_Union[Ack.Outcome, str]] = ..., slug: _Optional[str] = ..., rev: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class PushRequest(_message.Message):
    __slots__ = ("writes",)
    WRITES_FIELD_NUMBER: _ClassVar[int]
    writes: _containers.RepeatedCompositeFieldContainer[Write]
    def __init__(self, writes: _Optional[_Iterable[_Union[Write, _Mapping]]] = ...) -> None: ...

class PushResponse(_message.Message):
    __slots__ = ("acks",)
    ACKS_FIELD_NUMBER: _ClassVar[int]
    acks: _containers.RepeatedCompositeFieldContainer[Ack]
    def __init__(self, acks: _Optional[_Iterable[_Union[Ack, _Mapping]]] = ...) -> None: ...

class Cursor(_message.Message):
    __slots__ = ("txid", "seq")
    TXID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    txid: int
    seq: int
    def __init__(self, txid: _Optional[int] = ..., seq: _Optional[int] = ...) -> None: ...

class Change(_message.Message):
    __slots__ = ("store", "slug", "rev", "conflict_of", "author", "memory")
    STORE_FIELD_NUMBER: _ClassVar[int]
    SLUG_FIELD_NUMBER: _ClassVar[int]
    REV_FIELD_NUMBER: _ClassVar[int]
    CONFLICT_OF_FIELD_NUMBER: _ClassVar[int]
    AUTHOR_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    store: str
    slug: str
    rev: int
    conflict_of: str
    author: str
    memory: Memory
    def __init__(self, store: _Optional[str] = ..., slug: _Optional[str] = ..., rev: _Optional[int] = ..., conflict_of: _Optional[str] = ..., author: _Optional[str] = ..., memory: _Optional[_Union[Memory, _Mapping]] = ...) -> None: ...

class PullRequest(_message.Message):
    __slots__ = ("after", "limit")
    AFTER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    after: Cursor
    limit: int
    def __init__(self, after: _Optional[_Union[Cursor, _Mapping]] = ..., limit: _Optional[int] = ...) -> None: ...

class PullResponse(_message.Message):
    __slots__ = ("changes", "next", "reset")
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    changes: _containers.RepeatedCompositeFieldContainer[Change]
    next: Cursor
    reset: bool
    def __init__(self, changes: _Optional[_Iterable[_Union[Change, _Mapping]]] = ..., next: _Optional[_Union[Cursor, _Mapping]] = ..., reset: _Optional[bool] = ...) -> None: ...

class RecallRequest(_message.Message):
    __slots__ = ("stores", "text", "limit", "branch")
    STORES_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    stores: _containers.RepeatedScalarFieldContainer[str]
    text: str
    limit: int
    branch: str
    def __init__(self, stores: _Optional[_Iterable[str]] = ..., text: _Optional[str] = ..., limit: _Optional[int] = ..., branch: _Optional[str] = ...) -> None: ...

class RecallMatch(_message.Message):
    __slots__ = ("memory", "score")
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    memory: Memory
    score: float
    def __init__(self, memory: _Optional[_Union[Memory, _Mapping]] = ..., score: _Optional[float] = ...) -> None: ...

class RecallResponse(_message.Message):
    __slots__ = ("matches",)
    MATCHES_FIELD_NUMBER: _ClassVar[int]
    matches: _containers.RepeatedCompositeFieldContainer[RecallMatch]
    def __init__(self, matches: _Optional[_Iterable[_Union[RecallMatch, _Mapping]]] = ...) -> None: ...

class RecallEvent(_message.Message):
    __slots__ = ("store", "slug", "at")
    STORE_FIELD_NUMBER: _ClassVar[int]
    SLUG_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    store: str
    slug: str
    at: str
    def __init__(self, store: _Optional[str] = ..., slug: _Optional[str] = ..., at: _Optional[str] = ...) -> None: ...

class RecordRecallsRequest(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[RecallEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[RecallEvent, _Mapping]]] = ...) -> None: ...

class RecordRecallsResponse(_message.Message):
    __slots__ = ("recorded",)
    RECORDED_FIELD_NUMBER: _ClassVar[int]
    recorded: int
    def __init__(self, recorded: _Optional[int] = ...) -> None: ...

class StoresRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StoreCount(_message.Message):
    __slots__ = ("name", "count")
    NAME_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    name: str
    count: int
    def __init__(self, name: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class StoresResponse(_message.Message):
    __slots__ = ("stores", "team", "member", "model", "dim")
    STORES_FIELD_NUMBER: _ClassVar[int]
    TEAM_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DIM_FIELD_NUMBER: _ClassVar[int]
    stores: _containers.RepeatedCompositeFieldContainer[StoreCount]
    team: str
    member: str
    model: str
    dim: int
    def __init__(self, stores: _Optional[_Iterable[_Union[StoreCount, _Mapping]]] = ..., team: _Optional[str] = ..., member: _Optional[str] = ..., model: _Optional[str] = ..., dim: _Optional[int] = ...) -> None: ...

class ChatSession(_message.Message):
    __slots__ = ("key", "local_name", "topic", "project", "last_seen")
    KEY_FIELD_NUMBER: _ClassVar[int]
    LOCAL_NAME_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_FIELD_NUMBER: _ClassVar[int]
    key: str
    local_name: str
    topic: str
    project: str
    last_seen: str
    def __init__(self, key: _Optional[str] = ..., local_name: _Optional[str] = ..., topic: _Optional[str] = ..., project: _Optional[str] = ..., last_seen: _Optional[str] = ...) -> None: ...

class ChatPeer(_message.Message):
    __slots__ = ("id", "name", "member", "machine", "key", "local_name", "topic", "project", "last_seen")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    MACHINE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    LOCAL_NAME_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_FIELD_NUMBER: _ClassVar[int]
    id: int
    name: str
    member: str
    machine: str
    key: str
    local_name: str
    topic: str
    project: str
    last_seen: str
    def __init__(self, id: _Optional[int] = ..., name: _Optional[str] = ..., member: _Optional[str] = ..., machine: _Optional[str] = ..., key: _Optional[str] = ..., local_name: _Optional[str] = ..., topic: _Optional[str] = ..., project: _Optional[str] = ..., last_seen: _Optional[str] = ...) -> None: ...

class PublishSessionsRequest(_message.Message):
    __slots__ = ("machine", "sessions")
    MACHINE_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    machine: str
    sessions: _containers.RepeatedCompositeFieldContainer[ChatSession]
    def __init__(self, machine: _Optional[str] = ..., sessions: _Optional[_Iterable[_Union[ChatSession, _Mapping]]] = ...) -> None: ...

class PublishSessionsResponse(_message.Message):
    __slots__ = ("peers",)
    PEERS_FIELD_NUMBER: _ClassVar[int]
    peers: _containers.RepeatedCompositeFieldContainer[ChatPeer]
    def __init__(self, peers: _Optional[_Iterable[_Union[ChatPeer, _Mapping]]] = ...) -> None: ...

class PeersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PeersResponse(_message.Message):
    __slots__ = ("peers",)
    PEERS_FIELD_NUMBER: _ClassVar[int]
    peers: _containers.RepeatedCompositeFieldContainer[ChatPeer]
    def __init__(self, peers: _Optional[_Iterable[_Union[ChatPeer, _Mapping]]] = ...) -> None: ...

class OutgoingMail(_message.Message):
    __slots__ = ("client_id", "from_key", "to_peer", "body", "via_broadcast")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_KEY_FIELD_NUMBER: _ClassVar[int]
    TO_PEER_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    VIA_BROADCAST_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    from_key: str
    to_peer: int
    body: str
    via_broadcast: bool
    def __init__(self, client_id: _Optional[str] = ..., from_key: _Optional[str] = ..., to_peer: _Optional[int] = ..., body: _Optional[str] = ..., via_broadcast: _Optional[bool] = ...) -> None: ...

class MailAck(_message.Message):
    __slots__ = ("client_id", "id", "refused")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    id: int
    refused: str
    def __init__(self, client_id: _Optional[str] = ..., id: _Optional[int] = ..., refused: _Optional[str] = ...) -> None: ...

class SendMailRequest(_message.Message):
    __slots__ = ("machine", "mails")
    MACHINE_FIELD_NUMBER: _ClassVar[int]
    MAILS_FIELD_NUMBER: _ClassVar[int]
    machine: str
    mails: _containers.RepeatedCompositeFieldContainer[OutgoingMail]
    def __init__(self, machine: _Optional[str] = ..., mails: _Optional[_Iterable[_Union[OutgoingMail, _Mapping]]] = ...) -> None: ...

class SendMailResponse(_message.Message):
    __slots__ = ("acks",)
    ACKS_FIELD_NUMBER: _ClassVar[int]
    acks: _containers.RepeatedCompositeFieldContainer[MailAck]
    def __init__(self, acks: _Optional[_Iterable[_Union[MailAck, _Mapping]]] = ...) -> None: ...

class Mail(_message.Message):
    __slots__ = ("id", "from_peer", "from_name", "from_member", "from_machine", "from_project", "to_key", "to_name", "body", "via_broadcast", "created_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    FROM_PEER_FIELD_NUMBER: _ClassVar[int]
    FROM_NAME_FIELD_NUMBER: _ClassVar[int]
    FROM_MEMBER_FIELD_NUMBER: _ClassVar[int]
    FROM_MACHINE_FIELD_NUMBER: _ClassVar[int]
    FROM_PROJECT_FIELD_NUMBER: _ClassVar[int]
    TO_KEY_FIELD_NUMBER: _ClassVar[int]
    TO_NAME_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    VIA_BROADCAST_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    id: int
    from_peer: int
    from_name: str
    from_member: str
    from_machine: str
    from_project: str
    to_key: str
    to_name: str
    body: str
    via_broadcast: bool
    created_at: str
    def __init__(self, id: _Optional[int] = ..., from_peer: _Optional[int] = ..., from_name: _Optional[str] = ..., from_member: _Optional[str] = ..., from_machine: _Optional[str] = ..., from_project: _Optional[str] = ..., to_key: _Optional[str] = ..., to_name: _Optional[str] = ..., body: _Optional[str] = ..., via_broadcast: _Optional[bool] = ..., created_at: _Optional[str] = ...) -> None: ...

class PullMailRequest(_message.Message):
    __slots__ = ("machine", "after", "limit")
    MACHINE_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    machine: str
    after: int
    limit: int
    def __init__(self, machine: _Optional[str] = ..., after: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class PullMailResponse(_message.Message):
    __slots__ = ("mails",)
    MAILS_FIELD_NUMBER: _ClassVar[int]
    mails: _containers.RepeatedCompositeFieldContainer[Mail]
    def __init__(self, mails: _Optional[_Iterable[_Union[Mail, _Mapping]]] = ...) -> None: ...

class MarkDeliveredRequest(_message.Message):
    __slots__ = ("machine", "ids")
    MACHINE_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    machine: str
    ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, machine: _Optional[str] = ..., ids: _Optional[_Iterable[int]] = ...) -> None: ...

class MarkDeliveredResponse(_message.Message):
    __slots__ = ("marked",)
    MARKED_FIELD_NUMBER: _ClassVar[int]
    marked: int
    def __init__(self, marked: _Optional[int] = ...) -> None: ...
