"""Which strings M3 keeps and sends (m3grpc.text), and field paths naming the others."""

from __future__ import annotations

import json

import pytest

from m3grpc import fieldpath
from m3grpc.text import NUL_PROBLEM, SURROGATE_PROBLEM, text_problem


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("", None),
        ("plain", None),
        ("é 漢字 😀", None),  # a surrogate pair in UTF-16 is one code point here
        ("a\x00b", NUL_PROBLEM),
        ("\ud800", SURROGATE_PROBLEM),
        ("x\udfffy", SURROGATE_PROBLEM),
    ],
)
def test_text_problem(value: str, problem: str | None) -> None:
    assert text_problem(value) == problem


@pytest.mark.parametrize("key", ["a\x00b", "x\ud800y", "it's", "back\\slash", "lit\\u0041"])
def test_a_key_path_is_sendable_and_parses_back(key: str) -> None:
    path = f"responses{fieldpath.key(key)}"
    # A violation's path travels as UTF-8 (protobuf, JSON): it must encode.
    path.encode("utf-8")
    json.dumps(path, ensure_ascii=False).encode("utf-8")
    assert text_problem(path) is None
    segments = fieldpath.parse(path)
    assert segments[-1] == fieldpath.Key(key)
    assert fieldpath.join(segments) == path
