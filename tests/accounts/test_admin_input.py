"""Bad admin input is a 400 naming the field or parameter, the same on SQLite and PostgreSQL, and writes
nothing: integers out of range for their columns, `true` for an integer, NUL in text, and query or path
parameters that are not what they should be. Balances stay exact integers equal to their ledger's sum."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.accounts.conftest import Admin, billing_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

INT64_MAX = 2**63 - 1


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(
    request: pytest.FixtureRequest, fake_openai: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    with GatewayServer(billing_config(fake_openai, tmp_path_factory.mktemp("admin-input"), url)) as gw:
        yield gw


@pytest.fixture(autouse=True)
def no_unexpected_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Whatever a test sends, the gateway never logs an unexpected error (the 500 path)."""
    with caplog.at_level(logging.WARNING, logger="inferplex"):
        yield
    assert "unexpected error" not in caplog.text and "Traceback" not in caplog.text


def refused(r: httpx.Response, param: str) -> None:
    assert r.status_code == 400, (param, r.status_code, r.text)
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param and error["type"] == "invalid_request_error", error


def counts(admin: Admin) -> tuple[int, int]:
    keys = admin.client.get("/admin/keys").json()["data"]
    accounts = admin.client.get("/admin/accounts").json()["data"]
    return len(keys), len(accounts)


def exact(admin: Admin, account_id: str) -> int:
    """The balance, checked to be an integer equal to the sum of the account's ledger."""
    balance = admin.account(account_id)["balance_micros"]
    assert type(balance) is int, balance
    assert balance == sum(e["amount_micros"] for e in admin.ledger(account_id))
    return balance


LIMITS_OUT_OF_RANGE = [
    ({"rpm": 2**63}, "rpm"),
    ({"tpm": 2**64}, "tpm"),
    ({"max_concurrent": 2**63}, "max_concurrent"),
    ({"rpm": 0}, "rpm"),
    ({"tpm": -1}, "tpm"),
    ({"rpm": True}, "rpm"),
    ({"tpm": "1000"}, "tpm"),
    ({"max_concurrent": 2.0}, "max_concurrent"),
]


@pytest.mark.parametrize(
    "body,param",
    [
        *LIMITS_OUT_OF_RANGE,
        ({"credits_micros": 2**63}, "credits_micros"),
        ({"credits_micros": -1}, "credits_micros"),
        ({"credits_micros": True}, "credits_micros"),
        ({"name": "n\u0000x"}, "name"),
        ({"tags": ["ok", "t\u0000"]}, "tags"),
        ({"allowed_models": ["gpt-\u0000"]}, "allowed_models"),
        ({"metadata": {"team": "a\u0000b"}}, "metadata"),
        ({"metadata": {"k\u0000": 1}}, "metadata"),
        ({"metadata": {"deep": [{"x": ["\u0000"]}]}}, "metadata"),
        ({"account_id": "acct_\u0000"}, "account_id"),
        ({"default_processors": [{"name": "pii_redact", "mode": "\u0000"}]}, "default_processors"),
        ({"expires_at": True}, "expires_at"),
        ({"expires_at": "soon"}, "expires_at"),
        ({"scopes": ["chat\u0000"]}, "scopes"),
    ],
)
def test_a_key_that_cannot_be_stored_is_refused_and_nothing_is_written(
    admin: Admin, body: dict[str, Any], param: str
) -> None:
    before = counts(admin)
    refused(admin.client.post("/admin/keys", json={"name": "k", "credits_micros": 5, **body}), param)
    assert counts(admin) == before  # not even the account it would have made


@pytest.mark.parametrize(
    "body,param",
    [
        *LIMITS_OUT_OF_RANGE,
        ({"credits_micros": 2**63}, "credits_micros"),
        ({"credits_micros": False}, "credits_micros"),
        ({"name": "acme\u0000"}, "name"),
    ],
)
def test_an_account_that_cannot_be_stored_is_refused(admin: Admin, body: dict[str, Any], param: str) -> None:
    before = counts(admin)
    refused(admin.client.post("/admin/accounts", json={"name": "a", **body}), param)
    assert counts(admin) == before


@pytest.mark.parametrize("body,param", [*LIMITS_OUT_OF_RANGE, ({"name": "\u0000"}, "name")])
def test_a_patch_that_cannot_be_stored_is_refused_and_changes_nothing(
    admin: Admin, body: dict[str, Any], param: str
) -> None:
    created = admin.create_key(credits_micros=10, rpm=5)
    key_before = admin.client.get(f"/admin/keys/{created['id']}").json()
    refused(admin.client.patch(f"/admin/keys/{created['id']}", json=body), param)
    assert admin.client.get(f"/admin/keys/{created['id']}").json() == key_before
    account_before = admin.account(created["account_id"])
    refused(admin.client.patch(f"/admin/accounts/{created['account_id']}", json=body), param)
    assert admin.account(created["account_id"]) == account_before


def test_64_bit_limits_are_stored_and_read_back_exactly(admin: Admin, server: GatewayServer) -> None:
    limits = {"rpm": 2**40, "tpm": 10**12, "max_concurrent": INT64_MAX}
    created = admin.create_key(credits_micros=10**6, **limits)
    assert {k: created[k] for k in limits} == limits
    assert {k: admin.client.get(f"/admin/keys/{created['id']}").json()[k] for k in limits} == limits
    account = admin.client.post("/admin/accounts", json={"name": "big", **limits}).json()
    assert {k: admin.account(account["id"])[k] for k in limits} == limits
    body = {"model": "priced", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    r = httpx.post(
        server.base_url + "/chat/completions", json=body, headers={"Authorization": f"Bearer {created['key']}"}
    )
    assert r.status_code == 200, r.text  # and the limits themselves work with such numbers


def test_a_top_up_that_would_overflow_the_balance_is_refused_and_the_balance_stays_exact(
    admin: Admin, server: GatewayServer
) -> None:
    created = admin.create_key(credits_micros=1_000_000)
    account, key = created["account_id"], created["key"]
    credits = f"/admin/accounts/{account}/credits"
    refused(admin.client.post(credits, json={"amount_micros": INT64_MAX}), "amount_micros")
    assert exact(admin, account) == 1_000_000
    refused(admin.client.post(credits, json={"amount_micros": 2**63}), "amount_micros")
    refused(admin.client.post(credits, json={"amount_micros": -(2**64)}), "amount_micros")
    refused(admin.client.post(credits, json={"amount_micros": True}), "amount_micros")
    refused(admin.client.post(credits, json={"amount_micros": 5.0}), "amount_micros")
    refused(admin.client.post(credits, json={"amount_micros": 5, "note": "x\u0000"}), "note")
    r = admin.client.post(credits, json={"amount_micros": INT64_MAX - 1_000_000, "note": "to the top"})
    assert r.status_code == 200 and r.json()["balance_micros"] == INT64_MAX, r.text
    assert exact(admin, account) == INT64_MAX
    refused(admin.client.post(credits, json={"amount_micros": 1}), "amount_micros")
    assert exact(admin, account) == INT64_MAX
    r = admin.client.post(credits, json={"amount_micros": -INT64_MAX, "kind": "adjust"})
    assert r.status_code == 200 and exact(admin, account) == 0
    r = admin.client.post(credits, json={"amount_micros": -INT64_MAX, "kind": "adjust"})
    assert r.status_code == 200 and exact(admin, account) == -INT64_MAX
    refused(admin.client.post(credits, json={"amount_micros": -2, "kind": "adjust"}), "amount_micros")
    assert exact(admin, account) == -INT64_MAX
    # a request on that balance is refused for credit, not failed by the store's arithmetic (a 500 on PostgreSQL)
    body = {"model": "priced", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    r = httpx.post(server.base_url + "/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "insufficient_credits", r.text
    assert exact(admin, account) == -INT64_MAX


def test_credits_to_an_existing_account_that_would_overflow_it_create_no_key(admin: Admin) -> None:
    account = admin.create_key(credits_micros=INT64_MAX)["account_id"]
    before = counts(admin)
    refused(
        admin.client.post("/admin/keys", json={"name": "k", "account_id": account, "credits_micros": 1}),
        "credits_micros",
    )
    assert counts(admin) == before and exact(admin, account) == INT64_MAX


@pytest.mark.parametrize(
    "path,param",
    [
        ("/admin/usage?limit=", "limit"),
        ("/admin/usage?limit=abc", "limit"),
        ("/admin/usage?limit=-1", "limit"),
        ("/admin/usage?limit=0", "limit"),
        ("/admin/usage?limit=1.5", "limit"),
        (f"/admin/usage?limit={10**30}", "limit"),
        ("/admin/usage?since=abc", "since"),
        ("/admin/usage?since=nan", "since"),
        ("/admin/usage?until=inf", "until"),
        ("/admin/usage?until=1e999", "until"),
        ("/admin/usage/totals?since=-inf", "since"),
        ("/admin/usage/totals?by=week", "by"),
        ("/admin/usage?model=gpt%00", "model"),
        ("/admin/usage?key_id=%00", "key_id"),
        ("/admin/usage/totals?account_id=a%00b", "account_id"),
        ("/admin/keys?account_id=%00", "account_id"),
        ("/admin/keys/key_%00", "key_id"),
        ("/admin/accounts/acct_%00", "account_id"),
        ("/admin/accounts/acct_%00/ledger", "account_id"),
    ],
)
def test_a_bad_query_or_path_parameter_is_refused_naming_it(admin: Admin, path: str, param: str) -> None:
    refused(admin.client.get(path), param)


@pytest.mark.parametrize("limit", ["", "abc", "-1", "0", str(10**30), "9223372036854775808"])
def test_a_bad_ledger_limit_is_refused_naming_it(admin: Admin, limit: str) -> None:
    account = admin.create_key(credits_micros=5)["account_id"]
    refused(admin.client.get(f"/admin/accounts/{account}/ledger?limit={limit}"), "limit")


def test_good_page_sizes_still_page(admin: Admin) -> None:
    account = admin.create_key(credits_micros=5)["account_id"]
    for _ in range(3):
        assert admin.client.post(f"/admin/accounts/{account}/credits", json={"amount_micros": 1}).status_code == 200
    rows = admin.client.get(f"/admin/accounts/{account}/ledger?limit=2").json()["data"]
    assert len(rows) == 2
    assert admin.client.get("/admin/usage?limit=10000").status_code == 200


def test_a_ledger_longer_than_a_page_is_read_whole_with_before(admin: Admin) -> None:
    """`limit` is capped, so a ledger longer than a page must still be readable whole (to reconcile it)."""
    account = admin.create_key(credits_micros=5)["account_id"]
    for amount in (1, 2, 3, 4):
        r = admin.client.post(f"/admin/accounts/{account}/credits", json={"amount_micros": amount})
        assert r.status_code == 200
    seen: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 2}
    while True:
        page = admin.client.get(f"/admin/accounts/{account}/ledger", params=params).json()
        seen += page["data"]
        if not page["has_more"]:
            break
        params["before"] = page["data"][-1]["id"]
    assert [e["amount_micros"] for e in seen] == [4, 3, 2, 1, 5]
    assert sum(e["amount_micros"] for e in seen) == exact(admin, account) == 15
    refused(admin.client.get(f"/admin/accounts/{account}/ledger?before=abc"), "before")


@pytest.mark.parametrize(
    "method,path,param",
    [
        ("patch", "/admin/keys/k%00", "key_id"),
        ("post", "/admin/keys/k%00/revoke", "key_id"),
        ("post", "/admin/keys/k%00/rotate", "key_id"),
        ("patch", "/admin/accounts/a%00", "account_id"),
        ("post", "/admin/accounts/a%00/credits", "account_id"),
    ],
)
def test_nul_in_a_path_parameter_of_a_write_is_refused(admin: Admin, method: str, path: str, param: str) -> None:
    body = {"amount_micros": 1} if path.endswith("credits") else {}
    refused(admin.client.request(method.upper(), path, json=body), param)


@pytest.mark.parametrize(
    "path,param",
    [
        ("/admin/keys?acount_id=acct_x", "acount_id"),  # a typo must not list every key
        ("/admin/usage?key=key_x", "key"),
        ("/admin/usage/totals?by=model&modle=gpt", "modle"),
        ("/admin/usage/totals?limit=5", "limit"),
        ("/admin/accounts?limit=5", "limit"),
        ("/admin/keys/key_x?verbose=1", "verbose"),
    ],
)
def test_a_query_parameter_a_route_does_not_take_is_refused_naming_it(admin: Admin, path: str, param: str) -> None:
    refused(admin.client.get(path), param)


def test_the_query_parameters_each_route_takes_are_accepted(admin: Admin) -> None:
    created = admin.create_key(credits_micros=5)
    filters = {"key_id": created["id"], "account_id": created["account_id"], "model": "m", "since": 0, "until": 1}
    assert admin.client.get("/admin/keys", params={"account_id": created["account_id"]}).status_code == 200
    assert admin.client.get("/admin/usage", params={**filters, "limit": 5}).status_code == 200
    assert admin.client.get("/admin/usage/totals", params={**filters, "by": "tag"}).status_code == 200
    ledger = admin.client.get(f"/admin/accounts/{created['account_id']}/ledger", params={"limit": 5})
    assert ledger.status_code == 200
