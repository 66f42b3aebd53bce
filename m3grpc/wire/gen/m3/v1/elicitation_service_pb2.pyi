from m3grpc.wire.gen.m3.v1 import elicitation_pb2 as _elicitation_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetPendingRequest(_message.Message):
    __slots__ = ("execution_id",)
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    def __init__(self, execution_id: _Optional[str] = ...) -> None: ...

class GetPendingResponse(_message.Message):
    __slots__ = ("round",)
    ROUND_FIELD_NUMBER: _ClassVar[int]
    round: _elicitation_pb2.PendingElicitationRound
    def __init__(self, round: _Optional[_Union[_elicitation_pb2.PendingElicitationRound, _Mapping]] = ...) -> None: ...

class RespondRequest(_message.Message):
    __slots__ = ("round_id", "responses", "idempotency_key", "execution_id")
    class ResponsesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _elicitation_pb2.ElicitationResponse
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_elicitation_pb2.ElicitationResponse, _Mapping]] = ...) -> None: ...
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    round_id: str
    responses: _containers.MessageMap[str, _elicitation_pb2.ElicitationResponse]
    idempotency_key: str
    execution_id: str
    def __init__(self, round_id: _Optional[str] = ..., responses: _Optional[_Mapping[str, _elicitation_pb2.ElicitationResponse]] = ..., idempotency_key: _Optional[str] = ..., execution_id: _Optional[str] = ...) -> None: ...

class RespondResponse(_message.Message):
    __slots__ = ("round_id", "status", "replayed")
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    round_id: str
    status: _elicitation_pb2.ManagedInputStatus
    replayed: bool
    def __init__(self, round_id: _Optional[str] = ..., status: _Optional[_Union[_elicitation_pb2.ManagedInputStatus, str]] = ..., replayed: _Optional[bool] = ...) -> None: ...

class GetRoundRequest(_message.Message):
    __slots__ = ("round_id",)
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    round_id: str
    def __init__(self, round_id: _Optional[str] = ...) -> None: ...

class GetRoundResponse(_message.Message):
    __slots__ = ("round",)
    ROUND_FIELD_NUMBER: _ClassVar[int]
    round: _elicitation_pb2.ElicitationRound
    def __init__(self, round: _Optional[_Union[_elicitation_pb2.ElicitationRound, _Mapping]] = ...) -> None: ...

class ListRoundsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "execution_id", "statuses")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    execution_id: str
    statuses: _containers.RepeatedScalarFieldContainer[_elicitation_pb2.ManagedInputStatus]
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., execution_id: _Optional[str] = ..., statuses: _Optional[_Iterable[_Union[_elicitation_pb2.ManagedInputStatus, str]]] = ...) -> None: ...

class ListRoundsResponse(_message.Message):
    __slots__ = ("rounds", "next_page_token")
    ROUNDS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    rounds: _containers.RepeatedCompositeFieldContainer[_elicitation_pb2.ElicitationRound]
    next_page_token: str
    def __init__(self, rounds: _Optional[_Iterable[_Union[_elicitation_pb2.ElicitationRound, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
