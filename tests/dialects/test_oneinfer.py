"""OneInfer's own examples (seeds 000 and 001) replayed against Inferplex, changing only the URL and the key.

Every response field the doc lists is checked, as are the SSE chunk format and each documented status with
its envelope.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from inferplex.context import Context
from inferplex.dialects.oneinfer import render_error, status_for
from inferplex.errors import GatewayError, InternalError
from tests.dialects.seed_examples import SEED_000_EXAMPLE, SEED_001_EXAMPLE
from tests.fakes.anthropic_upstream import FakeAnthropic
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

DATA_FIELDS = {
    "id",
    "created",
    "text",
    "finish_reason",
    "provider",
    "model",
    "usage",
    "latency_ms",
    "is_context_length_full",
}


USER = [{"role": "user", "content": "hi there"}]


def url(gw: GatewayServer, path: str = "/v1/ula/chat/completions") -> str:
    return gw.url + path


def post(gw: GatewayServer, body: Any, path: str = "/v1/ula/chat/completions", **kw: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {gw.master_key}", "Content-Type": "application/json", **kw.pop("headers", {})}
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(url(gw, path), content=content, headers=headers, timeout=10, **kw)


def post_form(gw: GatewayServer, form: dict[str, str]) -> httpx.Response:
    """A multipart/form-data body: every field a part without a filename."""
    parts = {k: (None, v) for k, v in form.items()}
    return httpx.post(url(gw), files=parts, headers=gw.auth, timeout=10)


def assert_success(resp: httpx.Response) -> dict[str, Any]:
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert set(body) == {"api_details", "data", "error"}
    assert body["api_details"] == {"api_status": "success", "api_message": "Chat completion generated successfully."}
    assert body["error"] == {}
    data: dict[str, Any] = body["data"]
    assert set(data) == DATA_FIELDS
    assert isinstance(data["id"], str) and data["id"].startswith("req_")
    assert data["id"] == resp.headers["x-request-id"]
    assert isinstance(data["created"], int) and data["created"] > 1_700_000_000
    assert isinstance(data["text"], str)
    assert isinstance(data["latency_ms"], int | float) and data["latency_ms"] >= 0
    assert isinstance(data["is_context_length_full"], bool)
    usage = data["usage"]
    assert set(usage) == {"prompt_tokens", "completion_tokens", "total_tokens"}
    assert all(isinstance(v, int) for v in usage.values())
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0
    return data


def assert_error(resp: httpx.Response, status: int, code: str | None = None, param: str | None = None) -> None:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert set(body) == {"api_details", "data", "error"}
    assert body["api_details"]["api_status"] == "error"
    assert isinstance(body["api_details"]["api_message"], str) and body["api_details"]["api_message"]
    assert body["data"] == {}
    err = body["error"]
    assert set(err) == {"status", "code", "type", "message", "param"}
    assert err["status"] == status and err["message"] == body["api_details"]["api_message"]
    if code is not None:
        assert err["code"] == code
    if param is not None:
        assert err["param"] == param
    assert "Traceback" not in resp.text


# ---- the documented examples ------------------------------------------------------------------------------


def test_seed_000_example_request(seed_gateway: GatewayServer, fake_openai: FakeOpenAI) -> None:
    data = assert_success(post(seed_gateway, SEED_000_EXAMPLE))
    assert data["text"] == "echo: Tell me about AI."
    assert data["finish_reason"] == "stop"
    assert data["provider"] == "openai" and data["model"] == "gpt-4o-mini"
    assert data["is_context_length_full"] is False
    sent = fake_openai.state.last()
    assert sent.headers["Authorization"] == "Bearer sk-fake-upstream"
    assert sent.body["model"] == "gpt-4o-mini"
    assert sent.body["temperature"] == 0.7 and sent.body["max_tokens"] == 1000
    assert [m["role"] for m in sent.body["messages"]] == ["system", "user"]
    assert "provider" not in sent.body


def test_seed_001_anthropic_example(seed_gateway: GatewayServer, seed_anthropic: FakeAnthropic) -> None:
    data = assert_success(post(seed_gateway, SEED_001_EXAMPLE))
    assert data["text"] == "echo: Explain transformer attention in two sentences."
    assert data["provider"] == "anthropic" and data["model"] == "claude-sonnet-4-6"
    assert data["finish_reason"] == "stop"
    sent = seed_anthropic.last("/v1/messages").body
    assert sent["model"] == "claude-sonnet-4-6" and sent["max_tokens"] == 256
    assert sent["temperature"] == 0.7  # OneInfer's default, applied because the example omits it
    assert sent["system"] in (
        "You are a helpful assistant.",
        [{"type": "text", "text": "You are a helpful assistant."}],
    )


def test_defaults_provider_temperature_and_max_tokens(seed_gateway: GatewayServer, fake_openai: FakeOpenAI) -> None:
    data = assert_success(post(seed_gateway, {"model": "gpt-4o-mini", "messages": USER}))
    assert data["provider"] == "openai"
    sent = fake_openai.state.last().body
    assert sent["temperature"] == 0.7 and sent["max_tokens"] == 1000


def test_model_defaults_to_the_providers_first_chat_model(seed_gateway: GatewayServer) -> None:
    data = assert_success(post(seed_gateway, {"provider": "anthropic", "messages": USER}))
    assert data["model"] == "claude-sonnet-4-6"


def test_max_tokens_truncates_with_finish_reason_length(seed_gateway: GatewayServer) -> None:
    data = assert_success(post(seed_gateway, {**SEED_000_EXAMPLE, "max_tokens": 2}))
    assert data["finish_reason"] == "length" and data["text"] == "echo: Tell"


def test_context_length_full_when_the_window_is_used(seed_gateway: GatewayServer) -> None:
    data = assert_success(post(seed_gateway, {"provider": "openai", "model": "ctx-tiny", "messages": USER}))
    assert data["usage"]["total_tokens"] >= 5 and data["is_context_length_full"] is True


def test_endpoint_id_and_service_tier_are_honoured_not_forwarded(
    seed_gateway: GatewayServer, fake_openai: FakeOpenAI
) -> None:
    body = {**SEED_000_EXAMPLE, "endpoint_id": "ep-mini-openai", "service_tier": "flex", "top_p": 0.9, "stop": ["\n"]}
    assert_success(post(seed_gateway, body))
    sent = fake_openai.state.last().body
    assert "endpoint_id" not in sent and "provider" not in sent
    assert sent["top_p"] == 0.9 and sent["stop"] == ["\n"]


def test_multipart_form_body_is_accepted(seed_gateway: GatewayServer, fake_openai: FakeOpenAI) -> None:
    form = {
        "provider": "openai",
        "model": "gpt-4o-mini",
        "messages": json.dumps(USER),
        "temperature": "0.2",
        "max_tokens": "50",
        "stream": "false",
    }
    resp = post_form(seed_gateway, form)
    assert resp.request.headers["content-type"].startswith("multipart/form-data")
    assert assert_success(resp)["text"] == "echo: hi there"
    sent = fake_openai.state.last().body
    assert sent["temperature"] == 0.2 and sent["max_tokens"] == 50


# ---- streaming --------------------------------------------------------------------------------------------


def stream_lines(gw: GatewayServer, body: dict[str, Any]) -> tuple[httpx.Response, list[str]]:
    """Read the stream the way seed 001's Python example does: line by line, skipping blanks and [DONE]."""
    lines: list[str] = []
    with httpx.stream(
        "POST", url(gw), json=body, headers={"Authorization": f"Bearer {gw.master_key}"}, timeout=10
    ) as resp:
        for line in resp.iter_lines():
            lines.append(line)
    return resp, lines


@pytest.mark.parametrize(
    "provider,model,prompt",
    [("openai", "gpt-4o-mini", "Tell me a story."), ("anthropic", "claude-sonnet-4-6", "Tell me a story.")],
)
def test_seed_001_streaming_example(seed_gateway: GatewayServer, provider: str, model: str, prompt: str) -> None:
    body = {"provider": provider, "model": model, "messages": [{"role": "user", "content": prompt}], "stream": True}
    resp, lines = stream_lines(seed_gateway, body)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    events = [line for line in lines if line]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in events[:-1]]
    assert all(line.startswith("data: ") for line in events)
    assert all(set(c) == {"id", "text", "finish_reason"} for c in chunks)
    *pieces, final = chunks
    assert [c["id"] for c in pieces] == [f"chunk_{i}" for i in range(1, len(pieces) + 1)]
    assert all(c["finish_reason"] is None and c["text"] for c in pieces)
    assert final == {"id": "chunk_final", "text": "", "finish_reason": "stop"}
    assert "".join(c["text"] for c in pieces) == "echo: " + prompt


def test_stream_failure_after_first_byte_is_an_error_envelope_then_done(seed_gateway: GatewayServer) -> None:
    body = {"provider": "openai", "model": "die-midstream", "messages": USER, "stream": True}
    resp, lines = stream_lines(seed_gateway, body)
    events = [line for line in lines if line]
    assert resp.status_code == 200 and events[-1] == "data: [DONE]"
    assert json.loads(events[0].removeprefix("data: "))["text"] == "partial "
    last = json.loads(events[-2].removeprefix("data: "))
    assert last["api_details"]["api_status"] == "error" and last["data"] == {}
    assert last["error"]["status"] >= 500


def test_stream_refused_before_first_byte_is_a_json_error(seed_gateway: GatewayServer) -> None:
    resp, _ = stream_lines(seed_gateway, {"provider": "openai", "model": "nope", "messages": USER, "stream": True})
    assert resp.status_code == 400 and resp.headers["content-type"].startswith("application/json")


# ---- documented error statuses, in the envelope -----------------------------------------------------------


def test_400_invalid_json(seed_gateway: GatewayServer) -> None:
    assert_error(post(seed_gateway, b'{"provider": "openai", "messages": ['), 400, "invalid_json")


@pytest.mark.parametrize(
    "body,code,param",
    [
        ({"provider": "openai", "model": "gpt-4o-mini"}, None, "messages"),
        ({"provider": "openai", "model": "gpt-4o-mini", "messages": []}, None, "messages"),
        ({"provider": "", "model": "gpt-4o-mini", "messages": USER}, None, "provider"),
        ({"provider": "nope", "model": "gpt-4o-mini", "messages": USER}, "unsupported_provider", "provider"),
        ({"provider": "openai", "model": "no-such-model", "messages": USER}, "model_not_found", "model"),
        ({"provider": "anthropic", "model": "gpt-4o-mini", "messages": USER}, "model_not_found", "model"),
        ({**SEED_000_EXAMPLE, "temperature": 3}, None, "temperature"),
        ({**SEED_000_EXAMPLE, "max_tokens": 0}, None, "max_tokens"),
        ({**SEED_000_EXAMPLE, "top_p": 1.5}, None, "top_p"),
        ({**SEED_000_EXAMPLE, "messages": [{"role": "robot", "content": "hi"}]}, None, "messages[0].role"),
        ({**SEED_000_EXAMPLE, "service_tier": "turbo"}, "invalid_service_tier", "service_tier"),
        ({**SEED_000_EXAMPLE, "endpoint_id": "ep-nope"}, "endpoint_not_found", "endpoint_id"),
        (
            {
                **SEED_000_EXAMPLE,
                "model": "claude-sonnet-4-6",
                "provider": "anthropic",
                "endpoint_id": "ep-mini-openai",
            },
            "endpoint_not_found",
            "endpoint_id",
        ),
    ],
)
def test_400_missing_fields_unsupported_provider_and_invalid_values(
    seed_gateway: GatewayServer, body: dict[str, Any], code: str | None, param: str
) -> None:
    assert_error(post(seed_gateway, body), 400, code, param)


@pytest.mark.parametrize(
    "body,param",
    [
        ([SEED_000_EXAMPLE], None),
        ({**SEED_000_EXAMPLE, "messages": "Tell me about AI."}, "messages"),
        ({**SEED_000_EXAMPLE, "temperature": "hot"}, "temperature"),
        ({**SEED_000_EXAMPLE, "max_tokens": 1.5}, "max_tokens"),
        ({**SEED_000_EXAMPLE, "stream": "yes"}, "stream"),
        ({**SEED_000_EXAMPLE, "provider": 5}, "provider"),
        ({**SEED_000_EXAMPLE, "service_tier": 1}, "service_tier"),
        ({**SEED_000_EXAMPLE, "messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ],
)
def test_422_schema_validation(seed_gateway: GatewayServer, body: Any, param: str | None) -> None:
    assert_error(post(seed_gateway, body), 422, "schema_validation_error", param)


def test_422_bad_form_value(seed_gateway: GatewayServer) -> None:
    form = {"provider": "openai", "model": "gpt-4o-mini", "messages": json.dumps(USER), "temperature": "hot"}
    resp = post_form(seed_gateway, form)
    assert_error(resp, 422, "schema_validation_error", "temperature")


def test_422_file_in_a_chat_form(seed_gateway: GatewayServer) -> None:
    files = {"messages": (None, json.dumps(USER)), "image": ("a.png", b"\x89PNG", "image/png")}
    resp = httpx.post(url(seed_gateway), files=files, headers=seed_gateway.auth, timeout=10)
    assert_error(resp, 422, "schema_validation_error", "image")


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong-key"}, {"Authorization": "Basic abc"}],
)
def test_401_missing_or_invalid_bearer_token(seed_gateway: GatewayServer, headers: dict[str, str]) -> None:
    resp = httpx.post(url(seed_gateway), json=SEED_000_EXAMPLE, headers=headers, timeout=10)
    assert_error(resp, 401)


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_415_content_type(seed_gateway: GatewayServer, content_type: str | None) -> None:
    headers = {"Authorization": f"Bearer {seed_gateway.master_key}"}
    if content_type:
        headers["Content-Type"] = content_type
    resp = httpx.post(url(seed_gateway), content=json.dumps(SEED_000_EXAMPLE), headers=headers, timeout=10)
    assert_error(resp, 415, "unsupported_media_type")


def test_upstream_failure_is_a_5xx_envelope(seed_gateway: GatewayServer) -> None:
    resp = post(seed_gateway, {"provider": "openai", "model": "error-500", "messages": USER})
    assert resp.status_code >= 500
    assert_error(resp, resp.status_code)


@pytest.mark.parametrize(
    "err,status",
    [
        (InternalError("boom"), 500),
        (GatewayError("no money", status=402, code="insufficient_credit"), 403),
        (GatewayError("no money", status=403, code="insufficient_balance"), 403),
        (GatewayError("not found", status=404, code="model_not_found"), 400),
        (GatewayError("slow down", status=429, code="rate_limit_exceeded"), 429),
    ],
)
def test_status_table_for_errors_not_reachable_without_other_issues(err: GatewayError, status: int) -> None:
    """500 and 403 (insufficient credit) need a broken gateway or the credit ledger; their rendering is here."""
    assert status_for(err) == status
    resp = render_error(err, Context())
    assert resp.status_code == status
    body = json.loads(bytes(resp.body))
    assert body["api_details"]["api_status"] == "error" and body["error"]["status"] == status


# ---- unknown routes (the media routes: test_oneinfer_media.py) --------------------------------------------


def test_unknown_route_and_wrong_method_under_ula_use_the_envelope(seed_gateway: GatewayServer) -> None:
    assert_error(httpx.post(url(seed_gateway, "/v1/ula/nope"), headers=seed_gateway.auth), 404)
    assert_error(httpx.get(url(seed_gateway), headers=seed_gateway.auth), 405)


@pytest.mark.parametrize("tier,status", [("turbo", 400), ("auto", 200), ("flex", 200)])
def test_service_tier_follows_the_gateways_one_rule(seed_gateway: GatewayServer, tier: str, status: int) -> None:
    """OneInfer's `service_tier` is checked by the same rule as every other route's (routing/options.py), once:
    the same values pass, and a bad one is refused with the same message (in OneInfer's envelope)."""
    body = {**SEED_000_EXAMPLE, "service_tier": tier}
    ula = post(seed_gateway, body)
    openai = post(seed_gateway, {**body, "model": "gpt-4o-mini"}, "/v1/chat/completions")
    assert (ula.status_code, openai.status_code) == (status, status)
    if status == 400:
        assert_error(ula, 400, "invalid_service_tier", "service_tier")
        assert ula.json()["error"]["message"] == openai.json()["error"]["message"]
