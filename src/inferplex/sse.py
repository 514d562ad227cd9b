"""Server-sent events: a spec-correct line decoder for upstream streams, and the encoder for ours.

Providers split events across TCP reads anywhere, use `\\r\\n` or `\\n`, send comments (`: ping`) and
multi-line `data:` fields. The decoder follows the WHATWG event-stream rules for exactly those cases, so
no adapter ever parses SSE with a regex.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Event:
    data: str
    event: str = "message"
    id: str | None = None


class SSEDecoder:
    """Feed it raw lines (with or without their line terminator); it returns an `Event` when one completes."""

    __slots__ = ("_data", "_event", "_id")

    def __init__(self) -> None:
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None

    def feed(self, raw: bytes | str) -> Event | None:
        line = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        line = line.rstrip("\r\n")
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        return None

    def flush(self) -> Event | None:
        """End of stream: a final event without its blank line still counts (many servers omit it)."""
        return self._dispatch()

    def _dispatch(self) -> Event | None:
        if not self._data:
            self._event = ""
            return None
        event = Event("\n".join(self._data), self._event or "message", self._id)
        self._data = []
        self._event = ""
        return event


def encode(data: bytes, event: str | None = None) -> bytes:
    """One SSE frame. `data` must be a single line (JSON from orjson always is)."""
    if event is None:
        return b"data: " + data + b"\n\n"
    return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"


DONE = b"data: [DONE]\n\n"
