"""Bad input and upstream failures through HTTP: status, and the full OpenAI error object."""

from __future__ import annotations

import json
import logging
import socket
import time

import httpx
import pytest

from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

MSG = [{"role": "user", "content": "hi"}]


def assert_error(
    resp: httpx.Response, status: int, type_: str, code: str | None = None, param: str | None = None
) -> dict[str, object]:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert set(body) == {"error"}
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    assert err["type"] == type_
    if code is not None:
        assert err["code"] == code
    if param is not None:
        assert err["param"] == param
    assert "Traceback" not in resp.text
    return err


def post(gw: GatewayServer, body: object, **kw: object) -> httpx.Response:
    headers = {**gw.auth, **kw.pop("headers", {})}  # type: ignore[dict-item]
    return httpx.post(gw.base_url + "/chat/completions", headers=headers, json=body, timeout=10, **kw)  # type: ignore[arg-type]


def test_malformed_json(gateway: GatewayServer) -> None:
    r = httpx.post(
        gateway.base_url + "/chat/completions",
        content=b'{"model": "echo-model", "messages": [',
        headers={**gateway.auth, "content-type": "application/json"},
    )
    assert_error(r, 400, "invalid_request_error", "invalid_json")


def test_body_not_an_object(gateway: GatewayServer) -> None:
    assert_error(post(gateway, [1, 2]), 400, "invalid_request_error")


@pytest.mark.parametrize(
    "body,param",
    [
        ({"messages": MSG}, "model"),
        ({"model": "echo-model"}, "messages"),
        ({"model": "echo-model", "messages": []}, "messages"),
        ({"model": 5, "messages": MSG}, "model"),
        ({"model": "echo-model", "messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"model": "echo-model", "messages": [{"role": "user"}]}, "messages[0]"),
        ({"model": "echo-model", "messages": [{"role": "tool", "content": "x"}]}, "messages[0]"),
        ({"model": "echo-model", "messages": MSG, "temperature": 3}, "temperature"),
        ({"model": "echo-model", "messages": MSG, "temperature": "hot"}, "temperature"),
        ({"model": "echo-model", "messages": MSG, "top_p": 1.5}, "top_p"),
        ({"model": "echo-model", "messages": MSG, "max_tokens": 0}, "max_tokens"),
        ({"model": "echo-model", "messages": MSG, "n": 0}, "n"),
        ({"model": "echo-model", "messages": MSG, "frequency_penalty": -3}, "frequency_penalty"),
        ({"model": "echo-model", "messages": MSG, "top_logprobs": 3}, "top_logprobs"),
        ({"model": "echo-model", "messages": MSG, "logit_bias": {"1": 500}}, "logit_bias"),
        ({"model": "echo-model", "messages": MSG, "stream_options": {"include_usage": True}}, "stream_options"),
        ({"model": "echo-model", "messages": MSG, "tool_choice": "sometimes"}, "tool_choice"),
        ({"model": "echo-model", "messages": MSG, "response_format": {"type": "yaml"}}, "response_format.type"),
        ({"model": "echo-model", "messages": MSG, "response_format": {"type": "json_schema"}}, "response_format"),
        ({"model": "echo-model", "messages": MSG, "stop": 5}, "stop"),
        ({"model": "echo-model", "messages": MSG, "stream": "yes"}, "stream"),
        # OpenAI's API refuses a boolean where it wants a number ("expected a decimal, but got a boolean")
        ({"model": "echo-model", "messages": MSG, "temperature": True}, "temperature"),
        ({"model": "echo-model", "messages": MSG, "top_p": True}, "top_p"),
        ({"model": "echo-model", "messages": MSG, "max_tokens": True}, "max_tokens"),
        ({"model": "echo-model", "messages": MSG, "n": True}, "n"),
        ({"model": "echo-model", "messages": MSG, "seed": False}, "seed"),
    ],
)
def test_invalid_fields_name_the_param(gateway: GatewayServer, body: dict[str, object], param: str) -> None:
    err = assert_error(post(gateway, body), 400, "invalid_request_error")
    assert err["param"] == param, err


def test_missing_and_wrong_key(gateway: GatewayServer) -> None:
    r = httpx.post(gateway.base_url + "/chat/completions", json={"model": "echo-model", "messages": MSG})
    assert_error(r, 401, "authentication_error", "missing_api_key")
    r = post(gateway, {"model": "echo-model", "messages": MSG}, headers={"Authorization": "Bearer wrong"})
    assert_error(r, 401, "authentication_error", "invalid_api_key")
    r = post(gateway, {"model": "echo-model", "messages": MSG}, headers={"Authorization": "Basic abc"})
    assert_error(r, 401, "authentication_error")
    r = httpx.get(gateway.base_url + "/models")
    assert_error(r, 401, "authentication_error")


@pytest.mark.parametrize("stream", [False, True])
def test_unknown_model_is_json_404_even_for_streams(gateway: GatewayServer, stream: bool) -> None:
    r = post(gateway, {"model": "no-such-model", "messages": MSG, "stream": stream})
    err = assert_error(r, 404, "invalid_request_error", "model_not_found", "model")
    assert "no-such-model" in str(err["message"])


def test_unknown_provider_in_model_at_provider(gateway: GatewayServer) -> None:
    assert_error(post(gateway, {"model": "echo-model@nowhere", "messages": MSG}), 404, "invalid_request_error")
    assert_error(post(gateway, {"model": "echo-model@", "messages": MSG}), 400, "invalid_request_error", param="model")


def test_embedding_model_for_chat_is_rejected(gateway: GatewayServer) -> None:
    assert_error(post(gateway, {"model": "embed-model", "messages": MSG}), 400, "invalid_request_error", param="model")


def test_body_too_large(gateway: GatewayServer) -> None:
    big = {"model": "echo-model", "messages": [{"role": "user", "content": "x" * 100_000}]}
    assert_error(post(gateway, big), 413, "invalid_request_error", "request_too_large")


def test_chunked_body_too_large_without_content_length(gateway: GatewayServer) -> None:
    def gen():  # type: ignore[no-untyped-def]
        yield b'{"model": "echo-model", "messages": [{"role": "user", "content": "'
        for _ in range(100):
            yield b"x" * 1000
        yield b'"}]}'

    r = httpx.post(
        gateway.base_url + "/chat/completions",
        content=gen(),
        headers={**gateway.auth, "content-type": "application/json"},
    )
    assert_error(r, 413, "invalid_request_error", "request_too_large")


def test_wrong_content_type(gateway: GatewayServer) -> None:
    r = httpx.post(
        gateway.base_url + "/chat/completions",
        content=b"model=x",
        headers={**gateway.auth, "content-type": "application/x-www-form-urlencoded"},
    )
    assert_error(r, 415, "invalid_request_error", "unsupported_media_type")


def test_unknown_route_and_method(gateway: GatewayServer) -> None:
    assert_error(httpx.get(gateway.base_url + "/nothing", headers=gateway.auth), 404, "invalid_request_error")
    assert_error(httpx.get(gateway.base_url + "/chat/completions", headers=gateway.auth), 405, "invalid_request_error")


@pytest.mark.parametrize(
    ("method", "path", "allow", "dialect"),
    [
        ("GET", "/v1/chat/completions", "POST", "openai"),
        ("DELETE", "/v1/models", "GET, HEAD", "openai"),
        ("GET", "/v1/messages", "POST", "anthropic"),
        ("PUT", "/v1/ula/chat/completions", "POST", "oneinfer"),
        ("GET", "/v0/chat/completions", "POST", "openai"),
        ("GET", "/api/v1/chat/completions", "POST", "openai"),
    ],
)
def test_405_says_which_methods_are_allowed(
    gateway: GatewayServer, method: str, path: str, allow: str, dialect: str
) -> None:
    r = httpx.request(method, gateway.url + path, headers=gateway.auth)
    assert r.status_code == 405
    assert sorted(m.strip() for m in r.headers["allow"].split(",")) == sorted(allow.split(", "))
    body = r.json()
    if dialect == "anthropic":
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    elif dialect == "oneinfer":
        assert body["error"]["code"] == "method_not_allowed" and body["api_details"]["api_status"] == "error"
    else:
        assert_error(r, 405, "invalid_request_error", "method_not_allowed")


@pytest.mark.parametrize(
    "model,status,type_",
    [
        ("error-500", 502, "api_error"),
        ("error-503", 502, "api_error"),
        ("error-400", 400, "invalid_request_error"),
        ("error-401", 502, "api_error"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_upstream_errors_keep_the_provider_message(
    gateway: GatewayServer, model: str, status: int, type_: str, stream: bool
) -> None:
    err = assert_error(post(gateway, {"model": model, "messages": MSG, "stream": stream}), status, type_)
    assert str(err["message"]).startswith("fake upstream failure")


def test_upstream_429_keeps_retry_after(gateway: GatewayServer) -> None:
    r = post(gateway, {"model": "error-429", "messages": MSG})
    assert_error(r, 429, "rate_limit_error")
    assert r.headers["retry-after"] == "7"


def test_upstream_timeout_is_504(gateway: GatewayServer) -> None:
    started = time.monotonic()
    r = post(gateway, {"model": "hang", "messages": MSG})
    assert_error(r, 504, "api_error", "upstream_timeout")
    assert time.monotonic() - started < 5


def test_upstream_unreachable_is_502() -> None:
    from tests.gateway_server import free_port

    config = {
        "providers": [
            {"name": "gone", "base_url": f"http://127.0.0.1:{free_port()}/v1", "api_key": "env:FAKE_UPSTREAM_KEY"}
        ],
        "models": [{"name": "m", "deployments": [{"provider": "gone", "model": "m"}], "pricing": {"free": True}}],
    }
    with GatewayServer(config) as gw:
        err = assert_error(post(gw, {"model": "m", "messages": MSG}), 502, "api_error", "upstream_error")
        assert "could not connect" in str(err["message"])


def test_upstream_dying_midstream_gives_error_chunk_then_done(gateway: GatewayServer) -> None:
    with httpx.stream(
        "POST",
        gateway.base_url + "/chat/completions",
        headers=gateway.auth,
        json={"model": "die-midstream", "messages": MSG, "stream": True},
    ) as resp:
        assert resp.status_code == 200
        frames = [line[6:] for line in resp.iter_lines() if line.startswith("data: ")]
    assert frames[-1] == "[DONE]"
    error = json.loads(frames[-2])
    assert set(error) == {"error"} and set(error["error"]) == {"message", "type", "param", "code"}
    assert error["error"]["type"] == "api_error"
    content = "".join(json.loads(f)["choices"][0]["delta"].get("content") or "" for f in frames[:-2])
    assert content == "partial answer "


def test_client_disconnect_cancels_upstream_within_a_second(gateway: GatewayServer, fake_openai: FakeOpenAI) -> None:
    before = len(fake_openai.state.disconnects)
    with httpx.stream(
        "POST",
        gateway.base_url + "/chat/completions",
        headers=gateway.auth,
        json={"model": "slow-stream", "messages": MSG, "stream": True},
    ) as resp:
        seen = 0
        for line in resp.iter_lines():
            if line.startswith("data: "):
                seen += 1
            if seen >= 3:
                break
        left_at = time.monotonic()
    deadline = left_at + 1.0
    while len(fake_openai.state.disconnects) == before and time.monotonic() < deadline + 0.5:
        time.sleep(0.01)
    assert len(fake_openai.state.disconnects) > before, "upstream stream was never cancelled"
    assert fake_openai.state.disconnects[-1] - left_at < 1.0


def test_caller_leaving_before_its_body_arrives_is_not_an_error(
    gateway: GatewayServer, caplog: pytest.LogCaptureFixture
) -> None:
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {gateway.master_key}\r\nContent-Length: 200\r\n\r\n"
    )
    with caplog.at_level(logging.DEBUG, logger="inferplex"):
        with socket.create_connection(("127.0.0.1", gateway.port)) as sock:
            sock.sendall(head.encode() + b'{"model": "gpt-4o-mi')  # 20 of the 200 bytes announced
            time.sleep(0.2)
        time.sleep(0.3)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert any("before sending the whole body" in r.getMessage() for r in caplog.records)
    r = httpx.post(gateway.base_url + "/chat/completions", headers=gateway.auth, json={"model": "gpt-4o-mini"})
    assert r.status_code == 400  # the gateway is unharmed: the next caller gets a normal answer


def test_unexpected_exception_is_a_clean_500(
    gateway: GatewayServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from inferplex import catalog

    def boom(*a: object, **k: object) -> None:
        raise RuntimeError("kaboom")

    monkeypatch.setattr(catalog.Catalog, "resolve", boom)
    r = post(gateway, {"model": "echo-model", "messages": MSG})
    err = assert_error(r, 500, "api_error", "internal_error")
    assert r.headers["x-inferplex-request-id"] in str(err["message"])
    assert "kaboom" not in r.text
    assert any(r.headers["x-inferplex-request-id"] in rec.getMessage() for rec in caplog.records)
