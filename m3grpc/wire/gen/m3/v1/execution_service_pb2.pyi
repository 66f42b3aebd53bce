import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from m3grpc.wire.gen.m3.v1 import elicitation_pb2 as _elicitation_pb2
from m3grpc.wire.gen.m3.v1 import execution_pb2 as _execution_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

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
    __slots__ = ("execution_id", "cursor")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    cursor: str
    def __init__(self, execution_id: _Optional[str] = ..., cursor: _Optional[str] = ...) -> None: ...

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
