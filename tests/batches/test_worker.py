"""The batch worker in the gateway's own lifespan (tests/batches/worker_harness.py), on a fake OpenAI upstream:
lines run as their owner through the pipeline, results in OpenAI's line format in the output and error files,
counts, cost and ledger in agreement; validation at create; cancel; expiry; the concurrency bound;
embeddings; lines handed over directly (Anthropic's) and their results in order."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from inferplex.batches.service import LineInput
from inferplex.errors import InvalidRequest, NotFound
from tests.batches.worker_harness import MASTER, batch_config, chat_line, running
from tests.fakes.openai_upstream import FakeOpenAI


@pytest.fixture(autouse=True)
def _master(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATCHES_TEST_MASTER", MASTER)


def spend(ledger: list[dict[str, Any]]) -> int:
    """What the account was charged: the settlements' spend (a settle's amount is reserved - cost)."""
    return -sum(int(row["amount_micros"]) for row in ledger if row["kind"] in ("reserve", "settle"))


async def test_a_mixed_batch_completes_with_both_files_and_exact_charges(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    async with running(batch_config(fake_openai, tmp_path)) as gw:
        ctx, account = await gw.key()
        lines = [chat_line(f"ok-{i}", text=" ".join(["w"] * (i % 5 + 1))) for i in range(20)]
        lines += [chat_line("bad-0", model="broken"), chat_line("down-0", model="down")]
        created = await gw.batches.create(ctx, "openai", "/v1/chat/completions", await gw.upload(ctx, lines))
        assert created.status == "in_progress" and created.counts.total == 22
        done = await gw.wait(ctx, created.id)
        assert done.status == "completed", done
        assert (done.counts.completed, done.counts.failed, done.counts.processing) == (20, 2, 0)
        assert done.completed_at and done.finalizing_at and done.in_progress_at
        output, errors = await gw.file(done.output_file_id), await gw.file(done.error_file_id)
        assert sorted(o["custom_id"] for o in output) == sorted(f"ok-{i}" for i in range(20))
        for line in output:
            assert line["id"].startswith("batch_req_") and line["error"] is None
            response = line["response"]
            assert response["status_code"] == 200 and response["request_id"].startswith("breq_")
            assert response["body"]["object"] == "chat.completion"
            # `priced`: 3 micro-USD per output token; the fake echoes "echo:" plus the words
            assert response["body"]["cost"]["micros"] == 3 * response["body"]["usage"]["completion_tokens"]
        by_id = {e["custom_id"]: e for e in errors}
        assert set(by_id) == {"bad-0", "down-0"}
        assert by_id["bad-0"]["response"]["status_code"] == 400
        assert by_id["bad-0"]["response"]["body"]["error"]["message"]
        assert by_id["down-0"]["response"]["status_code"] >= 500
        costs = sum(o["response"]["body"]["cost"]["micros"] for o in output)
        assert done.cost_micros == costs
        await asyncio.sleep(0.1)  # the last settlement's usage row and ledger move are queued
        ledger = await gw.ledger(account)
        settles = [row["request_id"] for row in ledger if row["kind"] == "settle"]
        assert len(settles) == len(set(settles)) == 22  # each line's reservation settled (or released) once
        ran = {o["response"]["request_id"] for o in output} | {e["response"]["request_id"] for e in errors}
        assert set(settles) == ran
        assert spend(ledger) == costs
        assert (await gw.account(account))["balance_micros"] == 10_000_000 - costs


@pytest.mark.parametrize(
    ("content", "code", "line"),
    [
        (b'{"custom_id": "a"\n', "invalid_json_line", 1),
        (b'{"custom_id": "a", "method": "POST", "url": "/v1/embeddings", "body": {}}\n', "invalid_url", 1),
        (b'{"custom_id": "a", "method": "GET", "url": "/v1/chat/completions", "body": {}}\n', "invalid_method", 1),
        (b"\n\n", "empty_file", None),
    ],
)
async def test_an_input_file_that_does_not_hold_fails_the_batch_at_once(
    fake_openai: FakeOpenAI, tmp_path: Path, content: bytes, code: str, line: int | None
) -> None:
    async with running(batch_config(fake_openai, tmp_path)) as gw:
        ctx, _ = await gw.key()
        batch = await gw.batches.create(ctx, "openai", "/v1/chat/completions", await gw.upload(ctx, content))
        assert batch.status == "failed" and batch.failed_at and batch.errors
        assert (batch.errors[0]["code"], batch.errors[0]["line"]) == (code, line)


async def test_every_bad_line_is_named_with_its_number(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    async with running(batch_config(fake_openai, tmp_path)) as gw:
        ctx, _ = await gw.key()
        lines = [chat_line("a"), chat_line("a"), chat_line("b", stream=True), chat_line("c", model=7)]  # type: ignore[arg-type]
        batch = await gw.batches.create(ctx, "openai", "/v1/chat/completions", await gw.upload(ctx, lines))
        assert batch.status == "failed" and batch.errors is not None
        assert [(e["code"], e["line"]) for e in batch.errors] == [
            ("duplicate_custom_id", 2), ("invalid_body", 3), ("invalid_body", 4)
        ]  # fmt: skip
        assert "Streaming" in batch.errors[1]["message"]


async def test_unknown_endpoint_window_and_file_are_refused(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    async with running(batch_config(fake_openai, tmp_path)) as gw:
        ctx, _ = await gw.key()
        other, _ = await gw.key()
        file_id = await gw.upload(ctx, [chat_line("a")])
        with pytest.raises(InvalidRequest, match="endpoint"):
            await gw.batches.create(ctx, "openai", "/v1/completions", file_id)
        with pytest.raises(InvalidRequest, match="24h"):
            await gw.batches.create(ctx, "openai", "/v1/chat/completions", file_id, completion_window="1h")
        with pytest.raises(NotFound):  # another owner's file
            await gw.batches.create(other, "openai", "/v1/chat/completions", file_id)
        batch = await gw.batches.create(ctx, "openai", "/v1/chat/completions", file_id, metadata={"k": "v"})
        assert batch.metadata == {"k": "v"}
        with pytest.raises(NotFound):  # another owner's batch
            await gw.batches.get(other, batch.id)
        assert (await gw.batches.page(other, "openai"))[0] == []
        await gw.wait(ctx, batch.id)


async def test_cancel_finishes_what_runs_and_cancels_the_rest(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    async with running(batch_config(fake_openai, tmp_path, concurrency=2)) as gw:
        ctx, _ = await gw.key()
        lines = [chat_line(f"l{i}", model="paced") for i in range(200)]
        batch = await gw.batches.create(ctx, "openai", "/v1/chat/completions", await gw.upload(ctx, lines))
        await asyncio.sleep(0.2)
        cancelling = await gw.batches.cancel(ctx, batch.id)
        assert cancelling.status == "cancelling" and cancelling.cancelling_at
        done = await gw.wait(ctx, batch.id)
        assert done.status == "cancelled" and done.cancelled_at
        c = done.counts
        assert c.completed > 0 and c.cancelled > 0 and c.completed + c.cancelled == 200 and c.failed == 0
        output, errors = await gw.file(done.output_file_id), await gw.file(done.error_file_id)
        assert len(output) == c.completed and len(errors) == c.cancelled
        assert {e["error"]["code"] for e in errors} == {"batch_cancelled"}
        assert all(e["response"] is None for e in errors)
        assert (await gw.batches.cancel(ctx, batch.id)).status == "cancelled"  # ended: as it is


async def test_a_batch_past_its_window_expires(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    async with running(batch_config(fake_openai, tmp_path, concurrency=1, window_s=0.5)) as gw:
        ctx, _ = await gw.key()
        lines = [chat_line(f"l{i}", model="paced") for i in range(300)]
        batch = await gw.batches.create(ctx, "openai", "/v1/chat/completions", await gw.upload(ctx, lines))
        done = await gw.wait(ctx, batch.id)
        assert done.status == "expired" and done.expired_at
        assert 0 < done.counts.completed < 300 and done.counts.completed + done.counts.expired == 300
        errors = await gw.file(done.error_file_id)
        assert {e["error"]["code"] for e in errors} == {"batch_expired"}


async def test_the_worker_runs_at_most_its_concurrency(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    async with running(batch_config(fake_openai, tmp_path, concurrency=3)) as gw:
        ctx, _ = await gw.key()
        fake_openai.state.max_in_flight = 0
        lines = [chat_line(f"l{i}", model="paced") for i in range(30)]
        batch = await gw.batches.create(ctx, "openai", "/v1/chat/completions", await gw.upload(ctx, lines))
        assert (await gw.wait(ctx, batch.id)).counts.completed == 30
        assert fake_openai.state.max_in_flight == 3


async def test_an_embeddings_batch(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    async with running(batch_config(fake_openai, tmp_path)) as gw:
        ctx, _ = await gw.key()
        lines = [{"custom_id": f"e{i}", "method": "POST", "url": "/v1/embeddings",
                  "body": {"model": "embed-model", "input": f"text number {i}"}} for i in range(5)]  # fmt: skip
        batch = await gw.batches.create(ctx, "openai", "/v1/embeddings", await gw.upload(ctx, lines))
        done = await gw.wait(ctx, batch.id)
        output = await gw.file(done.output_file_id)
        assert done.counts.completed == 5 and len(output) == 5
        assert all(o["response"]["body"]["object"] == "list" for o in output)


async def test_lines_handed_over_and_their_results_in_order(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    async with running(batch_config(fake_openai, tmp_path)) as gw:
        ctx, _ = await gw.key()
        bodies = [chat_line(f"r{i}", model="broken" if i == 3 else "priced")["body"] for i in range(6)]
        lines = [LineInput(f"r{i}", body) for i, body in enumerate(bodies)]
        with pytest.raises(InvalidRequest, match=r"requests\[1\]"):
            await gw.batches.create(ctx, "anthropic", "/v1/chat/completions", [lines[0], lines[0]])
        batch = await gw.batches.create(ctx, "anthropic", "/v1/chat/completions", lines)
        assert batch.id.startswith("msgbatch_")
        with pytest.raises(InvalidRequest):
            [r async for r in gw.batches.results(ctx, batch.id)]
        done = await gw.wait(ctx, batch.id)
        assert done.output_file_id is None  # Anthropic's results are read from the rows
        results = [r async for r in gw.batches.results(ctx, batch.id)]
        assert [r.custom_id for r in results] == [f"r{i}" for i in range(6)]
        assert [r.outcome for r in results] == ["succeeded"] * 3 + ["errored"] + ["succeeded"] * 2
        assert results[3].status_code == 400 and results[3].body and "error" in results[3].body
        assert results[0].body and results[0].body["object"] == "chat.completion"
        listed, more = await gw.batches.page(ctx, "anthropic")
        assert [b.id for b in listed] == [batch.id] and not more
        assert (await gw.batches.page(ctx, "openai"))[0] == []
        await gw.batches.delete(ctx, batch.id)
        with pytest.raises(NotFound):
            await gw.batches.get(ctx, batch.id)


async def test_pages_newest_first_with_cursors(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    async with running(batch_config(fake_openai, tmp_path, worker=False)) as gw:
        ctx, _ = await gw.key()
        file_id = await gw.upload(ctx, [chat_line("a")])
        made = [(await gw.batches.create(ctx, "openai", "/v1/chat/completions", file_id)).id for _ in range(5)]
        newest = made[::-1]
        first, more = await gw.batches.page(ctx, "openai", limit=2)
        assert [b.id for b in first] == newest[:2] and more
        second, more = await gw.batches.page(ctx, "openai", after=first[-1].id, limit=2)
        assert [b.id for b in second] == newest[2:4] and more
        back, more = await gw.batches.page(ctx, "openai", before=second[0].id, limit=10)
        assert [b.id for b in back] == newest[:2] and not more
        with pytest.raises(InvalidRequest):
            await gw.batches.page(ctx, "openai", after="batch_" + "0" * 32)


async def test_a_responses_batch(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    async with running(batch_config(fake_openai, tmp_path)) as gw:
        ctx, _ = await gw.key()
        lines = [{"custom_id": f"r{i}", "method": "POST", "url": "/v1/responses",
                  "body": {"model": "priced", "input": f"say {i}", "store": False}} for i in range(3)]  # fmt: skip
        batch = await gw.batches.create(ctx, "openai", "/v1/responses", await gw.upload(ctx, lines))
        done = await gw.wait(ctx, batch.id)
        output = await gw.file(done.output_file_id)
        assert done.counts.completed == 3, await gw.file(done.error_file_id)
        for line in output:
            body = line["response"]["body"]
            assert body["object"] == "response" and body["status"] == "completed"
            assert body["output"][0]["content"][0]["text"].startswith("echo: say")


async def test_lines_a_limit_refuses_wait_and_run_later(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    """The key may run one request at a time and nothing queues (max_queue_wait_s 0): the worker's other lines
    are refused with a 429 and go back to pending until its retry-after, then run; none fails."""
    config = batch_config(fake_openai, tmp_path, concurrency=4, max_attempts=50)
    config["accounts"] = {"max_queue_wait_s": 0}
    async with running(config) as gw:
        ctx, _ = await gw.key(max_concurrent=1)
        lines = [chat_line(f"l{i}", model="paced") for i in range(6)]
        batch = await gw.batches.create(ctx, "openai", "/v1/chat/completions", await gw.upload(ctx, lines))
        done = await gw.wait(ctx, batch.id)
        assert (done.counts.completed, done.counts.failed) == (6, 0)


async def test_the_worker_starts_at_most_rate_per_s_lines(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    async with running(batch_config(fake_openai, tmp_path, rate_per_s=20)) as gw:
        ctx, _ = await gw.key()
        lines = [chat_line(f"l{i}") for i in range(21)]
        batch = await gw.batches.create(ctx, "openai", "/v1/chat/completions", await gw.upload(ctx, lines))
        began = asyncio.get_running_loop().time()
        done = await gw.wait(ctx, batch.id)
        assert done.counts.completed == 21
        assert asyncio.get_running_loop().time() - began >= 0.95  # 21 starts, 50 ms apart


async def test_a_key_revoked_since_fails_its_lines_and_pays_nothing(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    async with running(batch_config(fake_openai, tmp_path, worker=False)) as gw:
        ctx, account = await gw.key()
        batch = await gw.batches.create(
            ctx, "openai", "/v1/chat/completions", await gw.upload(ctx, [chat_line("a"), chat_line("b")])
        )
        r = await gw.admin.post(f"/admin/keys/{ctx.principal.key_id}/revoke")
        assert r.status_code == 200, r.text
        worker = gw.worker()
        for _ in range(3):
            await worker.tick()
            await asyncio.gather(*worker.running)
        done = await gw.wait(ctx, batch.id)
        assert (done.counts.completed, done.counts.failed) == (0, 2)
        errors = await gw.file(done.error_file_id)
        assert {e["response"]["status_code"] for e in errors} == {401}
        assert (await gw.account(account))["balance_micros"] == 10_000_000
        await worker.aclose()
