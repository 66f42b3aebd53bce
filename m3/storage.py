"""`m3.storage` is `m3grpc.storage` under the documentation's import name (see `m3`)."""

import sys

import m3grpc.storage
from m3grpc.storage import *  # noqa: F403  (the same names, for type checkers)

sys.modules[__name__] = m3grpc.storage
