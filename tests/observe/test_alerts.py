"""Alert webhooks, through real gateways and a receiver that checks every signature as a Standard Webhooks
consumer does (tests/fakes/webhook_receiver.py).

- budgets: real requests spend an account's and a key's monthly budget; each threshold crossed is delivered
  once (and a jump over two thresholds at once is one alert); across two replicas sharing PostgreSQL that
  both see the crossing, still once;
- a deployment's circuit breaker opening, and an error-rate spike (provider faults; a caller's own errors
  never count), each delivered once, to the hooks that asked for that kind, in their format (Slack's text);
- a receiver that fails twice gets three tries of one message (the same `webhook-id`), every try recorded.
"""

from __future__ import annotations

import asyncio
import base64
import secrets
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from inferplex.observe.alerts import AlertsSink
from tests.accounts.conftest import Admin, billing_config, own_database
from tests.fakes.openai_upstream import FakeOpenAI
from tests.fakes.webhook_receiver import WebhookReceiver
from tests.gateway_server import GatewayServer

SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
COST = 6  # `priced` with max_tokens=2: 2 output tokens at 3 micro-USD (tests/accounts/conftest.py)


@pytest.fixture(autouse=True)
def _secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IPX_TEST_WEBHOOK_SECRET", SECRET)


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    r = WebhookReceiver(secret=SECRET).start()
    yield r
    r.stop()


def _alerts(*hooks: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"webhooks": list(hooks), "budget_thresholds": [0.5, 0.8], "budget_check_s": 0.05, "tick_s": 0.05,
            "retry_initial_s": 0.05, "retry_max_s": 0.2, **extra}  # fmt: skip


def _hook(receiver: WebhookReceiver, **extra: Any) -> dict[str, Any]:
    return {"name": "ops", "url": receiver.url, "secret": "env:IPX_TEST_WEBHOOK_SECRET", **extra}


def _spend(server: GatewayServer, key: str, times: int = 1) -> list[int]:
    statuses = []
    for _ in range(times):
        body = {"model": "priced", "messages": [{"role": "user", "content": "a b c"}], "max_tokens": 2}
        r = httpx.post(f"{server.base_url}/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"})
        assert r.status_code in (200, 402), r.text
        assert r.status_code == 402 or int(r.headers["x-inferplex-cost-micros"]) == COST
        statuses.append(r.status_code)
    return statuses


def _budget(receiver: WebhookReceiver, subject: str, threshold: float) -> list[dict[str, Any]]:
    return [e for e in receiver.events("budget.threshold")
            if e["data"]["subject"] == subject and e["data"]["threshold"] == threshold]  # fmt: skip


def _rows(db_file: Path, query: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db_file) as conn:
        return conn.execute(query).fetchall()


# ---- budgets ---------------------------------------------------------------------------------------------------


def test_each_budget_threshold_is_delivered_once(tmp_path: Path, fake_openai: FakeOpenAI,
                                                  receiver: WebhookReceiver) -> None:  # fmt: skip
    config = billing_config(fake_openai, tmp_path, alerts=_alerts(_hook(receiver)))
    with GatewayServer(config) as server:
        admin = Admin(server.url, server.master_key)
        r = admin.client.post("/admin/accounts", json={"name": "acme", "credits_micros": 10_000,
                                                       "monthly_cap_micros": 100})  # fmt: skip
        account = r.json()
        capped = admin.create_key(account_id=account["id"], monthly_cap_micros=40, name="capped-key")
        free = admin.create_key(account_id=account["id"])

        _spend(server, capped["key"], 4)  # 24 of the key's 40: past 50%
        (first,) = receiver.wait_for(lambda: _budget(receiver, "key", 0.5))
        _spend(server, capped["key"], 2)  # 36: past 80%
        receiver.wait_for(lambda: _budget(receiver, "key", 0.8))
        assert _spend(server, capped["key"]) == [402]  # the key's cap itself refuses the next request
        assert len(_budget(receiver, "key", 0.5)) == 1  # the checks that found 80% found 50% raised already

        _spend(server, free["key"], 3)  # the account: 36 + 18 = 54 of 100
        receiver.wait_for(lambda: _budget(receiver, "account", 0.5))
        _spend(server, free["key"], 5)  # 84
        receiver.wait_for(lambda: _budget(receiver, "account", 0.8))
        _spend(server, free["key"], 1)
        admin.close()
    # stopped: every check and write it had begun is done
    taken = receiver.taken()
    assert all(d.verified for d in receiver.deliveries)
    assert sorted((e.body["data"]["subject"], e.body["data"]["threshold"]) for e in taken) == [
        ("account", 0.5), ("account", 0.8), ("key", 0.5), ("key", 0.8)]  # fmt: skip
    month = first["data"]["month"]
    assert first["type"] == "budget.threshold" and first["id"] == receiver.taken()[0].id
    assert first["data"] == {"subject": "key", "account_id": account["id"], "key_id": capped["id"],
                             "name": "capped-key", "month": month, "threshold": 0.5, "cap_micros": 40,
                             "spent_micros": 24, "fraction": 0.6}  # fmt: skip
    marks = _rows(tmp_path / "inferplex.db", "SELECT key FROM alert_marks WHERE key LIKE 'budget:%'")
    assert len(marks) == 4


def test_a_jump_over_two_thresholds_is_one_alert(tmp_path: Path, fake_openai: FakeOpenAI,
                                                 receiver: WebhookReceiver) -> None:  # fmt: skip
    config = billing_config(fake_openai, tmp_path, alerts=_alerts(_hook(receiver), budget_check_s=3600))
    with GatewayServer(config) as server:
        admin = Admin(server.url, server.master_key)
        r = admin.client.post("/admin/accounts", json={"name": "acme", "credits_micros": 10_000,
                                                       "monthly_cap_micros": 20})  # fmt: skip
        key = admin.create_key(account_id=r.json()["id"])
        _spend(server, key["key"], 3)  # 18 of 20 before any look: 50% and 80% at once
        sink = _sink(server)
        _on_loop(sink, sink.check_budgets(None, None))  # the sweep over every capped account and key
        (event,) = receiver.wait_for(lambda: receiver.events("budget.threshold"))
        admin.close()
    assert (event["data"]["subject"], event["data"]["threshold"], event["data"]["spent_micros"]) == ("account", 0.8, 18)
    assert len(receiver.taken()) == 1


def _sink(server: GatewayServer) -> AlertsSink:
    sink = server.server.config.app.state.hub.sink(AlertsSink)
    assert isinstance(sink, AlertsSink)
    return sink


def _on_loop(sink: AlertsSink, coro: Any) -> Any:
    """Run `coro` on the gateway's own event loop (its thread) and wait for it."""
    loop = sink._tasks[0].get_loop()
    return asyncio.run_coroutine_threadsafe(coro, loop).result(30)


def test_two_replicas_that_both_see_a_crossing_raise_it_once(fake_openai: FakeOpenAI, tmp_path: Path,
                                                             receiver: WebhookReceiver) -> None:  # fmt: skip
    with own_database("inferplex_alerts_") as url:
        configs = [billing_config(fake_openai, tmp_path / f"r{i}", url, alerts=_alerts(_hook(receiver),
                   budget_check_s=3600)) for i in (1, 2)]  # fmt: skip
        with GatewayServer(configs[0]) as one, GatewayServer(configs[1]) as two:
            admin = Admin(one.url, one.master_key)
            r = admin.client.post("/admin/accounts", json={"name": "acme", "credits_micros": 10_000,
                                                           "monthly_cap_micros": 60})  # fmt: skip
            account = r.json()["id"]
            key = admin.create_key(account_id=account)
            _spend(one, key["key"], 3)
            _spend(two, key["key"], 2)  # 30 of 60, spent on both
            sinks = [_sink(one), _sink(two)]

            # each replica checks at once and writes what it raised: both see 30 of 60, one mark is written
            futures = [asyncio.run_coroutine_threadsafe(_checker(s, account), s._tasks[0].get_loop()) for s in sinks]
            for f in futures:
                f.result(30)
            receiver.wait_for(lambda: receiver.events("budget.threshold"))
            admin.close()
        rows = asyncio.run(_pg_rows(url, "SELECT event_type, status FROM alert_deliveries"))
    assert rows == [("budget.threshold", "delivered")]
    assert len(receiver.taken()) == 1 and len(receiver.deliveries) == 1


def test_spend_another_replica_made_is_found_by_the_sweep(fake_openai: FakeOpenAI, tmp_path: Path,
                                                         receiver: WebhookReceiver) -> None:  # fmt: skip
    """Replica one raises no alerts (no webhooks); replica two never served the account, and finds its
    spend in its periodic look at every capped account and key."""
    with own_database("inferplex_alerts_") as url:
        quiet = billing_config(fake_openai, tmp_path / "r1", url)
        watching = billing_config(fake_openai, tmp_path / "r2", url, alerts=_alerts(_hook(receiver),
                                  budget_sweep_s=0.05))  # fmt: skip
        with GatewayServer(quiet) as one, GatewayServer(watching):
            admin = Admin(one.url, one.master_key)
            r = admin.client.post("/admin/accounts", json={"name": "acme", "credits_micros": 10_000})
            key = admin.create_key(account_id=r.json()["id"], monthly_cap_micros=30, name="k")
            _spend(one, key["key"], 3)  # 18 of the key's 30: past 50%
            (event,) = receiver.wait_for(lambda: receiver.events("budget.threshold"))
            admin.close()
    assert (event["data"]["subject"], event["data"]["key_id"], event["data"]["threshold"]) == ("key", key["id"], 0.5)


def _checker(sink: AlertsSink, account: str) -> Any:
    async def run() -> None:
        await sink.check_budgets({account}, set())
        await sink._write()

    return run()


async def _pg_rows(url: str, query: str) -> list[tuple[Any, ...]]:
    import asyncpg

    conn = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
    try:
        return [tuple(r) for r in await conn.fetch(query)]
    finally:
        await conn.close()


# ---- breakers and error rates --------------------------------------------------------------------------------


def _failing_config(fake: FakeOpenAI, tmp: Path, *hooks: dict[str, Any]) -> dict[str, Any]:
    config = billing_config(fake, tmp, alerts=_alerts(*hooks, error_rate={"window_s": 300, "threshold": 0.5,
                                                                          "min_requests": 6}))  # fmt: skip
    for model in config["models"]:
        if model["name"] == "error-500":
            model["routing"] = {"retries": 0, "cooldown": {"failures": 2, "window": 60, "period": 60}}
    return config


def test_a_breaker_opening_and_an_error_spike_are_each_delivered_once(
    tmp_path: Path, fake_openai: FakeOpenAI, receiver: WebhookReceiver
) -> None:
    slack = WebhookReceiver().start()  # unsigned, Slack's body, breakers only
    try:
        config = _failing_config(fake_openai, tmp_path, _hook(receiver),
                                 {"url": slack.url, "format": "slack", "events": ["breaker"]})  # fmt: skip
        with GatewayServer(config) as server:
            client = openai.OpenAI(base_url=server.base_url, api_key=server.master_key, max_retries=0)
            msgs = [{"role": "user", "content": "hi"}]
            for _ in range(5):  # the caller's own mistakes: not the gateway failing, never in the rate
                with pytest.raises(openai.BadRequestError):
                    client.chat.completions.create(model="echo-model", messages=[])
            for _ in range(3):
                client.chat.completions.create(model="echo-model", messages=msgs)  # type: ignore[arg-type]
            for _ in range(4):  # the second opens the breaker; the fourth makes 4 of 7 fail
                with pytest.raises(openai.APIStatusError):
                    client.chat.completions.create(model="error-500", messages=msgs)  # type: ignore[arg-type]
            (opened,) = receiver.wait_for(lambda: receiver.events("breaker.opened"))
            (spike,) = receiver.wait_for(lambda: receiver.events("error_rate.spike"))
            (text,) = slack.wait_for(lambda: slack.taken())
            for _ in range(3):  # still failing: the same outage, and the same spike
                with pytest.raises(openai.APIStatusError):
                    client.chat.completions.create(model="error-500", messages=msgs)  # type: ignore[arg-type]
    finally:
        slack.stop()
    assert opened["data"] == {"deployment": "fake/error-500", "provider": "fake", "models": ["error-500"],
                              "replica": opened["data"]["replica"]}  # fmt: skip
    assert spike["data"]["requests"] == 7 and spike["data"]["failed"] == 4
    assert spike["data"]["error_types"] == {"provider.upstream_error": 4} and spike["data"]["rate"] == 0.5714
    assert sorted(d.body["type"] for d in receiver.taken()) == ["breaker.opened", "error_rate.spike"]
    assert all(d.verified for d in receiver.deliveries)
    assert list(text.body) == ["text"] and "`fake/error-500`" in text.body["text"]
    assert "webhook-signature" not in text.headers and len(slack.deliveries) == 1


def test_a_receiver_failing_twice_gets_three_tries_of_one_message(
    tmp_path: Path, fake_openai: FakeOpenAI, receiver: WebhookReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver.fail_first = 2
    monkeypatch.setenv("IPX_TEST_WEBHOOK_URL", receiver.url)  # a URL that is a secret (Slack's) is referenced
    config = _failing_config(fake_openai, tmp_path, _hook(receiver, events=["breaker"], url="env:IPX_TEST_WEBHOOK_URL"))
    with GatewayServer(config) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key=server.master_key, max_retries=0)
        for _ in range(2):
            with pytest.raises(openai.APIStatusError):
                client.chat.completions.create(model="error-500", messages=[{"role": "user", "content": "hi"}])
        (event,) = receiver.wait_for(lambda: receiver.events("breaker.opened"))
    tries = receiver.deliveries
    assert [d.status for d in tries] == [500, 500, 204]
    assert len({d.id for d in tries}) == 1 and tries[0].id == event["id"]
    assert all(d.verified and d.raw == tries[0].raw for d in tries)  # each try signs the same bytes
    db = tmp_path / "inferplex.db"
    (delivery,) = _rows(db, "SELECT id, status, attempts, last_status, hook, body FROM alert_deliveries")
    assert delivery[1:5] == ("delivered", 3, 204, "ops")  # the hook by name: its URL is never written down
    assert delivery[5].encode() == tries[0].raw and str(receiver.port) not in repr(delivery)
    attempts = _rows(db, f"SELECT attempt, status, error FROM alert_attempts WHERE delivery_id = '{delivery[0]}' "
                         "ORDER BY attempt")  # fmt: skip
    assert attempts == [(1, 500, "HTTP 500"), (2, 500, "HTTP 500"), (3, 204, None)]


def test_a_delivery_given_up_after_max_attempts(tmp_path: Path, fake_openai: FakeOpenAI,
                                                receiver: WebhookReceiver) -> None:  # fmt: skip
    receiver.fail_first = 100
    config = _failing_config(fake_openai, tmp_path, _hook(receiver, events=["breaker"]))
    config["alerts"]["max_attempts"] = 3
    with GatewayServer(config) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key=server.master_key, max_retries=0)
        for _ in range(2):
            with pytest.raises(openai.APIStatusError):
                client.chat.completions.create(model="error-500", messages=[{"role": "user", "content": "hi"}])
        db = tmp_path / "inferplex.db"
        receiver.wait_for(lambda: _rows(db, "SELECT 1 FROM alert_deliveries WHERE status = 'failed'"))
    assert [d.status for d in receiver.deliveries] == [500, 500, 500]
    assert _rows(db, "SELECT attempts, next_attempt_at FROM alert_deliveries") == [(3, None)]


def test_a_webhook_whose_reference_is_not_set_stops_the_start(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    config = billing_config(fake_openai, tmp_path, alerts=_alerts({"url": "env:IPX_TEST_UNSET_WEBHOOK_URL"}))
    with pytest.raises(ValueError, match="IPX_TEST_UNSET_WEBHOOK_URL is not set"):
        GatewayServer(config)
