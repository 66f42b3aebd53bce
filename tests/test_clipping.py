"""The one clip helper: error echoes (characters), status trailers (bytes), stored messages."""

from __future__ import annotations

from m3grpc.clipping import ECHO_CHARS, clip


def test_text_within_the_limit_is_unchanged() -> None:
    assert clip("abc", 3) == "abc"
    assert clip("é" * 10, 20, unit="bytes") == "é" * 10


def test_a_cut_keeps_the_start_and_names_the_whole_length() -> None:
    cut = clip("x" * 500)
    assert len(cut) == ECHO_CHARS
    assert cut == "x" * (ECHO_CHARS - len("...(500 chars)")) + "...(500 chars)"


def test_a_byte_limit_counts_utf8_and_never_splits_a_character() -> None:
    cut = clip("é" * 100, 40, unit="bytes")
    assert len(cut.encode()) <= 40
    assert cut.endswith("...(100 chars)")
    assert set(cut.removesuffix("...(100 chars)")) == {"é"}
    # The same text counted in characters needs no cut.
    assert clip("é" * 100, 100) == "é" * 100


def test_other_values_are_clipped_as_their_repr() -> None:
    assert clip(None) == "None"
    assert clip(["a" * 200], 30).startswith("['aaa")
