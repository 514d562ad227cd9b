"""InferExchange's examples (seed 003) replayed against Inferplex at `/api/v1`, changing only URL and key."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

# The doc's two curl examples, verbatim.
EXAMPLE = {
    "model": "llama-3.1-8b",
    "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is machine learning?"},
    ],
    "temperature": 0.7,
    "max_tokens": 500,
}
STREAM_EXAMPLE = {"model": "llama-3.1-8b", "messages": [{"role": "user", "content": "Hello"}], "stream": True}


def post(gw: GatewayServer, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {gw.master_key}", "Content-Type": "application/json", **(headers or {})}
    return httpx.post(gw.url + "/api/v1/chat/completions", content=json.dumps(body), headers=headers, timeout=10)


def assert_openai_error(resp: httpx.Response, status: int, code: str | None = None) -> None:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    if code is not None:
        assert body["error"]["code"] == code


def test_chat_example(seed_gateway: GatewayServer, fake_openai: FakeOpenAI) -> None:
    resp = post(seed_gateway, EXAMPLE)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert isinstance(body["id"], str) and body["id"]
    assert body["object"] == "chat.completion"
    assert isinstance(body["created"], int)
    assert body["model"] == "llama-3.1-8b"
    choice = body["choices"][0]
    assert choice["index"] == 0
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["content"] == "echo: What is machine learning?"
    assert choice["finish_reason"] == "stop"
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0
    sent = fake_openai.state.last().body
    assert sent["model"] == "llama-3.1-8b-instant"
    assert sent["temperature"] == 0.7 and sent["max_tokens"] == 500


def test_streaming_example(seed_gateway: GatewayServer) -> None:
    with httpx.stream(
        "POST", seed_gateway.url + "/api/v1/chat/completions", json=STREAM_EXAMPLE, headers=seed_gateway.auth
    ) as resp:
        lines = [line for line in resp.iter_lines() if line]
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert all(c["id"] == chunks[0]["id"] for c in chunks)
    assert all(c["choices"][0]["index"] == 0 for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == "echo: Hello"


def test_openai_sdk_works_unchanged(seed_gateway: GatewayServer) -> None:
    client = openai.OpenAI(base_url=seed_gateway.url + "/api/v1", api_key=seed_gateway.master_key, max_retries=0)
    completion = client.chat.completions.create(model="llama-3.1-8b", messages=EXAMPLE["messages"])  # type: ignore[arg-type]
    assert completion.choices[0].message.content == "echo: What is machine learning?"
    assert "llama-3.1-8b" in [m.id for m in client.models.list()]


def test_models_list_carries_per_million_token_pricing(seed_gateway: GatewayServer) -> None:
    resp = httpx.get(seed_gateway.url + "/api/v1/models", headers=seed_gateway.auth, timeout=10)
    assert resp.status_code == 200
    body = resp.json()
    assert body["object"] == "list"
    cards = {m["id"]: m for m in body["data"]}
    llama = cards["llama-3.1-8b"]
    assert llama["object"] == "model" and isinstance(llama["created"], int) and llama["owned_by"] == "groq"
    assert llama["pricing"] == {"prompt": "0.05", "completion": "0.08", "unit": "per_million_tokens"}
    one = httpx.get(seed_gateway.url + "/api/v1/models/llama-3.1-8b", headers=seed_gateway.auth, timeout=10)
    assert one.status_code == 200 and one.json()["id"] == "llama-3.1-8b"


@pytest.mark.parametrize(
    "body,status,code",
    [
        ({**EXAMPLE, "model": "no-such-model"}, 404, "model_not_found"),
        ({"model": "llama-3.1-8b"}, 400, None),
        ({**EXAMPLE, "temperature": 3}, 400, None),
        ({**EXAMPLE, "top_p": 2}, 400, None),
    ],
)
def test_errors_in_openai_shape(seed_gateway: GatewayServer, body: dict[str, Any], status: int, code: str) -> None:
    assert_openai_error(post(seed_gateway, body), status, code)


def test_bad_key_is_a_401(seed_gateway: GatewayServer) -> None:
    assert_openai_error(post(seed_gateway, EXAMPLE, {"Authorization": "Bearer sk-infer-YOUR_KEY"}), 401)
