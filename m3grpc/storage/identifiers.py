"""Identifier checks shared by the stores and the runtime."""

from __future__ import annotations

from m3grpc.errors import FieldViolation, ManagedInputValidationError
from m3grpc.text import text_problem


def require_identifier(value: object, field: str) -> str:
    """A non-empty string ID that a store can keep (`m3grpc.text`), or
    ManagedInputValidationError naming the field."""
    if not isinstance(value, str) or not value.strip():
        raise ManagedInputValidationError(
            f"{field} must be a non-empty string",
            field_violations=[FieldViolation(field, "must be a non-empty string")],
        )
    if problem := text_problem(value):
        raise ManagedInputValidationError(
            f"invalid {field}", field_violations=[FieldViolation(field, problem)]
        )
    return value
