"""Runs the product documentation's first program as the documentation says an application
does: its text (documented_program.txt, verbatim) with `shipping_server` defined and
M3_DOCS_CODEX_MODEL set. Prints what the tests check as one JSON line.

    python run_documented_program.py [--harness codex|claude-code] [--target HOST:PORT]

- `--harness claude-code`: the program with `"harness": "claude-code"` in place of
  `"codex"` (M3_DOCS_CODEX_MODEL then names a Claude model): the documented swap of
  agent, nothing else.
- `--target`: the same program over gRPC, against `m3grpc serve` at that address: the
  kit is `RemoteMCPTestKit(target)` instead of the embedded `MCPTestKit(...)`, and
  `shipping_server` is the service's binding name, "shipping" (the remote kit names a
  binding; the service holds its configuration).

Without `--target`, `shipping_server` is the bundled example server over stdio.
"""

import argparse
import json
import sys
from pathlib import Path

from m3grpc import StdioServer
from m3grpc.client import RemoteMCPTestKit

HERE = Path(__file__).resolve().parent
EXAMPLE_SERVER = HERE.parents[1] / "examples" / "shipping_server.py"
EMBEDDED_KIT = "MCPTestKit(store=store, env={})"

parser = argparse.ArgumentParser()
parser.add_argument("--harness", default="codex", choices=["codex", "claude-code"])
parser.add_argument("--target")
args = parser.parse_args()

program = (HERE / "documented_program.txt").read_text(encoding="utf-8")
shipping_server: object = StdioServer(
    name="shipping", command=sys.executable, args=[str(EXAMPLE_SERVER)], protocol="legacy"
)
namespace: dict[str, object] = {"__name__": "__main__"}
if args.harness != "codex":
    assert program.count('"harness": "codex"') == 1
    program = program.replace('"harness": "codex"', f'"harness": "{args.harness}"')
if args.target is not None:
    assert program.count(EMBEDDED_KIT) == 1
    program = program.replace(EMBEDDED_KIT, "RemoteMCPTestKit(target)")
    namespace.update(RemoteMCPTestKit=RemoteMCPTestKit, target=args.target)
    shipping_server = "shipping"
namespace["shipping_server"] = shipping_server
exec(compile(program, "documented_program.txt", "exec"), namespace)

print(
    json.dumps(
        {
            "round": namespace["pending"].model_dump(mode="json"),  # type: ignore[attr-defined]
            "result": namespace["result"].model_dump(mode="json"),  # type: ignore[attr-defined]
        }
    )
)
