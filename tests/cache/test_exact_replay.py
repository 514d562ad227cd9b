"""What a recorded stream stores and how a stored one is paced (tables over cache/replay.py), and which
buffered answers are stored (cache/service.complete)."""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from inferplex.cache.replay import Recording, decode, paced
from inferplex.cache.service import complete


def chunk(content: str | None = None, finish: str | None = None, usage: bool = False) -> Any:
    if usage:
        return {"id": "c", "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}}
    delta = {} if content is None else {"content": content}
    return {"id": "c", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


async def upstream(chunks: list[Any], fail: bool = False) -> AsyncIterator[Any]:
    for c in chunks:
        yield c
    if fail:
        raise RuntimeError("upstream dropped the connection")


STOP = [chunk("b"), chunk(finish="stop"), chunk(usage=True)]
LENGTH = [chunk("b"), chunk(finish="length"), chunk(usage=True)]
UNFINISHED = [chunk("b"), chunk("c")]

# (the rest of the stream, the request set the length, it fails, stored)
RECORDED = [
    (STOP, False, False, True),
    (LENGTH, False, False, False),
    (LENGTH, True, False, True),
    (UNFINISHED, False, False, False),
    (STOP, False, True, False),
]


@pytest.mark.parametrize(("rest", "asked_length", "fails", "stored"), RECORDED)
async def test_what_a_recording_stores(rest: list[Any], asked_length: bool, fails: bool, stored: bool) -> None:
    kept: list[bytes] = []

    async def store(value: bytes) -> None:
        kept.append(value)

    first, expected = chunk("a"), copy.deepcopy([chunk("a"), *rest])
    recording = Recording(first, upstream(rest, fails), store, asked_length, 1 << 20)
    first["timings"] = {"mutated": "by a renderer"}  # after it was recorded: not stored
    seen = []
    try:
        async for c in recording:
            seen.append(c)
            c.pop("usage", None)  # a renderer dropping usage the caller did not ask for
    except RuntimeError:
        assert fails
    assert seen == rest and len(kept) == int(stored)
    if stored:
        cached = decode(kept[0])
        assert cached is not None and cached.chunks is not None
        assert [c for _, c in cached.chunks] == expected  # as they passed, usage chunk included
        offsets = [o for o, _ in cached.chunks]
        assert offsets[0] == 0 and offsets == sorted(offsets)


async def test_a_recording_closed_by_the_caller_stores_nothing_and_closes_the_upstream() -> None:
    closed: list[bool] = []

    async def endless() -> AsyncIterator[Any]:
        try:
            while True:
                yield chunk("x")
        finally:
            closed.append(True)

    kept: list[bytes] = []

    async def store(value: bytes) -> None:
        kept.append(value)

    rest = endless()
    recording = Recording(chunk("a"), rest, store, False, 1 << 20)
    await recording.__anext__()
    await recording.aclose()
    assert closed == [True] and kept == []
    # closed before a chunk was pulled: the upstream's iterator is closed all the same
    unstarted = endless()
    await Recording(chunk("a"), unstarted, store, False, 1 << 20).aclose()
    assert kept == []


async def test_a_stream_larger_than_an_entry_is_passed_on_but_not_stored() -> None:
    kept: list[bytes] = []

    async def store(value: bytes) -> None:
        kept.append(value)

    rest = [chunk("x" * 100) for _ in range(20)] + [chunk(finish="stop")]
    seen = [c async for c in Recording(chunk("a"), upstream(rest), store, False, 1000)]
    assert len(seen) == 21 and kept == []


@pytest.mark.parametrize(
    ("pace", "interval_s", "at_least", "at_most"),
    [("none", 0.0, 0.0, 0.05), ("fixed", 0.03, 0.06, 0.5), ("original", 0.0, 0.08, 0.5)],
)
async def test_paced(pace: Any, interval_s: float, at_least: float, at_most: float) -> None:
    stored = [(0.0, chunk("a")), (0.04, chunk("b")), (0.08, chunk(finish="stop"))]
    started = time.perf_counter()
    got = [c async for c in paced(stored, pace, interval_s)]
    elapsed = time.perf_counter() - started
    assert got == [chunk("b"), chunk(finish="stop")] and at_least <= elapsed <= at_most


# (the buffered answer, the request set the length, stored)
ANSWERS: list[tuple[dict[str, Any], bool, bool]] = [
    ({"choices": [{"finish_reason": "stop"}]}, False, True),
    ({"choices": [{"finish_reason": "stop"}, {"finish_reason": "length"}]}, False, False),
    ({"choices": [{"finish_reason": "length"}]}, True, True),
    ({"choices": [{"finish_reason": "tool_calls"}]}, False, True),
    ({"error": {"message": "no"}}, False, False),
    ({"object": "list", "data": [{"embedding": [1.0]}]}, False, True),
    ({"object": "response", "status": "completed"}, False, True),
    (
        {"object": "response", "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}},
        False,
        False,
    ),
    ({"object": "response", "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}, True, True),
    ({"object": "response", "status": "incomplete", "incomplete_details": {"reason": "content_filter"}}, True, False),
    ({"object": "response", "status": "failed"}, False, False),
]


@pytest.mark.parametrize(("answer", "asked_length", "stored"), ANSWERS)
def test_which_buffered_answers_are_stored(answer: dict[str, Any], asked_length: bool, stored: bool) -> None:
    assert complete(answer, asked_length) is stored


def test_a_value_this_version_cannot_read_is_a_miss() -> None:
    assert decode(b"not json") is None and decode(b"[1]") is None and decode(b'{"chunks": []}') is None
    assert asyncio.iscoroutinefunction(Recording.aclose)
