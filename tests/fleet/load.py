"""Callers of a fleet: the openai SDK, buffered and streamed, each call with a deadline, and what each got.

`run` keeps `width` calls in flight until told to stop, and returns one `Outcome` per call: its key, whether
it streamed, when it started and ended, the request id the gateway gave it (when an answer came at all),
and either the cost the response reported (`x-inferplex-cost-micros`, or the final chunk's `cost`) or the
error it ended with. A call that reached its deadline is an error named `timeout`: a hang, which the tests
refuse.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import openai

DEADLINE_S = 20.0
MODEL = "sleep-300"  # the upstream holds each call 300 ms
MESSAGES: list[Any] = [{"role": "user", "content": "three small words"}]


@dataclass
class Outcome:
    key: str  # its name
    stream: bool
    started: float
    ended: float = 0.0
    request_id: str | None = None
    cost: int | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.cost is not None


async def _buffered(client: openai.AsyncOpenAI, user: str, out: Outcome) -> None:
    raw = await client.chat.completions.with_raw_response.create(
        model=MODEL, messages=MESSAGES, max_tokens=5, user=user
    )
    out.request_id = raw.headers.get("x-request-id")
    raw.parse()
    out.cost = int(raw.headers["x-inferplex-cost-micros"])


async def _streamed(client: openai.AsyncOpenAI, user: str, out: Outcome) -> None:
    raw = await client.chat.completions.with_raw_response.create(
        model=MODEL, messages=MESSAGES, max_tokens=5, user=user, stream=True, stream_options={"include_usage": True}
    )
    out.request_id = raw.headers.get("x-request-id")
    async for chunk in raw.parse():
        cost = (chunk.model_extra or {}).get("cost")
        if cost is not None:
            out.cost = int(cost["micros"])
    if out.cost is None:
        out.error = "stream ended without its final chunk"


async def call(client: openai.AsyncOpenAI, user: str, stream: bool) -> Outcome:
    """One call as `user` (the key's name, which the upstream counts by)."""
    out = Outcome(user, stream, time.time())
    try:
        await (_streamed if stream else _buffered)(client, user, out)
    except openai.APITimeoutError:
        out.error = "timeout"
    except openai.APIStatusError as exc:
        out.error = str(exc.status_code)
        out.request_id = out.request_id or exc.response.headers.get("x-request-id")
    except (openai.APIError, httpx.HTTPError) as exc:
        out.error = type(exc).__name__
    out.ended = time.time()
    return out


async def held(base_url: str, key: str, user: str, flowing: asyncio.Event) -> Outcome:
    """A 30-second stream (model `slow-stream`) on one replica: `flowing` is set at its first chunk, when its
    reservation is surely held. It ends when the replica dies."""
    client = clients(base_url, [key])[key]
    out = Outcome(user, True, time.time())
    try:
        raw = await client.chat.completions.with_raw_response.create(
            model="slow-stream", messages=MESSAGES, max_tokens=5, user=user, stream=True
        )
        out.request_id = raw.headers.get("x-request-id")
        async for _ in raw.parse():
            flowing.set()
        out.error = "the stream ended without being cut"
    except (openai.APIError, httpx.HTTPError) as exc:
        out.error = type(exc).__name__
    finally:
        flowing.set()
        out.ended = time.time()
        await client.close()
    return out


def clients(base_url: str, keys: Sequence[str]) -> dict[str, openai.AsyncOpenAI]:
    """One SDK client per key: no retries (a retry would hide what the fleet did), a deadline per call."""
    return {
        key: openai.AsyncOpenAI(api_key=key, base_url=base_url + "/v1", max_retries=0, timeout=DEADLINE_S)
        for key in keys
    }


async def run(base_url: str, keys: dict[str, str], width: int, done: Callable[[], bool]) -> list[Outcome]:
    """`width` loops, each calling until `done()`: loop i uses key i % len(keys) (its `user` is the key's
    name) and streams every other call. `keys`: name -> secret."""
    sdk = clients(base_url, list(keys.values()))
    names = list(keys)
    outcomes: list[Outcome] = []

    async def loop(i: int) -> None:
        name = names[i % len(names)]
        n = 0
        while not done():
            outcome = await call(sdk[keys[name]], name, stream=(i // len(names) + n) % 2 == 1)
            outcomes.append(outcome)
            n += 1
            if outcome.error == "429":  # refused at once: do not spin
                await asyncio.sleep(0.2)

    try:
        await asyncio.gather(*(loop(i) for i in range(width)))
    finally:
        for client in sdk.values():
            await client.close()
    return outcomes
