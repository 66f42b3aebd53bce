import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from m3grpc.wire.gen.m3.v1 import elicitation_pb2 as _elicitation_pb2
from m3grpc.wire.gen.m3.v1 import execution_pb2 as _execution_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WatchEventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WATCH_EVENT_KIND_UNSPECIFIED: _ClassVar[WatchEventKind]
    WATCH_EVENT_KIND_ROUND_PENDING: _ClassVar[WatchEventKind]
    WATCH_EVENT_KIND_ROUND_LEFT_PENDING: _ClassVar[WatchEventKind]
    WATCH_EVENT_KIND_EXECUTION_FINISHED: _ClassVar[WatchEventKind]

class ServerTransport(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SERVER_TRANSPORT_UNSPECIFIED: _ClassVar[ServerTransport]
    SERVER_TRANSPORT_STDIO: _ClassVar[ServerTransport]
    SERVER_TRANSPORT_STREAMABLE_HTTP: _ClassVar[ServerTransport]

class ProtocolGeneration(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROTOCOL_GENERATION_UNSPECIFIED: _ClassVar[ProtocolGeneration]
    PROTOCOL_GENERATION_AUTO: _ClassVar[ProtocolGeneration]
    PROTOCOL_GENERATION_LEGACY: _ClassVar[ProtocolGeneration]
    PROTOCOL_GENERATION_MULTI_ROUND_TRIP: _ClassVar[ProtocolGeneration]
WATCH_EVENT_KIND_UNSPECIFIED: WatchEventKind
WATCH_EVENT_KIND_ROUND_PENDING: WatchEventKind
WATCH_EVENT_KIND_ROUND_LEFT_PENDING: WatchEventKind
WATCH_EVENT_KIND_EXECUTION_FINISHED: WatchEventKind
SERVER_TRANSPORT_UNSPECIFIED: ServerTransport
SERVER_TRANSPORT_STDIO: ServerTransport
SERVER_TRANSPORT_STREAMABLE_HTTP: ServerTransport
PROTOCOL_GENERATION_UNSPECIFIED: ProtocolGeneration
PROTOCOL_GENERATION_AUTO: ProtocolGeneration
PROTOCOL_GENERATION_LEGACY: ProtocolGeneration
PROTOCOL_GENERATION_MULTI_ROUND_TRIP: ProtocolGeneration

class SubmitRequest(_message.Message):
    __slots__ = ("agent", "operation", "human_input", "request_id")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    HUMAN_INPUT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    agent: _execution_pb2.AgentSpec
    operation: _execution_pb2.OperationSpec
    human_input: _execution_pb2.HumanInput
    request_id: str
    def __init__(self, agent: _Optional[_Union[_execution_pb2.AgentSpec, _Mapping]] = ..., operation: _Optional[_Union[_execution_pb2.OperationSpec, _Mapping]] = ..., human_input: _Optional[_Union[_execution_pb2.HumanInput, str]] = ..., request_id: _Optional[str] = ...) -> None: ...

class SubmitResponse(_message.Message):
    __slots__ = ("execution_id", "state")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    state: _execution_pb2.ExecutionState
    def __init__(self, execution_id: _Optional[str] = ..., state: _Optional[_Union[_execution_pb2.ExecutionState, _Mapping]] = ...) -> None: ...

class SnapshotRequest(_message.Message):
    __slots__ = ("execution_id",)
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    def __init__(self, execution_id: _Optional[str] = ...) -> None: ...

class SnapshotResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: _execution_pb2.ExecutionState
    def __init__(self, state: _Optional[_Union[_execution_pb2.ExecutionState, _Mapping]] = ...) -> None: ...

class ResultRequest(_message.Message):
    __slots__ = ("execution_id", "timeout")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    timeout: _duration_pb2.Duration
    def __init__(self, execution_id: _Optional[str] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ResultResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: _execution_pb2.ExecutionResult
    def __init__(self, result: _Optional[_Union[_execution_pb2.ExecutionResult, _Mapping]] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("execution_id", "request_id")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    request_id: str
    def __init__(self, execution_id: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class CancelResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: _execution_pb2.ExecutionState
    def __init__(self, state: _Optional[_Union[_execution_pb2.ExecutionState, _Mapping]] = ...) -> None: ...

class WatchPendingRequest(_message.Message):
    __slots__ = ("execution_id", "cursor", "kinds")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    cursor: str
    kinds: _containers.RepeatedScalarFieldContainer[WatchEventKind]
    def __init__(self, execution_id: _Optional[str] = ..., cursor: _Optional[str] = ..., kinds: _Optional[_Iterable[_Union[WatchEventKind, str]]] = ...) -> None: ...

class WatchPendingResponse(_message.Message):
    __slots__ = ("cursor", "round_pending", "round_left_pending", "execution_finished")
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    ROUND_PENDING_FIELD_NUMBER: _ClassVar[int]
    ROUND_LEFT_PENDING_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_FINISHED_FIELD_NUMBER: _ClassVar[int]
    cursor: str
    round_pending: _elicitation_pb2.PendingElicitationRound
    round_left_pending: RoundLeftPending
    execution_finished: _execution_pb2.ExecutionState
    def __init__(self, cursor: _Optional[str] = ..., round_pending: _Optional[_Union[_elicitation_pb2.PendingElicitationRound, _Mapping]] = ..., round_left_pending: _Optional[_Union[RoundLeftPending, _Mapping]] = ..., execution_finished: _Optional[_Union[_execution_pb2.ExecutionState, _Mapping]] = ...) -> None: ...

class RoundLeftPending(_message.Message):
    __slots__ = ("round_id", "execution_id", "status")
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    round_id: str
    execution_id: str
    status: _elicitation_pb2.ManagedInputStatus
    def __init__(self, round_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., status: _Optional[_Union[_elicitation_pb2.ManagedInputStatus, str]] = ...) -> None: ...

class ListServersRequest(_message.Message):
    __slots__ = ("names", "include_tools")
    NAMES_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_TOOLS_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    include_tools: bool
    def __init__(self, names: _Optional[_Iterable[str]] = ..., include_tools: _Optional[bool] = ...) -> None: ...

class ListServersResponse(_message.Message):
    __slots__ = ("servers",)
    SERVERS_FIELD_NUMBER: _ClassVar[int]
    servers: _containers.RepeatedCompositeFieldContainer[ServerInfo]
    def __init__(self, servers: _Optional[_Iterable[_Union[ServerInfo, _Mapping]]] = ...) -> None: ...

class ServerInfo(_message.Message):
    __slots__ = ("name", "transport", "protocol", "negotiated_protocol_version", "tools", "tools_error")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    NEGOTIATED_PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_ERROR_FIELD_NUMBER: _ClassVar[int]
    name: str
    transport: ServerTransport
    protocol: ProtocolGeneration
    negotiated_protocol_version: str
    tools: _containers.RepeatedCompositeFieldContainer[ToolInfo]
    tools_error: ServerError
    def __init__(self, name: _Optional[str] = ..., transport: _Optional[_Union[ServerTransport, str]] = ..., protocol: _Optional[_Union[ProtocolGeneration, str]] = ..., negotiated_protocol_version: _Optional[str] = ..., tools: _Optional[_Iterable[_Union[ToolInfo, _Mapping]]] = ..., tools_error: _Optional[_Union[ServerError, _Mapping]] = ...) -> None: ...

class ToolInfo(_message.Message):
    __slots__ = ("name", "title", "description", "input_schema")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    name: str
    title: str
    description: str
    input_schema: _struct_pb2.Struct
    def __init__(self, name: _Optional[str] = ..., title: _Optional[str] = ..., description: _Optional[str] = ..., input_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ServerError(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...
