"""OneInfer's key-for-token exchange, its three ways of presenting a credential, and its models list, replayed
through raw HTTP as OneInfer's docs publish them (seeds 000 and 001, and shared/reference/seed-apis.md).

The published flow: `POST /v1/ula/oauth-authentication?api_key=KEY` with no body answers
`{"access_token": "..."}`, or a 403 "API key is invalid or expired."; the client then sends
`Authorization: Bearer <token>`. The raw key also works as `Authorization: Bearer KEY` and as `X-API-KEY`.
`GET /v1/ula/models` is inferred (its page was never found): the catalogue's models in the envelope.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.dialects.seed_examples import SEED_000_EXAMPLE
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

INVALID = "API key is invalid or expired."
TTL_S = 3600  # accounts.token_ttl_s's default: OneInfer publishes no lifetime, so the gateway's own applies


@pytest.fixture(scope="module")
def admin(seed_gateway: GatewayServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=seed_gateway.url, headers=seed_gateway.auth, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def ula(seed_gateway: GatewayServer) -> Iterator[httpx.Client]:
    """A client with no credential of its own: each test presents one as a OneInfer client would."""
    with httpx.Client(base_url=seed_gateway.url + "/v1/ula", timeout=30) as client:
        yield client


def new_key(admin: httpx.Client, **body: Any) -> dict[str, Any]:
    resp = admin.post("/admin/keys", json={"name": "oneinfer-api", "credits_micros": 10_000_000, **body})
    assert resp.status_code == 201, resp.text
    key: dict[str, Any] = resp.json()
    return key


def exchange(ula: httpx.Client, api_key: str) -> httpx.Response:
    """The published request, byte for byte but for the host: the key in the query, no body."""
    resp = ula.post("/oauth-authentication", params={"api_key": api_key})
    assert resp.request.content == b"" and "content-type" not in resp.request.headers
    return resp


def token_of(ula: httpx.Client, api_key: str) -> str:
    resp = exchange(ula, api_key)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert list(body) == ["access_token"]  # exactly OneInfer's one key, not the envelope
    assert api_key not in resp.text and all(api_key not in v for v in resp.headers.values())
    token: str = body["access_token"]
    return token


def claims(token: str) -> dict[str, Any]:
    """What any holder of the token can read in it (it is signed, not encrypted)."""
    payload = token.split(".")[1]
    decoded: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return decoded


def assert_envelope_error(resp: httpx.Response, status: int, message: str | None = None) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = resp.json()
    assert set(body) == {"api_details", "data", "error"}
    assert body["api_details"]["api_status"] == "error" and body["data"] == {}
    assert body["error"]["status"] == status
    assert body["error"]["message"] == body["api_details"]["api_message"]
    if message is not None:
        assert body["api_details"]["api_message"] == message
    return body


def chat(ula: httpx.Client, headers: dict[str, str]) -> httpx.Response:
    return ula.post("/chat/completions", json=SEED_000_EXAMPLE, headers=headers)


def assert_chat_ok(resp: httpx.Response) -> None:
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["api_details"] == {"api_status": "success", "api_message": "Chat completion generated successfully."}
    assert body["data"]["text"] == "echo: Tell me about AI."


def usage_keys(admin: httpx.Client, key_id: str, expected: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 10
    while True:
        rows: list[dict[str, Any]] = admin.get("/admin/usage", params={"key_id": key_id}).json()["data"]
        if len(rows) >= expected or time.monotonic() > deadline:
            assert len(rows) == expected, rows
            return rows
        time.sleep(0.05)


# ---- the token exchange -----------------------------------------------------------------------------------


def test_the_published_flow_key_for_token_then_bearer_token_on_chat(
    ula: httpx.Client, admin: httpx.Client, fake_openai: FakeOpenAI
) -> None:
    key = new_key(admin)
    before = int(time.time())
    token = token_of(ula, key["key"])
    assert token.startswith("ipxt.") and token != key["key"]
    minted = claims(token)
    assert minted["kid"] == key["id"]
    assert set(minted["scp"]) == set(key["scopes"])  # exactly the key's scopes, never more
    assert before + TTL_S <= minted["exp"] <= int(time.time()) + TTL_S

    assert_chat_ok(chat(ula, {"Authorization": f"Bearer {token}"}))
    assert fake_openai.state.last().headers["Authorization"] == "Bearer sk-fake-upstream"  # never the caller's
    (row,) = usage_keys(admin, key["id"], 1)  # billed to the key the token came from
    assert row["model"] == "gpt-4o-mini" and row["cost_micros"] > 0


@pytest.mark.parametrize("how", ["bearer-token", "bearer-key", "x-api-key", "X-API-KEY"])
def test_each_published_way_of_presenting_the_credential_works_on_the_ula_routes(
    ula: httpx.Client, admin: httpx.Client, how: str
) -> None:
    key = new_key(admin)
    if how == "bearer-token":
        headers = {"Authorization": f"Bearer {token_of(ula, key['key'])}"}
    elif how == "bearer-key":
        headers = {"Authorization": f"Bearer {key['key']}"}
    else:
        headers = {how: key["key"]}
    assert_chat_ok(chat(ula, headers))
    with ula.stream("POST", "/chat/completions", json={**SEED_000_EXAMPLE, "stream": True}, headers=headers) as s:
        lines = [line for line in s.iter_lines() if line]
    assert s.status_code == 200 and lines[-1] == "data: [DONE]"
    assert ula.get("/models", headers=headers).status_code == 200
    usage_keys(admin, key["id"], 2)  # both calls billed to this key


def test_the_token_holds_no_more_than_the_keys_scopes(ula: httpx.Client, admin: httpx.Client) -> None:
    chat_only = token_of(ula, new_key(admin, scopes=["chat"])["key"])
    assert claims(chat_only)["scp"] == ["chat"]
    assert_chat_ok(chat(ula, {"Authorization": f"Bearer {chat_only}"}))
    refused = ula.get("/models", headers={"Authorization": f"Bearer {chat_only}"})
    assert assert_envelope_error(refused, 403)["error"]["code"] == "scope_not_allowed"

    list_only = token_of(ula, new_key(admin, scopes=["models:read"])["key"])
    assert ula.get("/models", headers={"Authorization": f"Bearer {list_only}"}).status_code == 200
    assert_envelope_error(chat(ula, {"Authorization": f"Bearer {list_only}"}), 403)


@pytest.mark.parametrize("api_key", ["ipx-not-a-real-key-000000000000", "not-even-a-key", "", "   "])
def test_an_unknown_key_is_a_403_in_the_envelope(ula: httpx.Client, api_key: str) -> None:
    resp = exchange(ula, api_key)
    body = assert_envelope_error(resp, 403, INVALID)
    assert body["error"]["param"] == "api_key"
    assert "access_token" not in resp.text


def test_a_revoked_key_is_a_403_and_its_tokens_stop_working(ula: httpx.Client, admin: httpx.Client) -> None:
    key = new_key(admin)
    token = token_of(ula, key["key"])
    assert admin.post(f"/admin/keys/{key['id']}/revoke").status_code == 200
    assert_envelope_error(exchange(ula, key["key"]), 403, INVALID)
    assert_envelope_error(chat(ula, {"Authorization": f"Bearer {token}"}), 401)  # its token died with it


def test_an_expired_key_is_a_403(ula: httpx.Client, admin: httpx.Client) -> None:
    key = new_key(admin)
    assert admin.patch(f"/admin/keys/{key['id']}", json={"expires_at": time.time() - 1}).status_code == 200
    resp = exchange(ula, key["key"])
    assert_envelope_error(resp, 403, INVALID)
    assert key["key"] not in resp.text


def test_a_rotated_keys_old_secret_is_a_403_and_its_tokens_end(ula: httpx.Client, admin: httpx.Client) -> None:
    key = new_key(admin)
    token = token_of(ula, key["key"])
    rotated = admin.post(f"/admin/keys/{key['id']}/rotate")
    assert rotated.status_code == 200, rotated.text
    assert_envelope_error(exchange(ula, key["key"]), 403, INVALID)
    assert_envelope_error(chat(ula, {"Authorization": f"Bearer {token}"}), 401)
    assert_chat_ok(chat(ula, {"Authorization": f"Bearer {token_of(ula, rotated.json()['key'])}"}))


def test_a_token_is_not_a_key(ula: httpx.Client, admin: httpx.Client) -> None:
    """A token traded here again could outlive the token it came from: only keys are exchanged."""
    token = token_of(ula, new_key(admin)["key"])
    assert_envelope_error(exchange(ula, token), 403, INVALID)


def test_only_the_querys_key_counts_not_a_header(ula: httpx.Client, seed_gateway: GatewayServer) -> None:
    """The master key in the header does not rescue a bad key in the query."""
    resp = ula.post("/oauth-authentication", params={"api_key": "ipx-nope"}, headers=seed_gateway.auth)
    assert_envelope_error(resp, 403, INVALID)


def test_a_missing_api_key_is_a_422_naming_it(ula: httpx.Client) -> None:
    body = assert_envelope_error(ula.post("/oauth-authentication"), 422)
    assert body["error"]["param"] == "api_key"


def test_only_post_is_served(ula: httpx.Client, admin: httpx.Client) -> None:
    resp = ula.get("/oauth-authentication", params={"api_key": new_key(admin)["key"]})
    assert_envelope_error(resp, 405)


def test_the_key_never_reaches_the_logs(
    ula: httpx.Client, admin: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    key = new_key(admin)
    revoked = new_key(admin)
    assert admin.post(f"/admin/keys/{revoked['id']}/revoke").status_code == 200
    with caplog.at_level(logging.DEBUG):
        token = token_of(ula, key["key"])
        assert_envelope_error(exchange(ula, revoked["key"]), 403, INVALID)
        assert_chat_ok(chat(ula, {"Authorization": f"Bearer {token}"}))
        assert_chat_ok(chat(ula, {"X-API-KEY": key["key"]}))
    # The test's own client (httpx, httpcore) logs the URL it requests, query and all: that is the caller's
    # side, where OneInfer's design puts the key. Everything else logged here is the gateway's.
    gateway = [r for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))]
    logged = "\n".join(f"{r.name} {r.getMessage()} {r.exc_text or ''}" for r in gateway)
    assert key["key"] not in logged and revoked["key"] not in logged


def test_a_keys_address_allowlist_applies_to_the_exchange(ula: httpx.Client, admin: httpx.Client) -> None:
    """The exchange sees the caller's own address, as every route does: the test calls from 127.0.0.1."""
    here = new_key(admin, allowed_ips=["127.0.0.1/32"])
    assert_chat_ok(chat(ula, {"Authorization": f"Bearer {token_of(ula, here['key'])}"}))
    elsewhere = new_key(admin, allowed_ips=["10.0.0.0/8"])
    body = assert_envelope_error(exchange(ula, elsewhere["key"]), 403)
    assert body["error"]["code"] == "ip_not_allowed" and elsewhere["key"] not in json.dumps(body)


def test_the_master_key_exchanges_for_a_token_too(ula: httpx.Client, seed_gateway: GatewayServer) -> None:
    token = token_of(ula, seed_gateway.master_key)
    assert claims(token)["kid"] == "master"
    assert_chat_ok(chat(ula, {"Authorization": f"Bearer {token}"}))


# ---- models (inferred) -------------------------------------------------------------------------------------


def models(ula: httpx.Client, headers: dict[str, str]) -> list[dict[str, Any]]:
    resp = ula.get("/models", headers=headers)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert set(body) == {"api_details", "data", "error"}
    assert body["api_details"] == {"api_status": "success", "api_message": "Models retrieved successfully."}
    assert body["error"] == {}
    data: list[dict[str, Any]] = body["data"]
    return data


MODEL_FIELDS = {
    "model",
    "display_name",
    "description",
    "providers",
    "kind",
    "context_length",
    "max_output_tokens",
    "pricing",
}


def test_models_lists_the_catalogue_with_providers_kind_context_and_prices(
    ula: httpx.Client, seed_gateway: GatewayServer
) -> None:
    data = models(ula, seed_gateway.auth)
    assert all(set(item) == MODEL_FIELDS for item in data)
    by_name = {item["model"]: item for item in data}
    assert {"gpt-4o-mini", "claude-sonnet-4-6", "llama-3.1-8b", "embed-model"} <= by_name.keys()
    mini = by_name["gpt-4o-mini"]
    assert mini["providers"] == ["groq", "openai"] and mini["kind"] == "chat"
    assert mini["context_length"] == 128000
    assert mini["pricing"] == {
        "currency": "USD",
        "unit": "per_million_tokens",
        "input": "0.15",
        "output": "0.60",
        "cached_input": None,
        "free": False,
    }
    claude = by_name["claude-sonnet-4-6"]
    assert claude["providers"] == ["anthropic"] and claude["context_length"] == 200000
    assert (claude["pricing"]["input"], claude["pricing"]["output"]) == ("3", "15")
    assert by_name["embed-model"]["kind"] == "embedding" and by_name["embed-model"]["pricing"]["free"] is True


def test_every_listed_chat_model_and_provider_is_one_the_chat_route_takes(
    ula: httpx.Client, seed_gateway: GatewayServer
) -> None:
    """What the docs send clients there for: the `provider` and `model` values of a chat request."""
    for name in ("gpt-4o-mini", "claude-sonnet-4-6", "llama-3.1-8b"):
        (item,) = [m for m in models(ula, seed_gateway.auth) if m["model"] == name]
        for provider in item["providers"]:
            body = {"provider": provider, "model": item["model"], "messages": [{"role": "user", "content": "hi"}]}
            resp = ula.post("/chat/completions", json=body, headers=seed_gateway.auth)
            assert resp.status_code == 200, resp.text
            assert resp.json()["data"]["provider"] == provider


def test_models_lists_only_what_the_key_may_use(ula: httpx.Client, admin: httpx.Client) -> None:
    key = new_key(admin, allowed_models=["gpt-4o-*", "claude-*"])
    data = models(ula, {"X-API-KEY": key["key"]})
    assert sorted(item["model"] for item in data) == ["claude-sonnet-4-6", "gpt-4o-mini"]


def test_models_errors_are_in_the_envelope(ula: httpx.Client, admin: httpx.Client) -> None:
    assert_envelope_error(ula.get("/models"), 401)
    assert_envelope_error(ula.get("/models", headers={"Authorization": "Bearer ipx-nope"}), 401)
    chat_only = new_key(admin, scopes=["chat"])
    body = assert_envelope_error(ula.get("/models", headers={"X-API-KEY": chat_only["key"]}), 403)
    assert body["error"]["code"] == "scope_not_allowed"
    assert_envelope_error(ula.post("/models", headers={"X-API-KEY": chat_only["key"]}), 405)
