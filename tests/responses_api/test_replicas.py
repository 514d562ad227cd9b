"""Stored responses across real gateway processes on one PostgreSQL: a follow-up sent to the other replica the
moment the first response completes is served with the whole history; a background response is read and
streamed from either replica."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from tests.accounts.conftest import Admin, billing_config, pg_url  # noqa: F401
from tests.fakes.openai_upstream import FakeOpenAI
from tests.replicas import serve

MASTER = "ipx-responses-replica-master"


@pytest.fixture(scope="module")
def config_path(fake_openai: FakeOpenAI, pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    tmp = tmp_path_factory.mktemp("responses-replicas")
    config = billing_config(fake_openai, tmp, pg_url, responses={"tick_s": 0.1, "lease_s": 1.5, "follow_poll_s": 0.02})
    config["models"] += [
        {"name": n, "deployments": [{"provider": "fake", "model": n}], "pricing": {"input": "0", "output": "3"}}
        for n in ("sleep-1500",)
    ]
    config["server"]["master_key"] = "env:INFERPLEX_TEST_MASTER"
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def env() -> dict[str, str]:
    """The replicas' environment, read when they start (the upstream key is set by a session fixture)."""
    return {**os.environ, "INFERPLEX_TEST_MASTER": MASTER}


@pytest.fixture(scope="module")
def replicas(config_path: Path) -> Iterator[list[str]]:
    with serve([config_path, config_path], env()) as urls:
        yield urls


@pytest.fixture(scope="module")
def key(replicas: list[str]) -> str:
    admin = Admin(replicas[0], MASTER)
    created = admin.create_key(scopes=["chat"], credits_micros=10**7)
    admin.close()
    return str(created["key"])


def _clients(urls: list[str], key: str) -> list[openai.OpenAI]:
    return [openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0) for url in urls]


def _texts(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] if isinstance(m["content"], str) else m["content"][0]["text"] for m in messages]


def test_a_follow_up_on_the_other_replica_the_moment_the_first_completes(
    replicas: list[str], key: str, fake_openai: FakeOpenAI
) -> None:
    a, b = _clients(replicas, key)
    previous: str | None = None
    expected: list[str] = []
    for turn in range(6):
        here, there = (a, b) if turn % 2 == 0 else (b, a)
        text = f"turn {turn}"
        with here.responses.stream(model="echo-model", input=text, previous_response_id=previous) as stream:
            for event in stream:
                if event.type == "response.completed":  # the other replica, before this stream has even closed
                    previous = event.response.id
                    follow = there.responses.create(
                        model="echo-model", input=f"{text} again", previous_response_id=previous
                    )
                    sent = fake_openai.state.last().body["messages"]
                    expected += [text, f"echo: {text}"]
                    assert _texts(sent) == [*expected, f"{text} again"]
                    assert follow.output_text == f"echo: {text} again"
    for client in (a, b):
        client.close()


def test_a_background_response_is_read_and_streamed_on_either_replica(replicas: list[str], key: str) -> None:
    a, b = _clients(replicas, key)
    queued = a.responses.create(model="echo-model", input="far away", background=True)
    events = list(b.responses.retrieve(queued.id, stream=True))
    assert events[-1].type == "response.completed"
    assert b.responses.retrieve(queued.id).output_text == "echo: far away"
    assert a.responses.create(model="echo-model", input="next", previous_response_id=queued.id).output_text
    for client in (a, b):
        client.close()
