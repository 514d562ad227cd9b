"""API keys and tokens through HTTP: creation, scopes, models, IPs, expiry, revocation, rotation, tokens."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.accounts.conftest import Admin, billing_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer


@pytest.fixture(scope="module")
def server(fake_openai: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    tmp = tmp_path_factory.mktemp("keys")
    config = billing_config(fake_openai, tmp, accounts={"trusted_proxies": ["127.0.0.1/32"]})
    with GatewayServer(config) as gw:
        yield gw


def chat(server: GatewayServer, key: str, model: str = "echo-model", **headers: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    return httpx.post(
        server.base_url + "/chat/completions", json=body, headers={"Authorization": f"Bearer {key}", **headers}
    )


def test_a_created_key_works_with_the_openai_sdk_and_is_shown_once(server: GatewayServer, admin: Admin) -> None:
    created = admin.create_key(name="ci", credits_micros=1_000_000)
    secret = created["key"]
    assert secret.startswith("ipx-") and len(secret) > 40 and created["prefix"] == secret[:8]
    client = openai.OpenAI(base_url=server.base_url, api_key=secret)
    reply = client.chat.completions.create(model="echo-model", messages=[{"role": "user", "content": "hello"}])
    assert reply.choices[0].message.content == "echo: hello"
    listed = admin.client.get("/admin/keys").json()["data"]
    fetched = admin.client.get(f"/admin/keys/{created['id']}").json()
    assert secret not in str(listed) + str(fetched) and "hash" not in fetched


@pytest.mark.parametrize(
    "header,code",
    [
        (None, "missing_api_key"),
        ("Basic abc", "malformed_credentials"),
        ("Bearer ipx-not-a-real-key", "invalid_api_key"),
        ("Bearer sk-something-else", "invalid_api_key"),
        ("Bearer ipxt.e30.bad", "invalid_token"),
    ],
)
def test_bad_credentials_are_401(server: GatewayServer, header: str | None, code: str) -> None:
    headers = {"Authorization": header} if header else {}
    r = httpx.post(server.base_url + "/chat/completions", json={}, headers=headers)
    assert r.status_code == 401 and r.json()["error"]["code"] == code


def test_scope_model_and_ip_refusals_have_distinct_codes(server: GatewayServer, admin: Admin) -> None:
    embed_only = admin.create_key(scopes=["embeddings"], credits_micros=10**6)["key"]
    r = chat(server, embed_only)
    assert r.status_code == 403 and r.json()["error"]["code"] == "scope_not_allowed"
    only_echo = admin.create_key(allowed_models=["echo-*"], credits_micros=10**6)["key"]
    assert chat(server, only_echo).status_code == 200
    r = chat(server, only_echo, model="tool-model")
    assert r.status_code == 403 and r.json()["error"]["code"] == "model_not_allowed"
    models = httpx.get(server.base_url + "/models", headers={"Authorization": f"Bearer {only_echo}"}).json()
    assert [m["id"] for m in models["data"]] == ["echo-model"]
    office = admin.create_key(allowed_ips=["10.1.0.0/16"], credits_micros=10**6)["key"]
    r = chat(server, office)
    assert r.status_code == 403 and r.json()["error"]["code"] == "ip_not_allowed"
    # the peer (127.0.0.1) is a trusted proxy here, so the address it forwards counts
    assert chat(server, office, **{"X-Forwarded-For": "203.0.113.9, 10.1.2.3"}).status_code == 200
    assert chat(server, office, **{"X-Forwarded-For": "10.1.2.3, 203.0.113.9"}).status_code == 403


def test_expired_revoked_and_rotated_keys_are_401(server: GatewayServer, admin: Admin) -> None:
    expired = admin.create_key(expires_at=time.time() - 1, credits_micros=10**6)["key"]
    r = chat(server, expired)
    assert r.status_code == 401 and r.json()["error"]["code"] == "expired_api_key"
    created = admin.create_key(credits_micros=10**6)
    rotated = admin.client.post(f"/admin/keys/{created['id']}/rotate").json()
    assert chat(server, created["key"]).status_code == 401
    assert chat(server, rotated["key"]).status_code == 200
    admin.client.post(f"/admin/keys/{created['id']}/revoke")
    r = chat(server, rotated["key"])
    assert r.status_code == 401 and r.json()["error"]["code"] == "revoked_api_key"


def test_a_key_changed_through_the_admin_api_changes_on_its_next_request(server: GatewayServer, admin: Admin) -> None:
    """The gateway keeps what it worked out from a key (its principal, its limits) while the key is unchanged;
    each change must show on the very next request, with and without a token minted from the key."""
    created = admin.create_key(credits_micros=10**6)
    minted = httpx.post(server.base_url + "/auth/token", headers={"Authorization": f"Bearer {created['key']}"})
    token = minted.json()["access_token"]
    for credential in (created["key"], token):
        assert [chat(server, credential).status_code for _ in range(3)] == [200] * 3
    # (change, then what the key and a token minted from it get; a token shares its key's limits)
    changes: list[tuple[dict[str, object], list[int], str]] = [
        ({"allowed_models": ["tool-*"]}, [403, 403], "model_not_allowed"),
        ({"allowed_models": [], "scopes": ["embeddings"]}, [403, 403], "scope_not_allowed"),
        ({"scopes": ["chat"], "rpm": 1}, [200, 429], "rate_limit_exceeded"),  # one request this minute
        ({"name": "renamed"}, [429, 429], "rate_limit_exceeded"),  # the limit, and its bucket, stay
        ({"rpm": None}, [200, 200], ""),
    ]
    for change, statuses, code in changes:
        r = admin.client.patch(f"/admin/keys/{created['id']}", json=change)
        assert r.status_code == 200, r.text
        answers = [chat(server, created["key"]), chat(server, token)]
        assert [a.status_code for a in answers] == statuses, (change, answers[-1].text)
        assert all(a.json()["error"]["code"] == code for a in answers if a.status_code != 200)


def test_token_exchange_and_revocation_kills_tokens_at_once(server: GatewayServer, admin: Admin) -> None:
    created = admin.create_key(scopes=["chat", "models:read"], credits_micros=10**6)
    r = httpx.post(
        server.base_url + "/auth/token",
        json={"scopes": ["chat"]},
        headers={"Authorization": f"Bearer {created['key']}"},
    )
    assert r.status_code == 200, r.text
    token = r.json()
    assert token["token_type"] == "Bearer" and token["scopes"] == ["chat"] and token["expires_in"] > 0
    assert created["key"] not in r.text
    assert chat(server, token["access_token"]).status_code == 200
    r = httpx.get(server.base_url + "/models", headers={"Authorization": f"Bearer {token['access_token']}"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "scope_not_allowed"  # narrowed to chat
    tampered = token["access_token"][:-2] + ("AA" if not token["access_token"].endswith("AA") else "BB")
    assert chat(server, tampered).status_code == 401
    admin.client.post(f"/admin/keys/{created['id']}/revoke")
    assert chat(server, token["access_token"]).status_code == 401


def test_non_admin_keys_cannot_administer(server: GatewayServer, admin: Admin) -> None:
    key = admin.create_key(credits_micros=10**6)["key"]
    r = httpx.get(server.url + "/admin/keys", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "scope_not_allowed"
    r = admin.client.post("/admin/keys", json={"name": "x", "scopes": ["root"]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "scopes"


def test_openapi_document_lists_the_admin_api(server: GatewayServer) -> None:
    doc = httpx.get(server.url + "/openapi.json").json()
    assert doc["openapi"].startswith("3.") and "/admin/keys" in doc["paths"] and "/v1/auth/token" in doc["paths"]
    assert "post" in doc["paths"]["/admin/keys"] and "KeyCreate" in doc["components"]["schemas"]


def test_a_key_never_appears_in_logs_usage_or_responses(
    server: GatewayServer, admin: Admin, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.DEBUG)
    created = admin.create_key(credits_micros=10**6, tags=["t"])
    secret = created["key"]
    seen = [chat(server, secret).text, chat(server, secret, model="error-500").text, chat(server, secret + "x").text]
    seen.append(httpx.post(server.base_url + "/auth/token", headers={"Authorization": f"Bearer {secret}"}).text)
    seen.append(admin.client.get("/admin/usage", params={"key_id": created["id"]}).text)
    seen.append(admin.client.get(f"/admin/keys/{created['id']}").text)
    seen.append(admin.client.get(f"/admin/accounts/{created['account_id']}/ledger").text)
    rows = admin.usage(key_id=created["id"])
    assert len(rows) >= 2
    assert all(secret not in s for s in seen)
    assert secret not in caplog.text
    db = Path(server.config.server.data_dir) / "inferplex.db"
    assert secret.encode() not in b"".join(p.read_bytes() for p in db.parent.glob("inferplex.db*"))


def test_a_key_enforces_its_processors_and_a_request_cannot_switch_them_off(
    server: GatewayServer, admin: Admin, fake_openai: FakeOpenAI
) -> None:
    created = admin.create_key(name="pii", credits_micros=1_000_000, enforced_processors=["pii_redact"])
    assert created["enforced_processors"] == ["pii_redact"]
    body = {
        "model": "echo-model",
        "messages": [{"role": "user", "content": "mail me at jane.doe@example.com"}],
        "processors": [],
    }
    r = httpx.post(
        server.base_url + "/chat/completions", json=body, headers={"Authorization": f"Bearer {created['key']}"}
    )
    assert r.status_code == 200, r.text
    sent = fake_openai.state.last().body["messages"][0]["content"]
    assert "jane.doe@example.com" not in sent and "[EMAIL_1]" in sent
    assert "pii_redact" in str(r.json()["processors"])
    # The same request with the master key (no enforced processors) reaches the upstream unredacted.
    r = httpx.post(
        server.base_url + "/chat/completions", json=body, headers={"Authorization": f"Bearer {server.master_key}"}
    )
    assert r.status_code == 200 and "jane.doe@example.com" in fake_openai.state.last().body["messages"][0]["content"]


def test_unknown_processor_on_a_key_is_refused_when_written(admin: Admin) -> None:
    r = admin.client.post("/admin/keys", json={"name": "bad", "default_processors": ["teleport"]})
    assert r.status_code == 400 and "teleport" in r.json()["error"]["message"]
