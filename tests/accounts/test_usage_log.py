"""The usage log is written off the request path, and a graceful shutdown loses no rows."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx

from inferplex.store.engine import Database
from inferplex.store.usage import UsageFilter, UsageStore
from inferplex.usage_log import UsageLog
from tests.accounts.conftest import billing_config, sqlite_url
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
        db = Database(sqlite_url(tmp_path))
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
