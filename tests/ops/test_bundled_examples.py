"""The bundled example configuration as a new user runs it: `.venv/bin/m3grpc serve
--config examples/m3.toml` with the environment not activated, so that the `python3`
first on PATH is another Python, without the MCP SDK. Its binding's `python3` is the
service's own interpreter there (m3grpc.servers.stdio_environment), check-config says
so, and a binding whose interpreter lacks the server's packages is an error line in
check-config and, when an execution runs, a few lines in the log, not a traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from m3grpc import ElicitationResponse
from m3grpc.client import RemoteExecutionHandle, RemoteMCPTestKit
from m3grpc.devtools.serve_process import ServeProcess
from m3grpc.types import ExecutionOutcome

ROOT = Path(__file__).resolve().parents[2]
# The console script beside this interpreter, as `.venv/bin/m3grpc` is run by path.
M3GRPC = str(Path(sys.executable).parent / "m3grpc")
ADDRESS = {"street": "1 Main Street", "city": "Pune"}


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A `python3` without the MCP SDK (a virtual environment with no packages)."""
    home = tmp_path_factory.mktemp("bare") / "venv"
    venv.create(home, with_pip=False)
    python = home / "bin" / "python3"
    probe = subprocess.run([python, "-c", "import mcp"], capture_output=True, check=False)
    assert probe.returncode != 0, "the bare environment must lack the MCP SDK"
    return python


def unactivated_env(bare_python: Path) -> dict[str, str]:
    """This service's environment not activated: another `python3` first on PATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join([str(bare_python.parent), "/usr/bin", "/bin"])
    return env


def checkout_copy(tmp_path: Path) -> Path:
    """The examples where the README's commands expect them (relative paths)."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    return tmp_path


def check_config(config: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [M3GRPC, "check-config", config],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@contextmanager
def example_service(
    workdir: Path, env: dict[str, str], log: Path
) -> Iterator[RemoteExecutionHandle]:
    """`.venv/bin/m3grpc serve --config examples/m3.toml` in `workdir`, and a managed
    execution of its `shipping` binding, submitted over gRPC."""
    service = ServeProcess(
        Path("examples/m3.toml"), log=log, command=(M3GRPC,), env=env, cwd=workdir
    ).start()
    try:
        with RemoteMCPTestKit(service.address) as kit:
            agent = kit.agents([{"harness": "scripted", "models": []}])[0]
            yield agent.submit(
                "Book it.",
                server="shipping",
                tools=["shipping:book_shipment"],
                human_input="managed",
            )
    finally:
        service.stop()


def test_the_example_config_runs_a_round_without_the_environment_activated(
    tmp_path: Path, bare_python: Path
) -> None:
    workdir = checkout_copy(tmp_path)
    env = unactivated_env(bare_python)
    checked = check_config("examples/m3.toml", workdir, env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    interpreter = Path(sys.executable).parent / "python3"
    assert (
        f"ok    server shipping (stdio): {interpreter} examples/shipping_server.py"
        in checked.stdout.splitlines()
    ), checked.stdout
    with example_service(workdir, env, tmp_path / "server.log") as handle:
        pending = handle.wait_for_pending(timeout=120)
        assert pending is not None, "the execution finished without asking"
        handle.respond_elicitation(
            pending.round_id,
            {"shipping_address": ElicitationResponse(action="accept", content=ADDRESS)},
            idempotency_key=f"address-{pending.round_id}",
        )
        result = handle.result(timeout=120)
    assert result.outcome is ExecutionOutcome.SUCCEEDED, result
    assert (workdir / "m3.sqlite").is_file()  # the example's relative database


def test_an_interpreter_without_the_servers_packages_is_an_error_and_a_short_log(
    tmp_path: Path, bare_python: Path
) -> None:
    workdir = checkout_copy(tmp_path)
    config = workdir / "examples" / "m3.toml"
    text = config.read_text()
    assert 'command = "python3"' in text
    config.write_text(text.replace('command = "python3"', f'command = "{bare_python}"'))
    env = unactivated_env(bare_python)
    checked = check_config("examples/m3.toml", workdir, env)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert (
        f"error server shipping (stdio): {bare_python} cannot import mcp, pydantic "
        "(imported by examples/shipping_server.py): install them into that interpreter, "
        "or name one that has them as the binding's command"
    ) in checked.stdout.splitlines(), checked.stdout

    log = tmp_path / "server.log"
    with example_service(workdir, env, log) as handle:
        result = handle.result(timeout=120)
    assert result.failure_code == "server_unavailable", result
    assert "No module named 'mcp'" in (result.failure_message or "")
    lines = log.read_text().splitlines()
    # The server's own stderr (its four-line traceback), then one line of M3's.
    connect = [line for line in lines if "cannot connect to MCP server 'shipping'" in line]
    assert len(connect) == 1, lines
    assert "failed before the MCP handshake completed" in connect[0]
    assert not any("Exception Group Traceback" in line for line in lines), lines
    assert not any(line.startswith(("  |", "  +")) for line in lines), lines
    assert len(lines) <= 8, lines


def test_check_config_reads_a_module_and_leaves_the_scripts_own_modules_alone(
    tmp_path: Path, bare_python: Path
) -> None:
    server = tmp_path / "server"
    server.mkdir()
    # A module beside the script is on its path (sys.path[0]), whatever the interpreter.
    (server / "helpers.py").write_text("VALUE = 1\n")
    (server / "main.py").write_text("import json\nimport helpers\nfrom os import path\n")
    (tmp_path / "m3.toml").write_text(
        f"""database = "{tmp_path / "m3.sqlite"}"
[servers.plain]
command = "{bare_python}"
args = ["-u", "server/main.py"]
[servers.module]
command = "{bare_python}"
args = ["-X", "dev", "-m", "mcp.server"]
"""
    )
    checked = check_config("m3.toml", tmp_path, unactivated_env(bare_python))
    assert checked.returncode == 1, checked.stdout + checked.stderr
    lines = checked.stdout.splitlines()
    assert f"ok    server plain (stdio): {bare_python} -u server/main.py" in lines, lines
    assert (
        f"error server module (stdio): {bare_python} cannot import mcp (imported by -m mcp.server)"
        ": install them into that interpreter, or name one that has them as the binding's command"
    ) in lines, lines
