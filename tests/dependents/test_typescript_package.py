"""The TypeScript client as another project depends on it: `npm pack` makes a
tarball of the built package (no tests, no scenario driver, no sources), a fresh
npm project installs it (its dependencies from the registry), type-checks a
program against the package's declarations and runs it against a live service:
submit, pending, respond (and a conflicting repeat, a typed error), result.
A fresh clone packs it (nothing installed before), and a project made with
npm's and tsc's own defaults compiles and runs the README's example as a `.mts`
file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import ADDRESS, BOOKED, ROOT, ServerProcess
from tests.support.locks import TYPESCRIPT_DIST, exclusive

pytestmark = pytest.mark.node

PACKAGE = ROOT / "clients" / "typescript"
NPM = shutil.which("npm") or "npm"

PROGRAM = """\
import {
  ExecutionOutcome, M3Client, ManagedInputConflictError, ManagedInputStatus,
} from "@m3grpc/client";

const m3 = new M3Client(process.argv[2] ?? "127.0.0.1:50051");
try {
  const { executionId } = await m3.submit({
    server: "shipping", tools: ["shipping:book_shipment"], humanInput: "managed",
    prompt: "Book it.",
  });
  let round = await m3.getPending(executionId);
  for (let attempt = 0; round === undefined && attempt < 1200; attempt++) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    round = await m3.getPending(executionId);
  }
  if (round === undefined) throw new Error(`no round of ${executionId} became pending`);
  const key = `address-${round.roundId}`;
  const reply = await m3.respond({ roundId: round.roundId, idempotencyKey: key,
    responses: { shipping_address: { action: "accept", content: ADDRESS } } });
  let conflict = "none";
  try {
    await m3.respond({ roundId: round.roundId, idempotencyKey: key,
      responses: { shipping_address: { action: "decline" } } });
  } catch (error) {
    if (error instanceof ManagedInputConflictError) conflict = error.reason;
    else throw error;
  }
  const result = await m3.result(executionId, { timeoutSeconds: 120 });
  console.log(JSON.stringify({
    requests: Object.keys(round.requests),
    status: ManagedInputStatus[reply.status],
    conflict,
    outcome: ExecutionOutcome[result.outcome],
    content: result.operations[0]?.result?.content,
  }));
} finally {
  m3.close();
}
"""


def _run(command: list[str], cwd: Path, timeout: float = 600) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _setup() -> Path:
    """The package's own dev dependencies (tsc, @types/node), as scripts/test.sh installs them."""
    _run(["bash", str(ROOT / "scripts" / "setup-typescript.sh")], ROOT)
    return PACKAGE / "node_modules"


@pytest.fixture(scope="module")
def tarball(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _setup()
    destination = tmp_path_factory.mktemp("pack")
    # `npm pack` runs the `prepare` script, which builds dist/ first.
    with exclusive(TYPESCRIPT_DIST):
        _run([NPM, "pack", "--pack-destination", str(destination)], PACKAGE)
    [packed] = destination.glob("*.tgz")
    return packed


def test_the_tarball_holds_the_built_package_only(tarball: Path) -> None:
    with tarfile.open(tarball) as archive:
        names = sorted(archive.getnames())
        manifest = json.loads(archive.extractfile("package/package.json").read())  # type: ignore[union-attr]
    assert {"package/LICENSE", "package/README.md", "package/package.json"} <= set(names)
    for built in ("index", "client", "errors", "gen/m3/v1/execution_service_pb"):
        assert f"package/dist/{built}.js" in names
        assert f"package/dist/{built}.d.ts" in names
    for name in names:
        assert not name.startswith(("package/src/", "package/dist/test/", "package/proto/")), name
        assert "scenarios" not in name and not name.endswith((".ts.map", ".js.map")), name
    assert "private" not in manifest
    assert manifest["license"] == "Apache-2.0"
    assert manifest["exports"]["."] == {"types": "./dist/index.d.ts", "default": "./dist/index.js"}


def test_a_fresh_project_installs_the_tarball_and_answers_a_round(
    tarball: Path, service: ServerProcess, tmp_path: Path
) -> None:
    consumer = tmp_path / "consumer"
    consumer.mkdir()
    (consumer / "package.json").write_text(
        json.dumps({"name": "consumer", "version": "1.0.0", "private": True, "type": "module"})
    )
    # Its dependencies come from the registry (or npm's cache, so this also runs offline
    # once they were fetched).
    _run([NPM, "install", "--no-audit", "--no-fund", "--prefer-offline", str(tarball)], consumer)
    program = PROGRAM.replace("ADDRESS", json.dumps(ADDRESS))
    (consumer / "main.ts").write_text(program)
    # Type-checked against the installed package's declarations (its `types` / `exports`),
    # with the compiler and Node's types of the client's own dev dependencies.
    modules = _setup()
    (consumer / "tsconfig.json").write_text(
        json.dumps(
            {
                "compilerOptions": {
                    "target": "ES2022",
                    "module": "NodeNext",
                    "moduleResolution": "NodeNext",
                    "strict": True,
                    "outDir": "out",
                    "typeRoots": [str(modules / "@types")],
                    "types": ["node"],
                },
                "files": ["main.ts"],
            }
        )
    )
    _run([str(modules / ".bin" / "tsc"), "-p", str(consumer)], consumer)
    done = subprocess.run(
        ["node", "out/main.js", service.address],
        cwd=consumer,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ},
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "requests": ["shipping_address"],
        "status": "RESPONSE_VALIDATED",
        "conflict": "MANAGED_INPUT_CONFLICT",
        "outcome": "SUCCEEDED",
        "content": [{"type": "text", "text": BOOKED}],
    }


def _manifest(tarball: Path) -> Any:
    with tarfile.open(tarball) as archive:
        return json.loads(archive.extractfile("package/package.json").read())  # type: ignore[union-attr]


def test_a_fresh_clone_packs_the_package_for_a_project_made_with_the_defaults(
    service: ServerProcess, tmp_path: Path
) -> None:
    # A fresh clone: the package's tracked files, no node_modules, no dist. `npm pack`
    # failed there (`tsc: not found`) until `npm ci`.
    clone = tmp_path / "clone"
    listed = _run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "clients/typescript"],
        ROOT,
    )
    for name in listed.split():
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, clone / name)
    assert not (clone / "clients" / "typescript" / "node_modules").exists()
    packed = tmp_path / "packed"
    packed.mkdir()
    _run(
        [
            NPM,
            "pack",
            "./clients/typescript",
            "--pack-destination",
            str(packed),
            "--prefer-offline",
        ],
        clone,
    )
    [tarball] = packed.glob("*.tgz")
    manifest = _manifest(tarball)
    # A scoped package is published restricted unless it says otherwise.
    assert manifest["name"].startswith("@") and manifest["publishConfig"] == {"access": "public"}

    # A new project as npm and tsc make one: `npm init -y` (npm 11 writes
    # "type": "commonjs") and `tsc --init` (module nodenext, verbatimModuleSyntax).
    # A .ts file is CommonJS there (TS1309 on the example's top-level await, TS1295
    # on its import); a .mts file is an ES module whatever the project's type.
    app = tmp_path / "my-app"
    app.mkdir()
    _run([NPM, "init", "-y"], app)
    dev = json.loads((PACKAGE / "package.json").read_text())["devDependencies"]
    tools = [f"typescript@{dev['typescript']}", f"@types/node@{dev['@types/node']}"]
    install = [NPM, "install", "--no-audit", "--no-fund", "--prefer-offline", str(tarball)]
    _run([*install, *tools], app)
    npx = [NPM, "exec", "--no", "--"]
    _run([*npx, "tsc", "--init", "--types", "node"], app)
    example = (PACKAGE / "examples" / "seed.mjs").read_text()  # the README's example
    (app / "seed.mts").write_text(example)
    _run([*npx, "tsc"], app)
    out = _run(["node", "seed.mjs", service.address], app, timeout=300)
    assert out.startswith("SUCCEEDED ") and BOOKED in out, out
