from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KIND_UNSPECIFIED: _ClassVar[Kind]
    QUERY: _ClassVar[Kind]
    PASSAGE: _ClassVar[Kind]
KIND_UNSPECIFIED: Kind
QUERY: Kind
PASSAGE: Kind

class EmbedRequest(_message.Message):
    __slots__ = ("texts", "kind")
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    texts: _containers.RepeatedScalarFieldContainer[str]
    kind: Kind
    def __init__(self, texts: _Optional[_Iterable[str]] = ..., kind: _Optional[_Union[Kind, str]] = ...) -> None: ...

class Timing(_message.Message):
    __slots__ = ("queue_us", "tokenize_us", "inference_us", "total_us")
    QUEUE_US_FIELD_NUMBER: _ClassVar[int]
    TOKENIZE_US_FIELD_NUMBER: _ClassVar[int]
    INFERENCE_US_FIELD_NUMBER: _ClassVar[int]
    TOTAL_US_FIELD_NUMBER: _ClassVar[int]
    queue_us: int
    tokenize_us: int
    inference_us: int
    total_us: int
    def __init__(self, queue_us: _Optional[int] = ..., tokenize_us: _Optional[int] = ..., inference_us: _Optional[int] = ..., total_us: _Optional[int] = ...) -> None: ...

class EmbedResponse(_message.Message):
    __slots__ = ("vectors", "dim", "count", "model_id", "token_counts", "truncated", "timing")
    VECTORS_FIELD_NUMBER: _ClassVar[int]
    DIM_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_COUNTS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    TIMING_FIELD_NUMBER: _ClassVar[int]
    vectors: bytes
    dim: int
    count: int
    model_id: str
    token_counts: _containers.RepeatedScalarFieldContainer[int]
    truncated: _containers.RepeatedScalarFieldContainer[bool]
    timing: Timing
    def __init__(self, vectors: _Optional[bytes] = ..., dim: _Optional[int] = ..., count: _Optional[int] = ..., model_id: _Optional[str] = ..., token_counts: _Optional[_Iterable[int]] = ..., truncated: _Optional[_Iterable[bool]] = ..., timing: _Optional[_Union[Timing, _Mapping]] = ...) -> None: ...

class Limits(_message.Message):
    __slots__ = ("max_texts_per_request", "max_chars_per_text", "max_batch_tokens", "max_batch_size", "max_queued_texts", "max_wait_ms")
    MAX_TEXTS_PER_REQUEST_FIELD_NUMBER: _ClassVar[int]
    MAX_CHARS_PER_TEXT_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUED_TEXTS_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    max_texts_per_request: int
    max_chars_per_text: int
    max_batch_tokens: int
    max_batch_size: int
    max_queued_texts: int
    max_wait_ms: int
    def __init__(self, max_texts_per_request: _Optional[int] = ..., max_chars_per_text: _Optional[int] = ..., max_batch_tokens: _Optional[int] = ..., max_batch_size: _Optional[int] = ..., max_queued_texts: _Optional[int] = ..., max_wait_ms: _Optional[int] = ...) -> None: ...

class InfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class InfoResponse(_message.Message):
    __slots__ = ("model_id", "model_revision", "model_sha256", "dim", "max_tokens", "pooling", "normalize", "query_prefix", "quantized", "loaded", "server_version", "limits", "idle_release_seconds", "exit_after_seconds", "auto_started", "pid", "uptime_s", "requests_served")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_REVISION_FIELD_NUMBER: _ClassVar[int]
    MODEL_SHA256_FIELD_NUMBER: _ClassVar[int]
    DIM_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    POOLING_FIELD_NUMBER: _ClassVar[int]
    NORMALIZE_FIELD_NUMBER: _ClassVar[int]
    QUERY_PREFIX_FIELD_NUMBER: _ClassVar[int]
    QUANTIZED_FIELD_NUMBER: _ClassVar[int]
    LOADED_FIELD_NUMBER: _ClassVar[int]
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    IDLE_RELEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    EXIT_AFTER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    AUTO_STARTED_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_SERVED_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    model_revision: str
    model_sha256: str
    dim: int
    max_tokens: int
    pooling: str
    normalize: bool
    query_prefix: str
    quantized: bool
    loaded: bool
    server_version: str
    limits: Limits
    idle_release_seconds: int
    exit_after_seconds: int
    auto_started: bool
    pid: int
    uptime_s: int
    requests_served: int
    def __init__(self, model_id: _Optional[str] = ..., model_revision: _Optional[str] = ..., model_sha256: _Optional[str] = ..., dim: _Optional[int] = ..., max_tokens: _Optional[int] = ..., pooling: _Optional[str] = ..., normalize: _Optional[bool] = ..., query_prefix: _Optional[str] = ..., quantized: _Optional[bool] = ..., loaded: _Optional[bool] = ..., server_version: _Optional[str] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., idle_release_seconds: _Optional[int] = ..., exit_after_seconds: _Optional[int] = ..., auto_started: _Optional[bool] = ..., pid: _Optional[int] = ..., uptime_s: _Optional[int] = ..., requests_served: _Optional[int] = ...) -> None: ...
