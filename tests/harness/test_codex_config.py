"""The Codex harness's config.toml holds one value a client chooses, the model
name (AgentSpec.models[0]): whatever its characters, it stays that one string
and adds no key, table or MCP server to the file Codex reads."""

from __future__ import annotations

import tomllib

import pytest

from m3grpc.harness import HarnessTask
from m3grpc.harness.codex import CodexSettings, codex_config
from m3grpc.servers import StdioServer

MODELS = [
    'gpt"\n[mcp_servers.evil]\ncommand = "sh"',
    'model\\" = 1 # comment',
    "emoji \U0001f600 and \u00e9",
    "controls \x00\x01\x1f\x7f\t\r\n\b\f end",
    "\u2028line separator",
]


@pytest.mark.parametrize("model", MODELS)
def test_a_client_chosen_model_name_stays_one_string(model: str) -> None:
    server = StdioServer(name="shipping", command="python3", args=["server.py"], env={"A": "b"})
    task = HarnessTask(
        execution_id="exe_config", prompt="p", server=server, tools=["shipping:tool"]
    )
    relay = ("/usr/bin/python3", ["-I", "-S", "relay_pipe.py", "/tmp/m3-relay-x/relay.sock"])
    config = tomllib.loads(codex_config(task, CodexSettings(), model, relay))
    assert config["model"] == model
    assert list(config["mcp_servers"]) == ["shipping"]
    assert config["mcp_servers"]["shipping"]["command"] == relay[0]
    assert config["mcp_servers"]["shipping"]["args"] == relay[1]
    assert config["mcp_servers"]["shipping"]["enabled_tools"] == ["tool"]
