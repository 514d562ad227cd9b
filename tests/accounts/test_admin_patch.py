"""Every field a PATCH route accepts is applied (PATCH, then GET shows it, and the gateway acts on it) or
refused with a 400 naming it: keys and accounts, on SQLite and PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from inferplex.admin.models import AccountUpdate, KeyUpdate
from tests.accounts.conftest import Admin, billing_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

EMAIL = "mail me at jane.doe@example.com"

# One change per field KeyUpdate accepts (a value unlike the key's default, so a change that is dropped shows).
KEY_CHANGES: dict[str, Any] = {
    "name": "renamed",
    "scopes": ["chat", "embeddings"],
    "allowed_models": ["echo-*"],
    "allowed_ips": ["10.0.0.0/8"],
    "expires_at": 4_102_444_800.0,
    "tags": ["team-a", "prod"],
    "metadata": {"owner": "ops", "n": 3, "nested": {"x": [1, "y"]}},
    "default_processors": ["pii_redact"],
    "enforced_processors": [{"name": "pii_redact"}],
    "rpm": 2**40,
    "tpm": 10**12,
    "max_concurrent": 7,
    "limit_rules": [{"metric": "tokens", "period": "day", "max": 10**9, "per_request": False}],
    "user_limit_rules": [{"metric": "requests", "period": "week", "max": 10**6, "per_request": False}],
    "monthly_cap_micros": 10**12,
}
ACCOUNT_CHANGES: dict[str, Any] = {
    "name": "renamed account",
    "rpm": 2**40,
    "tpm": 10**12,
    "max_concurrent": 3,
    "limit_rules": [{"metric": "prompt_tokens", "period": "month", "max": 10**9, "per_request": True}],
    "monthly_cap_micros": 10**12,
}


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(
    request: pytest.FixtureRequest, fake_openai: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    with GatewayServer(billing_config(fake_openai, tmp_path_factory.mktemp("patch"), url)) as gw:
        yield gw


def chat(server: GatewayServer, key: str, **extra: Any) -> httpx.Response:
    body = {"model": "echo-model", "messages": [{"role": "user", "content": EMAIL}], **extra}
    return httpx.post(
        server.base_url + "/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=10
    )


def test_the_cases_cover_every_field_each_patch_route_accepts() -> None:
    assert set(KEY_CHANGES) == set(KeyUpdate.model_fields)
    assert set(ACCOUNT_CHANGES) == set(AccountUpdate.model_fields)


@pytest.mark.parametrize("field", sorted(KEY_CHANGES))
def test_each_key_field_patched_reads_back(admin: Admin, field: str) -> None:
    created = admin.create_key(credits_micros=10**6)
    r = admin.client.patch(f"/admin/keys/{created['id']}", json={field: KEY_CHANGES[field]})
    assert r.status_code == 200, r.text
    assert r.json()[field] == KEY_CHANGES[field]
    fetched = admin.client.get(f"/admin/keys/{created['id']}").json()
    assert fetched[field] == KEY_CHANGES[field]
    listed = admin.client.get("/admin/keys", params={"account_id": created["account_id"]}).json()["data"]
    assert [k[field] for k in listed] == [KEY_CHANGES[field]]


def test_all_key_fields_patched_at_once_read_back(admin: Admin) -> None:
    created = admin.create_key(credits_micros=10**6)
    r = admin.client.patch(f"/admin/keys/{created['id']}", json=KEY_CHANGES)
    assert r.status_code == 200, r.text
    fetched = admin.client.get(f"/admin/keys/{created['id']}").json()
    assert {f: fetched[f] for f in KEY_CHANGES} == KEY_CHANGES


@pytest.mark.parametrize("field", sorted(ACCOUNT_CHANGES))
def test_each_account_field_patched_reads_back(admin: Admin, field: str) -> None:
    account = admin.client.post("/admin/accounts", json={"name": "a"}).json()
    r = admin.client.patch(f"/admin/accounts/{account['id']}", json={field: ACCOUNT_CHANGES[field]})
    assert r.status_code == 200, r.text
    assert r.json()[field] == ACCOUNT_CHANGES[field]
    assert admin.account(account["id"])[field] == ACCOUNT_CHANGES[field]


@pytest.mark.parametrize("field", ["enforced_processors", "default_processors"])
def test_processors_patched_onto_a_key_run_on_its_next_request(
    server: GatewayServer, admin: Admin, fake_openai: FakeOpenAI, field: str
) -> None:
    created = admin.create_key(credits_micros=10**6)
    assert chat(server, created["key"]).status_code == 200
    assert EMAIL in fake_openai.state.last().body["messages"][0]["content"]  # nothing runs yet
    r = admin.client.patch(f"/admin/keys/{created['id']}", json={field: ["pii_redact"]})
    assert r.status_code == 200, r.text
    assert chat(server, created["key"]).status_code == 200
    sent = fake_openai.state.last().body["messages"][0]["content"]
    assert "jane.doe@example.com" not in sent and "[EMAIL_1]" in sent
    assert chat(server, created["key"], processors=[]).status_code == 200  # an empty list turns defaults off
    unredacted = EMAIL in fake_openai.state.last().body["messages"][0]["content"]
    assert unredacted == (field == "default_processors")
    r = admin.client.patch(f"/admin/keys/{created['id']}", json={field: []})
    assert r.status_code == 200 and r.json()[field] == []
    assert chat(server, created["key"]).status_code == 200
    assert EMAIL in fake_openai.state.last().body["messages"][0]["content"]


def test_limits_and_expiry_cleared_with_null(admin: Admin, server: GatewayServer) -> None:
    created = admin.create_key(credits_micros=10**6, rpm=1, expires_at=time.time() + 3600)
    assert chat(server, created["key"]).status_code == 200
    assert chat(server, created["key"]).status_code == 429
    r = admin.client.patch(f"/admin/keys/{created['id']}", json={"rpm": None, "expires_at": None})
    assert r.status_code == 200 and r.json()["rpm"] is None and r.json()["expires_at"] is None
    assert chat(server, created["key"]).status_code == 200
    account = admin.client.post("/admin/accounts", json={"name": "a", "rpm": 5}).json()
    r = admin.client.patch(f"/admin/accounts/{account['id']}", json={"rpm": None})
    assert r.status_code == 200 and admin.account(account["id"])["rpm"] is None


@pytest.mark.parametrize(
    "body,param",
    [
        ({"name": None}, "name"),
        ({"scopes": None}, "scopes"),
        ({"allowed_models": None}, "allowed_models"),
        ({"allowed_ips": None}, "allowed_ips"),
        ({"tags": None}, "tags"),
        ({"metadata": None}, "metadata"),
        ({"default_processors": None}, "default_processors"),
        ({"enforced_processors": None}, "enforced_processors"),
        ({"name": ""}, "name"),
        ({"scopes": ["root"]}, "scopes"),
        ({"allowed_ips": ["not-an-ip"]}, "allowed_ips"),
        ({"enforced_processors": ["teleport"]}, "enforced_processors"),
        # options every request of the key would be refused for: refused when written instead
        ({"enforced_processors": [{"name": "pii_redact", "x": 1}]}, "enforced_processors"),
        ({"default_processors": [{"name": "pii_redact", "mode": "bogus"}]}, "default_processors"),
        ({"enforced_processors": [{"name": "injection_guard", "threshold": "high"}]}, "enforced_processors"),
        ({"default_processors": [{"name": "language", "language": 5}]}, "default_processors"),
        ({"account_id": "acct_other"}, "account_id"),
        ({"hash": "0" * 64}, "hash"),
        ({"revoked_at": None}, "revoked_at"),
        ({"id": "key_other"}, "id"),
    ],
)
def test_a_key_patch_it_cannot_apply_is_refused_naming_the_field_and_changes_nothing(
    admin: Admin, body: dict[str, Any], param: str
) -> None:
    created = admin.create_key(credits_micros=10**6)
    before = admin.client.get(f"/admin/keys/{created['id']}").json()
    r = admin.client.patch(f"/admin/keys/{created['id']}", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param and r.json()["error"]["type"] == "invalid_request_error"
    assert admin.client.get(f"/admin/keys/{created['id']}").json() == before


@pytest.mark.parametrize("body,param", [({"name": None}, "name"), ({"balance_micros": 5}, "balance_micros")])
def test_an_account_patch_it_cannot_apply_is_refused_naming_the_field(
    admin: Admin, body: dict[str, Any], param: str
) -> None:
    account = admin.client.post("/admin/accounts", json={"name": "a"}).json()
    r = admin.client.patch(f"/admin/accounts/{account['id']}", json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    assert admin.account(account["id"]) == account
