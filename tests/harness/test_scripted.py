"""The scripted harness against real MCP servers (tests/mcp_servers) as subprocesses.

Most tests use stdio; the HTTP tests start a Streamable HTTP server on a free
127.0.0.1 port. Each test's resolver is a plain async function that records
the rounds it got and answers them.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import mcp_types as t
import pytest

from m3grpc.errors import ManagedInputStateError, OperationTimeout
from m3grpc.harness import (
    HarnessTask,
    InputRound,
    OperationStep,
    ScriptedHarness,
)
from m3grpc.harness.request_keys import legacy_request_key, mrtr_request_keys, snake_case
from m3grpc.servers import HttpServer, ServerBinding, StdioServer, server_binding_adapter
from m3grpc.types import (
    ElicitationResponse,
    FormElicitationRequest,
    OperationResult,
    UrlElicitationRequest,
)
from tests.support.mcp_processes import http_mcp_server

SERVERS = Path(__file__).resolve().parents[1] / "mcp_servers"
ADDRESS = {"street": "1 Main Street", "city": "Pune"}
BOOKED = "booked shipment to 1 Main Street, Pune"
VARIANTS = ["legacy", "mrtr"]

Answer = Callable[[InputRound], Awaitable[Mapping[str, ElicitationResponse]]]


# --- helpers ---------------------------------------------------------------------


def stdio(script: str, variant: str, *, pid_file: Path | None = None) -> StdioServer:
    args = [str(SERVERS / f"{script}.py"), "--variant", variant]
    if pid_file is not None:
        args += ["--pid-file", str(pid_file)]
    return StdioServer(name=script, command=sys.executable, args=args)


def make_task(
    server: ServerBinding,
    script: list[OperationStep] | None,
    *,
    tools: list[str] | None = None,
    round_limit: int = 8,
) -> HarnessTask:
    if tools is None:
        tools = [f"{server.name}:{step.name}" for step in script or [] if step.kind == "tool"]
    return HarnessTask(
        execution_id="exec-1",
        prompt="Ask for the delivery address, then book the shipment.",
        server=server,
        tools=tools,
        script=script,
        round_limit=round_limit,
    )


def tool(name: str, **arguments: Any) -> OperationStep:
    return OperationStep("tool", name, arguments)


class Recorder:
    """A resolver that records every round and answers with `answer`."""

    def __init__(self, answer: Answer) -> None:
        self.rounds: list[InputRound] = []
        self._answer = answer

    async def __call__(self, round: InputRound) -> Mapping[str, ElicitationResponse]:
        self.rounds.append(round)
        return await self._answer(round)


def reply_with(response: ElicitationResponse) -> Recorder:
    async def answer(round: InputRound) -> Mapping[str, ElicitationResponse]:
        return dict.fromkeys(round.requests, response)

    return Recorder(answer)


async def answer_forms(round: InputRound) -> Mapping[str, ElicitationResponse]:
    """Accept every request with content fitting its schema."""
    responses: dict[str, ElicitationResponse] = {}
    for key, request in round.requests.items():
        if isinstance(request, UrlElicitationRequest):
            responses[key] = ElicitationResponse(action="accept")
            continue
        properties = request.requested_schema["properties"]
        if "confirm" in properties:
            content: dict[str, Any] = {"confirm": True}
        elif "answer" in properties:
            content = {"answer": f"answer {round.round_index}"}
        else:
            content = ADDRESS
        responses[key] = ElicitationResponse(action="accept", content=content)
    return responses


def text_of(result: OperationResult) -> str:
    data = result.result
    assert data is not None, result
    if result.operation_kind == "tool":
        return str(data["content"][0]["text"])
    if result.operation_kind == "prompt":
        return str(data["messages"][0]["content"]["text"])
    return str(data["contents"][0]["text"])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    # A zombie has exited; only its exit status is left to collect.
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


def pid_from(pid_file: Path) -> int:
    return int(pid_file.read_text())


# --- legacy elicitation (elicitation/create, the call is held open) ---------------


async def test_legacy_accept_books_shipment() -> None:
    resolver = reply_with(ElicitationResponse(action="accept", content=ADDRESS))
    task = make_task(stdio("shipping", "legacy"), [tool("book_shipment")])

    [result] = await ScriptedHarness().run(task, resolver)

    assert result.ok, result
    assert text_of(result) == BOOKED
    assert (result.logical_operation_id, result.server, result.operation_name) == (
        "op-0",
        "shipping",
        "book_shipment",
    )
    [round] = resolver.rounds
    assert (round.protocol, round.round_index, round.request_state) == ("legacy", 0, None)
    assert round.operation.logical_operation_id == "op-0"
    request = round.requests["shipping_address"]
    assert isinstance(request, FormElicitationRequest)
    assert request.message == "Where should the shipment go?"
    assert request.requested_schema["required"] == ["street", "city"]
    assert (request.server, request.operation_kind, request.operation_name) == (
        "shipping",
        "tool",
        "book_shipment",
    )


async def test_legacy_decline_and_cancel_reach_the_server() -> None:
    responses = iter([ElicitationResponse(action="decline"), ElicitationResponse(action="cancel")])

    async def refuse(round: InputRound) -> Mapping[str, ElicitationResponse]:
        return {"shipping_address": next(responses)}

    task = make_task(stdio("shipping", "legacy"), [tool("book_shipment"), tool("book_shipment")])

    declined, cancelled = await ScriptedHarness().run(task, Recorder(refuse))

    assert declined.ok and text_of(declined) == "shipment not booked: declined"
    assert cancelled.ok and text_of(cancelled) == "shipment not booked: cancelled"
    assert declined.logical_operation_id == "op-0" and cancelled.logical_operation_id == "op-1"


# --- 2026-07-28 multi round-trip (InputRequiredResult) -------------------------------


async def test_mrtr_accept_passes_request_state_through() -> None:
    resolver = reply_with(ElicitationResponse(action="accept", content=ADDRESS))
    task = make_task(stdio("shipping", "mrtr"), [tool("book_shipment")])

    [result] = await ScriptedHarness().run(task, resolver)

    assert result.ok and text_of(result) == BOOKED
    [round] = resolver.rounds
    assert (round.protocol, round.round_index) == ("mrtr", 0)
    assert round.request_state  # the server's sealed state, kept for the retry
    assert list(round.requests) == ["shipping_address"]
    request = round.requests["shipping_address"]
    assert isinstance(request, FormElicitationRequest)
    assert set(request.requested_schema["properties"]) == {"street", "city"}
    assert request.operation_name == "book_shipment"


async def test_mrtr_decline_reaches_the_server() -> None:
    task = make_task(stdio("shipping", "mrtr"), [tool("book_shipment")])

    [result] = await ScriptedHarness().run(task, reply_with(ElicitationResponse(action="decline")))

    assert text_of(result) == "shipment not booked: declined"


@pytest.mark.parametrize("variant", VARIANTS)
async def test_two_rounds_in_one_operation(variant: str) -> None:
    resolver = Recorder(answer_forms)
    task = make_task(stdio("shipping", variant), [tool("book_confirmed_shipment")])

    [result] = await ScriptedHarness().run(task, resolver)

    assert result.ok and text_of(result) == BOOKED
    assert [r.round_index for r in resolver.rounds] == [0, 1]
    assert [list(r.requests) for r in resolver.rounds] == [["shipping_address"], ["confirmation"]]
    assert {r.operation.logical_operation_id for r in resolver.rounds} == {"op-0"}
    second = resolver.rounds[1].requests["confirmation"]
    assert isinstance(second, FormElicitationRequest) and second.message == "Ship to Pune?"
    if variant == "mrtr":
        states = [r.request_state for r in resolver.rounds]
        assert all(states) and states[0] != states[1]


@pytest.mark.parametrize("variant", VARIANTS)
async def test_round_limit_fails_the_operation_and_the_script_goes_on(variant: str) -> None:
    resolver = Recorder(answer_forms)
    script = [tool("keep_asking"), tool("quote")]
    task = make_task(stdio("shipping", variant), script, round_limit=2)

    asking, quote = await ScriptedHarness().run(task, resolver)

    assert not asking.ok
    assert asking.failure_code == "round_limit_exceeded"
    assert [r.round_index for r in resolver.rounds] == [0, 1]  # no call for a third round
    assert quote.ok and text_of(quote) == "quote for 2.5 kg"


# --- URL mode, prompts, resources ------------------------------------------------------


@pytest.mark.parametrize(
    ("variant", "key"), [("legacy", "payment-authorization"), ("mrtr", "payment_authorization")]
)
async def test_url_mode_records_consent_only(variant: str, key: str) -> None:
    async def consent(round: InputRound) -> Mapping[str, ElicitationResponse]:
        first = round.operation.logical_operation_id == "op-0"
        return {key: ElicitationResponse(action="accept" if first else "decline")}

    resolver = Recorder(consent)
    script = [tool("authorize_payment"), tool("authorize_payment", amount=5)]
    task = make_task(stdio("payment", variant), script)

    accepted, declined = await ScriptedHarness().run(task, resolver)

    assert accepted.ok and text_of(accepted) == "payment authorized: 10.0"
    assert declined.ok and text_of(declined) == "payment not authorized: decline"
    request = resolver.rounds[0].requests[key]
    assert isinstance(request, UrlElicitationRequest)
    assert request.url == "https://pay.example.test/authorize"
    assert request.elicitation_id == key
    assert request.operation_name == "authorize_payment"
    assert resolver.rounds[1].operation.arguments == {"amount": 5}


@pytest.mark.parametrize("variant", VARIANTS)
async def test_prompt_and_resource_elicit(variant: str) -> None:
    resolver = Recorder(answer_forms)
    script = [
        OperationStep("prompt", "shipping_label"),
        OperationStep("resource", "shipment://s-7/address"),
    ]
    task = make_task(stdio("shipping", variant), script)

    prompt, resource = await ScriptedHarness().run(task, resolver)

    assert prompt.ok and text_of(prompt) == "Label: 1 Main Street, Pune"
    assert resource.ok and text_of(resource) == "s-7: 1 Main Street, Pune"
    assert [(r.operation.operation_kind, r.protocol) for r in resolver.rounds] == [
        ("prompt", variant),
        ("resource", variant),
    ]
    assert [list(r.requests) for r in resolver.rounds] == [["shipping_address"]] * 2
    resource_request = resolver.rounds[1].requests["shipping_address"]
    assert resource_request.operation_kind == "resource"
    assert resource_request.operation_name == "shipment://s-7/address"


# --- tool selection --------------------------------------------------------------------


async def test_unselected_tool_is_refused_without_contacting_the_server(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    resolver = Recorder(answer_forms)
    task = make_task(
        stdio("shipping", "legacy", pid_file=pid_file),
        [tool("book_shipment")],
        tools=["shipping:quote", "other:book_shipment"],
    )

    [result] = await ScriptedHarness().run(task, resolver)

    assert not result.ok and result.failure_code == "tool_not_selected"
    assert resolver.rounds == []
    assert not pid_file.exists()  # the server was never started


async def test_unlisted_tool_and_tool_error_fail_their_operations() -> None:
    script = [tool("track_parcel"), tool("quote", weight_kg="heavy"), tool("quote")]
    task = make_task(stdio("shipping", "legacy"), script)

    missing, error, quote = await ScriptedHarness().run(task, Recorder(answer_forms))

    assert not missing.ok and missing.failure_code == "tool_not_found"
    assert not error.ok and error.failure_code == "tool_error"
    assert error.result is not None and error.result["isError"] is True
    assert error.failure_message and "weight_kg" in error.failure_message
    assert quote.ok and text_of(quote) == "quote for 2.5 kg"


async def test_without_script_each_selected_tool_runs_once() -> None:
    resolver = Recorder(answer_forms)
    task = make_task(
        stdio("shipping", "legacy"),
        None,
        tools=["shipping:quote", "other:quote", "shipping:book_shipment", "shipping:quote"],
    )

    results = await ScriptedHarness().run(task, resolver)

    assert [(r.logical_operation_id, r.operation_name) for r in results] == [
        ("op-0", "quote"),
        ("op-1", "book_shipment"),
    ]
    assert [text_of(r) for r in results] == ["quote for 2.5 kg", BOOKED]


async def test_without_script_arguments_come_from_schema_defaults() -> None:
    resolver = reply_with(ElicitationResponse(action="accept"))
    task = make_task(stdio("payment", "legacy"), None, tools=["payment:authorize_payment"])

    [result] = await ScriptedHarness().run(task, resolver)

    assert result.ok
    assert resolver.rounds[0].operation.arguments == {"amount": 10.0}


# --- resolver failures, cancellation, cleanup -------------------------------------------


@pytest.mark.parametrize(
    ("variant", "error", "code"),
    [
        ("legacy", OperationTimeout("round deadline passed"), "operation_timeout"),
        ("mrtr", OperationTimeout("round deadline passed"), "operation_timeout"),
        ("mrtr", ManagedInputStateError("round is failed"), "managed_input_state_invalid"),
    ],
)
async def test_resolver_m3_error_fails_operation_stops_script_and_server(
    variant: str, error: Exception, code: str, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"

    async def fail(round: InputRound) -> Mapping[str, ElicitationResponse]:
        raise error

    task = make_task(
        stdio("shipping", variant, pid_file=pid_file), [tool("book_shipment"), tool("quote")]
    )

    results = await ScriptedHarness().run(task, Recorder(fail))

    [result] = results  # quote never ran
    assert not result.ok
    assert result.failure_code == code
    assert result.failure_message == str(error)
    assert not alive(pid_from(pid_file))


async def test_resolver_bug_propagates_and_server_exits(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"

    async def buggy(round: InputRound) -> Mapping[str, ElicitationResponse]:
        raise KeyError("oops")

    task = make_task(stdio("shipping", "legacy", pid_file=pid_file), [tool("book_shipment")])

    with pytest.raises(KeyError, match="oops"):
        await ScriptedHarness().run(task, Recorder(buggy))
    assert not alive(pid_from(pid_file))


async def test_wrong_response_keys_fail_the_operation() -> None:
    async def wrong(round: InputRound) -> Mapping[str, ElicitationResponse]:
        return {"address": ElicitationResponse(action="accept", content=ADDRESS)}

    task = make_task(stdio("shipping", "legacy"), [tool("book_shipment"), tool("quote")])

    failed, quote = await ScriptedHarness().run(task, Recorder(wrong))

    assert failed.failure_code == "invalid_input_response"
    assert failed.failure_message and "shipping_address" in failed.failure_message
    assert quote.ok


@pytest.mark.parametrize("variant", VARIANTS)
async def test_cancelling_the_run_cancels_the_resolver_and_stops_the_server(
    variant: str, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    waiting = asyncio.Event()
    resolver_cancelled = asyncio.Event()

    async def wait_forever(round: InputRound) -> Mapping[str, ElicitationResponse]:
        waiting.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            resolver_cancelled.set()
            raise
        raise AssertionError("unreachable")

    task = make_task(stdio("shipping", variant, pid_file=pid_file), [tool("book_shipment")])
    run = asyncio.create_task(ScriptedHarness().run(task, Recorder(wait_forever)))
    await asyncio.wait_for(waiting.wait(), timeout=15)
    pid = pid_from(pid_file)
    assert alive(pid)

    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(run, timeout=15)

    assert resolver_cancelled.is_set()
    assert not alive(pid)


async def test_mrtr_answer_after_request_state_expiry_is_reported() -> None:
    async def late(round: InputRound) -> Mapping[str, ElicitationResponse]:
        await asyncio.sleep(1.2)
        return {"shipping_address": ElicitationResponse(action="accept", content=ADDRESS)}

    server = stdio("shipping", "mrtr")
    server = server.model_copy(update={"args": (*server.args, "--state-ttl", "1")})
    task = make_task(server, [tool("book_shipment")])

    [result] = await ScriptedHarness().run(task, Recorder(late))

    assert not result.ok and result.failure_code == "request_state_rejected"


async def test_unstartable_server_is_reported() -> None:
    server = StdioServer(name="shipping", command=str(SERVERS / "no-such-server"))
    task = make_task(server, [tool("book_shipment"), tool("quote")])

    [result] = await ScriptedHarness().run(task, Recorder(answer_forms))

    assert result.failure_code == "server_unavailable"


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_missing_working_directory_is_named(loop: str, tmp_path: Path) -> None:
    """On asyncio's loop and on uvloop (an application may run the kit there), whose
    spawn error does not name the directory."""
    factory = (
        asyncio.new_event_loop
        if loop == "asyncio"
        else pytest.importorskip("uvloop").new_event_loop
    )
    missing = tmp_path / "no-such-directory"
    server = StdioServer(name="shipping", command=sys.executable, args=["-c", "pass"], cwd=missing)
    task = make_task(server, [tool("book_shipment")])

    with asyncio.Runner(loop_factory=factory) as runner:
        [result] = runner.run(ScriptedHarness().run(task, Recorder(answer_forms)))

    assert result.failure_code == "server_unavailable"
    assert result.failure_message == (
        f"working directory {str(missing)!r} of MCP server 'shipping' not found"
    )


# --- Streamable HTTP ----------------------------------------------------------------------


@pytest.fixture
def http_server(request: pytest.FixtureRequest) -> Iterator[str]:
    """Start tests/mcp_servers/shipping.py over HTTP (variant from `request.param`)."""
    with http_mcp_server("shipping", request.param) as url:
        yield url


@pytest.mark.parametrize("http_server", ["mrtr"], indirect=True)
async def test_http_mrtr_round_trip(http_server: str) -> None:
    resolver = Recorder(answer_forms)
    server = HttpServer(name="shipping", url=http_server, headers={"X-Test": "1"})
    task = make_task(server, [tool("book_confirmed_shipment")])

    [result] = await ScriptedHarness().run(task, resolver)

    assert result.ok and text_of(result) == BOOKED
    assert [(r.protocol, r.round_index) for r in resolver.rounds] == [("mrtr", 0), ("mrtr", 1)]


@pytest.mark.parametrize("http_server", ["legacy"], indirect=True)
async def test_http_legacy_slow_resolver_keeps_the_held_call(http_server: str) -> None:
    """The server holds tools/call open while the resolver (a human) takes its time."""

    async def slow(round: InputRound) -> Mapping[str, ElicitationResponse]:
        await asyncio.sleep(3)
        return {"shipping_address": ElicitationResponse(action="accept", content=ADDRESS)}

    resolver = Recorder(slow)
    # Over HTTP the SDK server always also speaks 2026-07-28, where ctx.elicit
    # has no back-channel: the binding pins the legacy protocol.
    server = HttpServer(name="shipping", url=http_server, protocol="legacy")
    task = make_task(server, [tool("book_shipment")])
    started = time.monotonic()

    [result] = await ScriptedHarness().run(task, resolver)

    assert time.monotonic() - started >= 3
    assert result.ok and text_of(result) == BOOKED
    assert [(r.protocol, list(r.requests)) for r in resolver.rounds] == [
        ("legacy", ["shipping_address"])
    ]


# --- request keys and bindings (no server) ----------------------------------------------


def form(title: str | None = None, meta: dict[str, Any] | None = None) -> t.ElicitRequestFormParams:
    schema: dict[str, Any] = {"type": "object", "properties": {"x": {"type": "string"}}}
    if title is not None:
        schema["title"] = title
    return t.ElicitRequestFormParams(
        message="m", requested_schema=schema, _meta=cast(t.RequestParamsMeta | None, meta)
    )


def test_snake_case() -> None:
    assert snake_case("ShippingAddress") == "shipping_address"
    assert snake_case("Shipping address") == "shipping_address"
    assert snake_case("HTTPProxy") == "http_proxy"
    assert snake_case("--") == ""


def test_legacy_request_key_rule() -> None:
    url = t.ElicitRequestURLParams(message="m", url="https://x.test", elicitation_id="e-1")
    assert legacy_request_key(form("ShippingAddress", {"m3/request_key": "addr"})) == "addr"
    assert legacy_request_key(url) == "e-1"
    assert legacy_request_key(form("ShippingAddress")) == "shipping_address"
    assert legacy_request_key(form("!!")) == "input"
    assert legacy_request_key(form()) == "input"


def test_mrtr_request_keys_shorten_sdk_keys_and_stay_unique() -> None:
    keys = mrtr_request_keys(
        {
            "__main__:shipping_address": form(),
            "pkg.mod:Outer.<locals>.shipping_address": form(),
            "app.resolvers:confirm#1": form(),
            "urn:x:y": form(),
            "plain": form(meta={"m3/request_key": "chosen"}),
        }
    )
    assert keys == {
        "shipping_address": "__main__:shipping_address",
        "pkg.mod:Outer.<locals>.shipping_address": "pkg.mod:Outer.<locals>.shipping_address",
        "confirm#1": "app.resolvers:confirm#1",
        "urn:x:y": "urn:x:y",
        "chosen": "plain",
    }


def test_bindings_round_trip_through_json() -> None:
    bindings: list[ServerBinding] = [
        StdioServer(
            name="shipping", command="python", args=["s.py"], env={"A": "1"}, cwd=Path("/tmp")
        ),
        HttpServer(
            name="remote", url="http://127.0.0.1:9/mcp", headers={"X": "y"}, protocol="legacy"
        ),
    ]
    for binding in bindings:
        data = server_binding_adapter.dump_json(binding)
        assert server_binding_adapter.validate_json(data) == binding
    assert isinstance(
        server_binding_adapter.validate_python(
            {"kind": "http", "name": "r", "url": "https://h/mcp"}
        ),
        HttpServer,
    )
    with pytest.raises(ValueError):
        StdioServer(name="a:b", command="python")
    with pytest.raises(ValueError):
        HttpServer(name="r", url="ftp://h/mcp")
    with pytest.raises(ValueError):
        HarnessTask(execution_id="e", prompt="p", server=bindings[0], tools=["no-colon"])
