"""The SQLite cache backend through HTTP: the embedded default keeps its entries in a file of its own beside
the gateway's database, and they outlive a restart."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import openai

from tests.accounts.conftest import Admin
from tests.cache.conftest import cache_config, unique, upstream_calls
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer


def test_a_restarted_gateway_answers_from_its_sqlite_cache(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    config = cache_config(fake_openai, tmp_path, backend="auto")  # a SQLite store and no Redis: SQLite
    text = unique()
    messages = [{"role": "user", "content": text}]
    with GatewayServer(config) as first:
        admin = Admin(first.url, first.master_key)
        key = str(admin.create_key(scopes=["chat"], credits_micros=10**7)["key"])
        admin.close()
        sdk = openai.OpenAI(base_url=first.base_url, api_key=key, max_retries=0)
        miss = sdk.chat.completions.with_raw_response.create(model="priced", messages=messages)  # type: ignore[arg-type]
        assert miss.headers["x-inferplex-cache"] == "miss"
    cache_file = tmp_path / "cache.sqlite3"
    with sqlite3.connect(cache_file) as conn:
        assert conn.execute("SELECT id FROM entries").fetchall() == [(miss.headers["x-inferplex-cache-entry"],)]
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with GatewayServer(config) as again:
        sdk = openai.OpenAI(base_url=again.base_url, api_key=key, max_retries=0)
        hit = sdk.chat.completions.with_raw_response.create(model="priced", messages=messages)  # type: ignore[arg-type]
        assert hit.headers["x-inferplex-cache"] == "hit"
        assert hit.parse().choices[0].message.content == f"echo: {text}"
    assert upstream_calls(fake_openai, text) == 1
    assert (tmp_path / "inferplex.db").exists()  # the gateway's own database is another file
