"""Access control that behaves correctly but that no test guarded (issue 19, item 21): each test here was
seen to fail with a one- or two-line change to the rule it names, so none of them can pass by accident.

- a key's model allowlist also governs the models a request falls back to (`models: [...]`, or a model's
  configured `routing.fallbacks`), `/v1/messages/count_tokens`, `GET /v1/models/{id}` and `/v1/endpoints`;
- `X-Forwarded-For` counts for `allowed_ips` only when the peer is a configured trusted proxy. The gateway
  is reached from 127.0.0.1 (not trusted here) and from 127.0.0.2 (trusted): two peers, one gateway;
- a token is refused once its lifetime has passed;
- every route requires the scope it declares (a table over every dialect's routes).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.accounts.conftest import Admin, billing_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

TRUSTED_PROXY = "127.0.0.2"
FALLBACK_UPSTREAM = "guarded-fallback"  # the upstream model id only the fallback model `guarded-b` uses
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def server(fake_openai: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    config = billing_config(
        fake_openai, tmp_path_factory.mktemp("guarded-access"), accounts={"trusted_proxies": [f"{TRUSTED_PROXY}/32"]}
    )
    price = {"input": "0", "output": "3"}
    config["models"] += [
        {  # always fails (one attempt), then falls back to `guarded-b`
            "name": "flaky",
            "deployments": [{"provider": "fake", "model": "error-503"}],
            "routing": {"retries": 0, "fallbacks": ["guarded-b"]},
            "pricing": price,
        },
        {"name": "guarded-b", "deployments": [{"provider": "fake", "model": FALLBACK_UPSTREAM}], "pricing": price},
    ]
    with GatewayServer(config) as gw:
        yield gw


def chat(server: GatewayServer, key: str, client: httpx.Client | None = None, **body: Any) -> httpx.Response:
    payload = {"model": "flaky", "messages": MESSAGES, **body}
    send = client.post if client is not None else httpx.post
    return send(
        server.base_url + "/chat/completions", json=payload, headers={"Authorization": f"Bearer {key}"}, timeout=30
    )


def fallback_hits(fake: FakeOpenAI) -> int:
    return sum(1 for r in fake.state.requests if r.body.get("model") == FALLBACK_UPSTREAM)


def assert_refused(r: httpx.Response, status: int, code: str) -> None:
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == code, error


# ---- the model allowlist ------------------------------------------------------------------------------------


def test_a_fallback_model_named_in_the_request_must_be_allowed_for_the_key(
    server: GatewayServer, admin: Admin, fake_openai: FakeOpenAI
) -> None:
    key = admin.create_key(allowed_models=["flaky"], credits_micros=10**6)["key"]
    before = len(fake_openai.state.requests)
    r = chat(server, key, models=["guarded-b"])
    assert_refused(r, 403, "model_not_allowed")
    assert "guarded-b" in r.json()["error"]["message"]
    assert len(fake_openai.state.requests) == before  # refused before any upstream call
    # The master key may use both: the same request is served by the fallback.
    r = chat(server, server.master_key, models=["guarded-b"])
    assert r.status_code == 200 and r.headers["x-inferplex-deployment"] == f"fake/{FALLBACK_UPSTREAM}", r.text


def test_a_configured_fallback_the_key_may_not_use_is_skipped(
    server: GatewayServer, admin: Admin, fake_openai: FakeOpenAI
) -> None:
    key = admin.create_key(allowed_models=["flaky"], credits_micros=10**6)["key"]
    before = fallback_hits(fake_openai)
    r = chat(server, key)
    assert r.status_code >= 500, r.text  # the upstream's own failure: the fallback was not tried
    assert "fake upstream failure 503" in r.json()["error"]["message"]
    assert fallback_hits(fake_openai) == before
    # With the master key the configured fallback serves the same request.
    r = chat(server, server.master_key)
    assert r.status_code == 200 and r.headers["x-inferplex-deployment"] == f"fake/{FALLBACK_UPSTREAM}", r.text
    assert fallback_hits(fake_openai) == before + 1


def test_count_tokens_applies_the_model_allowlist(server: GatewayServer, admin: Admin) -> None:
    key = admin.create_key(allowed_models=["flaky"], credits_micros=10**6)["key"]
    client = anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=0)
    counted = client.messages.count_tokens(model="flaky", messages=[{"role": "user", "content": "hi"}])
    assert counted.input_tokens > 0
    with pytest.raises(anthropic.PermissionDeniedError) as refused:
        client.messages.count_tokens(model="guarded-b", messages=[{"role": "user", "content": "hi"}])
    body: Any = refused.value.body
    assert body["type"] == "error" and body["error"]["type"] == "permission_error"
    assert "guarded-b" in body["error"]["message"]


def test_get_model_applies_the_model_allowlist(server: GatewayServer, admin: Admin) -> None:
    key = admin.create_key(allowed_models=["flaky"], credits_micros=10**6)["key"]
    client = openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=0)
    assert client.models.retrieve("flaky").id == "flaky"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("guarded-b")
    # the master key sees it: the 404 above is the allowlist, not a missing model
    master = openai.OpenAI(base_url=server.base_url, api_key=server.master_key, max_retries=0)
    assert master.models.retrieve("guarded-b").id == "guarded-b"


def test_the_endpoint_list_applies_the_model_allowlist(server: GatewayServer, admin: Admin) -> None:
    key = admin.create_key(allowed_models=["flaky"], credits_micros=10**6)["key"]

    def listed(credential: str) -> set[str]:
        r = httpx.get(server.base_url + "/endpoints", headers={"Authorization": f"Bearer {credential}"}, timeout=10)
        assert r.status_code == 200, r.text
        return {row["model"] for row in r.json()["data"]}

    assert listed(key) == {"flaky"}
    assert {"flaky", "guarded-b", "priced"} <= listed(server.master_key)


# ---- scopes: every route requires the one it declares ---------------------------------------------------------

DEFAULT_SCOPES = {"chat", "embeddings", "images", "audio", "video", "models:read"}
CHAT = {"model": "priced", "messages": MESSAGES, "max_tokens": 2}
SCOPED_ROUTES: list[tuple[str, str, str, dict[str, Any] | None]] = [
    ("POST", "/v1/chat/completions", "chat", CHAT),
    ("POST", "/v1/embeddings", "embeddings", {"model": "embed-model", "input": "hi"}),
    ("GET", "/v1/models", "models:read", None),
    ("GET", "/v1/models/priced", "models:read", None),
    ("GET", "/v1/endpoints", "models:read", None),
    ("POST", "/v1/messages", "chat", CHAT),
    ("POST", "/v1/messages/count_tokens", "chat", {"model": "priced", "messages": MESSAGES}),
    ("POST", "/v0/chat/completions", "chat", {**CHAT, "model": "priced@fake"}),
    ("GET", "/v0/endpoints", "models:read", None),
    ("GET", "/v0/models", "models:read", None),
    ("GET", "/v0/queries", "chat", None),
    ("POST", "/v0/queries", "chat", {"endpoint": "mine@external", "query_body": {}}),
    ("GET", "/v0/credits", "chat", None),
    ("POST", "/v1/ula/chat/completions", "chat", {**CHAT, "provider": "fake"}),
    ("POST", "/api/v1/chat/completions", "chat", CHAT),
    ("GET", "/api/v1/models", "models:read", None),
    ("GET", "/api/v1/models/priced", "models:read", None),
]


@pytest.mark.parametrize("method,path,scope,body", SCOPED_ROUTES, ids=[f"{m} {p}" for m, p, _, _ in SCOPED_ROUTES])
def test_every_route_requires_its_scope(
    server: GatewayServer, admin: Admin, method: str, path: str, scope: str, body: dict[str, Any] | None
) -> None:
    """A key with every other scope is refused in the route's own dialect; a key with only this one is let in."""

    def call(key: str) -> httpx.Response:
        return httpx.request(
            method, server.url + path, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30
        )

    without = admin.create_key(scopes=sorted(DEFAULT_SCOPES - {scope}), credits_micros=10**6)["key"]
    r = call(without)
    assert r.status_code == 403, r.text
    refused = r.json()
    if "detail" in refused:  # Unify's platform routes fail as its FastAPI service does
        assert path.startswith("/v0/") and scope in refused["detail"], refused
    elif path.startswith("/v1/messages"):  # Anthropic's error object has a type and no code
        assert refused["error"]["type"] == "permission_error" and scope in refused["error"]["message"], refused
    else:
        assert refused["error"]["code"] == "scope_not_allowed", refused
    only = admin.create_key(scopes=[scope], credits_micros=10**6)["key"]
    r = call(only)
    assert r.status_code == 200, r.text


# ---- X-Forwarded-For and allowed_ips ------------------------------------------------------------------------


@pytest.fixture
def via_proxy() -> Iterator[httpx.Client]:
    """A client whose connections come from the trusted proxy's address (127.0.0.2, a loopback address)."""
    with httpx.Client(transport=httpx.HTTPTransport(local_address=TRUSTED_PROXY)) as client:
        yield client


@pytest.fixture
def direct() -> Iterator[httpx.Client]:
    """A client whose connections come from 127.0.0.1, which is not a trusted proxy on this gateway."""
    with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.1")) as client:
        yield client


def test_x_forwarded_for_from_an_untrusted_peer_is_ignored(
    server: GatewayServer, admin: Admin, direct: httpx.Client
) -> None:
    office = admin.create_key(allowed_ips=["10.1.0.0/16"], credits_micros=10**6)["key"]
    forged = {"X-Forwarded-For": "10.1.2.3"}
    r = direct.post(
        server.base_url + "/chat/completions",
        json={"model": "priced", "messages": MESSAGES},
        headers={"Authorization": f"Bearer {office}", **forged},
    )
    assert_refused(r, 403, "ip_not_allowed")
    assert "127.0.0.1" in r.json()["error"]["message"]  # judged by the peer's own address
    local = admin.create_key(allowed_ips=["127.0.0.0/8"], credits_micros=10**6)["key"]
    r = direct.post(
        server.base_url + "/chat/completions",
        json={"model": "priced", "messages": MESSAGES},
        headers={"Authorization": f"Bearer {local}", "X-Forwarded-For": "203.0.113.9"},
    )
    assert r.status_code == 200, r.text


def test_x_forwarded_for_from_a_trusted_proxy_is_used(
    server: GatewayServer, admin: Admin, via_proxy: httpx.Client
) -> None:
    office = admin.create_key(allowed_ips=["10.1.0.0/16"], credits_micros=10**6)["key"]
    local = admin.create_key(allowed_ips=["127.0.0.0/8"], credits_micros=10**6)["key"]

    def post(key: str, forwarded: str) -> httpx.Response:
        return via_proxy.post(
            server.base_url + "/chat/completions",
            json={"model": "priced", "messages": MESSAGES},
            headers={"Authorization": f"Bearer {key}", "X-Forwarded-For": forwarded},
        )

    assert post(office, "10.1.2.3").status_code == 200
    # the right-most entry that is not a trusted proxy is the caller; entries left of it are the caller's own
    assert post(office, "203.0.113.9, 10.1.2.3").status_code == 200
    assert_refused(post(office, "10.1.2.3, 203.0.113.9"), 403, "ip_not_allowed")
    # the proxy's own address no longer counts once it forwards someone else's
    r = post(local, "203.0.113.9")
    assert_refused(r, 403, "ip_not_allowed")
    assert "203.0.113.9" in r.json()["error"]["message"]


# ---- token lifetime ----------------------------------------------------------------------------------------


def test_a_token_past_its_lifetime_is_refused(server: GatewayServer, admin: Admin) -> None:
    created = admin.create_key(credits_micros=10**6)
    r = httpx.post(
        server.base_url + "/auth/token", json={"ttl_s": 2}, headers={"Authorization": f"Bearer {created['key']}"}
    )
    assert r.status_code == 200, r.text
    minted = r.json()
    assert minted["expires_in"] == 2
    token = minted["access_token"]
    assert chat(server, token, model="priced").status_code == 200
    time.sleep(max(minted["expires_at"] - time.time(), 0) + 0.05)
    r = chat(server, token, model="priced")
    assert_refused(r, 401, "invalid_token")
    # the key itself is still good: it is the token's lifetime that ended
    assert chat(server, created["key"], model="priced").status_code == 200
