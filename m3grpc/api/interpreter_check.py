"""Whether a stdio binding's Python interpreter has the packages its server imports
(`m3grpc check-config`, serve's start-up summary).

A binding such as `command = "python3"`, `args = ["examples/shipping_server.py"]`
names an interpreter found on PATH; when that is the system's Python rather than
the environment M3 was installed into, the server dies on its first import and
every execution fails `server_unavailable`. The check reads the script's top-level
imports (or the `-m` module) and asks that interpreter, in the environment and
directory the server would start in, which of them it cannot find. It imports
nothing: `importlib.util.find_spec` only looks.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from m3grpc.servers import StdioServer, inherited_environment

# python, python3, python3.11, ... (what a binding names as its interpreter).
_PYTHON = re.compile(r"python(\d+(\.\d+)*)?")
# Interpreter options that take a value (`python -X dev script.py`).
_OPTIONS_WITH_VALUE = {"-X", "-W", "--check-hash-based-pycs"}
_PROBE_SECONDS = 15.0
_PROBE = """\
import importlib.util, json, sys
sys.path[0] = sys.argv[1]  # the script's directory, where `python -c` has its cwd
names = json.loads(sys.argv[2])
def missing(name):
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):
        return True
print(json.dumps([name for name in names if missing(name)]))
"""


@dataclass(frozen=True)
class MissingModules:
    """Modules the interpreter cannot find, and what imports them."""

    interpreter: str
    modules: tuple[str, ...]
    imported_by: str  # the script's path as the binding names it, or "-m MODULE"

    def describe(self) -> str:
        return (
            f"{self.interpreter} cannot import {', '.join(self.modules)} "
            f"(imported by {self.imported_by}): install them into that interpreter, "
            "or name one that has them as the binding's command"
        )


def is_python(command: str) -> bool:
    return _PYTHON.fullmatch(Path(command).name) is not None


def missing_modules(binding: StdioServer, interpreter: str) -> MissingModules | None:
    """What `interpreter` (the binding's command, resolved) lacks of what the binding's
    script or module imports; None when nothing is missing or it cannot be told
    (no script, `-c`, an unreadable file, an interpreter that does not answer)."""
    target = _target(binding.args)
    if target is None:
        return None
    kind, value = target
    cwd = binding.cwd or Path.cwd()
    if kind == "module":
        names, search, imported_by = [value.split(".")[0]], cwd, f"-m {value}"
    else:
        script = Path(cwd) / value
        try:
            tree = ast.parse(script.read_bytes(), filename=str(script))
        except (OSError, SyntaxError, ValueError):
            return None  # the server's own start reports it
        search = script.parent
        names = [name for name in _imports(tree) if not _local(search, name)]
        imported_by = value
    if not names:
        return None
    try:
        done = subprocess.run(
            [interpreter, "-c", _PROBE, str(search), json.dumps(names)],
            cwd=cwd,
            env=inherited_environment(binding),
            capture_output=True,
            text=True,
            timeout=_PROBE_SECONDS,
            check=False,
        )
        missing = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    if not missing:
        return None
    return MissingModules(interpreter, tuple(missing), imported_by)


def _target(args: Sequence[str]) -> tuple[str, str] | None:
    """("script", path) or ("module", name) as the interpreter reads its arguments."""
    arguments = iter(args)
    for argument in arguments:
        if argument == "-m":
            module = next(arguments, None)
            return ("module", module) if module else None
        if argument == "-c" or argument == "-":
            return None
        if argument in _OPTIONS_WITH_VALUE:
            next(arguments, None)
            continue
        if argument.startswith("-"):
            continue
        return ("script", argument)
    return None


def _imports(tree: ast.Module) -> list[str]:
    """The top-level packages the module imports at its top level, in order."""
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            found = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found = [node.module]
        else:
            continue
        for name in found:
            root = name.split(".")[0]
            if root != "__future__" and root not in names:
                names.append(root)
    return names


def _local(directory: Path, name: str) -> bool:
    """Whether `name` is a module beside the script (its directory is on sys.path)."""
    return (directory / f"{name}.py").is_file() or (directory / name).is_dir()
