"""Docs that run: every code block of the READMEs (README.md, clients/typescript/README.md,
clients/go/README.md) and of the documentation site's pages (docs/**/*.md) runs as
written, against a live `m3grpc serve` where it needs one.

Each block is named by its document, its heading and its language (`BLOCK_KEY`), and is
either run here (`RUNS`), run by another test named in `RUN_ELSEWHERE`, or skipped with
the reason it cannot run here (`SKIPS`, kept small). A new block that is none of these
fails `test_every_code_block_is_accounted_for`. Blocks in `text` (a terminal transcript),
`mermaid` (a generated diagram: tests/docs/test_generated_docs.py) or without a language
(output, a file tree) are not code.

How blocks run: Python with this interpreter (`python -c`), shell with `bash -e` in a
working directory whose entries link to the repository's top level (so relative paths
resolve as from the repository root while what a block writes stays in a tmp directory),
`m3grpc` on PATH running this checkout, and `M3_SERVER` set to the live service (which
runs examples/m3.toml on a free port, with its web inbox on another). The only edits: a
literal 127.0.0.1:50051 (the default address) becomes the live service's address,
`.venv/bin/m3grpc` (the README's virtual environment) becomes the `m3grpc` on PATH, and a
block that starts `m3grpc serve` listens on free ports (`--listen 127.0.0.1:0`, metrics
and inbox on port 0) and is stopped with SIGTERM once it is ready.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from m3grpc.devtools.serve_process import READY_PREFIX, ServeProcess
from tests.api.conftest import BOOKED, ROOT
from tests.api.inbox_support import InboxClient
from tests.storage.conftest import POSTGRES_URL, postgres_database
from tests.support.locks import TYPESCRIPT_DIST, exclusive

READMES = ("README.md", "clients/typescript/README.md", "clients/go/README.md")
# The site's pages (the client pages include the clients' READMEs, read above).
DOCUMENTS = (*READMES, *sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("docs/**/*.md")))
CODE_LANGUAGES = {"python", "bash", "sh", "shell", "ts", "typescript", "js", "go"}
NOT_CODE = {"text", "", "mermaid", "json"}  # a transcript, output, a diagram, a message
CONFIG = {"toml"}  # config file fragments: each must load as a valid configuration
DEFAULT_ADDRESS = "127.0.0.1:50051"
VENV_M3GRPC = ".venv/bin/m3grpc"  # the README's commands run it from its virtual environment
ADDRESS = {"street": "1 Main Street", "city": "Pune"}
FENCE = re.compile(r"^```(\S*)\s*$")


@dataclass(frozen=True)
class Block:
    document: str
    heading: str
    language: str
    index: int  # among the blocks of this language under this heading
    code: str

    @property
    def key(self) -> str:
        return BLOCK_KEY.format(self.document, self.heading, self.language, self.index)


BLOCK_KEY = "{} > {} > {}[{}]"


def blocks() -> list[Block]:
    found: list[Block] = []
    for document in DOCUMENTS:
        heading, open_block, counts = "(top)", None, Counter[tuple[str, str]]()
        for line in (ROOT / document).read_text().splitlines(keepends=True):
            if open_block is None:
                fence = FENCE.match(line)
                if fence is not None:
                    open_block = (fence.group(1), [])
                elif line.startswith("#"):
                    heading = line.lstrip("#").strip()
            elif line.rstrip("\n") == "```":
                language, lines = open_block
                index = counts[(heading, language)]
                counts[(heading, language)] += 1
                found.append(Block(document, heading, language, index, "".join(lines)))
                open_block = None
            else:
                open_block[1].append(line)
        assert open_block is None, f"{document}: a code block is never closed"
    return found


def block(key: str) -> Block:
    [match] = [found for found in blocks() if found.key == key]
    return match


# -- the live service and the working directory ------------------------------------------


@pytest.fixture(scope="session")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    """`m3grpc serve --config examples/m3.toml` with its web inbox, its database moved to
    a tmp directory."""
    tmp = tmp_path_factory.mktemp("docs-service")
    config = (ROOT / "examples" / "m3.toml").read_text()
    config = config.replace('database = "m3.sqlite"', f'database = "{tmp / "m3.sqlite"}"', 1)
    assert str(tmp) in config
    (tmp / "m3.toml").write_text(config)
    inbox = ("--inbox-listen", "127.0.0.1:0")
    server = ServeProcess(tmp / "m3.toml", log=tmp / "server.log", args=inbox).start()
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Context:
    service: ServeProcess
    workdir: Path
    env: dict[str, str]

    def run(self, command: list[str], *, cwd: Path | None = None, timeout: float = 600) -> str:
        done = subprocess.run(
            command,
            cwd=cwd or self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def bash(self, code: str, *, timeout: float = 900) -> str:
        code = code.replace(DEFAULT_ADDRESS, self.service.address).replace(VENV_M3GRPC, "m3grpc")
        return self.run(["bash", "-e", "-c", code], timeout=timeout)


@pytest.fixture
def context(service: ServeProcess, tmp_path: Path) -> Context:
    workdir = tmp_path / "repo"
    workdir.mkdir()
    for entry in ROOT.iterdir():
        if not entry.name.startswith(".") and ".sqlite" not in entry.name:
            (workdir / entry.name).symlink_to(entry)
    # `m3grpc` on PATH runs this checkout, however it was installed.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "m3grpc"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -m m3grpc "$@"\n')
    wrapper.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "M3_SERVER": service.address,
    }
    return Context(service, workdir, env)


# -- how each block runs -------------------------------------------------------------------


def _python(key: str, context: Context) -> str:
    return context.run([sys.executable, "-c", block(key).code], timeout=300)


def embedded_python(context: Context) -> None:
    out = _python("docs/guides/embedded-kit.md > A first program > python[0]", context)
    assert out.splitlines() == [f"response_validated succeeded {BOOKED}"]
    assert (context.workdir / "executions.sqlite").is_file()


def remote_python(context: Context) -> None:
    out = _python("docs/guides/clients/python.md > Use > python[0]", context)
    assert out.splitlines() == [
        "Where should the shipment go?",
        f"response_validated succeeded {BOOKED}",
    ]


def _check_session(out: str) -> None:
    assert "request shipping_address (form): Where should the shipment go?" in out
    assert "response_validated" in out
    assert "outcome    succeeded" in out
    assert BOOKED in out
    assert "resolved" in out  # rounds list


def cli_session(context: Context) -> None:
    _check_session(context.bash(block("docs/guides/cli.md > A session > bash[0]").code))


def tour_cli(context: Context) -> None:
    _check_session(context.bash(block("README.md > A five-minute tour > bash[1]").code))


def tour_inbox(context: Context) -> None:
    """The tour's inbox step: the block submits and waits for the result while the
    round is answered through the inbox's own endpoints, as its page sends answers."""
    inbox = InboxClient(context.service.inbox_url)
    before = {listed["round_id"] for listed in inbox.get("/api/rounds")[1]["rounds"]}
    code = block("README.md > A five-minute tour > bash[2]").code
    process = subprocess.Popen(
        ["bash", "-e", "-c", code.replace(DEFAULT_ADDRESS, context.service.address)],
        cwd=context.workdir,
        env=context.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(1200):
            new = [r for r in inbox.get("/api/rounds")[1]["rounds"] if r["round_id"] not in before]
            if new or process.poll() is not None:
                break
            threading.Event().wait(0.1)
        assert new, "no round appeared in the inbox"
        accept = {"action": "ELICITATION_ACTION_ACCEPT", "content": ADDRESS}
        answer = {"idempotency_key": "tour", "responses": {"shipping_address": accept}}
        status, body = inbox.respond(new[0]["round_id"], answer)
        assert status == 200, body
        out, err = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, out + err
    assert "outcome    succeeded" in out and BOOKED in out


def tour_serve(context: Context) -> None:
    printed = serve("README.md > A five-minute tour > bash[0]", context)
    assert "m3grpc inbox on http://127.0.0.1:" in printed


def bindings(context: Context) -> None:
    out = _python("README.md > Bind your own MCP server > python[0]", context)
    assert out.splitlines() == [f"old succeeded {BOOKED}", f"new succeeded {BOOKED}"]


def operating_commands(context: Context) -> None:
    out = context.bash(
        block(
            "docs/guides/operating/checks-and-migrations.md > check-config, db, health > bash[0]"
        ).code
    )
    assert "configuration OK" in out
    assert "schema at revision" in out
    assert out.splitlines()[-1] == "SERVING"
    assert (context.workdir / "m3.sqlite").is_file()


@contextlib.contextmanager
def serving(code: str, context: Context) -> Iterator[tuple[str, str]]:
    """Run a block that ends in `m3grpc serve`, on free ports, until it is ready; yield
    what it printed and its address, then stop it with SIGTERM (a clean exit)."""
    # A block's own --listen (the replicas' 50051 and 50052) is replaced too: a fixed
    # port can be taken on a busy CI host, and the last --listen given wins.
    code = re.sub(r"(?<![\w-])--listen \S+", "", code).replace(VENV_M3GRPC, "m3grpc")
    code = re.sub(r"\bserve\b", "serve --listen 127.0.0.1:0", code, count=1)
    code = re.sub(r"--metrics-listen \S+", "--metrics-listen 127.0.0.1:0", code)
    code = re.sub(r"--inbox-listen \S+", "--inbox-listen 127.0.0.1:0", code)
    process = subprocess.Popen(
        ["bash", "-e", "-c", code],
        cwd=context.workdir,
        env=context.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    watchdog = threading.Timer(180, os.killpg, (process.pid, signal.SIGKILL))
    watchdog.start()
    printed: list[str] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            printed.append(line)
            if line.startswith(READY_PREFIX):
                break
        assert printed and printed[-1].startswith(READY_PREFIX), printed
        watchdog.cancel()
        yield "".join(printed), printed[-1].removeprefix(READY_PREFIX).strip()
        os.killpg(process.pid, signal.SIGTERM)
        assert process.wait(timeout=90) == 0
    finally:
        watchdog.cancel()
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def serve(key: str, context: Context) -> str:
    """The block's `m3grpc serve` answers health checks (and metrics, when it serves them)."""
    with serving(block(key).code, context) as (printed, address):
        assert context.run(["m3grpc", "health", "--server", address]).strip() == "SERVING"
        for line in printed.splitlines():
            if line.startswith("m3grpc metrics on "):
                with urllib.request.urlopen(line.split()[-1], timeout=30) as page:
                    assert b"m3_rpcs_total" in page.read()
            if line.startswith("m3grpc inbox on "):
                with urllib.request.urlopen(line.split()[-1], timeout=30) as page:
                    assert b"<html" in page.read().lower()
    return printed


def replicas(context: Context) -> None:
    """The replicas section on a fresh database of the test PostgreSQL: the config, the
    upgrade, two replicas; an execution submitted through one is answered through the
    other."""
    if POSTGRES_URL is None:
        pytest.skip("M3_TEST_POSTGRES_URL not set")
    code = block("docs/guides/replicas.md > PostgreSQL replicas > bash[0]").code
    with contextlib.contextmanager(postgres_database)() as url:
        documented = "postgresql+psycopg://m3@127.0.0.1:5432/m3"
        assert documented in code
        code = code.replace(documented, url)
        lines = code.splitlines(keepends=True)
        prelude = "".join(line for line in lines if not line.startswith("m3grpc serve"))
        starts = [line for line in lines if line.startswith("m3grpc serve")]
        assert len(starts) == 2
        assert "schema at revision" in context.bash(prelude)
        with (
            serving(starts[0], context) as (_, first),
            serving(starts[1], context) as (_, second),
        ):
            submit = ["m3grpc", "submit", "--binding", "shipping", "--human-input", "managed"]
            submit += ["--tool", "shipping:book_shipment", "--prompt", "Book it."]
            execution = context.run([*submit, "--server", first]).strip()
            answer = '{"street": "1 Main Street", "city": "Pune"}'
            context.run(["m3grpc", "pending", execution, "--wait", "120", "--server", second])
            respond = ["m3grpc", "respond", "--execution", execution, "--accept", answer]
            context.run([*respond, "--server", second])
            out = context.run(["m3grpc", "result", execution, "--wait", "120", "--server", first])
            assert BOOKED in out


def serve_example(context: Context) -> None:
    serve("docs/guides/grpc-service.md > The gRPC service > bash[0]", context)
    assert (context.workdir / "m3.sqlite").is_file()  # examples/m3.toml's relative database


def serve_observed(context: Context) -> None:
    assert "m3grpc metrics on http://127.0.0.1:" in serve(
        "docs/guides/operating/observability.md > Logs, metrics, health and traces > bash[0]",
        context,
    )


def serve_inbox(context: Context) -> None:
    assert "m3grpc inbox on http://127.0.0.1:" in serve(
        "docs/guides/inbox.md > The web inbox: answering rounds in a browser > bash[0]",
        context,
    )


def serve_for_go(context: Context) -> None:
    serve("clients/go/README.md > Example > bash[0]", context)


def _typescript_ready(context: Context) -> Path:
    """clients/typescript built; call it holding the TYPESCRIPT_DIST lock."""
    package = ROOT / "clients" / "typescript"
    context.run(["bash", str(ROOT / "scripts" / "setup-typescript.sh")])
    context.run([shutil.which("npm") or "npm", "run", "--silent", "build"], cwd=package)
    return package


def typescript_example(context: Context) -> None:
    # Built here, then run from dist/: no other worker rebuilds it in between.
    with exclusive(TYPESCRIPT_DIST):
        package = _typescript_ready(context)
        code = block("clients/typescript/README.md > Example > ts[0]").code
        assert (package / "examples" / "seed.mjs").read_text() == code
        out = context.run(["node", "examples/seed.mjs", context.service.address], cwd=package)
    assert out.startswith("SUCCEEDED ") and BOOKED in out


def _typescript_project(context: Context) -> Path:
    """The README's project: the package packed (`npm pack` rebuilds dist/ through
    `prepare`) and installed into a project made by `npm init -y`."""
    with exclusive(TYPESCRIPT_DIST):
        _typescript_ready(context)
        context.bash(
            block("clients/typescript/README.md > Depend on it from another project > bash[0]").code
        )
    app = context.workdir / "my-app"
    assert (app / "node_modules" / "@m3grpc" / "client" / "dist" / "index.d.ts").is_file()
    return app


def typescript_dependency(context: Context) -> None:
    app = _typescript_project(context)
    # The README's example, in that project (it is plain JavaScript as well as TypeScript).
    program = block("clients/typescript/README.md > Example > ts[0]").code
    (app / "seed.mjs").write_text(program)
    out = context.run(["node", "seed.mjs", context.service.address], cwd=app)
    assert out.startswith("SUCCEEDED ") and BOOKED in out


def typescript_module(context: Context) -> None:
    """The README's example as `seed.mts` in that project (npm 11's `"type":
    "commonjs"`), compiled by the block's `tsc --init` and `tsc`, then run."""
    app = _typescript_project(context)
    assert '"type": "commonjs"' in (app / "package.json").read_text()
    (app / "seed.mts").write_text(block("clients/typescript/README.md > Example > ts[0]").code)
    code = block("clients/typescript/README.md > Example > bash[0]").code
    out = context.run(
        ["bash", "-e", "-c", code.replace(DEFAULT_ADDRESS, context.service.address)], cwd=app
    )
    last = out.splitlines()[-1]  # after npm's and tsc's own lines
    assert last.startswith("SUCCEEDED ") and BOOKED in last, out


def encryption_keys(context: Context) -> None:
    out = context.bash(block("docs/guides/security.md > Encryption at rest > bash[0]").code)
    assert "ok    encryption: answers sealed with key '2026-11'" in out
    assert "0 responses re-encrypted with key '2026-12'" in out


RUNS: dict[str, Callable[[Context], None]] = {
    "README.md > A five-minute tour > bash[0]": tour_serve,
    "README.md > A five-minute tour > bash[1]": tour_cli,
    "README.md > A five-minute tour > bash[2]": tour_inbox,
    "README.md > Bind your own MCP server > python[0]": bindings,
    "docs/guides/embedded-kit.md > A first program > python[0]": embedded_python,
    "docs/guides/grpc-service.md > The gRPC service > bash[0]": serve_example,
    "docs/guides/operating/checks-and-migrations.md > check-config, db, health > bash[0]": (
        operating_commands
    ),
    "docs/guides/operating/observability.md > Logs, metrics, health and traces > bash[0]": (
        serve_observed
    ),
    "docs/guides/replicas.md > PostgreSQL replicas > bash[0]": replicas,
    "docs/guides/inbox.md > The web inbox: answering rounds in a browser > bash[0]": serve_inbox,
    "docs/guides/clients/python.md > Use > python[0]": remote_python,
    "docs/guides/security.md > Encryption at rest > bash[0]": encryption_keys,
    "docs/guides/cli.md > A session > bash[0]": cli_session,
    "clients/typescript/README.md > Depend on it from another project > bash[0]": (
        typescript_dependency
    ),
    "clients/typescript/README.md > Example > ts[0]": typescript_example,
    "clients/typescript/README.md > Example > bash[0]": typescript_module,
    "clients/go/README.md > Example > bash[0]": serve_for_go,
}

RUN_ELSEWHERE: dict[str, str] = {
    # The documentation's first program with "claude-code" and a Claude model id, as
    # this fragment shows it, embedded and over gRPC.
    "docs/guides/harnesses/claude-code.md > The `claude-code` harness: Anthropic's Claude "
    "Code CLI > python[0]": "tests/harness/test_documented_program.py",
    "clients/go/README.md > Use it from another module > bash[0]": (
        "tests/dependents/test_go_module.py"
    ),
    # clients/go/examples/quickstart/readme_test.go keeps the block equal to main.go.
    "clients/go/README.md > Example > go[0]": "tests/dependents/test_go_module.py",
    "clients/go/README.md > Errors > go[0]": "tests/dependents/test_go_module.py",
    # The full campaign runs for tens of minutes; the test runs the same command
    # line with 20 executions and 3 kills per backend.
    "docs/how-it-works/crash-campaign.md > Crash campaign > bash[0]": (
        "tests/campaigns/test_crash_campaign.py"
    ),
}

SKIPS: dict[str, str] = {
    "docs/guides/harnesses/claude-code-notes.md > How the runs were made > sh[0]": (
        "the notes' probe runs, made by hand to recheck each fact on a new CLI (each prints "
        "a whole protocol exchange); tests/harness/test_claude_code_host.py and the harness "
        "matrix drive the same CLI through the same host in the suite"
    ),
    "docs/guides/security.md > Calling a secured service > python[0]": (
        "needs a TLS service, certificate files and a token; tests/api/test_auth.py makes "
        "those (tests/support/certs.py) and calls the kit with TlsOptions and a token"
    ),
    "clients/typescript/README.md > API > ts[0]": (
        "a fragment showing how to pass an OpenTelemetry interceptor (it needs "
        "@opentelemetry/api, not a dependency here); tests/api/test_tracing.py and the "
        "client's interceptors.test.ts cover propagation"
    ),
    "README.md > The two commands > bash[0]": (
        "installs the package into a new virtual environment (minutes of pip) and runs "
        "scripts/test.sh, the command that runs this test; tests/test_demo.py runs the demo "
        "of the first line and pins the line itself"
    ),
    "docs/guides/clients/python.md > Install > bash[0]": (
        "a placeholder path; tests/api/test_client_install.py builds this checkout's wheel, "
        "installs it without extras into a fresh virtual environment and runs the client, "
        "and tests/ops/test_installed_wheel.py builds the wheel and the sdist with "
        "python -m build and checks them with twine"
    ),
    "docs/guides/operating/container.md > Run it in a container > bash[0]": (
        "docker cannot run on this project's machines; tests/docker runs the image's "
        "entrypoint (with the first round's submit, pending, respond and result against the "
        "configuration it writes) and the compose configuration, and "
        "scripts/lint-container.sh lints the files"
    ),
    "clients/typescript/README.md > Development > bash[0]": (
        "the development loop: regenerates committed code and runs the unit tests and the "
        "scenario driver (its PORT is a placeholder); scripts/test.sh runs each of these "
        "(check-proto.sh's drift check, npm test) and tests/scenarios runs the driver"
    ),
    "clients/go/README.md > Development > bash[0]": (
        "the development loop: installs the code generators, regenerates committed code, "
        "vets and tests the module and runs the scenario driver (PORT is a placeholder); "
        "scripts/test.sh and tests/scenarios run each of these"
    ),
}


def test_every_code_block_is_accounted_for() -> None:
    found = blocks()
    languages = {entry.language for entry in found}
    unclassified = languages - CODE_LANGUAGES - NOT_CODE - CONFIG
    assert not unclassified, f"unclassified: {unclassified}"
    code = {entry.key for entry in found if entry.language in CODE_LANGUAGES}
    assert len(code) == len([e for e in found if e.language in CODE_LANGUAGES])
    accounted = [*RUNS, *RUN_ELSEWHERE, *SKIPS]
    assert len(accounted) == len(set(accounted)), "a block is listed twice"
    assert code == set(accounted), (
        f"not run or skipped: {sorted(code - set(accounted))}; "
        f"listed but gone: {sorted(set(accounted) - code)}"
    )
    for key, test in RUN_ELSEWHERE.items():
        heading = key.split(" > ")[1]
        assert heading in (ROOT / test).read_text(), f"{test} does not name {heading!r}"
    assert all(len(reason) > 40 for reason in SKIPS.values())


@pytest.mark.parametrize("key", sorted(RUNS))
def test_the_block_runs_as_written(key: str, context: Context) -> None:
    RUNS[key](context)


@pytest.mark.parametrize(
    "key", sorted(entry.key for entry in blocks() if entry.language in CONFIG) or ["none"]
)
def test_the_config_fragment_is_a_valid_configuration(key: str, tmp_path: Path) -> None:
    if key == "none":
        pytest.skip("no TOML fragments in the documents")
    from m3grpc.api.config import load_config

    path = tmp_path / "fragment.toml"
    path.write_text(block(key).code)
    load_config(str(path))  # raises ConfigError on an unknown key or a bad value
