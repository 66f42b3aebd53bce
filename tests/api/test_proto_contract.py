"""The m3.v1 wire contract: generated modules, error reasons, services, enums."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import (
    Descriptor,
    EnumDescriptor,
    FieldDescriptor,
    ServiceDescriptor,
)

from m3grpc import errors, types
from m3grpc.client import RemoteCallError
from m3grpc.wire.gen.m3.v1 import (
    elicitation_pb2,
    elicitation_service_pb2,
    elicitation_service_pb2_grpc,
    error_reason_pb2,
    execution_pb2,
    execution_service_pb2,
    execution_service_pb2_grpc,
)

ROOT = Path(__file__).resolve().parents[2]
GEN_DIR = ROOT / "m3grpc" / "wire" / "gen"
BASELINE = ROOT / "proto" / "baseline" / "m3.v1.binpb"

GENERATED_MODULES = [
    "m3grpc.wire.gen.m3.v1.error_reason_pb2",
    "m3grpc.wire.gen.m3.v1.execution_pb2",
    "m3grpc.wire.gen.m3.v1.elicitation_pb2",
    "m3grpc.wire.gen.m3.v1.execution_service_pb2",
    "m3grpc.wire.gen.m3.v1.execution_service_pb2_grpc",
    "m3grpc.wire.gen.m3.v1.elicitation_service_pb2",
    "m3grpc.wire.gen.m3.v1.elicitation_service_pb2_grpc",
]

# ErrorInfo reasons raised by the service layer rather than by an M3Error of
# m3grpc/errors.py.
SERVICE_LEVEL_REASONS = {
    "RESULT_WAIT_TIMEOUT",
    "WORK_QUEUE_FULL",
    "SERVER_BINDING_NOT_FOUND",
    "INTERNAL",
    "SERVICE_SHUTTING_DOWN",
    "UNAUTHENTICATED",
    "RATE_LIMITED",
}

REASON_PREFIX = "ERROR_REASON_"


def _subclasses(cls: type) -> set[type]:
    found: set[type] = set()
    for sub in cls.__subclasses__():
        found.add(sub)
        found |= _subclasses(sub)
    return found


def _wire_reasons() -> set[str]:
    enum = error_reason_pb2.DESCRIPTOR.enum_types_by_name["ErrorReason"]
    names = [v.name for v in enum.values if v.number != 0]
    assert all(name.startswith(REASON_PREFIX) for name in names)
    return {name.removeprefix(REASON_PREFIX) for name in names}


@pytest.mark.parametrize("module", GENERATED_MODULES)
def test_generated_module_imports(module: str) -> None:
    mod = importlib.import_module(module)
    assert mod.__name__ == module


def test_generated_code_uses_package_imports() -> None:
    for path in sorted(GEN_DIR.rglob("*.py*")):
        if path.suffix not in (".py", ".pyi"):
            continue
        for line in path.read_text().splitlines():
            assert not line.startswith(("from m3.v1 ", "import m3.v1")), f"{path}: {line}"


def test_error_reason_enum_matches_typed_errors() -> None:
    typed = {
        cls.reason
        for cls in _subclasses(errors.M3Error)
        if cls.__module__ == errors.__name__ and not cls.__name__.startswith("_")
    }
    assert typed, "no M3Error subclasses found"
    assert _wire_reasons() == typed | SERVICE_LEVEL_REASONS


def test_every_loaded_m3_error_reason_is_on_the_wire() -> None:
    # Subclasses defined outside m3grpc/errors.py (and imported by now) must
    # also use a documented reason; the client's RemoteCallError has none (it
    # stands for statuses without a known reason), and the CLI's own errors
    # (m3grpc.cli_remote.exits: a local wait ran out, bad arguments) never
    # cross the wire: their reasons are only printed.
    wire = _wire_reasons()
    for cls in _subclasses(errors.M3Error):
        if cls.__name__.startswith("_") or cls is RemoteCallError:
            continue
        if cls.__module__.startswith("m3grpc.cli_remote."):
            continue
        assert cls.reason in wire, f"{cls.__qualname__}.reason {cls.reason!r} not in ErrorReason"


def test_error_reason_comments_name_the_wire_reason() -> None:
    # Every value documents its wire string (checked on the proto source).
    source = (ROOT / "proto" / "m3" / "v1" / "error_reason.proto").read_text()
    for reason in _wire_reasons():
        assert f'Wire reason: "{reason}"' in source
        assert f'"reason": "{reason}"' in source
    assert errors.ERROR_DOMAIN == "m3grpc.dev"
    assert f'"domain": "{errors.ERROR_DOMAIN}"' in source


def _methods(service: ServiceDescriptor) -> dict[str, tuple[str, str, bool, bool]]:
    return {
        m.name: (
            m.input_type.full_name,
            m.output_type.full_name,
            m.client_streaming,
            m.server_streaming,
        )
        for m in service.methods
    }


def test_execution_service_methods() -> None:
    service = execution_service_pb2.DESCRIPTOR.services_by_name["ExecutionService"]
    assert service.full_name == "m3.v1.ExecutionService"
    expected = {
        name: (f"m3.v1.{name}Request", f"m3.v1.{name}Response", False, name == "WatchPending")
        for name in ("Submit", "Snapshot", "Result", "Cancel", "WatchPending", "ListServers")
    }
    assert _methods(service) == expected


def test_elicitation_service_methods() -> None:
    service = elicitation_service_pb2.DESCRIPTOR.services_by_name["ElicitationService"]
    assert service.full_name == "m3.v1.ElicitationService"
    expected = {
        name: (f"m3.v1.{name}Request", f"m3.v1.{name}Response", False, False)
        for name in ("GetPending", "Respond", "GetRound", "ListRounds")
    }
    assert _methods(service) == expected


def test_grpc_stubs_and_servicers_exist() -> None:
    for mod, name in (
        (execution_service_pb2_grpc, "ExecutionService"),
        (elicitation_service_pb2_grpc, "ElicitationService"),
    ):
        assert hasattr(mod, f"{name}Stub")
        assert hasattr(mod, f"{name}Servicer")
        assert hasattr(mod, f"add_{name}Servicer_to_server")


def _enum_suffixes(enum: EnumDescriptor, prefix: str) -> set[str]:
    return {v.name.removeprefix(prefix) for v in enum.values if v.number != 0}


def test_enums_mirror_the_domain_model() -> None:
    execution_enums = execution_pb2.DESCRIPTOR.enum_types_by_name
    elicitation_enums = elicitation_pb2.DESCRIPTOR.enum_types_by_name
    pairs: list[tuple[EnumDescriptor, str, set[str]]] = [
        (
            execution_enums["ExecutionStatus"],
            "EXECUTION_STATUS_",
            {m.name for m in types.ExecutionStatus},
        ),
        (
            execution_enums["ExecutionOutcome"],
            "EXECUTION_OUTCOME_",
            {m.name for m in types.ExecutionOutcome},
        ),
        (
            elicitation_enums["ManagedInputStatus"],
            "MANAGED_INPUT_STATUS_",
            {m.name for m in types.ManagedInputStatus},
        ),
        (
            execution_enums["HumanInput"],
            "HUMAN_INPUT_",
            {v.upper() for v in typing.get_args(types.HumanInput)},
        ),
        (
            execution_enums["OperationKind"],
            "OPERATION_KIND_",
            {v.upper() for v in typing.get_args(types.OperationKind)},
        ),
        (
            elicitation_enums["ElicitationAction"],
            "ELICITATION_ACTION_",
            {v.upper() for v in typing.get_args(types.ElicitationAction)},
        ),
    ]
    for enum, prefix, domain in pairs:
        assert enum.values_by_number[0].name == f"{prefix}UNSPECIFIED"
        assert _enum_suffixes(enum, prefix) == domain, enum.full_name


def test_pending_round_carries_every_seed_field() -> None:
    fields = set(elicitation_pb2.PendingElicitationRound.DESCRIPTOR.fields_by_name)
    # The seed's names, with AIP-142 time names on the wire.
    renamed = {"created_at": "create_time"}
    seed = {renamed.get(name, name) for name in types.PendingElicitationRound.model_fields}
    assert seed <= fields
    assert {"round_index", "round_limit"} <= fields
    requests = elicitation_pb2.PendingElicitationRound.DESCRIPTOR.fields_by_name["requests"]
    assert requests.message_type.GetOptions().map_entry
    value = requests.message_type.fields_by_name["value"].message_type
    assert value.full_name == "m3.v1.ElicitationRequest"
    assert set(value.oneofs_by_name["mode"].fields) == {
        value.fields_by_name["form"],
        value.fields_by_name["url"],
    }


def test_redacted_round_has_no_content_values() -> None:
    # The durable record exposes actions and keys, never response content.
    def message_fields(
        desc: Descriptor, seen: set[str] | None = None
    ) -> Iterator[tuple[str, FieldDescriptor]]:
        seen = seen if seen is not None else set()
        if desc.full_name in seen:
            return
        seen.add(desc.full_name)
        for field in desc.fields:
            yield desc.full_name, field
            if field.message_type is not None:
                yield from message_fields(field.message_type, seen)

    responses = elicitation_pb2.RedactedResponses.DESCRIPTOR
    for owner, field in message_fields(responses):
        assert field.name != "content", owner
        assert field.message_type is None or field.message_type.full_name != (
            "google.protobuf.Struct"
        ), f"{owner}.{field.name}"
    record = elicitation_pb2.ElicitationRound.DESCRIPTOR.fields_by_name
    assert record["responses"].message_type is responses
    assert "request_state" not in record
    assert not any("lease" in name for name in record)


def test_watch_pending_events() -> None:
    desc = execution_service_pb2.WatchPendingResponse.DESCRIPTOR
    event = {f.name: f.message_type.full_name for f in desc.oneofs_by_name["event"].fields}
    assert event == {
        "round_pending": "m3.v1.PendingElicitationRound",
        "round_left_pending": "m3.v1.RoundLeftPending",
        "execution_finished": "m3.v1.ExecutionState",
    }
    assert desc.fields_by_name["cursor"].type == desc.fields_by_name["cursor"].TYPE_STRING


def test_list_rounds_is_paginated() -> None:
    request = elicitation_service_pb2.ListRoundsRequest.DESCRIPTOR.fields_by_name
    response = elicitation_service_pb2.ListRoundsResponse.DESCRIPTOR.fields_by_name
    assert {"page_size", "page_token", "execution_id", "statuses"} <= set(request)
    assert "next_page_token" in response


def test_messages_round_trip() -> None:
    request = execution_service_pb2.SubmitRequest(
        agent=execution_pb2.AgentSpec(
            harness="scripted",
            server="shipping",
            tools=["shipping:book_shipment"],
            script=[
                execution_pb2.OperationStep(
                    kind=execution_pb2.OPERATION_KIND_TOOL, name="book_shipment"
                )
            ],
        ),
        human_input=execution_pb2.HUMAN_INPUT_MANAGED,
        request_id="2f1c6a4e-0000-4000-8000-000000000001",
    )
    request.agent.script[0].arguments.update({"weight_kg": 2.5})
    decoded = execution_service_pb2.SubmitRequest.FromString(request.SerializeToString())
    assert decoded == request
    assert decoded.WhichOneof("spec") == "agent"
    assert decoded.agent.script[0].arguments["weight_kg"] == 2.5


def test_baseline_image_holds_the_contract() -> None:
    image = descriptor_pb2.FileDescriptorSet.FromString(BASELINE.read_bytes())
    files = {f.name: f for f in image.file}
    assert {
        "m3/v1/error_reason.proto",
        "m3/v1/execution.proto",
        "m3/v1/elicitation.proto",
        "m3/v1/execution_service.proto",
        "m3/v1/elicitation_service.proto",
    } <= set(files)
    services = {s.name for f in files.values() for s in f.service}
    assert {"ExecutionService", "ElicitationService"} <= services


def test_generated_python_is_up_to_date(tmp_path: Path) -> None:
    """buf.gen.yaml's Python plugin, run into a scratch directory, gives the committed code."""
    buf = subprocess.run(
        ["bash", str(ROOT / "scripts" / "install-buf.sh")],
        check=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # buf.gen.yaml's inputs and managed mode (it sets go_package, which the
    # Python code embeds in its descriptors), with only the Python plugin.
    template = {
        "version": "v2",
        "inputs": [{"directory": "proto"}],
        "managed": {
            "enabled": True,
            "override": [
                {
                    "file_option": "go_package_prefix",
                    "value": "github.com/m3grpc/m3grpc/clients/go/gen",
                }
            ],
        },
        "plugins": [
            {
                "local": [sys.executable, "scripts/protoc-gen-m3-python"],
                "out": str(tmp_path / "gen"),
                "strategy": "all",
            }
        ],
    }
    subprocess.run(
        [buf, "generate", "--template", json.dumps(template)],
        check=True,
        cwd=ROOT,
        capture_output=True,
    )

    def tree(base: Path) -> dict[str, bytes]:
        return {
            str(p.relative_to(base)): p.read_bytes()
            for p in sorted(base.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts
        }

    assert tree(tmp_path / "gen") == tree(GEN_DIR), (
        "m3grpc/wire/gen is stale: run scripts/gen-proto.sh"
    )
