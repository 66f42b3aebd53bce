"""The layer picture of docs/architecture.md, enforced: every m3grpc module's
m3grpc imports (and, for the light layers, third-party imports) against the
allowed-dependency table. Imports inside functions and TYPE_CHECKING blocks count."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "m3grpc"

MODELS = {
    "types",
    "errors",
    "specs",
    "servers",
    "fieldpath",
    "form_schema",
    "plan",
    "submit_options",
    "clipping",
    "text",
    "waits",
    "tracing",
}
TOP_LEVEL = {"kit": "kit", "demo": "demo", "cli": "cli", "__main__": "cli"}

# layer -> the layers its modules may import (docs/architecture.md)
ALLOWED: dict[str, set[str]] = {
    "models": {"models"},
    "wire": {"models", "wire"},
    "client": {"models", "wire", "client"},
    "storage": {"models", "storage"},
    "harness": {"models", "harness"},
    "runtime": {"models", "storage", "harness", "runtime"},
    "kit": {"models", "storage", "harness", "runtime", "kit"},
    "api": {"models", "wire", "runtime", "api"},
    "devtools": {"devtools"},
    "demo": {"models", "client", "devtools", "demo"},
    "cli_remote": {"models", "wire", "client", "cli_remote"},
    "ops": {"models", "api", "runtime", "storage", "ops"},
    "cli": {"api", "demo", "cli_remote", "ops", "cli"},
}
# The remote client must install and import with grpcio, grpcio-status, protobuf
# and pydantic only: these layers import none of the server's dependencies.
LIGHT = {"models", "wire", "client", "cli_remote"}
SERVER_ONLY = {
    "sqlalchemy",
    "greenlet",
    "alembic",
    "jsonschema",
    "mcp",
    "mcp_types",
    "anyio",
    "httpx",
    "httpx2",
    "httpcore2",
    "httptools",
    "referencing",
    "grpc_health",
    "grpc_reflection",
    "prometheus_client",
    "psycopg",
    "rfc3339_validator",
    "rfc3986_validator",
}


def layer_of(module: str) -> str | None:
    """The layer of a dotted m3grpc module name; "root" for the package itself."""
    parts = module.split(".")
    assert parts[0] == "m3grpc", module
    if len(parts) == 1:
        return "root"
    head = parts[1]
    if head in MODELS:
        return "models"
    if head in TOP_LEVEL:
        return TOP_LEVEL[head]
    if head in ALLOWED:
        return head
    return None


def _module_name(path: Path) -> str:
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, dotted name) of every import in the file, relative ones resolved."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _import_base(node, module, is_package)
            for alias in node.names:
                # `from m3grpc import fieldpath` imports a module; `from m3grpc.x import y`
                # imports from m3grpc.x (y a name or a submodule of the same layer).
                if base == "m3grpc":
                    found.append((node.lineno, f"m3grpc.{alias.name}"))
                else:
                    found.append((node.lineno, base))
    return found


def _import_base(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The dotted module a `from ... import` names, a relative one resolved."""
    base = node.module or ""
    if not node.level:
        return base
    anchor = module.split(".")
    if not is_package:
        anchor = anchor[:-1]
    anchor = anchor[: len(anchor) - (node.level - 1)]
    return ".".join([*anchor, base] if base else anchor)


MODULES = sorted(
    path for path in PACKAGE.rglob("*.py") if "gen" not in path.relative_to(PACKAGE).parts
)


def test_every_module_has_a_layer() -> None:
    orphans = [_module_name(path) for path in MODULES if layer_of(_module_name(path)) is None]
    assert not orphans, f"add these modules to a layer (docs/architecture.md): {orphans}"


@pytest.mark.parametrize("path", MODULES, ids=lambda path: _module_name(path))
def test_imports_follow_the_layers(path: Path) -> None:
    module = _module_name(path)
    layer = layer_of(module)
    if layer in (None, "root"):  # the root re-exports lazily; orphans fail above
        return
    allowed = ALLOWED[layer]
    wrong = []
    for line, name in _imports(path, module):
        top = name.split(".")[0]
        if top == "m3grpc":
            target = layer_of(name)
            if target not in allowed:
                wrong.append(f"line {line}: {name} ({target})")
        elif layer in LIGHT and top in SERVER_ONLY:
            wrong.append(f"line {line}: {name} (a server-only dependency)")
    assert not wrong, f"{module} ({layer}) may import only {sorted(allowed)}: {wrong}"


def test_the_layer_check_sees_a_violation(tmp_path: Path) -> None:
    # The checker itself: a wire module importing storage or sqlalchemy is caught.
    source = tmp_path / "probe.py"
    source.write_text(
        "from m3grpc.storage import SqlExecutionStore\n"
        "def f():\n    import sqlalchemy\n"
        "from m3grpc import types\n"
    )
    names = sorted(name for _, name in _imports(source, "m3grpc.wire.probe"))
    assert names == ["m3grpc.storage", "m3grpc.types", "sqlalchemy"]
    assert layer_of("m3grpc.storage") not in ALLOWED["wire"]
    assert layer_of("m3grpc.types") in ALLOWED["wire"]


def _module_imports(path: Path, module: str, known: set[str]) -> set[str]:
    """The m3grpc modules `module` imports. `from m3grpc.storage import events` names
    the submodule, `from m3grpc.storage import X` (a re-exported name) the package;
    a package that a submodule's import runs first is not counted."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _import_base(node, module, is_package)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                names.append(submodule if submodule in known else base)
    found = set()
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name not in (module, "m3grpc"):
            found.add(name)
    return found


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles of `graph` (module -> the modules it imports): each the sorted
    modules (two or more) that all reach one another through their imports."""
    return sorted(sorted(members) for members in _strongly_connected(graph) if len(members) > 1)


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    # Tarjan's algorithm, iterative (a deep chain of imports must not hit the recursion limit).
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            step = next((w for w in successors if w in graph), None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph[step]))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.add(member)
                    if member == node:
                        break
                found.append(members)
    return found


def test_no_import_circle_inside_a_package() -> None:
    # One direction inside a package too (storage's engine knows nothing above it:
    # what a commit sets off is registered with it from above). Every import counts.
    modules = {_module_name(path): path for path in MODULES}
    graph = {
        module: _module_imports(path, module, set(modules)) for module, path in modules.items()
    }
    circles = [
        {module: sorted(graph[module] & set(circle)) for module in circle}
        for circle in import_circles(graph)
    ]
    assert not circles, (
        f"modules that import one another (module: its imports in the circle): {circles}"
    )


def test_the_circle_check_sees_a_circle() -> None:
    graph = {
        "engine": {"group_commit"},
        "group_commit": {"appended"},
        "appended": {"events"},
        "events": {"engine", "schema"},
        "schema": set(),
        "migrate": {"engine"},
    }
    assert import_circles(graph) == [["appended", "engine", "events", "group_commit"]]
    graph["events"] = {"schema"}
    assert import_circles(graph) == []
