"""What a default `m3grpc serve` leaves unimported (its idle RSS, issue 11): the
Prometheus client and the web inbox load only when configured.

The real command line runs in a child (`m3grpc.cli.main`, stopped with SIGTERM like
an operator stops it), which prints the modules it had loaded once it has shut down.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from m3grpc.devtools.serve_process import ServeProcess

# Loaded only for `--metrics-listen` / `[inbox] listen` (m3grpc/api/server.py).
OPTIONAL = ("prometheus_client", "m3grpc.api.metrics", "m3grpc.api.inbox")

_REPORT = "loaded: "
# `m3grpc serve`, then one line naming which of OPTIONAL it had imported.
_SERVE_AND_REPORT = (
    "import json, sys\n"
    "from m3grpc.cli import main\n"
    "code = main(sys.argv[1:])\n"
    f"names = {OPTIONAL!r}\n"
    f"print({_REPORT!r} + json.dumps([n for n in names if n in sys.modules]), flush=True)\n"
    "sys.exit(code)\n"
)


def loaded_by_serve(tmp_path: Path, *args: str) -> list[str]:
    config = tmp_path / "m3.toml"
    config.write_text(f"database = {json.dumps(str(tmp_path / 'm3.sqlite'))}\n")
    service = ServeProcess(
        config,
        log=tmp_path / "serve.log",
        args=args,
        command=(sys.executable, "-c", _SERVE_AND_REPORT),
    ).start()
    try:
        assert service.terminate() == 0, service.log_tail()
    finally:
        service.stop()
    reports = [line for line in service.output if line.startswith(_REPORT)]
    assert reports, f"no report:\n{''.join(service.output)}\n{service.log_tail()}"
    loaded: list[str] = json.loads(reports[-1].removeprefix(_REPORT))
    return loaded


def test_a_default_serve_loads_neither_metrics_nor_the_inbox(tmp_path: Path) -> None:
    assert loaded_by_serve(tmp_path) == []


def test_serve_loads_them_when_they_are_configured(tmp_path: Path) -> None:
    # Port 0: the service binds any free port itself. A port picked here and released
    # could be taken meanwhile (a parallel test's outgoing connection got one in CI).
    loaded = loaded_by_serve(
        tmp_path, "--metrics-listen", "127.0.0.1:0", "--inbox-listen", "127.0.0.1:0"
    )
    assert loaded == list(OPTIONAL)
