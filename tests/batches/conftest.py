"""What the batch and Files API gateway tests share: the admin client of the module's `server`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.accounts.conftest import Admin
from tests.gateway_server import GatewayServer


@pytest.fixture(scope="module")
def admin(server: GatewayServer) -> Iterator[Admin]:
    a = Admin(server.url, server.master_key)
    yield a
    a.close()
