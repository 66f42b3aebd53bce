"""Identifier checks shared by the stores and the runtime."""

from __future__ import annotations

from m3grpc.errors import FieldViolation, ManagedInputValidationError


def require_identifier(value: object, field: str) -> str:
    """A non-empty string ID, or ManagedInputValidationError naming the field."""
    if not isinstance(value, str) or not value.strip():
        raise ManagedInputValidationError(
            f"{field} must be a non-empty string",
            field_violations=[FieldViolation(field, "must be a non-empty string")],
        )
    return value
