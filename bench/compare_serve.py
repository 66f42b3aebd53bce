"""`m3grpc serve` as bench/compare.py starts it: the service's own command line, plus a probe
that reads the pragmas of every SQLite connection the service's engine hands out and writes
them to the file named by M3_BENCH_PRAGMA_FILE (the benchmark cannot ask the process).

    python bench/compare_serve.py serve --config m3.toml --listen 127.0.0.1:0
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from compare_common import PragmaProbe

if __name__ == "__main__":
    PragmaProbe(os.environ.get("M3_BENCH_PRAGMA_FILE")).install()
    from m3grpc.cli import main

    raise SystemExit(main())
