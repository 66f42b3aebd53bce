"""The host of Claude Code's stream-json control protocol against the real CLI (npm
@anthropic-ai/claude-code, installed by scripts/setup-claude-code.sh) and real MCP servers
over stdio (mcp 2.3.0). The only stand-in is the hosted LLM:
`m3grpc.devtools.fake_anthropic.FakeAnthropic`, a loopback Messages API server.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from m3grpc.devtools.fake_anthropic import (
    FAKE_ANTHROPIC_API_KEY,
    FAKE_CLAUDE_MODEL,
    CallTool,
    FakeAnthropic,
    Reply,
    UseTool,
    offered_tools,
    tool_results,
)
from m3grpc.harness.agent_process import remove_stale_homes
from m3grpc.harness.claude_code_host import (
    HOME_PREFIX,
    Allow,
    ClaudeCodeOptions,
    ClaudeCodeProcess,
    Deny,
    ElicitationReply,
    ElicitationRequest,
    PermissionRequest,
)
from tests.runtime.conftest import eventually
from tests.support.claude_code import (
    claude_code_binary,
    claude_code_processes,
    group_members,
    homes_of,
)
from tests.support.mcp_processes import MCP_SERVERS

ADDRESS = {"street": "1 Main St", "city": "Springfield"}
CHILD = Path(__file__).with_name("claude_code_host_child.py")


@pytest.fixture(scope="session")
def claude_bin() -> str:
    return claude_code_binary()


@pytest.fixture(autouse=True)
def nothing_left_running(claude_bin: str) -> Iterator[None]:
    yield
    assert claude_code_processes(claude_bin) == []
    assert homes_of(os.getpid()) == []


@pytest.fixture
def model() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        yield fake


def shipping(variant: str = "legacy") -> dict[str, Any]:
    script = MCP_SERVERS / "shipping.py"
    return {"command": sys.executable, "args": [str(script), "--variant", variant]}


def options(claude_bin: str, model: FakeAnthropic, **more: Any) -> ClaudeCodeOptions:
    more.setdefault("mcp_servers", {"shipping": shipping()})
    return ClaudeCodeOptions(
        binary=claude_bin,
        model=FAKE_CLAUDE_MODEL,
        base_url=model.base_url,
        api_key=FAKE_ANTHROPIC_API_KEY,
        **more,
    )


async def allow_all(request: PermissionRequest) -> Allow | Deny:
    return Allow()


class Answers:
    """An elicitation callback that records each request and answers with `reply`."""

    def __init__(self, reply: ElicitationReply | None = None) -> None:
        self.reply = reply
        self.requests: list[ElicitationRequest] = []
        self.arrived = asyncio.Event()
        self.cancelled = False

    async def __call__(self, request: ElicitationRequest) -> ElicitationReply:
        self.requests.append(request)
        self.arrived.set()
        if self.reply is None:  # a person who never answers
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled = True
                raise
        assert self.reply is not None
        return self.reply


@pytest.fixture
async def started() -> AsyncIterator[list[ClaudeCodeProcess]]:
    """Processes a test starts, closed afterwards even when the test fails."""
    processes: list[ClaudeCodeProcess] = []
    yield processes
    for process in processes:
        await process.close()


# -- elicitations --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "tool_text"),
    [
        (
            ElicitationReply(action="accept", content=ADDRESS),
            "booked shipment to 1 Main St, Springfield",
        ),
        (ElicitationReply(action="decline"), "shipment not booked: declined"),
        (ElicitationReply(action="cancel"), "shipment not booked: cancelled"),
    ],
    ids=["accept", "decline", "cancel"],
)
async def test_a_legacy_servers_elicitation_is_answered_by_the_host(
    claude_bin: str, model: FakeAnthropic, reply: ElicitationReply, tool_text: str
) -> None:
    model.queue(CallTool("shipping", "book_shipment"))
    answers = Answers(reply)
    async with ClaudeCodeProcess(
        options(claude_bin, model), can_use_tool=allow_all, on_elicitation=answers
    ) as claude:
        await claude.send_prompt("Book a shipment.")
        result = await claude.wait_result()

    [request] = answers.requests
    assert request.mcp_server_name == "shipping"
    assert request.mode == "form"
    assert request.message == "Where should the shipment go?"
    assert request.requested_schema is not None
    assert set(request.requested_schema["properties"]) == {"street", "city"}
    assert request.property_order == ["street", "city"]
    # The model's next request carries the tool's result, and the default step quotes it.
    [received] = tool_results(model.requests[1])
    assert tool_text in received.text
    assert not received.is_error
    assert result.subtype == "success" and not result.is_error
    assert result.result == f"Done: {tool_text}"


async def test_a_failing_elicitation_callback_reaches_the_server_as_cancel(
    claude_bin: str, model: FakeAnthropic
) -> None:
    model.queue(CallTool("shipping", "book_shipment"))

    async def broken(request: ElicitationRequest) -> ElicitationReply:
        raise RuntimeError("the host could not ask anyone")

    async with ClaudeCodeProcess(
        options(claude_bin, model), can_use_tool=allow_all, on_elicitation=broken
    ) as claude:
        await claude.send_prompt("Book a shipment.")
        result = await claude.wait_result()

    assert claude.refused_requests == [("elicitation", "the host could not ask anyone")]
    assert result.result == "Done: shipment not booked: cancelled"


async def test_a_2026_07_28_servers_input_required_result_is_answered_by_the_host(
    claude_bin: str, model: FakeAnthropic
) -> None:
    # shipping.py --variant mrtr answers server/discover: Claude Code speaks 2026-07-28,
    # and the tool's InputRequiredResult reaches the host as an elicitation.
    model.queue(CallTool("shipping", "book_shipment"))
    answers = Answers(ElicitationReply(action="accept", content=ADDRESS))
    async with ClaudeCodeProcess(
        options(claude_bin, model, mcp_servers={"shipping": shipping("mrtr")}),
        can_use_tool=allow_all,
        on_elicitation=answers,
    ) as claude:
        await claude.send_prompt("Book a shipment.")
        result = await claude.wait_result()

    assert [request.message for request in answers.requests] == ["Where should the shipment go?"]
    assert result.result == "Done: booked shipment to 1 Main St, Springfield"


# -- permissions ---------------------------------------------------------------------------


async def test_can_use_tool_allows_or_denies_an_mcp_tool(
    claude_bin: str, model: FakeAnthropic
) -> None:
    model.queue(
        CallTool("shipping", "quote", {"weight_kg": 4}),
        CallTool("shipping", "quote", {"weight_kg": 7}),
        Reply("finished"),
    )
    asked: list[PermissionRequest] = []

    async def first_only(request: PermissionRequest) -> Allow | Deny:
        asked.append(request)
        if len(asked) == 1:
            return Allow()
        return Deny(message="not twice, says the host")

    async with ClaudeCodeProcess(options(claude_bin, model), can_use_tool=first_only) as claude:
        await claude.send_prompt("Quote twice.")
        result = await claude.wait_result()

    assert [request.tool_name for request in asked] == ["mcp__shipping__quote"] * 2
    assert [request.input for request in asked] == [{"weight_kg": 4}, {"weight_kg": 7}]
    assert [request.tool_use_id for request in asked] == [use.id for use in claude.tool_uses]
    [allowed] = tool_results(model.requests[1])
    [denied] = tool_results(model.requests[2])
    assert '"quote for 4.0 kg"' in allowed.text and not allowed.is_error
    assert denied.text == "not twice, says the host" and denied.is_error
    assert result.result == "finished"


async def test_can_use_tool_allows_or_denies_a_built_in_tool(
    claude_bin: str, model: FakeAnthropic, tmp_path: Path
) -> None:
    denied_file, allowed_file = tmp_path / "denied", tmp_path / "allowed"
    model.queue(
        UseTool("Bash", {"command": f"touch {denied_file}", "description": "make a file"}),
        UseTool("Bash", {"command": f"touch {allowed_file}", "description": "make a file"}),
        Reply("finished"),
    )
    asked: list[PermissionRequest] = []

    async def second_only(request: PermissionRequest) -> Allow | Deny:
        asked.append(request)
        if len(asked) == 1:
            return Deny(message="no files, says the host")
        return Allow()

    async with ClaudeCodeProcess(
        options(claude_bin, model, mcp_servers={}, builtin_tools=["Bash"]),
        can_use_tool=second_only,
    ) as claude:
        await claude.send_prompt("Make two files.")
        await claude.wait_result()

    assert [request.tool_name for request in asked] == ["Bash", "Bash"]
    assert not denied_file.exists()
    assert allowed_file.exists()
    assert tool_results(model.requests[1])[0].text == "no files, says the host"


async def test_unknown_control_requests_are_refused_and_the_turn_goes_on(
    claude_bin: str, model: FakeAnthropic
) -> None:
    # A hook registered through `initialize` makes the CLI send `hook_callback`, a
    # subtype the host does not answer: its error response must not stop the turn.
    model.queue(CallTool("shipping", "quote"), Reply("finished"))
    async with ClaudeCodeProcess(options(claude_bin, model), can_use_tool=allow_all) as claude:
        hooks = {"PreToolUse": [{"matcher": None, "hookCallbackIds": ["hook_0"]}]}
        await claude.control({"subtype": "initialize", "hooks": hooks})
        await claude.send_prompt("Quote.")
        result = await claude.wait_result()

    assert [subtype for subtype, _ in claude.refused_requests] == ["hook_callback"]
    assert result.result == "finished"
    assert '"quote for 2.5 kg"' in tool_results(model.requests[1])[0].text


# -- stopping ------------------------------------------------------------------------------


async def test_interrupt_while_an_elicitation_is_pending(
    claude_bin: str, model: FakeAnthropic
) -> None:
    model.queue(CallTool("shipping", "book_shipment"))
    answers = Answers()  # never answers
    async with ClaudeCodeProcess(
        options(claude_bin, model), can_use_tool=allow_all, on_elicitation=answers
    ) as claude:
        await claude.send_prompt("Book a shipment.")
        await answers.arrived.wait()
        await claude.interrupt()
        result = await claude.wait_result()
        # The CLI withdrew the pending elicitation (control_cancel_request).
        assert answers.cancelled

    assert result.is_error
    assert result.subtype == "error_during_execution"
    assert result.terminal_reason == "aborted_tools"
    assert len(model.requests) == 1  # the turn ended without asking the model again


async def test_close_while_an_elicitation_is_pending_leaves_nothing_running(
    claude_bin: str,
    model: FakeAnthropic,
    started: list[ClaudeCodeProcess],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("M3_TEST_SECRET", "not for the agent")
    model.queue(CallTool("shipping", "book_shipment"))
    answers = Answers()  # never answers
    claude = ClaudeCodeProcess(
        options(claude_bin, model), can_use_tool=allow_all, on_elicitation=answers
    )
    started.append(claude)
    await claude.start()
    await claude.send_prompt("Book a shipment.")
    await answers.arrived.wait()
    assert claude.pid is not None
    group = claude.pid
    assert len(group_members(group)) >= 2  # the CLI and its MCP server
    home = claude.home
    assert home is not None and home.is_dir()
    environ = Path(f"/proc/{claude.pid}/environ").read_bytes().split(b"\0")
    assert f"CLAUDE_CONFIG_DIR={home / '.claude'}".encode() in environ
    assert f"ANTHROPIC_BASE_URL={model.base_url}".encode() in environ
    assert not any(variable.startswith(b"M3_TEST_SECRET=") for variable in environ)

    await claude.close()

    assert group_members(group) == []
    assert not home.exists()
    assert answers.cancelled
    with pytest.raises(Exception, match="not running"):
        await claude.send_prompt("Again.")


async def test_a_server_not_ready_in_time_is_left_out_of_the_turn(
    claude_bin: str, model: FakeAnthropic
) -> None:
    late = {"command": "/bin/sh", "args": ["-c", "sleep 120; exec true"]}
    async with ClaudeCodeProcess(
        options(claude_bin, model, mcp_servers={"late": late}, mcp_startup_seconds=1),
        can_use_tool=allow_all,
    ) as claude:
        await claude.send_prompt("Use the late server.")
        result = await claude.wait_result()
        # "pending" when the turn starts while it connects; "failed" when the CLI's own
        # connect timeout ran out first (seen under load): either way, not connected.
        assert claude.mcp_server_status("late") in ("pending", "failed")

    assert offered_tools(model.requests[0]) == []
    assert result.result == "I have no tool to call."


def test_a_killed_worker_leaves_no_agent_behind(claude_bin: str, tmp_path: Path) -> None:
    # The worker dies with SIGKILL while an elicitation is pending: no `close` runs. The
    # kernel kills the CLI (setpriv --pdeathsig; its stdin closing would end it too), and
    # its MCP server, whose stdin closes, exits; the home is left for the next start.
    errors = tmp_path / "worker-stderr.log"
    with errors.open("w") as stderr:
        worker = subprocess.Popen(
            [sys.executable, str(CHILD), claude_bin],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        assert worker.stdout is not None
        line = worker.stdout.readline()
        assert line.startswith("ready "), errors.read_text()
        cli = int(line.split()[1])
        assert cli in claude_code_processes(claude_bin)
        assert len(group_members(cli)) >= 2  # the CLI and its MCP server
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        eventually(lambda: group_members(cli) == [] or None, what="the CLI's group to end")
        assert homes_of(worker.pid)  # left behind by the killed worker
    finally:
        worker.kill()
        worker.wait()
    # What the next host to start does first (and the autouse check wants none left).
    remove_stale_homes(HOME_PREFIX)
    assert homes_of(worker.pid) == []
