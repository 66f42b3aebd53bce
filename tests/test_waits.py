"""How every face of the API reads a wait's timeout (m3grpc.waits)."""

from __future__ import annotations

import math

import pytest

from m3grpc.errors import ModelValidationError
from m3grpc.waits import UNLIMITED_ABOVE_SECONDS, wait_seconds


@pytest.mark.parametrize(
    ("timeout", "seconds"),
    [
        (None, None),
        (0, 0.0),
        (2.5, 2.5),
        (-1, 0.0),  # gives up at once
        (-(10**400), 0.0),
        (UNLIMITED_ABOVE_SECONDS, UNLIMITED_ABOVE_SECONDS),
        (UNLIMITED_ABOVE_SECONDS * 10, None),  # longer than anyone means: no limit
        (math.inf, None),
        (10**400, None),
    ],
)
def test_wait_seconds(timeout: object, seconds: float | None) -> None:
    assert wait_seconds(timeout) == seconds


@pytest.mark.parametrize("timeout", [math.nan, "10", True, [1]])
def test_what_is_no_number_of_seconds_is_refused(timeout: object) -> None:
    with pytest.raises(ModelValidationError) as caught:
        wait_seconds(timeout, "--wait")
    assert [v.field for v in caught.value.field_violations] == ["--wait"]
