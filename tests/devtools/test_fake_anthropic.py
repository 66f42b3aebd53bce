"""The fake Anthropic Messages API (m3grpc.devtools.fake_anthropic), driven by the real Claude
Code CLI (scripts/setup-claude-code.sh) against a real MCP server, and over plain HTTP for the
answers the CLI does not ask for on a normal run (non-streaming, count_tokens, unknown routes).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from m3grpc.devtools.fake_anthropic import (
    FAKE_ANTHROPIC_API_KEY,
    FAKE_CLAUDE_MODEL,
    CallTool,
    CallTools,
    Fail,
    FakeAnthropic,
    Reply,
    mcp_tool_name,
    offered_tools,
    tool_results,
)
from m3grpc.harness.claude_code_host import (
    Allow,
    ClaudeCodeOptions,
    ClaudeCodeProcess,
    Deny,
    PermissionRequest,
    ResultMessage,
)
from tests.support.claude_code import claude_code_binary
from tests.support.mcp_processes import MCP_SERVERS

SHIPPING = {
    "command": sys.executable,
    "args": [str(MCP_SERVERS / "shipping.py"), "--variant", "legacy"],
}
SHIPPING_TOOLS = ["book_shipment", "book_confirmed_shipment", "keep_asking", "quote"]


@pytest.fixture(scope="session")
def claude_bin() -> str:
    return claude_code_binary()


@pytest.fixture
def model() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        yield fake


async def allow_all(request: PermissionRequest) -> Allow | Deny:
    return Allow()


async def run(claude_bin: str, model: FakeAnthropic, **more: Any) -> ResultMessage:
    options = ClaudeCodeOptions(
        binary=claude_bin,
        model=FAKE_CLAUDE_MODEL,
        base_url=model.base_url,
        api_key=FAKE_ANTHROPIC_API_KEY,
        **more,
    )
    async with ClaudeCodeProcess(options, can_use_tool=allow_all) as claude:
        await claude.send_prompt("Get a quote.")
        return await claude.wait_result()


async def test_by_default_it_calls_the_first_offered_mcp_tool_and_quotes_its_result(
    claude_bin: str, model: FakeAnthropic
) -> None:
    # Only `quote` is offered: the others are disallowed.
    others = [mcp_tool_name("shipping", tool) for tool in SHIPPING_TOOLS if tool != "quote"]
    result = await run(
        claude_bin, model, mcp_servers={"shipping": SHIPPING}, disallowed_tools=others
    )

    first, second = model.requests
    assert offered_tools(first) == ["mcp__shipping__quote"]
    assert tool_results(first) == []
    [received] = tool_results(second)
    assert received.text == '{"result":"quote for 2.5 kg"}'  # structured content, as JSON
    assert not received.is_error
    assert result.result == "Done: quote for 2.5 kg"
    assert model.unanswered == []


async def test_scripted_parallel_calls_with_arguments_then_a_reply(
    claude_bin: str, model: FakeAnthropic
) -> None:
    model.queue(
        CallTools([CallTool("shipping", "quote", {"weight_kg": 1}), CallTool("shipping", "quote")]),
        Reply("two quotes"),
    )
    result = await run(claude_bin, model, mcp_servers={"shipping": SHIPPING})

    assert len(model.requests) == 2
    assert sorted(offered_tools(model.requests[0])) == sorted(
        mcp_tool_name("shipping", tool) for tool in SHIPPING_TOOLS
    )
    texts = [received.text for received in tool_results(model.requests[1])]
    assert texts == ['{"result":"quote for 1.0 kg"}', '{"result":"quote for 2.5 kg"}']
    assert result.result == "two quotes"


async def test_with_no_mcp_tool_it_says_so(claude_bin: str, model: FakeAnthropic) -> None:
    result = await run(claude_bin, model)

    assert offered_tools(model.requests[0]) == []
    assert result.result == "I have no tool to call."


async def test_a_failure_ends_the_turn_with_an_api_error(
    claude_bin: str, model: FakeAnthropic
) -> None:
    # Claude Code sends a request that failed with 400 twice more before it gives up.
    model.queue(Fail(400), Fail(400), Fail(400))
    result = await run(claude_bin, model)

    assert result.is_error
    assert result.api_error_status == 400
    assert "the fake model failed on purpose" in (result.result or "")


# -- plain HTTP ----------------------------------------------------------------------------


def post(model: FakeAnthropic, path: str, body: dict[str, Any]) -> httpx2.Response:
    return httpx2.post(f"{model.base_url}{path}", json=body, timeout=10)


def test_a_streamed_message_is_a_complete_event_sequence(model: FakeAnthropic) -> None:
    model.queue(CallTools([CallTool("m3 test", "look.up", {"q": 1})]), Reply("hello"))
    body = {"model": "claude-x", "stream": True, "messages": [{"role": "user", "content": "hi"}]}

    events = [
        json.loads(line.removeprefix("data: "))
        for line in post(model, "/v1/messages?beta=true", body).text.splitlines()
        if line.startswith("data: ")
    ]
    reply = post(model, "/v1/messages", {**body, "stream": False}).json()

    assert [event["type"] for event in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = events[1]["content_block"]
    assert start["type"] == "tool_use" and start["name"] == "mcp__m3_test__look_up"
    assert json.loads(events[2]["delta"]["partial_json"]) == {"q": 1}
    assert events[4]["delta"]["stop_reason"] == "tool_use"
    assert events[4]["usage"]["output_tokens"] > 0
    assert reply["content"] == [{"type": "text", "text": "hello"}]
    assert reply["stop_reason"] == "end_turn" and reply["model"] == "claude-x"
    assert len(model.requests) == 2


def test_tokens_are_counted_and_unknown_routes_recorded(model: FakeAnthropic) -> None:
    counted = post(model, "/v1/messages/count_tokens", {"messages": []})
    unknown = post(model, "/v1/complete", {})

    assert counted.status_code == 200 and counted.json()["input_tokens"] > 0
    assert unknown.status_code == 404
    assert model.unanswered == [("POST", "/v1/complete")]
    assert model.requests == []  # neither is a model request


def test_tool_results_drop_the_agents_reminders() -> None:
    body = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": "42\n\n<system-reminder>\nnotes\n</system-reminder>",
                        "is_error": True,
                    }
                ],
            }
        ]
    }
    [result] = tool_results(body)
    assert (result.tool_use_id, result.text, result.is_error) == ("toolu_1", "42", True)
