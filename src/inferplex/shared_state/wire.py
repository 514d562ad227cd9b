"""The coordinator's wire format: frames of JSON on a Unix socket, each one round trip of a batch.

A frame is a 4-byte big-endian length, one byte saying what it is, then that many bytes of JSON (orjson).
A worker sends `CALL` frames (a list of operations, each a list whose first item names it) and gets one
`REPLY` frame back per call, in order (one batch is in flight per connection, batching.py), with one result
per operation. The coordinator also sends `OPENED` frames unasked: a breaker opened (the payload is its key),
so a worker forgets that it found the breaker closed. JSON rather than pickle: a peer on the socket can at
worst send wrong numbers, never run code in the other process.
"""

from __future__ import annotations

import asyncio
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


async def read_frame(reader: asyncio.StreamReader) -> tuple[bytes, Any]:
    """The next frame's kind and payload; raises `asyncio.IncompleteReadError` at the end of the stream."""
    size, kind = _HEAD.unpack(await reader.readexactly(_HEAD.size))
    if size > MAX_FRAME:
        raise ConnectionError(f"a frame of {size} bytes: not a coordinator peer")
    return bytes((kind,)), orjson.loads(await reader.readexactly(size))
