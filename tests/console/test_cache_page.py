"""The console's Cache page (`/ui/cache`), in a real browser and over HTTP as a browser sends it.

- In chromium: after known traffic, the page (reached from the navigation) shows the store's entries and
  size, the hit rate overall and per model; a purge through its form (by model, then by entry, then
  everything) removes exactly those entries (the next such request is a miss: the fake upstream sees another
  call) and the page says how many went; the request log shows each request's outcome and filters by it;
  the page fits a phone.
- Over HTTP: a purge without the session's CSRF token is refused (403) and purges nothing; a form that
  selects nothing is shown again with the error (400); a bad window is a 400 page; with the cache off the
  page says so and a purge is refused (409) on the page.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.cache.support_ops import Operator, ask, cached_config, prompt, upstream_calls
from tests.conftest import openai_config
from tests.console.browser import Console, tid
from tests.console.conftest import ServerErrors
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

if TYPE_CHECKING:
    from playwright.sync_api import Browser

SECOND = {"name": "echo-two", "deployments": [{"provider": "fake", "model": "gpt-echo"}]}


def _config(fake: FakeOpenAI) -> dict[str, Any]:
    config = cached_config(fake)
    config["models"].append(SECOND)
    config["console"] = {"enabled": True}
    return config


@pytest.fixture
def cache_gateway(fake_openai: FakeOpenAI) -> Iterator[GatewayServer]:
    """A gateway of the test's own: its cache and its usage rows hold only the test's traffic."""
    with GatewayServer(_config(fake_openai)) as gateway:
        yield gateway


@pytest.fixture
def tab(browser: Browser, cache_gateway: GatewayServer, server_errors: ServerErrors) -> Iterator[Console]:
    console = Console.open(browser, cache_gateway.url)
    console.sign_in(cache_gateway.master_key)
    yield console
    console.close()
    assert console.errors == [] and console.broken == []
    assert server_errors.seen == []


def _shown(console: Console, testid: str, attribute: str) -> str | None:
    return console.page.locator(tid(testid)).first.get_attribute(attribute)


def _purge(console: Console, **fields: str) -> None:
    """Fill the purge form and send it; wait for the page it leads to."""
    form = console.page.locator(tid("cache-purge-form"))
    for name, text in fields.items():
        if name == "all":
            form.locator(tid("purge-all")).check()
        else:
            form.locator(f'[name="{name}"]').fill(text)
    with console.page.expect_navigation():
        form.locator(tid("purge-submit")).click()


def test_the_page_shows_the_numbers_and_purges_through_its_form(
    tab: Console, cache_gateway: GatewayServer, fake_openai: FakeOpenAI
) -> None:
    page = tab.page
    one, two = prompt("page one"), prompt("page two")
    ask(cache_gateway, one)
    _, hit = ask(cache_gateway, one)
    ask(cache_gateway, one)
    ask(cache_gateway, two, model="echo-two")
    _, third = ask(cache_gateway, prompt("page three"))
    assert hit["x-inferplex-cache"] == "hit"

    page.click(tid("nav-cache"))
    page.wait_for_url("**/ui/cache*")
    assert _shown(tab, "cache-state", "data-enabled") == "true"
    assert page.locator(tid("cache-backend")).inner_text() == "memory"
    assert _shown(tab, "cache-entries", "data-value") == "3"
    assert int(_shown(tab, "cache-bytes", "data-value") or 0) > 0
    total = page.locator(tid("cache-total"))
    assert (total.get_attribute("data-hits"), total.get_attribute("data-misses")) == ("2", "3")
    assert page.locator(tid("cache-rate")).inner_text() == "40.0%"
    echo = page.locator(f'{tid("cache-model-row")}[data-model="echo-model"]')
    assert (echo.get_attribute("data-hits"), echo.get_attribute("data-misses")) == ("2", "2")
    assert "50.0%" in echo.inner_text()
    assert "0.0%" in page.locator(f'{tid("cache-model-row")}[data-model="echo-two"]').inner_text()
    assert tab.shoot("cache-page") == 0, "the cache page is wider than a phone"

    # by model: echo-two's entry goes, echo-model's stay
    _purge(tab, model="echo-two")
    assert re.search(r"/ui/cache\?window=24h&purged=1$", page.url), page.url
    assert page.locator(tid("cache-purged")).inner_text() == "Purged 1 entry."
    assert _shown(tab, "cache-entries", "data-value") == "2"
    calls = upstream_calls(fake_openai, two), upstream_calls(fake_openai, one)
    assert ask(cache_gateway, two, model="echo-two")[1]["x-inferplex-cache"] == "miss"
    assert ask(cache_gateway, one)[1]["x-inferplex-cache"] == "hit"
    assert (upstream_calls(fake_openai, two), upstream_calls(fake_openai, one)) == (calls[0] + 1, calls[1])

    # by entry: the id the third answer's header named
    tab.goto("/ui/cache")
    _purge(tab, entry=third["x-inferplex-cache-entry"])
    assert _shown(tab, "cache-purged", "data-purged") == "1"
    assert _shown(tab, "cache-entries", "data-value") == "2"  # echo-two's again, and `one`'s

    # everything
    _purge(tab, all="on")
    assert _shown(tab, "cache-purged", "data-purged") == "2"
    assert _shown(tab, "cache-entries", "data-value") == "0"
    assert ask(cache_gateway, one)[1]["x-inferplex-cache"] == "miss"

    # the request log: each request's outcome, and the filter
    page.click(tid("nav-requests"))
    page.wait_for_url("**/ui/requests*")
    page.locator(tid("request-filters")).locator("summary").click()  # the filters past the first rows
    page.select_option(tid("request-cache"), "hit")
    with page.expect_navigation():
        page.click(tid("request-apply"))
    rows = page.locator(tid("request-row"))
    assert rows.count() == 3  # the two hits of `one` and the one after the model purge
    assert {rows.nth(i).locator(tid("request-cache-outcome")).inner_text() for i in range(3)} == {"hit"}
    tab.goto(f"/ui/requests/{hit['x-inferplex-request-id']}")
    assert page.locator(tid("detail-cache")).inner_text() == "hit"


def test_a_form_that_selects_nothing_is_shown_again_with_the_error(tab: Console) -> None:
    tab.goto("/ui/cache")
    _purge(tab, namespace="  ")
    assert "name what to purge" in tab.page.locator(tid("form-error")).inner_text()
    _purge(tab, model="echo-model", all="on")
    assert "give it alone" in tab.page.locator(tid("form-error")).inner_text()
    assert tab.page.locator('[name="model"]').input_value() == "echo-model"  # kept for the next try


# ---- over HTTP ---------------------------------------------------------------------------------------------


@contextmanager
def _signed_in(gateway: GatewayServer) -> Iterator[httpx.Client]:
    """An httpx client holding a console session's cookie, as a browser would."""
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        assert http.post("/ui/login", data={"key": gateway.master_key}).status_code == 303
        yield http


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found
    return found.group(1)


def test_a_purge_needs_the_session_and_its_csrf_token(cache_gateway: GatewayServer) -> None:
    ask(cache_gateway, prompt("csrf"))
    stranger = httpx.post(cache_gateway.url + "/ui/cache/purge", data={"all": "on"})
    assert (stranger.status_code, stranger.headers["location"]) == (303, "/ui/login")
    with _signed_in(cache_gateway) as http:
        forged = http.post("/ui/cache/purge", data={"all": "on"})
        assert forged.status_code == 403
        wrong = http.post("/ui/cache/purge", data={"all": "on", "csrf": "not-the-token"})
        assert wrong.status_code == 403
        operator = Operator(cache_gateway)
        try:
            assert operator.cache()["entries"] == 1  # nothing purged
            token = _csrf(http.get("/ui/cache").text)
            done = http.post("/ui/cache/purge", data={"all": "on", "csrf": token, "window": "7d"})
            assert (done.status_code, done.headers["location"]) == (303, "/ui/cache?window=7d&purged=1")
            assert operator.cache()["entries"] == 0
        finally:
            operator.close()


def test_a_bad_window_is_a_400_page(cache_gateway: GatewayServer) -> None:
    with _signed_in(cache_gateway) as http:
        answer = http.get("/ui/cache", params={"window": "1y"})
        assert answer.status_code == 400 and "window" in answer.text
        assert http.get("/ui/cache", params={"window": "7d"}).status_code == 200


def test_with_the_cache_off_the_page_says_so_and_refuses_a_purge(fake_openai: FakeOpenAI) -> None:
    config = openai_config(fake_openai)
    config["console"] = {"enabled": True}
    with GatewayServer(config) as gateway, _signed_in(gateway) as http:
        page = http.get("/ui/cache")
        assert page.status_code == 200 and 'data-testid="cache-off"' in page.text
        refused = http.post("/ui/cache/purge", data={"all": "on", "csrf": _csrf(page.text)})
        assert refused.status_code == 409 and "cache.enabled" in refused.text
