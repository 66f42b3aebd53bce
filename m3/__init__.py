"""`m3`: the import name the product documentation uses for M3's embedded API.

The same objects as `m3grpc` (`from m3 import MCPTestKit` is `m3grpc.MCPTestKit`),
loaded on first use as there; `m3.storage`, `m3.types` and `m3.errors` are
`m3grpc.storage`, `m3grpc.types` and `m3grpc.errors`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import m3grpc
from m3grpc import __all__ as __all__

if TYPE_CHECKING:
    from m3grpc import *  # noqa: F403  (the same names, for type checkers)


def __getattr__(name: str) -> Any:
    return getattr(m3grpc, name)


def __dir__() -> list[str]:
    return dir(m3grpc)
