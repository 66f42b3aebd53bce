"""The one mapping of model-field violations to request paths (m3grpc/api/request_paths.py):
what the model layer names (specs, submission checks, response validation),
now and later, comes out as a path into the request that walks to a proto field."""

from __future__ import annotations

import pytest

from m3grpc import fieldpath
from m3grpc.api.request_paths import violations_for
from m3grpc.errors import FieldViolation
from m3grpc.wire.gen.m3.v1 import elicitation_service_pb2, execution_pb2, execution_service_pb2

from .pathwalk import assert_request_path

AGENT = execution_service_pb2.SubmitRequest(agent=execution_pb2.AgentSpec(harness="scripted"))
OPERATION = execution_service_pb2.SubmitRequest(operation=execution_pb2.OperationSpec())
RESPOND = elicitation_service_pb2.RespondRequest(round_id="r")


@pytest.mark.parametrize(
    ("request_message", "model_path", "request_path"),
    [
        (AGENT, "round_timeout_seconds", "agent.round_timeout"),
        (AGENT, "prompt", "agent.prompt"),
        (AGENT, "models[3]", "agent.models[3]"),
        (AGENT, "tools[1]", "agent.tools[1]"),
        (AGENT, "script.0.name", "agent.script[0].name"),
        (AGENT, "script[0].arguments.a b", "agent.script[0].arguments['a b']"),
        (
            AGENT,
            "elicitation_plan.rules[2].content",
            "agent.elicitation_plan.rules[2].accept_content",
        ),
        (
            AGENT,
            "elicitation_plan.rules[2].use_schema_defaults",
            "agent.elicitation_plan.rules[2].accept_defaults",
        ),
        (AGENT, "elicitation_plan.rules[0].action", "agent.elicitation_plan.rules[0].answer"),
        (
            AGENT,
            "elicitation_plan.rules[0].message_contains",
            "agent.elicitation_plan.rules[0].message_contains",
        ),
        (AGENT, "permission_policy.default", "agent.permission_policy"),
        (AGENT, "server.command", "agent.server"),
        (AGENT, "kind", "agent"),
        (AGENT, "store", "human_input"),
        (AGENT, "human_input", "human_input"),
        (AGENT, "spec", "spec"),
        (AGENT, "agent.tools[1]", "agent.tools[1]"),  # already a request path
        (OPERATION, "operation.kind", "operation.operation.kind"),
        (OPERATION, "operation.operation.kind", "operation.operation.kind"),
        (OPERATION, "server", "operation.server"),
        (OPERATION, "round_limit", "operation.round_limit"),
        (RESPOND, "responses['k'].content.street", "responses['k'].content.street"),
        (RESPOND, "responses[k].action", "responses['k'].action"),
        (RESPOND, 'responses["it\'s"]', "responses['it\\'s']"),
        (RESPOND, "idempotency_key", "idempotency_key"),
    ],
)
def test_model_paths_become_request_paths(
    request_message: object, model_path: str, request_path: str
) -> None:
    assert isinstance(
        request_message,
        execution_service_pb2.SubmitRequest | elicitation_service_pb2.RespondRequest,
    )
    (mapped,) = violations_for(request_message, [FieldViolation(model_path, "x")])
    assert mapped.field == request_path
    assert_request_path(request_message.DESCRIPTOR, mapped.field)


def test_long_keys_are_cut_and_still_parse() -> None:
    key = "é" * 500
    (mapped,) = violations_for(RESPOND, [FieldViolation(f"responses{fieldpath.key(key)}", "x")])
    assert len(mapped.field.encode()) < 100
    assert mapped.field.endswith("...(500 chars)']")
    assert_request_path(RESPOND.DESCRIPTOR, mapped.field)


def test_fieldpath_round_trip() -> None:
    for path in ("a.b[2]['k\\'ey'].c", "responses['x y'].content['1st'].z"):
        assert fieldpath.join(fieldpath.parse(path)) == path
