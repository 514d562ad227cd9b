"""The admin console in a real browser, as an operator uses it (issue 24): sign in with the master key, make a
key, use it, find its request and its usage, revoke it, and see the API refuse it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser

from tests.console.browser import Console, tid
from tests.gateway_server import GatewayServer


@pytest.fixture
def console(browser: Browser, console_gateway: GatewayServer) -> Iterator[Console]:
    tab = Console.open(browser, console_gateway.url)
    yield tab
    tab.close()


def test_a_wrong_key_is_not_let_in(console: Console) -> None:
    console.goto("/ui/login")
    console.page.fill(tid("login-key"), "ipx-not-a-key")
    console.page.click(tid("login-submit"))
    console.page.wait_for_load_state()
    assert console.path().startswith("/ui/login")
    console.goto("/ui/keys")
    assert console.path().startswith("/ui/login")
