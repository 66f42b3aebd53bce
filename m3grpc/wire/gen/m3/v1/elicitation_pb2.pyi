import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from m3grpc.wire.gen.m3.v1 import execution_pb2 as _execution_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ElicitationAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ELICITATION_ACTION_UNSPECIFIED: _ClassVar[ElicitationAction]
    ELICITATION_ACTION_ACCEPT: _ClassVar[ElicitationAction]
    ELICITATION_ACTION_DECLINE: _ClassVar[ElicitationAction]
    ELICITATION_ACTION_CANCEL: _ClassVar[ElicitationAction]

class ManagedInputStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MANAGED_INPUT_STATUS_UNSPECIFIED: _ClassVar[ManagedInputStatus]
    MANAGED_INPUT_STATUS_PENDING: _ClassVar[ManagedInputStatus]
    MANAGED_INPUT_STATUS_RESPONSE_VALIDATED: _ClassVar[ManagedInputStatus]
    MANAGED_INPUT_STATUS_DELIVERY_STARTED: _ClassVar[ManagedInputStatus]
    MANAGED_INPUT_STATUS_DELIVERED: _ClassVar[ManagedInputStatus]
    MANAGED_INPUT_STATUS_RESOLVED: _ClassVar[ManagedInputStatus]
    MANAGED_INPUT_STATUS_FAILED: _ClassVar[ManagedInputStatus]
ELICITATION_ACTION_UNSPECIFIED: ElicitationAction
ELICITATION_ACTION_ACCEPT: ElicitationAction
ELICITATION_ACTION_DECLINE: ElicitationAction
ELICITATION_ACTION_CANCEL: ElicitationAction
MANAGED_INPUT_STATUS_UNSPECIFIED: ManagedInputStatus
MANAGED_INPUT_STATUS_PENDING: ManagedInputStatus
MANAGED_INPUT_STATUS_RESPONSE_VALIDATED: ManagedInputStatus
MANAGED_INPUT_STATUS_DELIVERY_STARTED: ManagedInputStatus
MANAGED_INPUT_STATUS_DELIVERED: ManagedInputStatus
MANAGED_INPUT_STATUS_RESOLVED: ManagedInputStatus
MANAGED_INPUT_STATUS_FAILED: ManagedInputStatus

class FormElicitation(_message.Message):
    __slots__ = ("message", "requested_schema")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    message: str
    requested_schema: _struct_pb2.Struct
    def __init__(self, message: _Optional[str] = ..., requested_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class UrlElicitation(_message.Message):
    __slots__ = ("message", "url", "elicitation_id")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    ELICITATION_ID_FIELD_NUMBER: _ClassVar[int]
    message: str
    url: str
    elicitation_id: str
    def __init__(self, message: _Optional[str] = ..., url: _Optional[str] = ..., elicitation_id: _Optional[str] = ...) -> None: ...

class ElicitationRequest(_message.Message):
    __slots__ = ("form", "url", "meta", "task", "server", "operation_kind", "operation_name")
    FORM_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    SERVER_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KIND_FIELD_NUMBER: _ClassVar[int]
    OPERATION_NAME_FIELD_NUMBER: _ClassVar[int]
    form: FormElicitation
    url: UrlElicitation
    meta: _struct_pb2.Struct
    task: _struct_pb2.Struct
    server: str
    operation_kind: _execution_pb2.OperationKind
    operation_name: str
    def __init__(self, form: _Optional[_Union[FormElicitation, _Mapping]] = ..., url: _Optional[_Union[UrlElicitation, _Mapping]] = ..., meta: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., task: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., server: _Optional[str] = ..., operation_kind: _Optional[_Union[_execution_pb2.OperationKind, str]] = ..., operation_name: _Optional[str] = ...) -> None: ...

class PendingElicitationRound(_message.Message):
    __slots__ = ("round_id", "execution_id", "logical_operation_id", "server", "operation_kind", "operation_name", "requests", "create_time", "deadline", "request_state", "round_index", "round_limit")
    class RequestsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ElicitationRequest
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ElicitationRequest, _Mapping]] = ...) -> None: ...
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    LOGICAL_OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    SERVER_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KIND_FIELD_NUMBER: _ClassVar[int]
    OPERATION_NAME_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_STATE_FIELD_NUMBER: _ClassVar[int]
    ROUND_INDEX_FIELD_NUMBER: _ClassVar[int]
    ROUND_LIMIT_FIELD_NUMBER: _ClassVar[int]
    round_id: str
    execution_id: str
    logical_operation_id: str
    server: str
    operation_kind: _execution_pb2.OperationKind
    operation_name: str
    requests: _containers.MessageMap[str, ElicitationRequest]
    create_time: _timestamp_pb2.Timestamp
    deadline: _timestamp_pb2.Timestamp
    request_state: str
    round_index: int
    round_limit: int
    def __init__(self, round_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., logical_operation_id: _Optional[str] = ..., server: _Optional[str] = ..., operation_kind: _Optional[_Union[_execution_pb2.OperationKind, str]] = ..., operation_name: _Optional[str] = ..., requests: _Optional[_Mapping[str, ElicitationRequest]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., request_state: _Optional[str] = ..., round_index: _Optional[int] = ..., round_limit: _Optional[int] = ...) -> None: ...

class ElicitationResponse(_message.Message):
    __slots__ = ("action", "content")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    action: ElicitationAction
    content: _struct_pb2.Struct
    def __init__(self, action: _Optional[_Union[ElicitationAction, str]] = ..., content: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class RedactedResponse(_message.Message):
    __slots__ = ("action", "content_keys")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    CONTENT_KEYS_FIELD_NUMBER: _ClassVar[int]
    action: ElicitationAction
    content_keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, action: _Optional[_Union[ElicitationAction, str]] = ..., content_keys: _Optional[_Iterable[str]] = ...) -> None: ...

class RedactedResponses(_message.Message):
    __slots__ = ("idempotency_key", "responses", "digest")
    class ResponsesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: RedactedResponse
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[RedactedResponse, _Mapping]] = ...) -> None: ...
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    idempotency_key: str
    responses: _containers.MessageMap[str, RedactedResponse]
    digest: str
    def __init__(self, idempotency_key: _Optional[str] = ..., responses: _Optional[_Mapping[str, RedactedResponse]] = ..., digest: _Optional[str] = ...) -> None: ...

class ElicitationRound(_message.Message):
    __slots__ = ("round_id", "execution_id", "logical_operation_id", "server", "operation_kind", "operation_name", "requests", "round_index", "round_limit", "status", "responses", "delivery_attempts", "create_time", "update_time", "deadline", "response_validate_time", "delivery_start_time", "deliver_time", "resolve_time", "fail_time", "failure_code", "failure_message")
    class RequestsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ElicitationRequest
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ElicitationRequest, _Mapping]] = ...) -> None: ...
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    LOGICAL_OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    SERVER_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KIND_FIELD_NUMBER: _ClassVar[int]
    OPERATION_NAME_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    ROUND_INDEX_FIELD_NUMBER: _ClassVar[int]
    ROUND_LIMIT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_VALIDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_START_TIME_FIELD_NUMBER: _ClassVar[int]
    DELIVER_TIME_FIELD_NUMBER: _ClassVar[int]
    RESOLVE_TIME_FIELD_NUMBER: _ClassVar[int]
    FAIL_TIME_FIELD_NUMBER: _ClassVar[int]
    FAILURE_CODE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    round_id: str
    execution_id: str
    logical_operation_id: str
    server: str
    operation_kind: _execution_pb2.OperationKind
    operation_name: str
    requests: _containers.MessageMap[str, ElicitationRequest]
    round_index: int
    round_limit: int
    status: ManagedInputStatus
    responses: RedactedResponses
    delivery_attempts: int
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    deadline: _timestamp_pb2.Timestamp
    response_validate_time: _timestamp_pb2.Timestamp
    delivery_start_time: _timestamp_pb2.Timestamp
    deliver_time: _timestamp_pb2.Timestamp
    resolve_time: _timestamp_pb2.Timestamp
    fail_time: _timestamp_pb2.Timestamp
    failure_code: str
    failure_message: str
    def __init__(self, round_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., logical_operation_id: _Optional[str] = ..., server: _Optional[str] = ..., operation_kind: _Optional[_Union[_execution_pb2.OperationKind, str]] = ..., operation_name: _Optional[str] = ..., requests: _Optional[_Mapping[str, ElicitationRequest]] = ..., round_index: _Optional[int] = ..., round_limit: _Optional[int] = ..., status: _Optional[_Union[ManagedInputStatus, str]] = ..., responses: _Optional[_Union[RedactedResponses, _Mapping]] = ..., delivery_attempts: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., response_validate_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delivery_start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., deliver_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., resolve_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., fail_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., failure_code: _Optional[str] = ..., failure_message: _Optional[str] = ...) -> None: ...
