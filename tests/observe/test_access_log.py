"""The JSON request log: one line per request, through a real gateway and the official SDK.

Known traffic goes in (a buffered chat, a stream, an embedding, a refused key, a caller's 400, an upstream
500 that falls back to another model); the file must then hold one line for each, whose fields agree with
what the caller saw (request id, status, model, deployment, attempts, tokens, cost), and nowhere the key or
the Authorization header. Bodies appear only when the operator turns them on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from inferplex.observe.faults import ERROR_TYPES
from tests.conftest import openai_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

FIELDS = {
    "time", "request_id", "method", "route", "dialect", "operation", "status", "error_type", "error", "key_id",
    "account_id", "model", "provider", "deployment", "upstream_model", "attempts", "stream", "timings", "tokens",
    "cost_micros", "client_ip", "cache",
}  # fmt: skip


def _config(fake: FakeOpenAI, path: Path, bodies: bool = False) -> dict[str, Any]:
    config = openai_config(fake)
    for model in config["models"]:
        if model["name"] == "error-500":  # fails once, then the caller is served by echo-model
            model["routing"] = {"retries": 0, "fallbacks": ["echo-model"]}
    config["observability"] = {"request_log": {"enabled": True, "destination": str(path), "bodies": bodies,
                                               "flush_s": 0.02}}  # fmt: skip
    return config


def _lines(path: Path, count: int) -> list[dict[str, Any]]:
    """The log's lines once there are `count` of them (lines are written just after the last byte goes out)."""
    deadline = time.monotonic() + 20
    while True:
        text = path.read_text() if path.exists() else ""
        rows = [json.loads(x) for x in text.splitlines()]
        if len(rows) >= count or time.monotonic() > deadline:
            return rows
        time.sleep(0.02)


@pytest.fixture
def funded(tmp_path: Path, fake_openai: FakeOpenAI) -> Iterator[tuple[GatewayServer, Path, dict[str, Any]]]:
    path = tmp_path / "requests.jsonl"
    with GatewayServer(_config(fake_openai, path)) as server:
        r = httpx.post(f"{server.url}/admin/accounts", headers=server.auth,
                       json={"name": "acme", "credits_micros": 10_000_000})  # fmt: skip
        assert r.status_code == 201, r.text
        r = httpx.post(f"{server.url}/admin/keys", headers=server.auth,
                       json={"name": "app", "account_id": r.json()["id"]})  # fmt: skip
        assert r.status_code == 201, r.text
        yield server, path, r.json()


def test_one_line_per_request_with_what_the_caller_saw(funded: tuple[GatewayServer, Path, dict[str, Any]]) -> None:
    server, path, key = funded
    client = openai.OpenAI(base_url=server.base_url, api_key=key["key"], max_retries=0)
    msgs = [{"role": "user", "content": "hello there"}]
    seen: dict[str, Any] = {}

    chat = client.chat.completions.with_raw_response.create(model="echo-model", messages=msgs)  # type: ignore[arg-type]
    seen["chat"] = chat.headers["x-inferplex-request-id"], chat.parse()
    with client.chat.completions.with_streaming_response.create(
        model="echo-model", messages=msgs, stream=True, stream_options={"include_usage": True},  # type: ignore[arg-type]
    ) as stream:  # fmt: skip
        seen["stream"] = stream.headers["x-inferplex-request-id"], [c for c in stream.parse() if c.usage]
    embed = client.embeddings.with_raw_response.create(model="embed-model", input="hi")
    seen["embedding"] = embed.headers["x-inferplex-request-id"], embed.parse()
    fallback = client.chat.completions.with_raw_response.create(model="error-500", messages=msgs)  # type: ignore[arg-type]
    seen["fallback"] = fallback.headers["x-inferplex-request-id"], fallback.parse()
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.base_url, api_key="ipx-not-a-key", max_retries=0).models.list()
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model="echo-model", messages=[])
    seen["bad"] = bad.value.response.headers["x-inferplex-request-id"]

    rows = [r for r in _lines(path, 8) if not r["route"].startswith("/admin")]  # and the two admin calls
    assert len(rows) == 6
    by_id = {r["request_id"]: r for r in rows}
    for row in rows:
        assert set(row) == FIELDS
        assert row["error_type"] is None or row["error_type"] in ERROR_TYPES
        assert row["time"].endswith("Z") and row["method"] in ("GET", "POST")

    chat_id, completion = seen["chat"]
    row = by_id[chat_id]
    assert (row["route"], row["dialect"], row["operation"], row["status"], row["stream"]) == (
        "/v1/chat/completions", "openai", "chat", 200, False)  # fmt: skip
    assert (row["key_id"], row["account_id"]) == (key["id"], key["account_id"])
    assert (row["model"], row["provider"], row["deployment"], row["upstream_model"]) == (
        "echo-model", "fake", "fake/gpt-echo", "gpt-echo")  # fmt: skip
    usage = completion.usage
    assert row["tokens"] == {"input": usage.prompt_tokens, "output": usage.completion_tokens,
                             "cached": usage.prompt_tokens_details.cached_tokens}  # fmt: skip
    assert row["cost_micros"] == int(chat.headers["x-inferplex-cost-micros"]) > 0
    assert row["timings"]["total_ms"] >= row["timings"]["upstream_ms"] > 0
    assert [(a["deployment"], a["outcome"], a["status"]) for a in row["attempts"]] == [("fake/gpt-echo", "ok", 200)]
    assert row["client_ip"] == "127.0.0.1" and row["error"] is None

    stream_id, usage_chunks = seen["stream"]
    row = by_id[stream_id]
    assert (row["stream"], row["status"], row["timings"]["ttft_ms"] is not None) == (True, 200, True)
    assert row["tokens"]["output"] == usage_chunks[0].usage.completion_tokens

    embed_id, embedding = seen["embedding"]
    row = by_id[embed_id]
    assert (row["route"], row["operation"], row["model"]) == ("/v1/embeddings", "embedding", "embed-model")
    assert row["tokens"]["input"] == embedding.usage.prompt_tokens

    fb_id, answer = seen["fallback"]
    row = by_id[fb_id]
    assert (row["status"], row["error_type"], row["model"], answer.choices[0].message.content[:5]) == (
        200, None, "echo-model", "echo:")  # fmt: skip
    assert [(a["deployment"], a["outcome"], a["status"]) for a in row["attempts"]] == [
        ("fake/error-500", "error", 500), ("fake/gpt-echo", "ok", 200)]  # fmt: skip

    row = by_id[seen["bad"]]
    assert (row["status"], row["error_type"], row["attempts"], row["cost_micros"]) == (
        400, "caller.invalid_request", [], None)  # fmt: skip
    assert row["error"]["message"]
    refused = [r for r in rows if r["status"] == 401]
    assert len(refused) == 1
    assert (refused[0]["route"], refused[0]["error_type"], refused[0]["error"]["code"]) == (
        "/v1/models", "policy.unauthenticated", "invalid_api_key")  # fmt: skip

    text = path.read_text()
    for secret in (key["key"], server.master_key, "ipx-not-a-key", "Bearer", "authorization"):
        assert secret not in text
    assert "response_body" not in text and "request_body" not in text and "hello there" not in text


def test_bodies_only_when_turned_on(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    path = tmp_path / "requests.jsonl"
    with GatewayServer(_config(fake_openai, path, bodies=True)) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key=server.master_key, max_retries=0)
        answer = client.chat.completions.create(model="echo-model", messages=[{"role": "user", "content": "ping"}])
        rows = _lines(path, 1)
    assert len(rows) == 1
    assert rows[0]["response_body"]["choices"][0]["message"]["content"] == answer.choices[0].message.content
    assert rows[0]["request_body"]["messages"] == [{"role": "user", "content": "ping"}]
    assert rows[0]["request_body"]["model"] == "echo-model"
    assert rows[0]["key_id"] == "master" and server.master_key not in path.read_text()


def test_a_rotated_file_is_reopened(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    """logrotate moves the file away: the next lines start a new file at the configured path."""
    path = tmp_path / "requests.jsonl"
    with GatewayServer(_config(fake_openai, path)) as server:
        health = httpx.get(f"{server.url}/v1/models", headers=server.auth)
        assert health.status_code == 200
        assert len(_lines(path, 1)) == 1
        path.rename(tmp_path / "requests.jsonl.1")
        again = httpx.get(f"{server.url}/v1/models", headers=server.auth)
        rows = _lines(path, 1)
    assert [r["request_id"] for r in rows] == [again.headers["x-inferplex-request-id"]]
    old = [json.loads(x) for x in (tmp_path / "requests.jsonl.1").read_text().splitlines()]
    assert [r["request_id"] for r in old] == [health.headers["x-inferplex-request-id"]]
