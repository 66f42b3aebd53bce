"""`m3grpc check-config [FILE] [--no-database]`: the configuration, its bindings and
its database, checked and summarised (m3grpc/api/preflight.py does the checks).

Exit 0: every check passed; 1: a check failed (each failure is an `error` line);
2: FILE cannot be read or is not a valid configuration (one `m3grpc:` line).
"""

from __future__ import annotations

import os
import sys

from m3grpc.api.config import ConfigError, load_config
from m3grpc.api.preflight import preflight


def run_check_config(path: str | None, *, check_database: bool = True) -> int:
    source = path or os.environ.get("M3_CONFIG") or None
    try:
        config = load_config(source)
    except ConfigError as exc:
        print(f"m3grpc: {exc}", file=sys.stderr)
        return 2
    result = preflight(config, source, check_database=check_database)
    for line in result.lines():
        print(line)
    problems = len(result.errors)
    if problems:
        print(f"{problems} problem{'s' if problems > 1 else ''} found")
        return 1
    print("configuration OK")
    return 0
