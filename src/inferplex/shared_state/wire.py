"""The coordinator's wire format: frames of JSON on a Unix socket, each one round trip of a batch.

A frame is a 4-byte big-endian length, one byte saying what it is, then that many bytes of JSON (orjson).
A worker sends `CALL` frames (a list of operations, each a list whose first item names it) and gets one
`REPLY` frame back per call, in order (one batch is in flight per connection, batching.py), with one result
per operation. The coordinator also sends `OPENED` frames unasked: a breaker opened (the payload is its key),
so a worker forgets that it found the breaker closed. JSON rather than pickle: a peer on the socket can at
worst send wrong numbers, never run code in the other process.
"""

from __future__ import annotations

import struct
from typing import Any

import orjson

CALL = b"C"
REPLY = b"R"
OPENED = b"O"

_HEAD = struct.Struct(">IB")
MAX_FRAME = 64 * 1024 * 1024  # a batch of 500 operations is far below this; more is a broken peer


def frame(kind: bytes, payload: Any) -> bytes:
    body = orjson.dumps(payload)
    return _HEAD.pack(len(body), kind[0]) + body


class Frames:
    """Cuts a byte stream into frames as it arrives (`asyncio.Protocol.data_received` hands over any number
    of bytes: part of a frame, or several)."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[bytes, Any]]:
        """The frames `data` completes, in order; raises ConnectionError on a frame no peer sends."""
        buffer = self._buffer
        buffer += data
        out = []
        at = 0
        while len(buffer) - at >= _HEAD.size:
            size, kind = _HEAD.unpack_from(buffer, at)
            if size > MAX_FRAME:
                raise ConnectionError(f"a frame of {size} bytes: not a coordinator peer")
            end = at + _HEAD.size + size
            if len(buffer) < end:
                break
            out.append((bytes((kind,)), orjson.loads(memoryview(buffer)[at + _HEAD.size : end])))
            at = end
        if at:
            del buffer[:at]
        return out
