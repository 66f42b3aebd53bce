"""`m3.types` is `m3grpc.types` under the documentation's import name (see `m3`)."""

import sys

import m3grpc.types
from m3grpc.types import *  # noqa: F403  (the same names, for type checkers)

sys.modules[__name__] = m3grpc.types
