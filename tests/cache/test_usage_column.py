"""The usage row's `cache` column (migration 0020): what the response cache did for each request, on SQLite
and PostgreSQL alike.

- The migration adds it and its downgrade removes it; rows logged before it keep their values and read NULL.
- Every writer carries it: the usage log's batch (COPY on PostgreSQL, executemany on SQLite), the row-by-row
  fallback and the spool's replay (a row spooled by an older version, without the column, is NULL), and
  the rows the usage queries, the request log's filter and the fleet's hit-rate count read back.
- Through HTTP: the first request is a `miss`, the same one again a `hit`, a request that says `no-cache` a
  `bypass`, a model the cache does not serve NULL; the admin API's request log and usage listings show it
  and filter by it, and refuse an unknown outcome.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from inferplex.store import tables as t
from inferplex.store.engine import open_database
from inferplex.store.request_log import RequestFilter, RequestLog
from inferplex.store.spool import USAGE, Spool
from inferplex.store.usage import UsageFilter, UsageStore
from tests.accounts.conftest import own_database, sqlite_url
from tests.cache.support_ops import Operator, ask, cached_config, prompt, upstream_calls, usage_row
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer
from tests.migrating import down_and_up, usage_rows_at
from tests.observe.usage_reference import usage_rows

NOW = 1_764_000_000.0


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield sqlite_url(tmp_path)
        return
    with own_database("inferplex_h4_usage_cache_") as found:
        yield found


def _columns(inspector: Any) -> set[str]:
    return {c["name"] for c in inspector.get_columns("usage")}


def test_0020_up_down_up(url: str) -> None:
    up, down, again = down_and_up(url, "0019", _columns)
    assert "cache" in up and up == {c.name for c in t.usage.columns}
    assert down == up - {"cache"}
    assert again == up


def test_rows_before_0020_read_null_and_every_writer_carries_the_outcome(url: str, tmp_path: Path) -> None:
    usage_rows_at(url, "0019", [usage_row("before-1"), usage_row("before-2", model="m2")], {"cache"})

    async def upgraded_and_written() -> dict[str, Any]:
        db = open_database(url)
        spool = Spool(tmp_path / "spool.db")
        try:
            await db.migrate()
            usage = UsageStore(db)
            # the usage log's batch: the guard's rows, and one without the column (the Unify dialect's)
            without = {k: v for k, v in usage_row("batch-none").items() if k != "cache"}
            await usage.append([usage_row("batch-hit", cache="hit"), usage_row("batch-miss", cache="miss"), without])
            # the spool's replay (store/recovery.py): one kept by this version, one by a version before 0020
            older = {k: v for k, v in usage_row("spooled-old").items() if k != "cache"}
            spool.put(USAGE, [usage_row("spooled-semantic", cache="semantic-hit", model="m2"), older])
            assert await usage.append_each([item for _, item in spool.take(USAGE, 10)]) == 2
            await usage.append_each([usage_row("fallback-bypass", cache="bypass")])  # the row-by-row fallback
            log = RequestLog(db)
            return {
                "hits": [r["request_id"] for r in (await log.page(RequestFilter(cache="hits"))).rows],
                "none": {r["request_id"] for r in (await log.page(RequestFilter(cache="none"))).rows},
                "misses": [r["request_id"] for r in await usage.rows(UsageFilter(cache="miss"))],
                "totals": {r["group"]: r["requests"] for r in await usage.totals("cache", UsageFilter())},
                "window": await usage.cache_outcomes(NOW - 1),
                "later": await usage.cache_outcomes(NOW + 1),
                "detail": (await log.detail("spooled-semantic") or {}).get("cache"),
            }
        finally:
            spool.close()
            await db.aclose()

    found = asyncio.run(upgraded_and_written())
    stored = {r["request_id"]: r["cache"] for r in usage_rows(url)}
    assert stored == {
        "before-1": None, "before-2": None, "batch-hit": "hit", "batch-miss": "miss", "batch-none": None,
        "spooled-semantic": "semantic-hit", "spooled-old": None, "fallback-bypass": "bypass",
    }  # fmt: skip
    assert sorted(found["hits"]) == ["batch-hit", "spooled-semantic"]
    assert found["none"] == {"before-1", "before-2", "batch-none", "spooled-old"}
    assert found["misses"] == ["batch-miss"]
    assert found["totals"] == {None: 4, "hit": 1, "miss": 1, "semantic-hit": 1, "bypass": 1}
    assert found["window"] == [("m1", "bypass", 1), ("m1", "hit", 1), ("m1", "miss", 1), ("m2", "semantic-hit", 1)]
    assert found["later"] == []
    assert found["detail"] == "semantic-hit"


# ---- through HTTP ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cached_gateway(fake_openai: FakeOpenAI) -> Iterator[GatewayServer]:
    config = cached_config(fake_openai)
    config["models"].append(
        {"name": "not-cached", "deployments": [{"provider": "fake", "model": "gpt-echo"}], "cache": {"enabled": False}}
    )
    with GatewayServer(config) as gateway:
        yield gateway


def test_a_request_is_logged_as_a_miss_then_as_a_hit(
    cached_gateway: GatewayServer, operator: Operator, fake_openai: FakeOpenAI
) -> None:
    text = prompt("usage")
    first_answer, first = ask(cached_gateway, text)
    again_answer, again = ask(cached_gateway, text)
    assert again_answer == first_answer == f"echo: {text}"
    assert upstream_calls(fake_openai, text) == 1
    assert (first["x-inferplex-cache"], again["x-inferplex-cache"]) == ("miss", "hit")
    first_row = operator.request_row(first["x-inferplex-request-id"])
    again_row = operator.request_row(again["x-inferplex-request-id"])
    assert (first_row["cache"], again_row["cache"]) == ("miss", "hit")
    assert again_row["attempts"] == [] and again_row["deployment"] is None  # no upstream served it

    _, bypassed = ask(cached_gateway, text, extra_headers={"Cache-Control": "no-cache"})
    assert operator.request_row(bypassed["x-inferplex-request-id"])["cache"] == "bypass"
    _, plain = ask(cached_gateway, text, model="not-cached")
    assert "x-inferplex-cache" not in plain
    assert operator.request_row(plain["x-inferplex-request-id"])["cache"] is None


def test_the_admin_listings_show_and_filter_by_the_outcome(cached_gateway: GatewayServer, operator: Operator) -> None:
    since = time.time() - 1
    text = prompt("listing")
    ids = [ask(cached_gateway, text)[1]["x-inferplex-request-id"] for _ in range(3)]
    operator.request_row(ids[-1])
    hits = operator.requests(cache="hit", since=since)
    assert {r["request_id"] for r in hits} >= set(ids[1:]) and ids[0] not in {r["request_id"] for r in hits}
    assert all(r["cache"] == "hit" for r in hits)
    assert {r["request_id"] for r in operator.requests(cache="hits", since=since)} >= set(ids[1:])
    misses = operator.http.get("/admin/usage", params={"cache": "miss", "since": since}).json()["data"]
    assert ids[0] in {r["request_id"] for r in misses} and all(r["cache"] == "miss" for r in misses)
    totals = operator.http.get("/admin/usage/totals", params={"by": "cache", "since": since}).json()
    by = {t["group"]: t["requests"] for t in totals["data"]}
    assert by.get("hit", 0) >= 2 and by.get("miss", 0) >= 1


@pytest.mark.parametrize("path", ["/admin/requests", "/admin/usage", "/admin/usage/totals"])
def test_an_unknown_outcome_is_refused_naming_it(operator: Operator, path: str) -> None:
    r = operator.http.get(path, params={"cache": "sometimes"})
    assert r.status_code == 400
    assert (
        r.json()["error"]["param"] == "cache"
        and "hit, semantic-hit, miss, bypass, none" in r.json()["error"]["message"]
    )


def test_rows_of_a_gateway_without_the_cache_have_none(fake_openai: FakeOpenAI) -> None:
    from tests.conftest import openai_config

    with GatewayServer(openai_config(fake_openai)) as gateway:
        _, headers = ask(gateway, prompt("off"))
        assert "x-inferplex-cache" not in headers
        with httpx.Client(base_url=gateway.url, headers=gateway.auth) as http:
            op = Operator(gateway)
            try:
                assert op.request_row(headers["x-inferplex-request-id"])["cache"] is None
            finally:
                op.close()
            assert http.get("/admin/requests", params={"cache": "hits"}).json()["data"] == []
