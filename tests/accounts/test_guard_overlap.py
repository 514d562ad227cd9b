"""A reservation sent beside the limits' round trip (accounts/guard.py, `_Overlap`): what a caller and the
ledger see when the limits then refuse the request, on SQLite and on PostgreSQL with the limits in Redis."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from tests.accounts.conftest import REDIS_URL, Admin, billing_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer


@pytest.fixture(scope="module", params=["sqlite", "postgresql+redis"])
def server(
    request: pytest.FixtureRequest, fake_openai: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    tmp = tmp_path_factory.mktemp("overlap")
    prefix = f"inferplex_test:{secrets.token_hex(6)}:"
    config = billing_config(fake_openai, tmp)
    if request.param != "sqlite":
        url = request.getfixturevalue("pg_url")
        config = billing_config(fake_openai, tmp, url)
        config["storage"].update({"redis_url": REDIS_URL, "redis_prefix": prefix})
    try:
        with GatewayServer(config) as gw:
            yield gw
    finally:
        client = redis.Redis.from_url(REDIS_URL)
        keys = list(client.scan_iter(prefix + "*"))
        if keys:
            client.delete(*keys)
        client.close()


def chat(server: GatewayServer, key: str) -> httpx.Response:
    body = {"model": "priced", "messages": [{"role": "user", "content": "a b c"}], "max_tokens": 2}
    return httpx.post(
        server.base_url + "/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30
    )


def settled(admin: Admin, account_id: str, expected: int) -> list[dict[str, Any]]:
    """The ledger once the balance is `expected` (settlements are booked after the answer), checked to sum
    to the balance."""
    deadline = time.monotonic() + 10
    while admin.account(account_id)["balance_micros"] != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    balance = admin.account(account_id)["balance_micros"]
    entries = admin.ledger(account_id)
    assert balance == expected
    assert balance == sum(e["amount_micros"] for e in entries)
    return entries


def test_a_request_the_limits_refuse_costs_nothing_and_its_reservation_is_given_back(
    server: GatewayServer, admin: Admin
) -> None:
    created = admin.create_key(credits_micros=10_000, rpm=1)
    first = chat(server, created["key"])
    assert first.status_code == 200
    refused = chat(server, created["key"])
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    # `priced` costs 3 micro-USD an output token: the first request's 2 tokens, and nothing for the refused one.
    entries = settled(admin, created["account_id"], 10_000 - 6)
    theirs = [e for e in entries if e["request_id"] == refused.headers["x-request-id"]]
    # It was alone, so its reservation went out beside the limits' check, and came back in full.
    assert sorted(e["kind"] for e in theirs) == ["reserve", "settle"]
    assert sum(e["amount_micros"] for e in theirs) == 0


def test_a_caller_the_limits_refused_is_not_reserved_for_again(server: GatewayServer, admin: Admin) -> None:
    created = admin.create_key(credits_micros=10_000, rpm=1)
    assert chat(server, created["key"]).status_code == 200
    assert chat(server, created["key"]).status_code == 429
    again = [chat(server, created["key"]) for _ in range(3)]
    assert [r.status_code for r in again] == [429, 429, 429]
    entries = settled(admin, created["account_id"], 10_000 - 6)
    ids = {r.headers["x-request-id"] for r in again}
    assert [e for e in entries if e["request_id"] in ids] == []  # no reservation and release per refusal


def test_credits_are_still_refused_before_anything_is_spent(server: GatewayServer, admin: Admin) -> None:
    created = admin.create_key(credits_micros=1, rpm=100)
    refused = chat(server, created["key"])
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "insufficient_credits"
    settled(admin, created["account_id"], 1)
