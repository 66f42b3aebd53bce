"""Documents the verbs read: JSON (or TOML) given inline, as `@FILE`, or `-` for stdin."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path
from typing import Any

from m3grpc.cli_remote.exits import CliInputError


def read_text(source: str, what: str) -> tuple[str, str]:
    """The text `source` names and where it came from: `-` stdin, `@PATH` a file,
    anything else the text itself."""
    if source == "-":
        return sys.stdin.read(), "stdin"
    if source.startswith("@"):
        return _file(Path(source[1:]), what), source[1:]
    return source, "the argument"


def read_spec_file(source: str) -> dict[str, Any]:
    """An AgentSpec document: a JSON or TOML file path, or `-` for stdin."""
    if source == "-":
        text, origin = sys.stdin.read(), "stdin"
    else:
        path = Path(source.removeprefix("@"))
        text, origin = _file(path, "spec"), str(path)
        if path.suffix == ".toml":
            return _object(_toml(text, origin), origin, "spec")
    try:
        return _object(json.loads(text), origin, "spec")
    except json.JSONDecodeError as json_error:
        try:
            return _object(tomllib.loads(text), origin, "spec")
        except tomllib.TOMLDecodeError:
            raise CliInputError(
                f"spec in {origin} is neither JSON nor TOML: {json_error}"
            ) from None


def read_json_object(source: str, what: str) -> dict[str, Any]:
    text, origin = read_text(source, what)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise CliInputError(f"{what} in {origin} is not JSON: {error}") from None
    return _object(value, origin, what)


def _file(path: Path, what: str) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise CliInputError(f"cannot read {what} file {str(path)!r}: {error}") from None


def _toml(text: str, origin: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise CliInputError(f"spec in {origin} is not TOML: {error}") from None


def _object(value: Any, origin: str, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise CliInputError(f"{what} in {origin} must be a JSON object, not {type(value).__name__}")
    return value
