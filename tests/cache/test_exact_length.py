"""An answer cut at the provider's own limit (finish_reason `length` when the request set no max_tokens) is
served but never stored: the next caller gets a fresh attempt, not half an answer for an hour."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from aiohttp import web

from tests.cache.conftest import cache_config, chat, sse_frames, unique
from tests.conftest import UPSTREAM_KEY
from tests.fakes.openai_upstream import FakeOpenAI
from tests.fakes.server import BackgroundServer
from tests.gateway_server import GatewayServer

KEY = UPSTREAM_KEY  # the session sets FAKE_UPSTREAM_KEY to it


class Cutter:
    """An OpenAI-compatible provider that stops every answer at its own output limit (`length`), buffered or
    streamed, and refuses what OpenAI refuses (a wrong key, a body without model or messages)."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.server = BackgroundServer([web.post("/v1/chat/completions", self.chat)], "cutter")
        self.url = ""

    async def chat(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {KEY}":
            return web.json_response({"error": {"message": "bad key", "type": "invalid_request_error"}}, status=401)
        body = orjson.loads(await request.read())
        if not isinstance(body.get("model"), str) or not isinstance(body.get("messages"), list):
            return web.json_response(
                {"error": {"message": "model and messages", "type": "invalid_request_error"}}, status=400
            )
        self.bodies.append(body)
        usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
        base = {"id": "chatcmpl-cut", "created": 1735689600, "model": body["model"]}
        if not body.get("stream"):
            message = {"role": "assistant", "content": "half an"}
            choice = {"index": 0, "message": message, "finish_reason": "length", "logprobs": None}
            return web.json_response({**base, "object": "chat.completion", "choices": [choice], "usage": usage})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        kind = {**base, "object": "chat.completion.chunk"}
        for delta, finish in (
            ({"role": "assistant", "content": "half"}, None),
            ({"content": " an"}, None),
            ({}, "length"),
        ):
            data = {**kind, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            await resp.write(b"data: " + orjson.dumps(data) + b"\n\n")
        await resp.write(b"data: " + orjson.dumps({**kind, "choices": [], "usage": usage}) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    def sent(self, text: str) -> int:
        return sum(1 for b in self.bodies if text in str(b["messages"]))


@pytest.fixture(scope="module")
def cutter() -> Iterator[Cutter]:
    fake = Cutter()
    port = fake.server.start()
    fake.url = f"http://127.0.0.1:{port}/v1"
    yield fake
    fake.server.stop()


@pytest.fixture(scope="module")
def server(
    fake_openai: FakeOpenAI, cutter: Cutter, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    config = cache_config(fake_openai, tmp_path_factory.mktemp("cut"))
    config["providers"].append(
        {"name": "cutter", "kind": "openai", "base_url": cutter.url, "api_key": "env:FAKE_UPSTREAM_KEY"}
    )
    config["models"].append({"name": "cut", "deployments": [{"provider": "cutter", "model": "cut-1"}]})
    with GatewayServer(config) as gw:
        yield gw


def test_a_buffered_answer_cut_by_the_provider_is_not_stored(server: GatewayServer, cutter: Cutter) -> None:
    text = unique()
    answers = [chat(server, text, model="cut") for _ in range(2)]
    assert [r.json()["choices"][0]["finish_reason"] for r in answers] == ["length", "length"]
    assert [r.headers["x-inferplex-cache"] for r in answers] == ["miss", "miss"]
    assert cutter.sent(text) == 2
    # the same cut, when the request set the length, is what it asked for: stored
    asked = [chat(server, text, model="cut", max_tokens=2) for _ in range(2)]
    assert [r.headers["x-inferplex-cache"] for r in asked] == ["miss", "hit"] and cutter.sent(text) == 3


def test_a_stream_cut_by_the_provider_is_not_stored(server: GatewayServer, cutter: Cutter) -> None:
    text = unique()
    for _ in range(2):
        r, frames = sse_frames(server, text, model="cut")
        assert r.headers["x-inferplex-cache"] == "miss" and '"finish_reason":"length"' in "".join(frames)
    assert cutter.sent(text) == 2
    asked = [sse_frames(server, text, model="cut", max_completion_tokens=2)[0] for _ in range(2)]
    assert [r.headers["x-inferplex-cache"] for r in asked] == ["miss", "hit"] and cutter.sent(text) == 3
