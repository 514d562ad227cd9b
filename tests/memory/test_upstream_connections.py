"""Upstream connections are reused after streams: one connection carries a caller's calls in turn.

A provider ends a stream with its end marker (`data: [DONE]`) and then the body's own end, in two writes that
often arrive apart. The gateway used to close the response at the marker, which closes the connection when
the body's end had not arrived yet: about one stream in ten on a loaded machine opened a new connection for
the next call (a TLS handshake to a real provider), and each closed connection left its transports in
reference cycles (tests/memory/test_reference_cycles.py failed on CI with 42 of them after 200 streams).
`late-eof-*` makes the fake send the body's end 20 ms after the marker, so every stream takes that path; the
fake records each request's client port, one per connection.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.conftest import openai_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer


@pytest.fixture(scope="module")
def server(fake_openai: FakeOpenAI) -> Iterator[GatewayServer]:
    config = openai_config(fake_openai)
    for name, upstream in (("late-eof", "late-eof-model"), ("slow-end", "late-eof-1500")):
        config["models"].append({"name": name, "deployments": [{"provider": "fake", "model": upstream}]})
    with GatewayServer(config) as gateway:
        yield gateway


@pytest.fixture
def client(server: GatewayServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.base_url, api_key=server.master_key, max_retries=0) as sdk:
        yield sdk


def streamed(client: openai.OpenAI, model: str, text: str) -> tuple[str, str | None]:
    """One streamed call read whole: its text and finish reason."""
    parts: list[str] = []
    finish = None
    messages: Any = [{"role": "user", "content": text}]
    for chunk in client.chat.completions.create(model=model, messages=messages, stream=True):
        for choice in chunk.choices:
            parts.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    return "".join(parts), finish


def test_streams_whose_end_comes_after_the_done_marker_reuse_one_upstream_connection(
    client: openai.OpenAI, fake_openai: FakeOpenAI
) -> None:
    since = len(fake_openai.state.requests)
    for i in range(20):
        assert streamed(client, "late-eof", f"call {i}") == (f"echo: call {i}", "stop")
    assert len(fake_openai.state.requests) - since == 20
    assert len(fake_openai.state.peers(since)) == 1


def test_buffered_and_streamed_calls_in_turn_reuse_one_upstream_connection(
    client: openai.OpenAI, fake_openai: FakeOpenAI
) -> None:
    since = len(fake_openai.state.requests)
    for i in range(15):
        assert streamed(client, "echo-model", f"stream {i}") == (f"echo: stream {i}", "stop")
        answer = client.chat.completions.create(model="echo-model", messages=[{"role": "user", "content": "hi"}])
        assert answer.choices[0].message.content == "echo: hi"
    assert len(fake_openai.state.requests) - since == 30
    assert len(fake_openai.state.peers(since)) == 1


def test_a_stream_whose_end_comes_late_after_the_done_marker_ends_for_the_caller_at_once(
    client: openai.OpenAI, fake_openai: FakeOpenAI
) -> None:
    """The wait for the body's end is bounded (providers/http.END_WAIT_S): an upstream that keeps the body open
    after `[DONE]` (here for 1.5 s) costs its stream a quarter second and its connection, nothing more."""
    since = len(fake_openai.state.requests)
    started = time.monotonic()
    assert streamed(client, "slow-end", "hello") == ("echo: hello", "stop")
    assert time.monotonic() - started < 1
    assert streamed(client, "late-eof", "again") == ("echo: again", "stop")
    assert len(fake_openai.state.peers(since)) == 2
