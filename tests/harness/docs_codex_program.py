"""Runs the product documentation's first program as the documentation says an application
does: its text (documented_program.txt, verbatim) with `shipping_server` defined, the
bundled example server over stdio, and M3_DOCS_CODEX_MODEL set.

tests/harness/test_codex.py runs this file as a script with M3_DOCS_CODEX_MODEL naming
the fake model (m3grpc.devtools.fake_model) and M3_CODEX_* pointing the codex harness at
it. After the program, it prints what the test checks as one JSON line.
"""

import json
import sys
from pathlib import Path

from m3grpc import StdioServer

HERE = Path(__file__).resolve().parent
EXAMPLE_SERVER = HERE.parents[1] / "examples" / "shipping_server.py"

# What the documentation leaves to the application: the configured stdio binding.
shipping_server = StdioServer(
    name="shipping", command=sys.executable, args=[str(EXAMPLE_SERVER)], protocol="legacy"
)
program = (HERE / "documented_program.txt").read_text(encoding="utf-8")
namespace = {"__name__": "__main__", "shipping_server": shipping_server}
exec(compile(program, "documented_program.txt", "exec"), namespace)

print(
    json.dumps(
        {
            "round": namespace["pending"].model_dump(mode="json"),
            "result": namespace["result"].model_dump(mode="json"),
        }
    )
)
