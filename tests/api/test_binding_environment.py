"""What a binding's subprocess inherits, black-box: `m3grpc serve` runs with
secrets in its own environment (a token, cloud and model provider keys, a
database URL with a password) and in its configuration (a token's plaintext in
its environment, an HTTP binding's Authorization header); a stdio binding runs
tests/mcp_servers/environment.py, whose tool reports its environment, command
line and working directory.

The subprocess gets only the MCP SDK's minimal environment (HOME, LOGNAME,
PATH, SHELL, TERM, USER; Python adds LC_CTYPE itself under the C locale) plus
what its binding lists, and nothing a client sends (tool arguments, request
ID, binding name) reaches its environment, command line or working directory.
A client naming a program instead of a binding gets SERVER_BINDING_NOT_FOUND
and nothing is stored.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from m3grpc.api.auth import token_hash
from m3grpc.devtools.serve_process import ServeProcess
from m3grpc.wire.gen.m3.v1 import execution_pb2, execution_service_pb2
from tests.api.conftest import SERVERS, Stubs, add_servers, expect_failure, write_config

TOKEN = "canary-token-plaintext-5b0e"
SERVICE_SECRETS = {
    "M3_TOKEN": TOKEN,
    "AWS_SECRET_ACCESS_KEY": "canary-aws-secret-9d41",
    "OPENAI_API_KEY": "canary-openai-key-77c2",
    "M3_DATABASE_URL": "postgresql://m3:canary-db-password@127.0.0.1/m3",
    "GITHUB_TOKEN": "canary-github-token-e13a",
}
HEADER_SECRET = "Bearer canary-header-secret-40f1"
LISTED = {"BINDING_LISTED": "listed-value", "LOG_LEVEL": "warning"}
CLIENT_CANARY = "client-canary-a7 --flag $(id) ../../etc/passwd"
SDK_MINIMAL = {"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LC_CTYPE"}
CALL = (("authorization", f"Bearer {TOKEN}"),)


def _assignments(values: dict[str, str]) -> str:
    return "".join(f"{key} = {json.dumps(value)}\n" for key, value in values.items())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    tmp = tmp_path_factory.mktemp("binding-env")
    config = write_config(tmp / "m3.toml", tmp / "m3.sqlite")
    add_servers(
        config,
        {
            "environment": {
                "command": sys.executable,
                "args": [str(SERVERS / "environment.py")],
            },
            # Never contacted: its header is a secret of the configuration.
            "remote": {"url": "http://127.0.0.1:9/mcp"},
        },
    )
    # Appended to the last tables add_servers wrote: TOML dotted keys, as tables.
    text = config.read_text().replace(
        "[servers.remote]\n",
        f"[servers.environment.env]\n{_assignments(LISTED)}[servers.remote]\n",
    )
    text += f"[servers.remote.headers]\n{_assignments({'Authorization': HEADER_SECRET})}"
    config.write_text(text)
    with config.open("a") as out:
        out.write(f'[[auth.tokens]]\nprincipal = "alice"\nhash = "{token_hash(TOKEN)}"\n')
    env = {**os.environ, **SERVICE_SECRETS}
    process = ServeProcess(config, log=tmp / "server.log", env=env).start()
    try:
        yield process
    finally:
        process.terminate()


@pytest.fixture
def stubs(server: ServeProcess) -> Iterator[Stubs]:
    client = Stubs(grpc.insecure_channel(server.address))
    yield client
    client.close()


def _describe_process(stubs: Stubs) -> dict[str, Any]:
    operation = execution_pb2.OperationSpec(
        server="environment",
        operation=execution_pb2.OperationStep(
            kind=execution_pb2.OPERATION_KIND_TOOL, name="describe_process"
        ),
    )
    operation.operation.arguments.update({"note": CLIENT_CANARY})
    submitted = stubs.executions.Submit(
        execution_service_pb2.SubmitRequest(
            operation=operation,
            human_input=execution_pb2.HUMAN_INPUT_FAIL,
            request_id=CLIENT_CANARY,
        ),
        timeout=30,
        metadata=CALL,
    )
    result = stubs.executions.Result(
        execution_service_pb2.ResultRequest(execution_id=submitted.execution_id),
        timeout=120,
        metadata=CALL,
    ).result
    assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED, result
    described: dict[str, Any] = json.loads(
        result.operations[0].result["structuredContent"]["result"]
    )
    return described


def test_a_binding_gets_only_the_minimal_environment_and_what_it_lists(stubs: Stubs) -> None:
    described = _describe_process(stubs)
    environ: dict[str, str] = described["environ"]
    assert set(environ) <= SDK_MINIMAL | set(LISTED), sorted(set(environ) - SDK_MINIMAL)
    for name, value in LISTED.items():
        assert environ[name] == value
    everything = json.dumps(described)
    for secret in (*SERVICE_SECRETS.values(), HEADER_SECRET, "canary"):
        assert secret not in everything
    assert not set(SERVICE_SECRETS) & set(environ)
    # The command line is the binding's, exactly; the client's text reached neither
    # it, nor the environment, nor the working directory (the service's).
    assert described["argv"] == [str(SERVERS / "environment.py")]
    assert "client-canary" not in everything


def test_a_client_cannot_name_a_program_instead_of_a_binding(
    stubs: Stubs, server: ServeProcess
) -> None:
    database = Path(server.config).parent / "m3.sqlite"

    def stored() -> int:
        with sqlite3.connect(database) as db:
            return int(db.execute("SELECT count(*) FROM m3_executions").fetchone()[0])

    before = stored()
    for name in (sys.executable, "sh -c id", "../../bin/sh", str(SERVERS / "environment.py")):
        operation = execution_pb2.OperationSpec(
            server=name,
            operation=execution_pb2.OperationStep(
                kind=execution_pb2.OPERATION_KIND_TOOL, name="describe_process"
            ),
        )
        failure = expect_failure(
            stubs.executions.Submit,
            execution_service_pb2.SubmitRequest(operation=operation),
            timeout=30,
            metadata=CALL,
        )
        assert failure.code == grpc.StatusCode.NOT_FOUND
        assert failure.info.reason == "SERVER_BINDING_NOT_FOUND"
    assert stored() == before
