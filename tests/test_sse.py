"""The SSE decoder (`sse.py`), by table: what each spec-valid (and sloppy) stream becomes."""

from __future__ import annotations

import pytest

from inferplex.sse import SSEDecoder


def decode(lines: list[str]) -> list[tuple[str, str]]:
    d = SSEDecoder()
    out = [e for e in (d.feed(line) for line in lines) if e is not None]
    last = d.flush()
    if last is not None:
        out.append(last)
    return [(e.event, e.data) for e in out]


@pytest.mark.parametrize(
    "lines,expected",
    [
        (["data: a", ""], [("message", "a")]),
        (["data: a\r\n", "\r\n"], [("message", "a")]),
        (["data:a", ""], [("message", "a")]),
        (["data:  two spaces", ""], [("message", " two spaces")]),
        (["data: one", "data: two", ""], [("message", "one\ntwo")]),
        ([": keep-alive comment", "", "data: x", ""], [("message", "x")]),
        (["event: ping", "data: {}", ""], [("ping", "{}")]),
        (["event: ping", "", "data: after", ""], [("message", "after")]),
        (["id: 7", "data: x", ""], [("message", "x")]),
        (["data: no blank line at end"], [("message", "no blank line at end")]),
        (["retry: 100", "unknown: field", ""], []),
        (["data", ""], [("message", "")]),
    ],
)
def test_sse_decoder(lines: list[str], expected: list[tuple[str, str]]) -> None:
    assert decode(lines) == expected
