"""A worker for tests/harness/test_claude_code_host.py that is killed while Claude Code waits.

    python tests/harness/claude_code_host_child.py CLAUDE_BIN

Starts the fake model and one ClaudeCodeProcess whose MCP server (shipping.py, legacy) asks
for an address; when the elicitation reaches the host it prints "ready <CLI pid>" and waits
for ever (the test SIGKILLs it: nothing of this process can clean up).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from m3grpc.devtools.fake_anthropic import (  # noqa: E402
    FAKE_ANTHROPIC_API_KEY,
    FAKE_CLAUDE_MODEL,
    CallTool,
    FakeAnthropic,
)
from m3grpc.harness.claude_code_host import (  # noqa: E402
    Allow,
    ClaudeCodeOptions,
    ClaudeCodeProcess,
    Deny,
    ElicitationReply,
    ElicitationRequest,
    PermissionRequest,
)


async def main(binary: str) -> None:
    shipping = [str(ROOT / "tests" / "mcp_servers" / "shipping.py"), "--variant", "legacy"]
    with FakeAnthropic([CallTool("shipping", "book_shipment")]) as model:
        options = ClaudeCodeOptions(
            binary=binary,
            model=FAKE_CLAUDE_MODEL,
            base_url=model.base_url,
            api_key=FAKE_ANTHROPIC_API_KEY,
            mcp_servers={"shipping": {"command": sys.executable, "args": shipping}},
        )
        claude: ClaudeCodeProcess

        async def allow(request: PermissionRequest) -> Allow | Deny:
            return Allow()

        async def wait_for_ever(request: ElicitationRequest) -> ElicitationReply:
            print(f"ready {claude.pid}", flush=True)
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

        claude = ClaudeCodeProcess(options, can_use_tool=allow, on_elicitation=wait_for_ever)
        async with claude:
            await claude.send_prompt("Book a shipment.")
            await claude.wait_result()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
