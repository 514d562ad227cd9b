"""The console's usage data: the hourly and daily rollups answer exactly what a plain aggregation over the
usage table answers, whoever wrote the rows (the usage log after real requests through HTTP, its COPY or
executemany in bulk, the spool's row-by-row replay, SQL by hand), on SQLite and on PostgreSQL; and the request
log's pages, filters and detail, through the admin API."""

from __future__ import annotations

import asyncio
import csv
import io
import math
import random
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import openai
import orjson
import pytest
from pydantic import TypeAdapter
from sqlalchemy import insert

from inferplex.admin import responses as r
from inferplex.store import tables as t
from inferplex.store.backend import Database
from inferplex.store.engine import open_database
from inferplex.store.request_log import RequestFilter, RequestLog
from inferplex.store.rollups import GROUPS, RollupFilter, Rollups, ceil_to, floor_to
from inferplex.store.usage import COLUMNS, UsageStore
from tests.accounts.conftest import billing_config, own_database, sqlite_url
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer
from tests.observe.usage_reference import aggregate, random_rows, same, usage_rows

HI = [{"role": "user", "content": "hi"}]
DAY = 86400


# ---- after real requests through HTTP ---------------------------------------------------------------------


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "sqlite":
        yield sqlite_url(tmp_path_factory.mktemp("rollups"))
        return
    with own_database("inferplex_rollups_") as url:
        yield url


@pytest.fixture(scope="module")
def server(fake_openai: FakeOpenAI, database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    config = billing_config(fake_openai, tmp_path_factory.mktemp("gw"), database_url)
    config["models"].append(
        {  # the first deployment fails, the router fails over to the second: one failed attempt, a 200
            "name": "flaky",
            "deployments": [
                {"provider": "fake", "model": "error-500", "id": "bad", "priority": 0},
                {"provider": "fake", "model": "gpt-echo", "id": "good", "priority": 1},
            ],
            "routing": {"strategy": "priority"},
            "pricing": {"input": "0", "output": "3"},
        }
    )
    with GatewayServer(config) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def admin(server: GatewayServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, headers=server.auth, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def traffic(server: GatewayServer, admin: httpx.Client) -> dict[str, Any]:
    """Known requests by two funded keys and one without credit: buffered and streamed chats, an embedding,
    an upstream failure, an upstream timeout, a failover, a refusal for credit. Returns the keys and the
    failover's request id."""
    keys = []
    for name, credits in (("alpha", 10_000_000), ("beta", 10_000_000), ("broke", 1)):
        made = admin.post("/admin/keys", json={"name": name, "credits_micros": credits, "tags": [f"team-{name}"]})
        assert made.status_code == 201, made.text
        keys.append(made.json())
    alpha, beta, broke = (openai.OpenAI(base_url=server.base_url, api_key=k["key"], max_retries=0) for k in keys)
    for _ in range(3):
        alpha.chat.completions.create(model="priced", messages=HI, max_tokens=5)  # type: ignore[arg-type]
    for _ in alpha.chat.completions.create(model="echo-model", messages=HI, stream=True):  # type: ignore[arg-type]
        pass
    alpha.embeddings.create(model="embed-model", input="hello")
    with pytest.raises(openai.InternalServerError):
        alpha.chat.completions.create(model="error-500", messages=HI)  # type: ignore[arg-type]
    with pytest.raises(openai.InternalServerError):  # the upstream never answers: 504 after its read timeout
        alpha.chat.completions.create(model="hang", messages=HI)  # type: ignore[arg-type]
    failover = alpha.chat.completions.with_raw_response.create(model="flaky", messages=HI)  # type: ignore[arg-type]
    for _ in range(2):
        beta.chat.completions.create(model="echo-model", messages=HI, extra_body={"tags": ["night"]})  # type: ignore[arg-type]
    with pytest.raises(openai.PermissionDeniedError):
        broke.chat.completions.create(model="priced", messages=HI)  # type: ignore[arg-type]
    return {"keys": keys, "failover": failover.headers["x-inferplex-request-id"]}


def _series(admin: httpx.Client, **params: Any) -> dict[str, Any]:
    answer = admin.get("/admin/usage/series", params=params)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = TypeAdapter(r.UsageSeries).validate_python(answer.json())
    return body


def test_rollups_equal_a_plain_aggregation_after_real_requests(
    traffic: dict[str, Any], admin: httpx.Client, database_url: str
) -> None:
    window = {"since": time.time() - DAY, "until": time.time() + 3600}  # every row, however the hours fall
    _series(admin, grain="day", **window)  # the gateway flushes its usage log first
    rows = usage_rows(database_url)
    assert len(rows) == 11  # 10 answered requests and the credit refusal
    assert sum(row["status"] >= 400 for row in rows) == 3
    for grain, seconds in (("hour", 3600), ("day", DAY)):
        for group_by in (None, *GROUPS):
            params = {"grain": grain, **window, **({"group_by": group_by} if group_by else {})}
            answer = _series(admin, **params)
            same(answer["data"], aggregate(rows, seconds, group_by))
            expected_totals = aggregate(rows, None, group_by)
            same(sorted(answer["totals"], key=lambda x: x["group"] or ""), expected_totals)
    by_key = {row["group"]: row for row in _series(admin, grain="day", group_by="key", **window)["totals"]}
    alpha, beta, broke = (k["id"] for k in traffic["keys"])
    assert (by_key[alpha]["requests"], by_key[beta]["requests"], by_key[broke]["requests"]) == (8, 2, 1)
    assert (by_key[alpha]["errors"], by_key[broke]["errors"]) == (2, 1)
    one_key = _series(admin, grain="hour", key_id=beta, **window)["totals"]
    assert [(x["group"], x["requests"]) for x in one_key] == [(None, 2)]


def test_the_csv_export_is_the_series(traffic: dict[str, Any], admin: httpx.Client) -> None:
    params = {"grain": "hour", "group_by": "model", "since": time.time() - DAY, "until": time.time() + 3600}
    answer = admin.get("/admin/usage/export", params=params)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/csv")
    assert answer.headers["content-disposition"].startswith("attachment;")
    table = list(csv.DictReader(io.StringIO(answer.text)))
    series = _series(admin, **params)["data"]
    assert [(int(x["bucket"]), x["group"], int(x["requests"]), int(x["cost_micros"])) for x in table] == [
        (x["bucket"], x["group"] or "", x["requests"], x["cost_micros"]) for x in series
    ]
    assert all(x["time"].endswith("Z") for x in table)


def _all_pages(admin: httpx.Client, **params: Any) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    before = None
    while True:
        answer = admin.get("/admin/requests", params={**params, "limit": 3, **({"before": before} if before else {})})
        assert answer.status_code == 200, answer.text
        page = TypeAdapter(r.RequestList).validate_python(answer.json())
        seen += page["data"]
        assert page["has_more"] == (page["before"] is not None)
        if not page["has_more"]:
            return seen
        before = page["before"]


def test_the_request_log_pages_through_every_request_newest_first_and_filters(
    traffic: dict[str, Any], admin: httpx.Client, database_url: str
) -> None:
    _series(admin, grain="hour")  # flushed
    rows = sorted(usage_rows(database_url), key=lambda x: (x["created_at"], x["id"]), reverse=True)
    assert [x["request_id"] for x in _all_pages(admin)] == [x["request_id"] for x in rows]
    alpha, beta, broke = (k["id"] for k in traffic["keys"])
    cases: list[tuple[dict[str, Any], Any]] = [
        ({"status": "5xx"}, lambda x: x["status"] >= 500),
        ({"status": "403"}, lambda x: x["status"] == 403),
        ({"status": "error"}, lambda x: x["status"] >= 400),
        ({"error_type": "provider"}, lambda x: x["model"] in ("error-500", "hang")),
        ({"error_type": "provider.timeout"}, lambda x: x["model"] == "hang"),
        ({"error_type": "provider.upstream_error"}, lambda x: x["model"] == "error-500"),
        ({"error_type": "policy.insufficient_credits"}, lambda x: x["key_id"] == broke),
        ({"model": "priced"}, lambda x: x["model"] == "priced"),
        ({"key_id": beta}, lambda x: x["key_id"] == beta),
        ({"tag": "night"}, lambda x: x["key_id"] == beta),
        ({"tag": "team-alpha"}, lambda x: x["key_id"] == alpha),
        ({"min_cost_micros": 1}, lambda x: x["cost_micros"] >= 1),
        ({"max_cost_micros": 0}, lambda x: x["cost_micros"] == 0),
        ({"min_latency_ms": 0, "max_latency_ms": 1e9}, lambda x: x["total_ms"] is not None),
        ({"since": rows[3]["created_at"]}, lambda x: x["created_at"] >= rows[3]["created_at"]),
    ]
    for params, wanted in cases:
        expected = [x["request_id"] for x in rows if wanted(x)]
        assert expected, params  # every filter selects some rows, and not all of them
        assert len(expected) < len(rows) or "since" in params or "min_latency_ms" in params, params
        assert [x["request_id"] for x in _all_pages(admin, **params)] == expected, params
    assert {x["operation"] for x in rows} >= {"chat", "embedding"}
    assert {x["route"] for x in rows} >= {"/v1/chat/completions", "/v1/embeddings"}


def test_one_request_s_detail_shows_its_attempts_and_credit_moves(
    traffic: dict[str, Any], admin: httpx.Client, server: GatewayServer, database_url: str
) -> None:
    answer = admin.get(f"/admin/requests/{traffic['failover']}")
    assert answer.status_code == 200, answer.text
    found = TypeAdapter(r.RequestDetail).validate_python(answer.json())
    assert found["status"] == 200 and found["deployment"] == "good" and found["attempt_errors"] == 1
    assert [(a["deployment"], a["outcome"], a["status"]) for a in found["attempts"]] == [
        ("bad", "error", 500),
        ("good", "ok", 200),
    ]
    assert {e["kind"] for e in found["ledger"]} >= {"reserve", "settle"}
    assert sum(e["amount_micros"] for e in found["ledger"]) == -found["cost_micros"]
    missing = admin.get("/admin/requests/req_nope")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "request_not_found"

    async def errors() -> list[dict[str, Any]]:
        db = open_database(database_url)
        try:
            return await RequestLog(db).recent_errors(deployment="bad")
        finally:
            await db.aclose()

    recent = asyncio.run(errors())
    assert traffic["failover"] in [e["request_id"] for e in recent]
    assert {(e["deployment"], e["status"]) for e in recent} == {("bad", 500)}


@pytest.mark.parametrize(
    ("path", "params", "param"),
    [
        ("/admin/usage/series", {"grain": "week"}, "grain"),
        ("/admin/usage/series", {"group_by": "colour"}, "group_by"),
        ("/admin/usage/series", {"since": 10, "until": 5}, "since"),
        ("/admin/usage/series", {"since": "soon"}, "since"),
        ("/admin/usage/series", {"since": 0, "until": 4e9}, None),  # more than MAX_BUCKETS hours
        ("/admin/usage/export", {"until": -1}, "since"),
        ("/admin/requests", {"status": "7xx"}, "status"),
        ("/admin/requests", {"error_type": "upstream"}, "error_type"),
        ("/admin/requests", {"before": "yesterday"}, "before"),
        ("/admin/requests", {"before": "1.5:99999999999999999999"}, "before"),
        ("/admin/requests", {"min_cost_micros": "-1"}, "min_cost_micros"),
        ("/admin/requests", {"min_latency_ms": "inf"}, "min_latency_ms"),
        ("/admin/requests", {"limit": 0}, "limit"),
        ("/admin/requests", {"colour": "red"}, "colour"),
    ],
)
def test_bad_parameters_are_a_400_naming_them(
    admin: httpx.Client, path: str, params: dict[str, Any], param: str | None
) -> None:
    answer = admin.get(path, params=params)
    assert answer.status_code == 400, answer.text
    if param is not None:
        assert answer.json()["error"]["param"] == param


def test_usage_data_is_for_admins_only(traffic: dict[str, Any], server: GatewayServer) -> None:
    key = traffic["keys"][0]["key"]
    for path in ("/admin/usage/series", "/admin/usage/export", "/admin/requests", "/admin/requests/x"):
        assert httpx.get(server.url + path, headers={"Authorization": f"Bearer {key}"}).status_code == 403
        assert httpx.get(server.url + path).status_code == 401


# ---- after bulk inserts, by every writer ------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Database, str]]:
    if request.param == "sqlite":
        url = sqlite_url(tmp_path)
        database = open_database(url)
        await database.migrate()
        yield database, url
        await database.aclose()
        return
    with own_database("inferplex_rollups_bulk_") as url:
        database = open_database(url)
        await database.migrate()
        yield database, url
        await database.aclose()


START = 1_764_000_000.0 - 3 * 3600 - 17.25  # not on an hour: buckets fall across the rows


async def test_rollups_stay_exact_whoever_writes_the_rows(db: tuple[Database, str]) -> None:
    database, url = db
    store = UsageStore(database)
    rows = random_rows(1, 3100, START, 6)
    for i in range(0, 3000, 500):  # the usage log's batches: COPY on PostgreSQL, executemany on SQLite
        await store.append(rows[i : i + 500])
    assert await store.append_each(rows[3000:3050] + rows[:5]) == 50  # the spool's replay (skips written rows)
    by_hand = [{k: row[k] for k in COLUMNS} for row in rows[3050:]]  # SQL by hand: a multi-row INSERT
    await database.write(lambda conn: conn.execute(insert(t.usage), by_hand))
    plain = await asyncio.to_thread(usage_rows, url)
    assert len(plain) == 3100
    if url.startswith("sqlite"):  # no trigger there (store/sqlite_rollups.py): rows by hand are not rolled up
        plain = [x for x in plain if x["request_id"] not in {r["request_id"] for r in by_hand}]
        assert len(plain) == 3050
    rollups = Rollups(database)
    for grain, seconds in (("hour", 3600), ("day", DAY)):
        for group_by in (None, *GROUPS):
            got = await rollups.series(grain, START, START + 6 * DAY + 1, group_by)
            same(got, aggregate(plain, seconds, group_by))
    rng = random.Random(7)
    for _ in range(25):  # ranges of hours to days, with and without a filter
        since = START + rng.random() * 5 * DAY
        until = since + rng.choice([600, 3 * 3600, DAY, 2.5 * DAY, 5 * DAY])
        group_by = rng.choice([None, *GROUPS])
        where = rng.choice([RollupFilter(), RollupFilter(model="m-b"), RollupFilter(key_id="key_2", provider="p-1")])
        start, end = floor_to(3600, since), ceil_to(3600, until)
        inside = [
            x
            for x in plain
            if start <= math.floor(x["created_at"] / 3600) * 3600 < end
            and all(v is None or x[k] == v for k, v in (("model", where.model), ("key_id", where.key_id),
                                                          ("provider", where.provider)))
        ]  # fmt: skip
        got = await rollups.totals(since, until, group_by, where)
        same(sorted(got, key=lambda x: x["group"] or ""), aggregate(inside, None, group_by) or _zero(group_by))


async def test_a_nul_character_is_refused_before_the_database(db: tuple[Database, str]) -> None:
    """PostgreSQL cannot hold NUL even in a comparison: each engine refuses it alike (a 400 in the routes)."""
    database, _ = db
    with pytest.raises(ValueError, match="`model` contains a NUL"):
        await Rollups(database).series("hour", START, START + DAY, None, RollupFilter(model="a\x00b"))
    with pytest.raises(ValueError, match="`tag` contains a NUL"):
        await RequestLog(database).page(RequestFilter(tag="a\x00b"))
    assert await RequestLog(database).detail("req\x00") is None


def _zero(group_by: str | None) -> list[dict[str, Any]]:
    """What totals without a group answer for a range with no usage: one row of zeros."""
    if group_by is not None:
        return []
    sums = ("requests", "errors", "prompt_tokens", "completion_tokens", "cached_tokens", "cost_micros")
    return [{"group": None, **dict.fromkeys(sums, 0), **dict.fromkeys(("avg_ms", "p50_ms", "p95_ms", "p99_ms"))}]


async def test_postgresql_rolls_up_a_copy_batch_in_one_trigger_call() -> None:
    """A batch of 500 rows by COPY (the usage log's write) runs the rollup function once, not 500 times: the
    trigger is a statement trigger over the batch's transition table."""
    with own_database("inferplex_rollups_copy_") as url:
        database = open_database(url)
        await database.migrate()
        await database.aclose()
        rows = random_rows(3, 500, START, 2)
        conn = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
        try:
            async with conn.transaction():
                await conn.execute("SET LOCAL track_functions = 'pl'")
                order = list(COLUMNS)
                records = [tuple(_text_json(k, row[k]) for k in order) for row in rows]
                await conn.copy_records_to_table("usage", records=records, columns=order)
                calls = await conn.fetchval(
                    "SELECT calls FROM pg_stat_xact_user_functions WHERE funcname = 'inferplex_usage_rollup'"
                )
            assert calls == 1
            assert await conn.fetchval("SELECT sum(requests) FROM usage_hourly") == 500
            assert await conn.fetchval("SELECT sum(requests) FROM usage_daily") == 500
        finally:
            await conn.close()


def _text_json(name: str, value: Any) -> Any:
    return orjson.dumps(value).decode() if name in ("tags", "request_body", "response_body", "attempts") else value
