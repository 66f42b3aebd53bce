"""`m3.errors` is `m3grpc.errors` under the documentation's import name (see `m3`)."""

import sys

import m3grpc.errors
from m3grpc.errors import *  # noqa: F403  (the same names, for type checkers)

sys.modules[__name__] = m3grpc.errors
