"""Log set-up for `m3grpc serve`: one line per event, as text or as JSON.

Every record goes through one handler on the root logger, so the service's own
lines, the lifecycle events (`m3grpc.lifecycle`), the RPC lines
(`m3grpc.rpc`) and what the `grpc` and `asyncio` libraries log through Python
logging share one format. gRPC's C core writes to stderr by itself, outside
Python logging: `configure_logging` sets `GRPC_VERBOSITY=ERROR` (unless the
environment already sets it) before grpc is first imported, so only its errors
appear there.

This module imports no grpc: the CLI calls it before loading the server.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

LogFormat = Literal["text", "json"]

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = frozenset(vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None)).keys()) | {
    "message",
    "asctime",
    "taskName",
}


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The structured fields a record carries (`extra=`), without the standard ones."""
    return {
        key: value
        for key, value in vars(record).items()
        if key not in _STANDARD and not key.startswith("_")
    }


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, the record's fields,
    and `exc_info` (the traceback as one string) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in extra_fields(record).items():
            entry.setdefault(key, value)
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exc_info"] = record.exc_text
        return json.dumps(entry, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """`TIME LEVEL LOGGER: message key=value ...`; a traceback follows on its lines."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = " ".join(
            f"{key}={value}" for key, value in extra_fields(record).items() if value is not None
        )
        if not fields:
            return line
        head, newline, tail = line.partition("\n")
        return f"{head} {fields}{newline}{tail}"


def configure_logging(
    level: str = "warning", log_format: LogFormat = "text", stream: TextIO | None = None
) -> None:
    """Route every Python log record (the service's, grpc's and asyncio's) to
    `stream` (stderr) in `log_format`, at `level` and above."""
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # Libraries that may have set up handlers of their own log through the root's.
    for name in ("grpc", "asyncio"):
        library = logging.getLogger(name)
        for old in list(library.handlers):
            library.removeHandler(old)
        library.propagate = True
    logging.captureWarnings(True)
