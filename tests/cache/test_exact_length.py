"""An answer cut at the provider's own limit (finish_reason `length` when the request set no max_tokens) is
served but never stored: the next caller gets a fresh attempt, not half an answer for an hour."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cache.conftest import cache_config, chat, sse_frames, unique, upstream_calls
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer


@pytest.fixture(scope="module")
def server(fake_openai: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    # the fake's `cut-*` stops every answer at 3 words, its own limit (finish_reason length)
    cut = {"name": "cut", "deployments": [{"provider": "fake", "model": "cut-1"}]}
    with GatewayServer(cache_config(fake_openai, tmp_path_factory.mktemp("cut"), [cut])) as gw:
        yield gw


def test_a_buffered_answer_cut_by_the_provider_is_not_stored(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    text = unique()
    answers = [chat(server, text, model="cut") for _ in range(2)]
    assert [r.json()["choices"][0]["finish_reason"] for r in answers] == ["length", "length"]
    assert [r.headers["x-inferplex-cache"] for r in answers] == ["miss", "miss"]
    assert upstream_calls(fake_openai, text) == 2
    # the same cut, when the request set the length, is what it asked for: stored
    asked = [chat(server, text, model="cut", max_tokens=2) for _ in range(2)]
    assert [r.headers["x-inferplex-cache"] for r in asked] == ["miss", "hit"] and upstream_calls(fake_openai, text) == 3


def test_a_stream_cut_by_the_provider_is_not_stored(server: GatewayServer, fake_openai: FakeOpenAI) -> None:
    text = unique()
    for _ in range(2):
        r, frames = sse_frames(server, text, model="cut")
        assert r.headers["x-inferplex-cache"] == "miss" and '"finish_reason":"length"' in "".join(frames)
    assert upstream_calls(fake_openai, text) == 2
    asked = [sse_frames(server, text, model="cut", max_completion_tokens=2)[0] for _ in range(2)]
    assert [r.headers["x-inferplex-cache"] for r in asked] == ["miss", "hit"] and upstream_calls(fake_openai, text) == 3
