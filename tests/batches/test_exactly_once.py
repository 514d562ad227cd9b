"""Each line ends once and is charged once, at every point a worker can stop: after writing a line's result but
before settling it, after settling but before marking it settled, while it stalls past its lease (another
worker runs the line again, and the stalled one's result is fenced out and its reservation released), and
with two workers sharing one batch (on SQLite and on PostgreSQL, where claims skip locked rows)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from inferplex.batches.worker import BatchWorker, Settling
from tests.accounts.conftest import own_database
from tests.batches.worker_harness import MASTER, Running, batch_config, chat_line, running
from tests.fakes.openai_upstream import FakeOpenAI


@pytest.fixture(autouse=True)
def _master(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATCHES_TEST_MASTER", MASTER)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str | None]:
    if request.param == "sqlite":
        yield None
        return
    with own_database("inferplex_batches_") as url:
        yield url


async def books(gw: Running, account: str) -> tuple[Counter[str], int]:
    """(settlements per request id, balance): a settlement (or release) is one `settle` row."""
    await asyncio.sleep(0.05)  # the usage rows and ledger moves queued by the last settlement
    ledger = await gw.ledger(account)
    settled = Counter(row["request_id"] for row in ledger if row["kind"] == "settle")
    return settled, int((await gw.account(account))["balance_micros"])


async def costs(gw: Running, file_id: str | None) -> dict[str, int]:
    return {x["response"]["request_id"]: x["response"]["body"]["cost"]["micros"] for x in await gw.file(file_id)}


async def test_a_result_written_but_not_settled_is_settled_once(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    async with running(batch_config(fake_openai, tmp_path, worker=False, lease_s=0.5)) as gw:
        ctx, account = await gw.key()
        worker = gw.worker()

        async def dies(items: list[Settling]) -> list[None]:  # the worker stops right after writing results
            raise RuntimeError("killed")

        worker._settles._run = dies
        gw.batches.wake = worker.wake
        worker.start()
        try:
            lines = [chat_line(f"l{i}", text="a b " * (i % 3)) for i in range(12)]
            batch = await gw.batches.create(ctx, "openai", "/v1/chat/completions", await gw.upload(ctx, lines))
            done = await gw.wait(ctx, batch.id)
            paid = await costs(gw, done.output_file_id)
            assert len(paid) == 12
            settled, balance = await books(gw, account)
            assert not set(paid) & set(settled)  # results written, nothing settled: the reservations held
            assert balance < 10_000_000 - sum(paid.values())
        finally:
            await worker.aclose()
        again = gw.worker()  # a new worker's chores settle them, once their lease has lapsed
        await asyncio.sleep(0.6)
        for _ in range(3):
            await again.tick()
        settled, balance = await books(gw, account)
        assert {r: settled[r] for r in paid} == dict.fromkeys(paid, 1)
        assert balance == 10_000_000 - sum(paid.values())
        unsettled = await gw.batches.rows.unsettled(1e12, 100)
        assert unsettled == []


async def test_settled_but_not_marked_is_not_charged_twice(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    async with running(batch_config(fake_openai, tmp_path, worker=False, lease_s=0.5)) as gw:
        ctx, account = await gw.key()
        worker = gw.worker()
        rows = worker.rows

        async def dies(keys: Any) -> list[None]:  # the worker stops right after settling
            raise RuntimeError("killed")

        rows.mark_settled = dies  # type: ignore[method-assign]
        gw.batches.wake = worker.wake
        worker.start()
        try:
            lines = [chat_line(f"l{i}") for i in range(8)]
            batch = await gw.batches.create(ctx, "openai", "/v1/chat/completions", await gw.upload(ctx, lines))
            done = await gw.wait(ctx, batch.id)
            paid = await costs(gw, done.output_file_id)
            settled, balance = await books(gw, account)
            assert {r: settled[r] for r in paid} == dict.fromkeys(paid, 1)
            assert balance == 10_000_000 - sum(paid.values())
        finally:
            await worker.aclose()
        assert len(await gw.batches.rows.unsettled(1e12, 100)) == 8
        again = gw.worker()
        await asyncio.sleep(0.6)
        for _ in range(3):
            await again.tick()  # settles them again: the ledger skips each, already settled
        settled, balance = await books(gw, account)
        assert {r: settled[r] for r in paid} == dict.fromkeys(paid, 1)
        assert balance == 10_000_000 - sum(paid.values())
        assert await gw.batches.rows.unsettled(1e12, 100) == []


async def test_a_worker_stalled_past_its_lease_is_fenced_out(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    """Worker one's call takes 1.5 s and it never renews its 0.5 s lease; worker two claims the line again.
    Both calls reach the upstream; only one result is kept, and one charge."""
    async with running(batch_config(fake_openai, tmp_path, worker=False, lease_s=0.5)) as gw:
        ctx, account = await gw.key()
        one, two = gw.worker(), gw.worker()
        batch = await gw.batches.create(
            ctx, "openai", "/v1/chat/completions", await gw.upload(ctx, [chat_line("only", model="slow")])
        )
        assert await one.tick() == 1
        await asyncio.sleep(0.6)
        assert await two.tick() == 1  # the lease lapsed: claimed again, as a new attempt
        await asyncio.gather(*one.running, *two.running)
        for _ in range(2):
            await two.tick()
        done = await gw.wait(ctx, batch.id)
        assert done.counts.completed == 1 and done.counts.total == 1
        output = await gw.file(done.output_file_id)
        assert len(output) == 1
        kept = output[0]["response"]["request_id"]
        settled, balance = await books(gw, account)
        assert settled[kept] == 1 and len(settled) == 2  # the other attempt's reservation was released
        assert balance == 10_000_000 - output[0]["response"]["body"]["cost"]["micros"]
        await one.aclose()
        await two.aclose()


async def test_two_workers_share_a_batch_each_line_once(
    fake_openai: FakeOpenAI, tmp_path: Path, database_url: str | None
) -> None:
    config = batch_config(fake_openai, tmp_path, database_url, worker=False, concurrency=4)
    async with running(config) as gw:
        ctx, account = await gw.key()
        workers: list[BatchWorker] = [gw.worker(), gw.worker()]
        for w in workers:
            w.start()

        def wake() -> None:
            for w in workers:
                w.wake()

        gw.batches.wake = wake
        run = f"two-workers-{tmp_path.name}"
        try:
            lines = [chat_line(f"l{i}", model="paced", text=f"{run} {i}") for i in range(120)]
            batch = await gw.batches.create(ctx, "openai", "/v1/chat/completions", await gw.upload(ctx, lines))
            done = await gw.wait(ctx, batch.id, 60)
        finally:
            for w in workers:
                await w.aclose()
        assert done.counts.completed == 120
        paid = await costs(gw, done.output_file_id)
        calls = Counter(
            r.body["messages"][-1]["content"]
            for r in list(fake_openai.state.requests)
            if str(r.body.get("messages", [{}])[-1].get("content", "")).startswith(run + " ")
        )
        assert len(calls) == 120 and set(calls.values()) == {1}  # no line ran twice
        settled, balance = await books(gw, account)
        assert {r: settled[r] for r in paid} == dict.fromkeys(paid, 1)
        assert balance == 10_000_000 - sum(paid.values())


async def test_a_stopping_worker_gives_its_lines_back_at_once(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    async with running(batch_config(fake_openai, tmp_path, worker=False, lease_s=60)) as gw:
        ctx, account = await gw.key()
        one, two = gw.worker(), gw.worker()
        lines = [chat_line("a", model="slow"), chat_line("b", model="slow")]
        batch = await gw.batches.create(ctx, "openai", "/v1/chat/completions", await gw.upload(ctx, lines))
        assert await one.tick() == 2
        await asyncio.sleep(0.2)  # both calls at the upstream
        await one.aclose()
        assert await two.tick() == 2  # at once, not after the 60 s lease
        await asyncio.gather(*two.running)
        await two.tick()
        done = await gw.wait(ctx, batch.id)
        assert done.counts.completed == 2
        paid = await costs(gw, done.output_file_id)
        settled, balance = await books(gw, account)
        assert {r: settled[r] for r in paid} == dict.fromkeys(paid, 1)
        assert balance == 10_000_000 - sum(paid.values())  # the cancelled calls released their reservations
        await two.aclose()


async def test_a_line_cut_max_attempts_times_ends_errored(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    """A line whose worker dies on it each time (here: stalls past its lease) is not run forever."""
    async with running(batch_config(fake_openai, tmp_path, worker=False, lease_s=0.5, max_attempts=1)) as gw:
        ctx, account = await gw.key()
        one, two = gw.worker(), gw.worker()
        batch = await gw.batches.create(
            ctx, "openai", "/v1/chat/completions", await gw.upload(ctx, [chat_line("poison", model="slow")])
        )
        assert await one.tick() == 1
        await asyncio.sleep(0.6)
        assert await two.tick() == 0  # not claimed again: ended
        await asyncio.gather(*one.running)  # its end is fenced out, its reservation released
        await two.tick()
        done = await gw.wait(ctx, batch.id)
        assert (done.counts.completed, done.counts.failed) == (0, 1)
        (error,) = await gw.file(done.error_file_id)
        assert error["response"]["status_code"] == 500
        assert error["response"]["body"]["error"]["code"] == "batch_line_interrupted"
        settled, balance = await books(gw, account)
        assert balance == 10_000_000 and set(settled.values()) == {1}
        await one.aclose()
        await two.aclose()
