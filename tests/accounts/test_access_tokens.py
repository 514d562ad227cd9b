"""Tokens from `POST /v1/auth/token` hold no more than they were minted with, whoever minted them, and die with
the secret that minted them (a rotated key, a changed master key), on SQLite and PostgreSQL."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.accounts.conftest import Admin, billing_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

TTL = 600


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    if request.param == "postgresql":
        url: str = request.getfixturevalue("pg_url")
        return url
    return f"sqlite:///{tmp_path_factory.mktemp('tokens-db') / 'inferplex.db'}"


@pytest.fixture(scope="module")
def server(
    fake_openai: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory, store_url: str
) -> Iterator[GatewayServer]:
    config = billing_config(fake_openai, tmp_path_factory.mktemp("tokens"), store_url, accounts={"token_ttl_s": TTL})
    with GatewayServer(config) as gw:
        yield gw


def mint(server: GatewayServer, credential: str, body: dict[str, Any] | None = None) -> httpx.Response:
    return httpx.post(
        server.base_url + "/auth/token", json=body, headers={"Authorization": f"Bearer {credential}"}, timeout=10
    )


def token_of(server: GatewayServer, credential: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    r = mint(server, credential, body)
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


def call(server: GatewayServer, credential: str, what: str) -> httpx.Response:
    """One request needing one scope: `chat`, `models:read` or `admin`."""
    headers = {"Authorization": f"Bearer {credential}"}
    if what == "chat":
        body = {"model": "echo-model", "messages": [{"role": "user", "content": "hi"}]}
        return httpx.post(server.base_url + "/chat/completions", json=body, headers=headers, timeout=10)
    if what == "models:read":
        return httpx.get(server.base_url + "/models", headers=headers, timeout=10)
    return httpx.get(server.url + "/admin/keys", headers=headers, timeout=10)


def statuses(server: GatewayServer, credential: str) -> dict[str, int]:
    return {what: call(server, credential, what).status_code for what in ("chat", "models:read", "admin")}


def test_a_master_minted_token_holds_only_the_scopes_asked_for(server: GatewayServer) -> None:
    token = token_of(server, server.master_key, {"scopes": ["chat"]})
    assert token["scopes"] == ["chat"] and token["key_id"] == "master"
    assert statuses(server, token["access_token"]) == {"chat": 200, "models:read": 403, "admin": 403}
    r = call(server, token["access_token"], "admin")
    assert r.json()["error"]["code"] == "scope_not_allowed"
    everything = token_of(server, server.master_key)  # no scopes asked: the master key's own
    assert statuses(server, everything["access_token"]) == {"chat": 200, "models:read": 200, "admin": 200}


def test_an_admin_keys_token_narrowed_to_chat_can_chat_and_nothing_else(server: GatewayServer, admin: Admin) -> None:
    key = admin.create_key(scopes=["admin"], credits_micros=10**6)["key"]
    assert statuses(server, key) == {"chat": 200, "models:read": 200, "admin": 200}
    token = token_of(server, key, {"scopes": ["chat"]})
    assert token["scopes"] == ["chat"]
    assert statuses(server, token["access_token"]) == {"chat": 200, "models:read": 403, "admin": 403}


def test_a_token_from_a_token_holds_no_more_than_it(server: GatewayServer, admin: Admin) -> None:
    key = admin.create_key(scopes=["chat", "models:read"], credits_micros=10**6)["key"]
    first = token_of(server, key, {"scopes": ["chat"], "ttl_s": 30})
    r = mint(server, first["access_token"], {"scopes": ["chat", "models:read"]})
    assert r.status_code == 403 and r.json()["error"]["code"] == "scope_not_allowed", r.text
    second = token_of(server, first["access_token"])
    assert second["scopes"] == ["chat"]
    assert second["expires_at"] <= first["expires_at"] and second["expires_in"] <= 30  # never outlives it
    assert statuses(server, second["access_token"]) == {"chat": 200, "models:read": 403, "admin": 403}


@pytest.mark.parametrize(
    "body,param,status",
    [
        ({"scopes": ["root"]}, "scopes", 400),
        ({"scopes": ["chat", "admin"]}, "scopes", 403),  # the key has no admin scope
        ({"scopes": []}, "scopes", 400),
        ({"scopes": "chat"}, "scopes", 400),
        ({"ttl_s": 0}, "ttl_s", 400),
        ({"ttl_s": -5}, "ttl_s", 400),
        ({"ttl_s": TTL + 1}, "ttl_s", 400),
        ({"ttl_s": 2**63}, "ttl_s", 400),
        ({"ttl_s": True}, "ttl_s", 400),
        ({"ttl_s": "60"}, "ttl_s", 400),
        ({"ttl_s": 1.5}, "ttl_s", 400),
        ({"lifetime": 60}, "lifetime", 400),
    ],
)
def test_a_token_request_out_of_bounds_is_refused_naming_the_field(
    server: GatewayServer, admin: Admin, body: dict[str, Any], param: str, status: int
) -> None:
    key = admin.create_key(scopes=["chat"], credits_micros=10**6)["key"]
    r = mint(server, key, body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param


def test_a_token_lives_as_long_as_asked_within_the_bound(server: GatewayServer, admin: Admin) -> None:
    key = admin.create_key(scopes=["chat"], credits_micros=10**6)["key"]
    assert token_of(server, key, {"ttl_s": 60})["expires_in"] == 60
    assert token_of(server, key, {"ttl_s": TTL})["expires_in"] == TTL
    whole = token_of(server, key)
    assert whole["expires_in"] == TTL and abs(whole["expires_at"] - (time.time() + TTL)) < 5


def test_rotating_a_key_ends_the_tokens_minted_with_its_old_secret(server: GatewayServer, admin: Admin) -> None:
    created = admin.create_key(scopes=["chat"], credits_micros=10**6)
    old = token_of(server, created["key"])["access_token"]
    assert call(server, old, "chat").status_code == 200
    rotated = admin.client.post(f"/admin/keys/{created['id']}/rotate").json()
    r = call(server, old, "chat")
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_token", r.text
    fresh = token_of(server, rotated["key"])["access_token"]
    assert call(server, fresh, "chat").status_code == 200


def test_changing_the_master_key_ends_the_tokens_minted_with_the_old_one(
    fake_openai: FakeOpenAI, tmp_path: Path, store_url: str
) -> None:
    """Same data directory (so the same token secret) and database; only the master key changes."""
    config = billing_config(fake_openai, tmp_path, store_url)
    with GatewayServer(config, master_key="ipx-master-one") as gw:
        token = token_of(gw, "ipx-master-one")["access_token"]
        assert statuses(gw, token) == {"chat": 200, "models:read": 200, "admin": 200}
    with GatewayServer(config, master_key="ipx-master-one") as gw:  # a restart alone keeps it
        assert call(gw, token, "admin").status_code == 200
    with GatewayServer(config, master_key="ipx-master-two") as gw:
        for what in ("chat", "models:read", "admin"):
            r = call(gw, token, what)
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_token", (what, r.text)
        assert call(gw, token_of(gw, "ipx-master-two")["access_token"], "admin").status_code == 200


def _signed(secret: bytes, payload: dict[str, Any]) -> str:
    """A token as the gateway signs one, with whatever payload (tokens.issue always binds)."""
    body = "ipxt." + base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b"=").decode()
    signature = hmac.new(secret, body.encode(), hashlib.sha256).digest()
    return body + "." + base64.urlsafe_b64encode(signature).rstrip(b"=").decode()


def test_a_well_signed_token_without_the_minting_secrets_binding_is_refused(
    server: GatewayServer, admin: Admin
) -> None:
    """Tokens from before bindings, and tokens whose binding is another credential's, get nothing."""
    secret = (Path(server.config.server.data_dir) / "token_secret").read_text().strip().encode()
    created = admin.create_key(scopes=["chat"], credits_micros=10**6)
    other = admin.create_key(scopes=["chat"], credits_micros=10**6)
    other_binding = json.loads(
        base64.urlsafe_b64decode(token_of(server, other["key"])["access_token"].split(".")[1] + "==")
    )["bnd"]
    exp = int(time.time()) + 60
    unbound = {"kid": created["id"], "scp": ["chat"], "exp": exp}
    for payload in (unbound, {**unbound, "bnd": other_binding}, {**unbound, "kid": "master", "bnd": other_binding}):
        r = call(server, _signed(secret, payload), "chat")
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_token", (payload, r.text)
    genuine = token_of(server, created["key"])["access_token"]
    assert call(server, genuine, "chat").status_code == 200
