"""No test binds a fixed port: a port written into a test (or a benchmark that CI runs)
may be taken on the machine that runs it (a user's own `m3grpc serve` on 50051, another
test run), and the test then fails for a reason that is not the code's. Servers under
test listen on port 0 (the kernel picks a free one) and report the port they got.

This is the static half of the check: it reads tests/ and bench/ for a literal port in
the places a test would bind one (`--listen`, `--metrics-listen`, `--inbox-listen`, a
`listen`/`metrics_listen`/`M3_LISTEN` setting, `socket.bind`, `port=`). The other half
is scripts/test.sh, which runs the whole suite beside the README's example service on
its default address (scripts/hold-default-address.sh), where a test that starts a
service without choosing its port fails.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("tests", "bench")
SUFFIXES = {".py", ".toml", ".sh", ".json", ".ts", ".mjs", ".go"}
HOST = r"(?:127\.\d+\.\d+\.\d+|localhost|0\.0\.0\.0|\[::1?\]|::1?)"
BINDS = (
    re.compile(r"--(?:metrics-|inbox-)?listen[\"',\s=]+[\"']?" + HOST + r":(\d+)"),
    # A TOML setting, also right after an escaped newline in a Python string.
    re.compile(r"(?:\b|(?<=\\n))(?:metrics_)?listen\s*=\s*\\?[\"']?" + HOST + r":(\d+)"),
    re.compile(r"M3_LISTEN[\"']?\s*[:=]\s*[\"']?" + HOST + r":(\d+)"),
    re.compile(r"\.bind\(\(\s*[\"'][^\"']*[\"']\s*,\s*(\d+)\s*\)\)"),
    re.compile(r"\bport\s*=\s*(\d+)\b"),
)

# Addresses that are written but never bound, each with the reason.
NOT_BOUND: dict[tuple[str, str], str] = {
    ("tests/ops/test_check_config.py", 'listen = "127.0.0.1:50999'): (
        "check-config reads the address and reports it; it binds nothing"
    ),
    ("tests/ops/test_check_config.py", 'listen = "0.0.0.0:50051'): (
        "check-config reports the exposure rule's verdict on it; it binds nothing"
    ),
    ("tests/ops/test_check_config.py", 'listen = "0.0.0.0:8080'): (
        "check-config reports the web inbox's exposure; it binds nothing"
    ),
    ("tests/api/test_units.py", 'listen = "0.0.0.0:6000'): (
        "load_config parses the file; nothing is served"
    ),
    ("tests/docker/test_entrypoint.py", 'listen = "127.0.0.1:1'): (
        "the file's listen, which the test shows M3_LISTEN (port 0) overrides"
    ),
}


def fixed_ports(text: str) -> list[tuple[int, str]]:
    """(line number, the matched text) of every literal port from 1 to 65535 bound in
    `text` (port 0 takes a free port; a port past 65535 is refused before any bind)."""
    found: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        for pattern in BINDS:
            for match in pattern.finditer(line):
                if 0 < int(match.group(1)) <= 65535:
                    found.append((number, match.group(0)))
    return found


def test_the_scan_finds_fixed_ports_and_passes_free_ones() -> None:
    fixed = """
        ["serve", "--listen", "127.0.0.1:50051"]
        run("serve --inbox-listen 127.0.0.1:8080")
        config.write_text('database = "x"\\nlisten = "127.0.0.1:50051"\\n')
        sock.bind(("127.0.0.1", 9464))
        uvicorn.Config(app, host="127.0.0.1", port=8000)
        env = {"M3_LISTEN": "0.0.0.0:50051"}
        metrics_listen = "[::1]:9464"
    """
    assert len(fixed_ports(fixed)) == 7, fixed_ports(fixed)
    free = """
        ["serve", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"]
        config.write_text('listen = "127.0.0.1:0"\\n')
        sock.bind(("127.0.0.1", 0))
        refused("--listen", "127.0.0.1:99999")
        port = free_port()
    """
    assert fixed_ports(free) == []


def test_no_test_binds_a_fixed_port() -> None:
    found: list[str] = []
    used: set[tuple[str, str]] = set()
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix not in SUFFIXES or "node_modules" in path.parts or not path.is_file():
                continue
            if path == Path(__file__).resolve():
                continue  # its own examples
            name = path.relative_to(ROOT).as_posix()
            for number, text in fixed_ports(path.read_text(errors="replace")):
                if (name, text) in NOT_BOUND:
                    used.add((name, text))
                else:
                    found.append(f"{name}:{number}: {text}")
    assert not found, "a fixed port (use port 0 and read the one it got):\n" + "\n".join(found)
    assert used == set(NOT_BOUND), f"NOT_BOUND lists what is gone: {set(NOT_BOUND) - used}"
