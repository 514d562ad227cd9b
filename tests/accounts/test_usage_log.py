"""The usage log is written off the request path, and a graceful shutdown loses no rows."""

from __future__ import annotations

import asyncio
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from inferplex.store.sqlite import SQLiteDatabase
from inferplex.store.usage import UsageFilter, UsageStore
from inferplex.usage_log import UsageLog
from tests.accounts.conftest import Admin, billing_config, sqlite_url
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer


def test_rows_queued_at_shutdown_are_written(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    config = billing_config(fake_openai, tmp_path)
    with GatewayServer(config) as gw, httpx.Client(base_url=gw.base_url, headers=gw.auth) as client:
        ids = []
        for i in range(30):
            body = {"model": "priced", "messages": [{"role": "user", "content": f"n{i}"}], "max_tokens": 2}
            r = client.post("/chat/completions", json=body)
            assert r.status_code == 200
            ids.append(r.headers["x-request-id"])
    # the server is stopped: read its database directly

    async def read() -> list[dict[str, Any]]:
        db = SQLiteDatabase(sqlite_url(tmp_path))
        try:
            return await UsageStore(db).rows(UsageFilter(model="priced"), limit=1000)
        finally:
            await db.aclose()

    rows = asyncio.run(read())
    assert sorted(r["request_id"] for r in rows) == sorted(ids)
    assert all(r["key_id"] == "master" and r["cost_micros"] == 6 for r in rows)


class _Failing:
    def __init__(self) -> None:
        self.calls = 0
        self.rows: list[dict[str, Any]] = []

    async def append(self, rows: list[dict[str, Any]]) -> None:
        self.calls += 1
        if self.calls == 1:
            raise OSError("database went away for a moment")
        self.rows += rows

    async def append_each(self, rows: list[dict[str, Any]]) -> int:
        await self.append(rows)
        return len(rows)


async def test_a_failed_write_is_retried_and_batches_gather() -> None:
    sink = _Failing()
    log = UsageLog(sink, interval_s=0.01)
    log.start()
    for i in range(10):
        log.record({"request_id": str(i)})
    await log.aclose()
    assert [r["request_id"] for r in sink.rows] == [str(i) for i in range(10)]
    assert sink.calls == 2  # one batch, written on the second try


class _ListSink:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    async def append(self, rows: list[dict[str, Any]]) -> None:
        self.rows += rows

    async def append_each(self, rows: list[dict[str, Any]]) -> int:
        self.rows += rows
        return len(rows)


async def test_a_row_queued_while_a_reader_flushes_is_not_lost() -> None:
    """A reader's flush (the admin API flushes before it reads) must not strand the background writer's
    next row in the batch the flush already took."""
    sink = _ListSink()
    log = UsageLog(sink, interval_s=0.01)
    log.start()
    await asyncio.sleep(0.01)  # the writer now waits for a row
    await log.flush()  # a reader flushes: nothing queued yet
    log.record({"request_id": "r1"})
    await asyncio.sleep(0.05)  # the writer takes the row, waits its interval, writes
    await log.flush()
    await log.aclose()
    assert [r["request_id"] for r in sink.rows] == ["r1"]


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_one_row_postgresql_cannot_store_costs_no_other_row(
    engine: str, fake_openai: FakeOpenAI, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """40 concurrent requests, one whose end user, tag and logged body hold a NUL: every request gets its
    usage row on both engines. SQLite stores the NUL; PostgreSQL's text types cannot, so there the batch
    falls back to row by row and the NUL is stored as U+FFFD."""
    url = request.getfixturevalue("pg_url") if engine == "postgresql" else None
    config = billing_config(fake_openai, tmp_path, url, accounts={"log_query_body": True})
    with GatewayServer(config) as gw, httpx.Client(base_url=gw.base_url, headers=gw.auth) as client:
        admin = Admin(gw.url, gw.master_key)
        tag = "t" + secrets.token_hex(4)

        def send(i: int) -> httpx.Response:
            who = "a\u0000b" if i == 7 else f"user{i}"
            body = {"model": "priced", "messages": [{"role": "user", "content": who}], "max_tokens": 2,
                    "user": who, "tags": [tag, who]}  # fmt: skip
            return client.post("/chat/completions", json=body)

        with ThreadPoolExecutor(40) as pool:
            answers = list(pool.map(send, range(40)))
        assert [r.status_code for r in answers] == [200] * 40
        ids = sorted(r.headers["x-request-id"] for r in answers)
        bad = answers[7].headers["x-request-id"]

        def rows() -> list[dict[str, Any]]:
            return [r for r in admin.usage(limit=1000) if tag in (r["tags"] or [])]

        deadline = time.monotonic() + 10
        while len(rows()) < 40 and time.monotonic() < deadline:
            time.sleep(0.1)
        got = {r["request_id"]: r for r in rows()}
        assert sorted(got) == ids
        stored = "a\ufffdb" if engine == "postgresql" else "a\u0000b"
        assert got[bad]["end_user"] == stored
        assert got[bad]["tags"] == [tag, stored]
        assert got[bad]["request_body"]["messages"][0]["content"] == stored
        admin.close()
