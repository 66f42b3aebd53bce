"""A wait's timeout, read the same way by every face of the API: the embedded
handles, the remote client and the command line.

None waits without limit, and so does a timeout longer than anyone means
(infinity included): such a number overflows the clocks and deadlines it would
meet (gRPC's call deadline expired at once for 1e10 s). A negative timeout is
zero: the wait gives up at once. NaN is no timeout at all; it used to make an
embedded wait never give up, and the remote client raise an untyped ValueError.
"""

from __future__ import annotations

import math

from m3grpc.errors import FieldViolation, ModelValidationError

# About 31 years: any longer wait is a wait without limit.
UNLIMITED_ABOVE_SECONDS = 1e9


def wait_seconds(timeout: object, field: str = "timeout") -> float | None:
    """`timeout` as seconds to wait (None: without limit); ModelValidationError
    naming `field` if it is not a number of seconds."""
    if timeout is None:
        return None
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or (isinstance(timeout, float) and math.isnan(timeout))
    ):
        raise ModelValidationError(
            f"invalid {field}",
            field_violations=[
                FieldViolation(field, "must be a number of seconds, or None to wait without limit")
            ],
        )
    if timeout > UNLIMITED_ABOVE_SECONDS:
        return None
    return float(timeout) if timeout > 0 else 0.0
