"""What the Responses API's gateway tests share: a funded key on the module's `server`, an openai client for
it, and the stored row of a response read straight from the gateway's database."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import openai
import pytest

from inferplex.responses_api.store import ResponseRows, StoredResponse
from inferplex.store.engine import open_database
from tests.accounts.conftest import Admin
from tests.gateway_server import GatewayServer


@pytest.fixture(scope="module")
def account(server: GatewayServer) -> Iterator[tuple[str, str]]:
    """A key with an account and credits on the module's `server`: (key, account id)."""
    admin = Admin(server.url, server.master_key)
    created = admin.create_key(scopes=["chat"], credits_micros=10**7)
    admin.close()
    yield created["key"], created["account_id"]


@pytest.fixture
def client(server: GatewayServer, account: tuple[str, str]) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.base_url, api_key=account[0], max_retries=0) as c:
        yield c


def stored_row(database_url: str, response_id: str) -> StoredResponse | None:
    """The stored row, read from the gateway's database as another replica would."""

    async def read() -> StoredResponse | None:
        db = open_database(database_url)
        try:
            return await ResponseRows(db).get(response_id)
        finally:
            await db.aclose()

    return asyncio.run(read())


def stored(server: GatewayServer, response_id: str) -> StoredResponse | None:
    """The stored row of a response `server` answered."""
    return stored_row(str(server.config.storage.database_url), response_id)
