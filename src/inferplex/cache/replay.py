"""Streams in and out of the cache: a stream recorded as it passes, and a stored one sent again.

A stream is stored as its chunks, each serialised the moment it passes (the dialects' renderers change the
chunk objects afterwards: they add `timings` and `cost`, and drop `usage` when the caller did not ask for
it), with its offset in seconds from the first. It is stored only when the upstream's iterator ends on its
own after a `finish_reason` (not `length` unless the request set the length): never when the caller leaves
(the stream is closed), never when the upstream fails. Replayed, the chunks come in the same order with the
same ids, content, finish_reason and usage chunk, so the dialect frames them exactly as the first time.

Stored value (the service's own encoding; a backend never looks inside): `{"answer": {...}}` for a buffered
answer, `{"chunks": [[offset_s, chunk], ...]}` for a stream, each with `"priced": {"deployment", "tier"}`: who
produced it, so that a hit is priced as the answer was.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal, cast

import orjson

from inferplex.cache.base import Cached

if TYPE_CHECKING:
    from inferplex.responses import ChatCompletionChunk


def decode(value: bytes) -> Cached | None:
    """A stored value as `Cached` (fresh objects each time: the renderers may change them), or None for a
    value this version cannot read."""
    try:
        data = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    answer, chunks, priced = data.get("answer"), data.get("chunks"), data.get("priced")
    priced = priced if isinstance(priced, dict) else None
    if isinstance(answer, dict):
        return Cached(answer=answer, priced=priced)
    if isinstance(chunks, list) and chunks:
        kept = [(float(offset), cast("ChatCompletionChunk", chunk)) for offset, chunk in chunks]
        return Cached(chunks=kept, priced=priced)
    return None


def _finish_reasons(chunk: Any) -> list[str]:
    return [c["finish_reason"] for c in chunk.get("choices") or () if isinstance(c, dict) and c.get("finish_reason")]


class Recording:
    """The upstream's chunks passed through unchanged, kept as they pass, stored (`store(value)`) when the
    upstream ends cleanly. Closing it (the caller left) closes the upstream's iterator and stores nothing."""

    def __init__(
        self,
        first: ChatCompletionChunk,
        rest: AsyncIterator[ChatCompletionChunk],
        store: Callable[[bytes], Awaitable[None]],
        asked_length: bool,
        max_bytes: int,
        priced: dict[str, Any] | None = None,
    ) -> None:
        self._rest = rest
        self._priced = priced
        self._store = store
        self._asked_length = asked_length
        self._max_bytes = max_bytes
        self._started = time.perf_counter()
        raw = orjson.dumps(first)
        self._kept: list[tuple[float, bytes]] | None = [(0.0, raw)]
        self._size = len(raw)
        self._finish = _finish_reasons(first)

    def __aiter__(self) -> Recording:
        return self

    async def __anext__(self) -> ChatCompletionChunk:
        try:
            chunk = await self._rest.__anext__()
        except StopAsyncIteration:
            kept, self._kept = self._kept, None
            if kept is not None and self._storable():
                await self._store(encode(kept, self._priced))
            raise
        except BaseException:
            self._kept = None  # a failed stream is never stored
            raise
        if self._kept is not None:
            raw = orjson.dumps(chunk)
            self._size += len(raw) + 24
            if self._size > self._max_bytes:
                self._kept = None  # too large to store: stop keeping it
            else:
                self._kept.append((time.perf_counter() - self._started, raw))
                self._finish += _finish_reasons(chunk)
        return chunk

    def _storable(self) -> bool:
        if not self._finish:
            return False  # ended without saying why: not a complete answer
        return self._asked_length or "length" not in self._finish

    async def aclose(self) -> None:
        self._kept = None
        aclose = getattr(self._rest, "aclose", None)
        if aclose is not None:
            await aclose()


def encode(kept: list[tuple[float, bytes]], priced: dict[str, Any] | None = None) -> bytes:
    """The stored value of a stream, from chunks already serialised (not parsed again)."""
    value: dict[str, Any] = {"chunks": [[round(offset, 4), orjson.Fragment(raw)] for offset, raw in kept]}
    if priced is not None:
        value["priced"] = priced
    return orjson.dumps(value)


async def paced(
    chunks: list[tuple[float, ChatCompletionChunk]],
    pace: Literal["none", "original", "fixed"],
    interval_s: float,
) -> AsyncIterator[ChatCompletionChunk]:
    """The chunks after the first: as fast as the caller reads, at their original offsets from the first, or
    one every `interval_s`."""
    started = time.perf_counter()
    for offset, chunk in chunks[1:]:
        if pace == "original":
            wait = offset - (time.perf_counter() - started)
            if wait > 0:
                await asyncio.sleep(wait)
        elif pace == "fixed" and interval_s > 0:
            await asyncio.sleep(interval_s)
        yield chunk
