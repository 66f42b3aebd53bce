"""Process set-up for memory, shared by `m3grpc serve` and its worker processes
(issue 11: RSS with many paused executions). Standard library only: it runs before
the service's libraries are imported.
"""

from __future__ import annotations

import ctypes
import gc
import os
import sys

# The cyclic garbage collector's thresholds in the service (Python's: 700, 10, 10). A
# legacy round leaves a few hundred young container objects and about 140 in garbage
# cycles; at 700, generation 0 was collected about twice a round and the collections
# took 5-7% of the service's CPU (their time summed by `gc.callbacks`, 16 legacy rounds
# in flight); at 10,000 a quarter to a third of that. The young objects wait longer for
# a collection: a few MB at most.
SERVICE_GC_THRESHOLDS = (10_000, 10, 10)

# glibc's mallopt parameter for the number of malloc arenas (malloc.h).
_M_ARENA_MAX = -8
# Arenas the service lets glibc create. By default glibc gives each thread that
# allocates while another holds an arena a new one, up to 8 per core: the service's
# store, lease, gRPC and executor threads each fragmented an arena of their own, ~10 MB
# of RSS with 1,000 executions paused (bench/compare.py --scale 1000). Python allocates
# under the GIL, so two arenas cost no measurable speed.
SERVICE_MALLOC_ARENAS = 2


def limit_malloc_arenas(arenas: int = SERVICE_MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas before the process starts its threads; True if set.
    Not glibc, or MALLOC_ARENA_MAX set by the operator: left alone."""
    if os.environ.get("MALLOC_ARENA_MAX") or not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False  # another C library (musl has no arenas to cap)
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, arenas))


def skip_trio() -> None:
    """Keep trio out of the process: httpcore2 (httpx2's transport, which the MCP
    sessions use only through proxies) imports it when it is installed (for clients
    run on trio), ~4 MB of RSS; the service runs its HTTP clients on asyncio only,
    where httpcore2 never uses it (it treats trio as absent). Call it before
    httpcore2 is imported."""
    sys.modules.setdefault("trio", None)  # type: ignore[arg-type]


def freeze_startup_objects() -> None:
    """Move every object alive once the process has started (modules, schemas, compiled
    statements: ~150,000 in `m3grpc serve`) out of the cyclic garbage collector's
    generations. They live as long as the process, yet each full collection walked
    them all: 30-40 ms a collection, a pause every few hundred rounds under load.
    Call it once, after start-up."""
    gc.freeze()


def collect_less_often(thresholds: tuple[int, int, int] = SERVICE_GC_THRESHOLDS) -> None:
    """Set the service's collector thresholds (`SERVICE_GC_THRESHOLDS`). Only in the
    service's own processes: the embedded kit leaves its application's collector as
    it is."""
    gc.set_threshold(*thresholds)
