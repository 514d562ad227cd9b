"""A batch line the response cache answers is logged like any request: its usage row (written when the line
is settled, batches/worker.py) records the cache outcome, `hit` for a prompt the same account asked before."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.accounts.conftest import Admin
from tests.batches.test_openai_batches import batches_config, chat_line, ended, new_client, upload
from tests.cache.support_ops import prompt, upstream_calls
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer


@pytest.fixture
def gateway(fake_openai: FakeOpenAI, tmp_path: Path) -> Iterator[GatewayServer]:
    config = batches_config(fake_openai, tmp_path)
    config["cache"] = {"enabled": True, "backend": "memory"}
    with GatewayServer(config) as server:
        yield server


def test_a_batch_line_answered_from_the_cache_is_logged_as_a_hit(
    gateway: GatewayServer, fake_openai: FakeOpenAI
) -> None:
    admin = Admin(gateway.url, gateway.master_key)
    try:
        client, account = new_client(gateway, admin)
        asked, fresh = prompt("batch asked"), prompt("batch fresh")
        client.chat.completions.create(model="priced", messages=[{"role": "user", "content": asked}])
        lines = [chat_line("cached", "priced", asked), chat_line("fresh", "priced", fresh)]
        made = client.batches.create(
            input_file_id=upload(client, lines), endpoint="/v1/chat/completions", completion_window="24h"
        )
        assert ended(client, made.id).status == "completed"
        assert (upstream_calls(fake_openai, asked), upstream_calls(fake_openai, fresh)) == (1, 1)
        rows = admin.client.get("/admin/usage", params={"account_id": account}).json()["data"]
        logged = {r["request_id"]: r["cache"] for r in rows if f"batch:{made.id}" in r["tags"]}
        assert sorted(logged.values()) == ["hit", "miss"], rows
    finally:
        admin.close()
