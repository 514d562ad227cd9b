"""Credits, limits and the usage log through HTTP, on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import asyncpg
import httpx
import pytest

from inferplex.store.ledger import Ledger
from inferplex.store.moves import Move
from inferplex.store.postgres import PostgresDatabase
from inferplex.store.sqlite import SQLiteDatabase
from tests.accounts.conftest import Admin, billing_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(
    request: pytest.FixtureRequest, fake_openai: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    tmp = tmp_path_factory.mktemp("billing")
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    config = billing_config(fake_openai, tmp, url, accounts={"max_queue_wait_s": 1.0})
    config["models"].append(
        {
            "name": "slow-priced",
            "deployments": [{"provider": "fake", "model": "slow-stream"}],
            "max_output": 1000,
            "pricing": {"input": "0", "output": "4"},
        }
    )
    with GatewayServer(config) as gw:
        yield gw


def body(model: str = "priced", text: str = "a b c", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], **extra}


def post(server: GatewayServer, key: str, payload: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        server.base_url + "/chat/completions", json=payload, headers={"Authorization": f"Bearer {key}"}, timeout=30
    )


def assert_reconciles(admin: Admin, account_id: str) -> int:
    balance: int = admin.account(account_id)["balance_micros"]
    assert balance == sum(e["amount_micros"] for e in admin.ledger(account_id))
    return balance


def test_exact_budget_under_200_concurrent_requests(server: GatewayServer, admin: Admin) -> None:
    # `priced` costs 3 micro-USD per output token and nothing per input token; with max_tokens=2 the fake
    # answers exactly 2 tokens, so the worst case reserved (6) is also the real cost: 300 covers exactly 50.
    created = admin.create_key(credits_micros=300)

    async def burst() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=200)
        async with httpx.AsyncClient(limits=limits, timeout=60) as client:
            return await asyncio.gather(
                *(
                    client.post(
                        server.base_url + "/chat/completions",
                        json=body(max_tokens=2),
                        headers={"Authorization": f"Bearer {created['key']}"},
                    )
                    for _ in range(200)
                )
            )

    responses = asyncio.run(burst())
    ok = [r for r in responses if r.status_code == 200]
    refused = [r for r in responses if r.status_code == 403]
    assert len(ok) == 50 and len(refused) == 150
    assert all(r.json()["error"]["code"] == "insufficient_credits" for r in refused)
    assert all(r.headers["x-inferplex-cost-micros"] == "6" and r.json()["cost"]["micros"] == 6 for r in ok)
    assert assert_reconciles(admin, created["account_id"]) == 0
    kinds = [e["kind"] for e in admin.ledger(created["account_id"])]
    assert (kinds.count("reserve"), kinds.count("settle"), kinds.count("topup")) == (50, 50, 1)


def test_settlement_refunds_the_unused_reservation_and_failures_cost_nothing(
    server: GatewayServer, admin: Admin
) -> None:
    created = admin.create_key(credits_micros=10_000)
    r = post(server, created["key"], body(text="hello"))  # no max_tokens: reserves max_output (100) x 3
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2
    assert r.json()["cost"] == {"currency": "USD", "micros": 6}
    assert assert_reconciles(admin, created["account_id"]) == 10_000 - 6
    entries = admin.ledger(created["account_id"])[:2]
    assert [(e["kind"], e["amount_micros"]) for e in entries] == [("settle", 294), ("reserve", -300)]
    failed = post(server, created["key"], body(model="error-500"))
    assert failed.status_code >= 500
    assert assert_reconciles(admin, created["account_id"]) == 10_000 - 6
    poor = admin.create_key(credits_micros=5)
    r = post(server, poor["key"], body())
    assert r.status_code == 403 and r.json()["error"]["code"] == "insufficient_credits"
    assert "300 micro-USD" in r.json()["error"]["message"]


def test_the_master_key_is_not_billed_but_sees_the_cost(server: GatewayServer) -> None:
    r = post(server, server.master_key, body(max_tokens=2))
    assert r.status_code == 200 and r.headers["x-inferplex-cost-micros"] == "6"


def test_a_stream_cut_by_the_caller_is_billed_for_what_was_produced(server: GatewayServer, admin: Admin) -> None:
    created = admin.create_key(credits_micros=100_000)
    received = ""
    with httpx.stream(
        "POST",
        server.base_url + "/chat/completions",
        json=body(model="slow-priced", stream=True),
        headers={"Authorization": f"Bearer {created['key']}"},
        timeout=30,
    ) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: {"):
                received += line.count("tick ") * "tick "
            if len(received) >= 50:
                break  # hang up after ten chunks
    deadline = time.monotonic() + 10
    while len(admin.ledger(created["account_id"])) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    balance = assert_reconciles(admin, created["account_id"])
    billed = 100_000 - balance
    # 4 micro-USD per token, a token per 4 characters: about one micro-USD per character produced. The
    # gateway may have relayed a few chunks the client had not read yet; never anything like the 4000 reserved.
    assert len(received) <= billed <= len(received) + 5 * 20 + 4
    rows = admin.usage(key_id=created["id"])
    assert rows[0]["cost_micros"] == billed and rows[0]["estimated"] == 1


def test_a_completed_stream_is_billed_from_usage_and_its_last_chunk_carries_the_cost(
    server: GatewayServer, admin: Admin
) -> None:
    created = admin.create_key(credits_micros=10_000)
    import openai

    client = openai.OpenAI(base_url=server.base_url, api_key=created["key"])
    chunks = list(
        client.chat.completions.create(
            model="priced",
            messages=[{"role": "user", "content": "one two"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    last = chunks[-1].model_dump()
    assert last["usage"]["completion_tokens"] == 3 and last["cost"] == {"currency": "USD", "micros": 9}
    deadline = time.monotonic() + 10
    while assert_reconciles(admin, created["account_id"]) != 10_000 - 9 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert assert_reconciles(admin, created["account_id"]) == 10_000 - 9


def test_requests_per_minute_are_429_with_retry_after(server: GatewayServer, admin: Admin) -> None:
    created = admin.create_key(credits_micros=10_000, rpm=3)
    statuses = [post(server, created["key"], body(max_tokens=2)) for _ in range(5)]
    assert [r.status_code for r in statuses] == [200, 200, 200, 429, 429]
    refused = statuses[3]
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert 1 <= int(refused.headers["retry-after"]) <= 20


def test_account_tokens_per_minute(server: GatewayServer, admin: Admin) -> None:
    account = admin.client.post("/admin/accounts", json={"name": "t", "credits_micros": 10_000, "tpm": 60}).json()
    key = admin.create_key(account_id=account["id"])["key"]
    first = post(server, key, body(text="x " * 20, max_tokens=2))
    assert first.status_code == 200
    second = post(server, key, body(text="y " * 20, max_tokens=2))
    assert second.status_code == 429 and "tokens per minute" in second.json()["error"]["message"]


def test_concurrency_waits_in_a_queue_then_429(server: GatewayServer, admin: Admin, fake_openai: FakeOpenAI) -> None:
    created = admin.create_key(credits_micros=100_000, max_concurrent=1)
    fake_openai.state.max_in_flight = 0

    async def burst(n: int) -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=30) as client:
            return await asyncio.gather(
                *(
                    client.post(
                        server.base_url + "/chat/completions",
                        json=body(model="sleep-300", max_tokens=2),
                        headers={"Authorization": f"Bearer {created['key']}"},
                    )
                    for _ in range(n)
                )
            )

    responses = asyncio.run(burst(5))  # 300 ms each, one at a time, at most 1 s of waiting
    statuses = sorted(r.status_code for r in responses)
    assert statuses[:2] == [200, 200] and statuses[-1] == 429
    assert fake_openai.state.max_in_flight == 1
    queued = [r for r in responses if r.status_code == 200 and "x-inferplex-queued-ms" in r.headers]
    assert queued and all(float(r.json()["timings"]["queued_ms"]) >= 200 for r in queued)
    assert all("retry-after" in r.headers for r in responses if r.status_code == 429)


def test_usage_log_rows_and_bodies_on_request(server: GatewayServer, admin: Admin, fake_openai: FakeOpenAI) -> None:
    created = admin.create_key(credits_micros=10_000, tags=["team-a"])
    r = post(server, created["key"], body(max_tokens=2, user="end-user-7", log_query_body=True))
    assert r.status_code == 200
    assert "log_query_body" not in fake_openai.state.last().body
    row = admin.usage(key_id=created["id"])[0]
    assert row["request_id"] == r.headers["x-request-id"]
    assert (row["model"], row["provider"], row["status"], row["end_user"]) == ("priced", "fake", 200, "end-user-7")
    assert (row["prompt_tokens"], row["completion_tokens"], row["cost_micros"]) == (3, 2, 6)
    assert row["tags"] == ["team-a"] and row["request_body"]["messages"][0]["content"] == "a b c"
    assert row["response_body"] is None  # not asked for
    plain = post(server, created["key"], body(max_tokens=2))
    assert admin.usage(key_id=created["id"])[0]["request_body"] is None and plain.status_code == 200
    totals = admin.client.get("/admin/usage/totals", params={"by": "tag", "key_id": created["id"]}).json()
    assert totals["data"] == [
        {
            "group": "team-a",
            "requests": 2,
            "prompt_tokens": 6,
            "completion_tokens": 4,
            "cached_tokens": 0,
            "cost_micros": 12,
        }
    ]


def test_the_usage_log_keeps_the_response_body_when_asked(server: GatewayServer, admin: Admin) -> None:
    created = admin.create_key(credits_micros=10_000)
    buffered = post(server, created["key"], body(text="one two three", log_response_body=True))
    assert buffered.status_code == 200
    answer = buffered.json()["choices"][0]["message"]["content"]
    with httpx.stream(
        "POST",
        server.base_url + "/chat/completions",
        json=body(text="four five", stream=True, log_response_body=True),
        headers={"Authorization": f"Bearer {created['key']}"},
        timeout=30,
    ) as resp:
        frames = [line[6:] for line in resp.iter_lines() if line.startswith("data: ") and line != "data: [DONE]"]
    streamed = "".join(json.loads(f)["choices"][0]["delta"].get("content") or "" for f in frames)
    rows = {r["request_id"]: r for r in admin.usage(key_id=created["id"])}
    logged = rows[buffered.headers["x-request-id"]]["response_body"]
    assert logged["object"] == "chat.completion" and logged["choices"][0]["message"]["content"] == answer
    assert logged["usage"]["completion_tokens"] == buffered.json()["usage"]["completion_tokens"]
    logged = rows[resp.headers["x-request-id"]]["response_body"]
    assert logged["choices"][0]["message"]["content"] == streamed == "echo: four five"
    assert logged["choices"][0]["finish_reason"] == "stop" and logged["usage"]["completion_tokens"] == 3


def test_a_ledger_that_cannot_be_reached_answers_503_and_charges_nothing(
    server: GatewayServer, admin: Admin, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The database drops the connection in the middle of the reservation's batch (as a restart does).
    created = admin.create_key(credits_micros=1_000)
    assert post(server, created["key"], body(max_tokens=2)).status_code == 200
    if server.config.storage.database_url and not server.config.storage.database_url.startswith("sqlite"):
        failure: BaseException = asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation")
        engine: type = PostgresDatabase
    else:
        failure, engine = sqlite3.OperationalError("disk I/O error"), SQLiteDatabase

    async def unreachable(*args: object, **kwargs: object) -> object:
        raise failure

    with monkeypatch.context() as patch:
        patch.setattr(engine, "apply_moves", unreachable)
        r = post(server, created["key"], body(max_tokens=2))
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "store_unavailable"
    assert post(server, created["key"], body(max_tokens=2)).status_code == 200  # reachable again: served
    entries = admin.ledger(created["account_id"])
    assert [e["kind"] for e in entries].count("reserve") == 2  # the refused request reserved nothing
    assert assert_reconciles(admin, created["account_id"]) == 1_000 - 2 * 6


def test_an_answer_does_not_wait_for_its_settlement_but_a_read_of_the_ledger_does(
    server: GatewayServer, admin: Admin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The settlement is queued, not waited for: the answer leaves without a database round trip. The admin
    API of the same replica reads the balance and the ledger only after what the replica has queued."""
    created = admin.create_key(credits_micros=1_000)
    original = Ledger._apply
    settled: list[Move] = []

    async def slow_settlements(self: Ledger, moves: list[Move]) -> list[int | None]:
        if any(m.kind == "settle" for m in moves):
            await asyncio.sleep(0.5)
            settled.extend(m for m in moves if m.kind == "settle")
        return await original(self, moves)

    with monkeypatch.context() as patch:
        patch.setattr(Ledger, "_apply", slow_settlements)
        r = post(server, created["key"], body(max_tokens=50))
        assert r.status_code == 200 and not settled  # answered before its settlement was booked
        cost = int(r.headers["x-inferplex-cost-micros"])
        assert 0 < cost < 150  # less than the worst case reserved: the settlement gives some back
        assert assert_reconciles(admin, created["account_id"]) == 1_000 - cost
        assert len(settled) == 1
    assert [e["kind"] for e in admin.ledger(created["account_id"])][:2] == ["settle", "reserve"]


@pytest.mark.parametrize("note", ['say "thanks"', "C:\\credits\\2026", "{a,b}", "NULL", "Grüße 🎉"])
def test_a_top_up_note_reads_back_from_the_ledger_exactly_as_sent(
    server: GatewayServer, admin: Admin, note: str
) -> None:
    created = admin.create_key(credits_micros=100)
    account = created["account_id"]
    r = admin.client.post(f"/admin/accounts/{account}/credits", json={"amount_micros": 7, "note": note})
    assert r.status_code == 200, r.text
    assert admin.ledger(account)[0]["note"] == note  # newest first
    assert assert_reconciles(admin, account) == 107
