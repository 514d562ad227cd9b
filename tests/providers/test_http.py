"""The upstream HTTP call, both ways `providers.http` can make it: aiohttp's connection-level steps (`DIRECT`,
what the gateway uses with the aiohttp installed here) and `session.post` (the fallback for an aiohttp without them).
Each runs against the fake OpenAI server, a real HTTP server that records what it received: the same wire
request, the same answers, the same errors."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from yarl import URL

from inferplex.config import Timeouts
from inferplex.errors import InvalidRequest, RateLimited, UpstreamError
from inferplex.providers import http
from inferplex.providers.failures import OPENAI
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import free_port

KEY = "sk-fake-upstream"
HEADERS = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
MSG = [{"role": "user", "content": "Say hi"}]
T = Timeouts(connect=2, read=5)
FAKE = OPENAI.bind("fake")  # the OpenAI-compatible adapter's error map, for a provider named "fake"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI(KEY).start()
    yield server
    server.stop()


@pytest.fixture(params=[True, False], ids=["direct", "session.post"])
async def session(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    monkeypatch.setattr(http, "DIRECT", request.param)
    s = http.new_session()
    yield s
    await s.close()


def test_this_aiohttp_takes_the_direct_path() -> None:
    """If an aiohttp upgrade moves the steps `_post` takes, calls still work (session.post) but cost more:
    this says so here rather than in a benchmark."""
    assert http.DIRECT


async def test_buffered_call_sends_the_body_and_headers_and_returns_the_answer(session: Any, fake: FakeOpenAI) -> None:
    url = URL(fake.base_url + "/chat/completions")
    data, headers = await http.post_json(session, url, {"model": "m", "messages": MSG}, HEADERS, T, FAKE)
    assert data["object"] == "chat.completion"
    assert data["choices"][0]["message"]["content"] == "echo: Say hi"
    assert headers["content-type"].startswith("application/json")
    sent = fake.state.last()
    assert sent.body == {"model": "m", "messages": MSG}
    assert sent.headers["Authorization"] == f"Bearer {KEY}"
    assert sent.headers["Content-Type"] == "application/json"
    assert sent.headers["Host"] == url.raw_authority
    assert "User-Agent" not in sent.headers  # skipped by the session, on both paths


async def test_both_paths_put_the_same_request_on_the_wire(fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    for direct in (True, False):
        monkeypatch.setattr(http, "DIRECT", direct)
        s = http.new_session()
        try:
            url = fake.base_url + "/chat/completions"
            await http.post_json(s, url, {"model": "m", "messages": MSG}, HEADERS, T, FAKE)
        finally:
            await s.close()
        sent = fake.state.last()
        seen.append((sent.headers, sent.body))
    assert seen[0] == seen[1]


async def test_error_status_becomes_the_providers_error(session: Any, fake: FakeOpenAI) -> None:
    with pytest.raises(InvalidRequest) as err:
        await http.post_json(session, fake.base_url + "/chat/completions", {"model": "error-400", "messages": MSG},
                             HEADERS, T, FAKE)  # fmt: skip
    assert err.value.status == 400 and err.value.message == "fake upstream failure 400"
    with pytest.raises(RateLimited) as limited:
        await http.open_stream(session, fake.base_url + "/chat/completions",
                               {"model": "error-429", "messages": MSG, "stream": True}, HEADERS, T, FAKE)  # fmt: skip
    assert limited.value.message == "fake upstream failure 429" and limited.value.retry_after == 7


async def test_stream_reads_every_event_then_done(session: Any, fake: FakeOpenAI) -> None:
    body = {"model": "m", "messages": MSG, "stream": True, "stream_options": {"include_usage": True}}
    resp = await http.open_stream(session, fake.base_url + "/chat/completions", body, HEADERS, T, FAKE)
    try:
        events = [data async for _, data in http.json_events(resp, FAKE)]
    finally:
        resp.close()
    assert events[-1] is http.DONE
    chunks = [e for e in events if e is not http.DONE]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "echo: Say hi"
    assert chunks[-1]["usage"]["completion_tokens"] > 0


async def test_unreachable_upstream_is_an_upstream_error(session: Any) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1/chat/completions"
    with pytest.raises(UpstreamError, match="could not connect to provider fake"):
        await http.post_json(session, url, {"model": "m", "messages": MSG}, HEADERS, T, FAKE)
    with pytest.raises(UpstreamError, match="could not connect to provider fake"):
        await http.open_stream(session, url, {"model": "m", "messages": MSG, "stream": True}, HEADERS, T, FAKE)
