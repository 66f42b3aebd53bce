"""The remote client installs alone: a fresh virtual environment gets the m3grpc
distribution without the `server` extra (only grpcio, grpcio-status, protobuf and
pydantic come with it), imports `m3grpc.client` without sqlalchemy, mcp or
jsonschema being installed, and runs the seed flow against a live service, through
the client and through the CLI's remote verbs."""

from __future__ import annotations

import json
import os
import subprocess
import venv
from pathlib import Path

from tests.support.wheel import build_wheel, run_installed

from .conftest import ServerProcess

# Run inside the fresh environment; prints one JSON line.
PROGRAM = r"""
import importlib.util, json, sys, time
import m3grpc.client
from m3grpc.client import RemoteMCPTestKit
from m3grpc.types import ElicitationResponse

ADDRESS = {"street": "1 Main Street", "city": "Pune"}

SERVER = ("sqlalchemy", "mcp", "jsonschema")
report = {
    "installed": [m for m in SERVER if importlib.util.find_spec(m)],
    "loaded": [m for m in (*SERVER, "m3grpc.runtime") if m in sys.modules],
}
with RemoteMCPTestKit(sys.argv[1]) as kit:
    agent = kit.agents([{"harness": "scripted", "models": []}])[0]
    handle = agent.submit(
        "Ask for the delivery address, then book the shipment.",
        server="shipping", tools=["shipping:book_shipment"], human_input="managed",
    )
    deadline = time.monotonic() + 120
    pending = handle.pending_elicitation()
    while pending is None and time.monotonic() < deadline:
        time.sleep(0.1)
        pending = handle.pending_elicitation()
    handle.respond_elicitation(
        pending.round_id,
        {key: ElicitationResponse(action="accept", content=ADDRESS) for key in pending.requests},
        idempotency_key="install-" + pending.round_id,
    )
    report["outcome"] = handle.result(timeout=120).outcome.value
print(json.dumps(report))
"""


def test_client_installs_and_runs_without_the_server_extra(
    tmp_path: Path, shared_server: ServerProcess
) -> None:
    # The wheel is built from this checkout with the build tools already here; the
    # fresh environment then installs it and its dependencies the usual way.
    wheel = build_wheel(tmp_path / "dist")
    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    run_installed(python, "-m", "pip", "install", "-q", wheel)

    # Run outside the checkout, so only the installed copy is importable.
    done = subprocess.run(
        [python, "-c", PROGRAM, shared_server.address],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"installed": [], "loaded": [], "outcome": "succeeded"}

    # The CLI's remote verbs run on the same light install.
    def verb(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [tmp_path / "venv" / "bin" / "m3grpc", *args, "--server", shared_server.address],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        )
        assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
        return done

    tool = ("--binding", "shipping", "--tool", "shipping:book_shipment", "--prompt", "Book it.")
    execution_id = verb("submit", *tool, "--human-input", "managed").stdout.strip()
    verb("pending", execution_id, "--wait", "120")
    address = json.dumps({"street": "1 Main Street", "city": "Pune"})
    verb("respond", "--execution", execution_id, "--accept", address)
    result = json.loads(verb("result", execution_id, "--wait", "120", "--json").stdout)
    assert result["outcome"] == "succeeded"

    # The service itself needs the extra, and says so.
    serve = subprocess.run(
        [tmp_path / "venv" / "bin" / "m3grpc", "serve"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert serve.returncode == 2
    assert "m3grpc[server]" in serve.stderr and "sqlalchemy" in serve.stderr
