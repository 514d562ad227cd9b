"""The gateway's lifespan in the test's own event loop, without an HTTP server: the batch service and its
worker exactly as `inferplex serve` starts them, the admin API through an in-process ASGI client, and helpers to
make a key with credit, upload an input file and wait for a batch. Used by the worker and exactly-once tests;
the crash test runs real `inferplex serve` processes instead."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from inferplex.accounts.wiring import AccountServices
from inferplex.app import create_app
from inferplex.batches.rows import BatchRows
from inferplex.batches.service import Batch, BatchService
from inferplex.batches.worker import BatchWorker
from inferplex.config import parse_config
from inferplex.context import Context
from inferplex.services import Services
from tests.accounts.conftest import billing_config
from tests.fakes.openai_upstream import FakeOpenAI

MASTER = "ipx-batches-test-master"


def batch_config(fake: FakeOpenAI, tmp: Path, database_url: str | None = None, **batches: Any) -> dict[str, Any]:
    """The billing test config (`priced`: 3 micro-USD per output token, nothing per input token) plus models
    that fail upstream (`broken`: a 400, `down`: a 500) and a quick worker."""
    config = billing_config(fake, tmp, database_url)
    config["models"] += [
        {"name": "broken", "deployments": [{"provider": "fake", "model": "error-400"}],
         "pricing": {"input": "0", "output": "3"}},
        {"name": "down", "deployments": [{"provider": "fake", "model": "error-500"}],
         "pricing": {"input": "0", "output": "3"}},
        {"name": "paced", "deployments": [{"provider": "fake", "model": "sleep-20"}], "max_output": 100,
         "pricing": {"input": "0", "output": "3"}},
        {"name": "slow", "deployments": [{"provider": "fake", "model": "sleep-1500"}], "max_output": 100,
         "pricing": {"input": "0", "output": "3"}},
    ]  # fmt: skip
    config["server"]["master_key"] = "env:BATCHES_TEST_MASTER"
    config["batches"] = {"tick_s": 0.05, "concurrency": 8, "lease_s": 2, **batches}
    return config


@dataclass
class Running:
    services: Services
    admin: httpx.AsyncClient
    accounts: AccountServices

    def worker(self, **config: Any) -> BatchWorker:
        """Another worker on the same database (not started: call `tick`, or `start` it)."""
        a, s = self.accounts, self.services
        settings = self.batches.config.model_copy(update=config)
        return BatchWorker(BatchRows(a.db), s.pipeline, a.guard, a.auth, s.media, settings, s.responses)

    @property
    def batches(self) -> BatchService:
        service = self.services.batches
        assert isinstance(service, BatchService)
        return service

    async def key(self, credits: int = 10_000_000, **body: Any) -> tuple[Context, str]:
        """A caller with an account holding `credits` (and the key's other fields in `body`): its context and
        its account id."""
        r = await self.admin.post("/admin/keys", json={"name": "batches", "credits_micros": credits, **body})
        assert r.status_code == 201, r.text
        made = r.json()
        principal = await self.services.auth.principal_for(made["id"])
        return Context(principal=principal), made["account_id"]

    async def upload(self, ctx: Context, lines: list[dict[str, Any]] | bytes) -> str:
        media = self.services.media
        assert media is not None
        data = lines if isinstance(lines, bytes) else "".join(json.dumps(line) + "\n" for line in lines).encode()
        owner = ctx.principal.account_id or ctx.principal.key_id
        stored = await media.save_bytes(owner, data, filename="in.jsonl", content_type="application/jsonl",
                                        purpose="batch")  # fmt: skip
        return stored.id

    async def wait(self, ctx: Context, batch_id: str, within_s: float = 30.0) -> Batch:
        deadline = time.monotonic() + within_s
        while True:
            batch = await self.batches.get(ctx, batch_id)
            if batch.ended:
                return batch
            assert time.monotonic() < deadline, f"batch {batch_id} did not end: {batch}"
            await asyncio.sleep(0.05)

    async def file(self, file_id: str | None) -> list[dict[str, Any]]:
        if file_id is None:
            return []
        media = self.services.media
        assert media is not None
        stored = await media.get(file_id)
        assert stored is not None
        data = b"".join([chunk async for chunk in media.read(stored)])
        return [json.loads(line) for line in data.splitlines()]

    async def account(self, account_id: str) -> dict[str, Any]:
        r = await self.admin.get(f"/admin/accounts/{account_id}")
        assert r.status_code == 200, r.text
        found: dict[str, Any] = r.json()
        return found

    async def ledger(self, account_id: str) -> list[dict[str, Any]]:
        r = await self.admin.get(f"/admin/accounts/{account_id}/ledger", params={"limit": 10_000})
        assert r.status_code == 200, r.text
        rows: list[dict[str, Any]] = r.json()["data"]
        return rows


@asynccontextmanager
async def running(config: dict[str, Any]) -> AsyncIterator[Running]:
    app = create_app(parse_config(config, "<test>"), MASTER)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {MASTER}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway", headers=headers) as admin:
            yield Running(app.state.services, admin, app.state.accounts)


def chat_line(custom_id: str, model: str = "priced", text: str = "one two three", **body: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": text}]
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": model, "messages": messages, **body}}  # fmt: skip
