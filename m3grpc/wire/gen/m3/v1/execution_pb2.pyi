import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HumanInput(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HUMAN_INPUT_UNSPECIFIED: _ClassVar[HumanInput]
    HUMAN_INPUT_FAIL: _ClassVar[HumanInput]
    HUMAN_INPUT_MANAGED: _ClassVar[HumanInput]

class OperationKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OPERATION_KIND_UNSPECIFIED: _ClassVar[OperationKind]
    OPERATION_KIND_TOOL: _ClassVar[OperationKind]
    OPERATION_KIND_PROMPT: _ClassVar[OperationKind]
    OPERATION_KIND_RESOURCE: _ClassVar[OperationKind]

class ExecutionStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXECUTION_STATUS_UNSPECIFIED: _ClassVar[ExecutionStatus]
    EXECUTION_STATUS_QUEUED: _ClassVar[ExecutionStatus]
    EXECUTION_STATUS_RUNNING: _ClassVar[ExecutionStatus]
    EXECUTION_STATUS_WAITING_FOR_INPUT: _ClassVar[ExecutionStatus]
    EXECUTION_STATUS_FINISHED: _ClassVar[ExecutionStatus]

class ExecutionOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXECUTION_OUTCOME_UNSPECIFIED: _ClassVar[ExecutionOutcome]
    EXECUTION_OUTCOME_SUCCEEDED: _ClassVar[ExecutionOutcome]
    EXECUTION_OUTCOME_FAILED: _ClassVar[ExecutionOutcome]
    EXECUTION_OUTCOME_CANCELLED: _ClassVar[ExecutionOutcome]

class PermissionPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PERMISSION_POLICY_UNSPECIFIED: _ClassVar[PermissionPolicy]
    PERMISSION_POLICY_DENY: _ClassVar[PermissionPolicy]
    PERMISSION_POLICY_ALLOW: _ClassVar[PermissionPolicy]
HUMAN_INPUT_UNSPECIFIED: HumanInput
HUMAN_INPUT_FAIL: HumanInput
HUMAN_INPUT_MANAGED: HumanInput
OPERATION_KIND_UNSPECIFIED: OperationKind
OPERATION_KIND_TOOL: OperationKind
OPERATION_KIND_PROMPT: OperationKind
OPERATION_KIND_RESOURCE: OperationKind
EXECUTION_STATUS_UNSPECIFIED: ExecutionStatus
EXECUTION_STATUS_QUEUED: ExecutionStatus
EXECUTION_STATUS_RUNNING: ExecutionStatus
EXECUTION_STATUS_WAITING_FOR_INPUT: ExecutionStatus
EXECUTION_STATUS_FINISHED: ExecutionStatus
EXECUTION_OUTCOME_UNSPECIFIED: ExecutionOutcome
EXECUTION_OUTCOME_SUCCEEDED: ExecutionOutcome
EXECUTION_OUTCOME_FAILED: ExecutionOutcome
EXECUTION_OUTCOME_CANCELLED: ExecutionOutcome
PERMISSION_POLICY_UNSPECIFIED: PermissionPolicy
PERMISSION_POLICY_DENY: PermissionPolicy
PERMISSION_POLICY_ALLOW: PermissionPolicy

class OperationStep(_message.Message):
    __slots__ = ("kind", "name", "arguments", "task", "task_ttl")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    TASK_TTL_FIELD_NUMBER: _ClassVar[int]
    kind: OperationKind
    name: str
    arguments: _struct_pb2.Struct
    task: bool
    task_ttl: _duration_pb2.Duration
    def __init__(self, kind: _Optional[_Union[OperationKind, str]] = ..., name: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., task: _Optional[bool] = ..., task_ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ElicitationPlan(_message.Message):
    __slots__ = ("rules",)
    RULES_FIELD_NUMBER: _ClassVar[int]
    rules: _containers.RepeatedCompositeFieldContainer[ElicitationRule]
    def __init__(self, rules: _Optional[_Iterable[_Union[ElicitationRule, _Mapping]]] = ...) -> None: ...

class ElicitationRule(_message.Message):
    __slots__ = ("operation_name", "request_key", "message_contains", "accept_content", "accept_defaults", "decline", "cancel")
    class AcceptDefaults(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    class Decline(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    class Cancel(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    OPERATION_NAME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_KEY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_CONTAINS_FIELD_NUMBER: _ClassVar[int]
    ACCEPT_CONTENT_FIELD_NUMBER: _ClassVar[int]
    ACCEPT_DEFAULTS_FIELD_NUMBER: _ClassVar[int]
    DECLINE_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    operation_name: str
    request_key: str
    message_contains: str
    accept_content: _struct_pb2.Struct
    accept_defaults: ElicitationRule.AcceptDefaults
    decline: ElicitationRule.Decline
    cancel: ElicitationRule.Cancel
    def __init__(self, operation_name: _Optional[str] = ..., request_key: _Optional[str] = ..., message_contains: _Optional[str] = ..., accept_content: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., accept_defaults: _Optional[_Union[ElicitationRule.AcceptDefaults, _Mapping]] = ..., decline: _Optional[_Union[ElicitationRule.Decline, _Mapping]] = ..., cancel: _Optional[_Union[ElicitationRule.Cancel, _Mapping]] = ...) -> None: ...

class AgentSpec(_message.Message):
    __slots__ = ("harness", "models", "prompt", "server", "tools", "script", "elicitation_plan", "permission_policy", "round_limit", "round_timeout")
    HARNESS_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    SERVER_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    SCRIPT_FIELD_NUMBER: _ClassVar[int]
    ELICITATION_PLAN_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_POLICY_FIELD_NUMBER: _ClassVar[int]
    ROUND_LIMIT_FIELD_NUMBER: _ClassVar[int]
    ROUND_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    harness: str
    models: _containers.RepeatedScalarFieldContainer[str]
    prompt: str
    server: str
    tools: _containers.RepeatedScalarFieldContainer[str]
    script: _containers.RepeatedCompositeFieldContainer[OperationStep]
    elicitation_plan: ElicitationPlan
    permission_policy: PermissionPolicy
    round_limit: int
    round_timeout: _duration_pb2.Duration
    def __init__(self, harness: _Optional[str] = ..., models: _Optional[_Iterable[str]] = ..., prompt: _Optional[str] = ..., server: _Optional[str] = ..., tools: _Optional[_Iterable[str]] = ..., script: _Optional[_Iterable[_Union[OperationStep, _Mapping]]] = ..., elicitation_plan: _Optional[_Union[ElicitationPlan, _Mapping]] = ..., permission_policy: _Optional[_Union[PermissionPolicy, str]] = ..., round_limit: _Optional[int] = ..., round_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class OperationSpec(_message.Message):
    __slots__ = ("server", "operation", "elicitation_plan", "round_limit")
    SERVER_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    ELICITATION_PLAN_FIELD_NUMBER: _ClassVar[int]
    ROUND_LIMIT_FIELD_NUMBER: _ClassVar[int]
    server: str
    operation: OperationStep
    elicitation_plan: ElicitationPlan
    round_limit: int
    def __init__(self, server: _Optional[str] = ..., operation: _Optional[_Union[OperationStep, _Mapping]] = ..., elicitation_plan: _Optional[_Union[ElicitationPlan, _Mapping]] = ..., round_limit: _Optional[int] = ...) -> None: ...

class ExecutionState(_message.Message):
    __slots__ = ("execution_id", "lifecycle", "outcome", "human_input", "create_time", "update_time", "finish_time", "failure_code", "failure_message")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    LIFECYCLE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    HUMAN_INPUT_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    FAILURE_CODE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    lifecycle: ExecutionStatus
    outcome: ExecutionOutcome
    human_input: HumanInput
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    finish_time: _timestamp_pb2.Timestamp
    failure_code: str
    failure_message: str
    def __init__(self, execution_id: _Optional[str] = ..., lifecycle: _Optional[_Union[ExecutionStatus, str]] = ..., outcome: _Optional[_Union[ExecutionOutcome, str]] = ..., human_input: _Optional[_Union[HumanInput, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., failure_code: _Optional[str] = ..., failure_message: _Optional[str] = ...) -> None: ...

class OperationResult(_message.Message):
    __slots__ = ("logical_operation_id", "server", "operation_kind", "operation_name", "ok", "result", "failure_code", "failure_message")
    LOGICAL_OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    SERVER_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KIND_FIELD_NUMBER: _ClassVar[int]
    OPERATION_NAME_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    FAILURE_CODE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    logical_operation_id: str
    server: str
    operation_kind: OperationKind
    operation_name: str
    ok: bool
    result: _struct_pb2.Struct
    failure_code: str
    failure_message: str
    def __init__(self, logical_operation_id: _Optional[str] = ..., server: _Optional[str] = ..., operation_kind: _Optional[_Union[OperationKind, str]] = ..., operation_name: _Optional[str] = ..., ok: _Optional[bool] = ..., result: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., failure_code: _Optional[str] = ..., failure_message: _Optional[str] = ...) -> None: ...

class ExecutionResult(_message.Message):
    __slots__ = ("execution_id", "outcome", "operations", "failure_code", "failure_message", "finish_time", "agent")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    FAILURE_CODE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    outcome: ExecutionOutcome
    operations: _containers.RepeatedCompositeFieldContainer[OperationResult]
    failure_code: str
    failure_message: str
    finish_time: _timestamp_pb2.Timestamp
    agent: AgentReport
    def __init__(self, execution_id: _Optional[str] = ..., outcome: _Optional[_Union[ExecutionOutcome, str]] = ..., operations: _Optional[_Iterable[_Union[OperationResult, _Mapping]]] = ..., failure_code: _Optional[str] = ..., failure_message: _Optional[str] = ..., finish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., agent: _Optional[_Union[AgentReport, _Mapping]] = ...) -> None: ...

class AgentReport(_message.Message):
    __slots__ = ("harness", "model", "session_id", "turn_id", "turn_status", "final_message", "token_usage", "native_prompts")
    class TokenUsageEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    HARNESS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_STATUS_FIELD_NUMBER: _ClassVar[int]
    FINAL_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_USAGE_FIELD_NUMBER: _ClassVar[int]
    NATIVE_PROMPTS_FIELD_NUMBER: _ClassVar[int]
    harness: str
    model: str
    session_id: str
    turn_id: str
    turn_status: str
    final_message: str
    token_usage: _containers.ScalarMap[str, int]
    native_prompts: _containers.RepeatedCompositeFieldContainer[NativePrompt]
    def __init__(self, harness: _Optional[str] = ..., model: _Optional[str] = ..., session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., turn_status: _Optional[str] = ..., final_message: _Optional[str] = ..., token_usage: _Optional[_Mapping[str, int]] = ..., native_prompts: _Optional[_Iterable[_Union[NativePrompt, _Mapping]]] = ...) -> None: ...

class NativePrompt(_message.Message):
    __slots__ = ("kind", "allowed", "detail")
    KIND_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    kind: str
    allowed: bool
    detail: str
    def __init__(self, kind: _Optional[str] = ..., allowed: _Optional[bool] = ..., detail: _Optional[str] = ...) -> None: ...
