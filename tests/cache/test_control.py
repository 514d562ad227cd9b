"""Per-request cache control: what each spelling means (tables), and a malformed value as a 400 in the
caller's dialect (through HTTP)."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import openai
import pytest

from inferplex.cache.control import Control, parse
from inferplex.errors import InvalidRequest
from tests.cache.conftest import client, unique
from tests.gateway_server import GatewayServer

# (headers, the body's `cache`, what the request asked)
PARSED: list[tuple[dict[str, str], dict[str, Any] | None, Control]] = [
    ({}, None, Control()),
    ({"cache-control": "no-cache"}, None, Control(read=False)),
    ({"cache-control": "no-store"}, None, Control(store=False)),
    ({"cache-control": "No-Cache, no-store"}, None, Control(read=False, store=False)),
    ({"cache-control": "max-age=30"}, None, Control(max_age_s=30)),
    ({"cache-control": 'max-age="0"'}, None, Control(max_age_s=0)),
    ({"cache-control": "private, must-revalidate"}, None, Control()),  # other directives: ignored
    ({"x-inferplex-cache": "bypass"}, None, Control(bypass=True)),
    ({"x-inferplex-cache": "use"}, None, Control(use=True)),
    ({"x-inferplex-cache": "semantic"}, None, Control(use=True, semantic=True)),
    ({"x-inferplex-cache": "no-cache, no-store"}, None, Control(read=False, store=False)),
    (
        {"x-inferplex-cache": "namespace=team-a, ttl=60, threshold=0.9, max-age=5"},
        None,
        Control(namespace="team-a", ttl_s=60, threshold=0.9, max_age_s=5),
    ),
    ({}, {"no-cache": True}, Control(read=False)),
    ({}, {"no-store": True, "no-cache": False}, Control(store=False)),
    ({}, {"use-cache": True}, Control(use=True)),
    ({}, {"use-cache": False}, Control(bypass=True)),
    ({}, {"ttl": 120, "s-maxage": 10, "namespace": "x"}, Control(ttl_s=120, max_age_s=10, namespace="x")),
    ({}, {"semantic": True, "threshold": 0.8}, Control(use=True, semantic=True, threshold=0.8)),
    ({}, {"semantic": False}, Control(semantic=False)),
    # header and body combine: flags from either, the smaller ttl and max-age, one namespace
    (
        {"cache-control": "no-store, max-age=5"},
        {"s-maxage": 60, "ttl": 10},
        Control(store=False, max_age_s=5, ttl_s=10),
    ),
    ({"x-inferplex-cache": "ttl=5, namespace=a"}, {"ttl": 60, "namespace": "a"}, Control(ttl_s=5, namespace="a")),
]


@pytest.mark.parametrize(("headers", "body", "expected"), PARSED)
def test_parse(headers: dict[str, str], body: dict[str, Any] | None, expected: Control) -> None:
    assert parse(httpx.Headers(headers), body) == expected


def test_a_header_sent_twice_counts_both_times() -> None:
    headers = httpx.Headers([("cache-control", "no-store"), ("cache-control", "max-age=3")])
    assert parse(headers, None) == Control(store=False, max_age_s=3)


def test_no_headers_outside_a_request() -> None:
    assert parse(None, {"no-store": True}) == Control(store=False)


# (headers, the body's `cache`, the parameter the 400 names)
REFUSED: list[tuple[dict[str, str], dict[str, Any] | None, str]] = [
    ({"cache-control": "max-age=soon"}, None, "Cache-Control: max-age"),
    ({"cache-control": "max-age=-1"}, None, "Cache-Control: max-age"),
    ({"cache-control": "max-age=1.5"}, None, "Cache-Control: max-age"),
    ({"x-inferplex-cache": "always"}, None, "x-inferplex-cache"),
    ({"x-inferplex-cache": "ttl=0"}, None, "x-inferplex-cache: ttl"),
    ({"x-inferplex-cache": "ttl=nan"}, None, "x-inferplex-cache: ttl"),
    ({"x-inferplex-cache": "threshold=1.5"}, None, "x-inferplex-cache: threshold"),
    ({"x-inferplex-cache": "namespace="}, None, "x-inferplex-cache: namespace"),
    ({"x-inferplex-cache": "bypass=1"}, None, "x-inferplex-cache"),
    ({}, {"no-store": "yes"}, "cache.no-store"),
    ({}, {"use-cache": 1}, "cache.use-cache"),
    ({}, {"ttl": -5}, "cache.ttl"),
    ({}, {"ttl": True}, "cache.ttl"),
    ({}, {"s-maxage": "10"}, "cache.s-maxage"),  # a JSON string is not a number (only headers are text)
    ({}, {"namespace": 7}, "cache.namespace"),
    ({}, {"namespace": "x" * 129}, "cache.namespace"),
    ({}, {"threshold": 0}, "cache.threshold"),
    ({}, {"semantic": "on"}, "cache.semantic"),
    ({}, {"no_store": True}, "cache.no_store"),
    ({"x-inferplex-cache": "namespace=a"}, {"namespace": "b"}, "cache.namespace"),
]


@pytest.mark.parametrize(("headers", "body", "param"), REFUSED)
def test_refused(headers: dict[str, str], body: dict[str, Any] | None, param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse(httpx.Headers(headers), body)
    assert caught.value.param == param and caught.value.status == 400


def test_s_maxage_string_is_refused_but_a_header_number_is_text() -> None:
    assert parse(httpx.Headers({"x-inferplex-cache": "max-age=10"}), None) == Control(max_age_s=10)


def test_a_malformed_control_is_an_openai_400(server: GatewayServer) -> None:
    text = unique()
    sdk = client(server, **{"x-inferplex-cache": "ttl=forever"})
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.chat.completions.create(model="priced", messages=[{"role": "user", "content": text}])
    error: Any = caught.value.body
    assert error["type"] == "invalid_request_error" and error["param"] == "x-inferplex-cache: ttl"
    assert "ttl" in error["message"]
    with pytest.raises(openai.BadRequestError) as caught:
        client(server).chat.completions.create(
            model="priced", messages=[{"role": "user", "content": text}], extra_body={"cache": {"ttl": "x"}}
        )
    assert caught.value.body["param"] == "cache.ttl"  # type: ignore[index]
    r = httpx.post(
        server.base_url + "/embeddings",
        json={"model": "embed-model", "input": text, "cache": {"bogus": True}},
        headers={"Authorization": f"Bearer {server.master_key}"},
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "cache.bogus"
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_a_malformed_control_is_an_anthropic_400(server: GatewayServer) -> None:
    sdk = anthropic.Anthropic(
        base_url=server.url,
        api_key=server.master_key,
        max_retries=0,
        default_headers={"Cache-Control": "max-age=later"},
    )
    with pytest.raises(anthropic.BadRequestError) as caught:
        sdk.messages.create(model="priced", max_tokens=50, messages=[{"role": "user", "content": unique()}])
    body: Any = caught.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "max-age" in body["error"]["message"]
    assert caught.value.response.headers["request-id"]
