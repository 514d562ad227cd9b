"""The admin console in a real browser, as an operator uses it (issue 24): sign in with the master key, make a
key, fund it, use it, find its request and its usage, revoke it, and see the API refuse it; on a phone too.

Pages fill in as the gateway writes usage rows (in batches, off the request path), so a step that looks for
a request reloads its page until the row is there (`until_present`), within the step's time limit."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from playwright.sync_api import Browser, Locator

from tests.console import conftest
from tests.console.browser import PHONE, Console, tid
from tests.console.conftest import ServerErrors
from tests.gateway_server import GatewayServer, free_port

NAV = ("keys", "accounts", "usage", "requests", "providers", "models")


@pytest.fixture
def console(browser: Browser, console_gateway: GatewayServer, server_errors: ServerErrors) -> Iterator[Console]:
    tab = Console.open(browser, console_gateway.url)
    yield tab
    tab.close()
    # every page the test saw ran its scripts without an error and loaded all its assets, and the gateway
    # raised nothing while serving them
    assert tab.errors == [] and tab.broken == []
    assert server_errors.seen == []


@pytest.fixture
def signed_in(console: Console, console_gateway: GatewayServer) -> Console:
    console.sign_in(console_gateway.master_key)
    return console


def client(gateway: GatewayServer, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=key, max_retries=0)


def chat(gateway: GatewayServer, key: str, text: str = "hello console") -> str:
    """One chat completion of echo-model with `key`: the request id the gateway answered with."""
    raw = client(gateway, key).chat.completions.with_raw_response.create(
        model="echo-model", messages=[{"role": "user", "content": text}]
    )
    assert raw.parse().choices[0].message.content == f"echo: {text}"
    return raw.headers["x-inferplex-request-id"]


def chat_with(gateway: GatewayServer, model: str, text: str) -> str:
    """One chat completion of `model` with the master key: its request id."""
    raw = client(gateway, gateway.master_key).chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": text}]
    )
    raw.parse()
    return raw.headers["x-inferplex-request-id"]


def create_key(
    console: Console,
    name: str,
    scopes: tuple[str, ...] = ("chat",),
    credits_micros: int | None = None,
    shoot: str | None = None,
) -> tuple[str, str]:
    """Make a key in the keys page with exactly `scopes` (and its new account funded with `credits_micros`):
    its id and the secret the page shows once (screenshots of that page named `shoot`)."""
    page = console.page
    page.click(tid("nav-keys"))
    page.wait_for_url("**/ui/keys*")
    form = page.locator(tid("key-create-form"))
    form.locator('[name="name"]').fill(name)
    boxes = form.locator('input[name="scopes"]')
    for i in range(boxes.count()):
        box = boxes.nth(i)
        box.set_checked(box.get_attribute("value") in scopes)
    if credits_micros is not None:
        form.locator('[name="credits_micros"]').fill(str(credits_micros))
    form.locator(tid("key-create-submit")).click()
    secret = page.locator(tid("new-secret")).inner_text().strip()
    assert secret.startswith("ipx-"), secret
    if shoot:
        assert console.shoot(shoot) == 0, "the page showing the secret is wider than a phone"
    key_id = page.locator(tid("new-key-id")).inner_text().strip()
    assert key_row(console, name).get_attribute("data-key-id") == key_id  # and the list has it
    return key_id, secret


def key_row(console: Console, name: str) -> Locator:
    """The keys page's row of the key named `name`."""
    console.goto("/ui/keys")
    row = console.page.locator(tid("key-row"), has_text=name)
    assert row.count() == 1, f"{row.count()} rows for key {name!r}"
    return row


def until_present(console: Console, selector: str, has_text: str | None = None) -> Locator:
    """Reload the current page until `selector` (holding `has_text`) is on it: rows the gateway writes a moment
    after answering. Fails the step when it never comes (the browser's step timeout, per reload)."""
    page = console.page
    for _ in range(40):
        found = page.locator(selector, has_text=has_text)
        if found.count():
            return found
        page.wait_for_timeout(250)
        page.reload()
    raise AssertionError(f"{selector} {has_text or ''} never appeared on {console.path()}")


def account_of(gateway: GatewayServer, key_id: str) -> str:
    """The account the console's new key bills (a key made without one gets an account of its own)."""
    answer = httpx.get(f"{gateway.url}/admin/keys/{key_id}", headers=gateway.auth)
    answer.raise_for_status()
    account_id: str = answer.json()["account_id"]
    return account_id


def test_a_wrong_key_is_not_let_in(console: Console) -> None:
    console.goto("/ui/login")
    console.page.fill(tid("login-key"), "ipx-not-a-key")
    console.page.click(tid("login-submit"))
    console.page.wait_for_load_state()
    assert console.path().startswith("/ui/login")
    console.goto("/ui/keys")
    assert console.path().startswith("/ui/login")


def test_a_key_made_in_the_console_works_until_revoked(signed_in: Console, console_gateway: GatewayServer) -> None:
    console, page = signed_in, signed_in.page
    key_id, secret = create_key(console, "browser-flow", shoot="key-secret")
    console.shoot("keys-after-create")

    # a new key's own account starts empty: the gateway refuses it until the account is funded
    with pytest.raises(openai.PermissionDeniedError):
        chat(console_gateway, secret)
    account_id = account_of(console_gateway, key_id)
    page.click(tid("nav-accounts"))
    page.wait_for_url("**/ui/accounts*")
    page.locator(f'{tid("account-row")}[data-account-id="{account_id}"] {tid("account-link")}').click()
    page.wait_for_url(f"**/ui/accounts/{account_id}*")
    entries = page.locator(tid("ledger-row")).count()
    page.fill(tid("credit-amount"), "5")
    page.click(tid("credit-submit"))
    page.locator(tid("account-balance"), has_text="$5.00").wait_for()
    assert page.locator(tid("ledger-row")).count() == entries + 1
    console.shoot("account-ledger")

    request_id = chat(console_gateway, secret)

    page.click(tid("nav-requests"))
    page.wait_for_url("**/ui/requests*")
    row = until_present(console, f'{tid("request-row")}[data-request-id="{request_id}"]')
    page.fill(tid("request-key"), key_id)
    page.click(tid("request-apply"))
    page.wait_for_url(f"**key={key_id}*")
    # the key's two requests: the refusal before funding, then the answer
    statuses = page.locator(tid("request-status-code")).all_inner_texts()
    assert sorted(s.strip() for s in statuses) == ["200", "403"]
    console.shoot("requests")
    row.locator(tid("request-link")).click()
    page.wait_for_url(f"**/ui/requests/{request_id}*")
    assert page.locator(tid("request-detail")).get_attribute("data-request-id") == request_id
    assert page.locator(tid("detail-model")).inner_text().strip() == "echo-model"
    assert page.locator(tid("detail-key")).inner_text().strip() == key_id
    assert page.locator(tid("detail-status")).inner_text().strip() == "200"
    assert page.locator(tid("attempt-row")).count() == 1
    console.shoot("request-detail")

    page.click(tid("nav-usage"))
    page.wait_for_url("**/ui/usage*")
    page.select_option(tid("usage-group"), "key")
    page.click(tid("usage-apply"))
    usage = until_present(console, f'{tid("usage-row")}[data-group="{key_id}"]')
    # two requests: the one refused before the account was funded (an error) and the one answered
    assert usage.locator(tid("usage-requests")).inner_text().strip() == "2"
    assert usage.locator(tid("usage-errors")).inner_text().strip() == "1"
    assert page.locator(f"{tid('usage-chart')} canvas").count() >= 1
    console.shoot("usage-by-key")
    with page.expect_download() as download:
        page.click(tid("usage-csv"))
    csv_path = download.value.path()
    lines = [line for line in csv_path.read_text().splitlines() if key_id in line]
    assert lines, "the CSV export has no line for the key"

    key_row(console, "browser-flow").locator(tid("key-edit")).click()
    page.wait_for_url(f"**/ui/keys/{key_id}*")
    page.click(tid("key-revoke"))
    page.locator(tid("key-status"), has_text="revoked").wait_for()
    with pytest.raises(openai.AuthenticationError):
        chat(console_gateway, secret)
    assert console.errors == []


def test_the_new_secret_is_shown_once(signed_in: Console) -> None:
    page = signed_in.page
    key_id, secret = create_key(signed_in, "shown-once")
    shown_at = page.evaluate("navigation.currentEntry.index")
    for path in ("/ui/accounts", "/ui/keys", f"/ui/keys/{key_id}"):
        signed_in.goto(path)
        assert secret not in page.content(), path
        assert page.locator(tid("new-secret")).count() == 0, path
    # nor from the browser's history: the answer that showed it was not kept (cache-control: no-store), and
    # going back to it neither shows it again nor posts the form again
    while page.evaluate("navigation.currentEntry.index") > shown_at:
        page.go_back()
    assert secret not in page.content()
    assert page.locator(tid("key-row"), has_text="shown-once").count() == 1


def test_rotating_in_the_console_swaps_the_secret(signed_in: Console, console_gateway: GatewayServer) -> None:
    page = signed_in.page
    key_id, old = create_key(signed_in, "rotated", credits_micros=5_000_000)
    chat(console_gateway, old)
    key_row(signed_in, "rotated").locator(tid("key-edit")).click()
    page.wait_for_url(f"**/ui/keys/{key_id}*")
    page.click(tid("key-rotate"))
    new = page.locator(tid("new-secret")).inner_text().strip()
    assert new.startswith("ipx-") and new != old
    assert signed_in.shoot("key-rotated") == 0
    with pytest.raises(openai.AuthenticationError):
        chat(console_gateway, old)
    chat(console_gateway, new)


def test_an_admin_key_signs_in_until_it_is_revoked(
    browser: Browser, signed_in: Console, console_gateway: GatewayServer
) -> None:
    """Only keys holding `admin` get in; and revoking one in the console ends the session it opened."""
    _, chat_only = create_key(signed_in, "no-console")
    admin_id, admin = create_key(signed_in, "second-operator", scopes=("admin",))
    other = Console.open(browser, console_gateway.url)
    try:
        other.goto("/ui/login")
        other.page.fill(tid("login-key"), chat_only)
        other.page.click(tid("login-submit"))
        other.page.wait_for_load_state()
        assert other.path().startswith("/ui/login")
        other.sign_in(admin)
        other.goto("/ui/accounts")
        assert other.path().startswith("/ui/accounts")

        key_row(signed_in, "second-operator").locator(tid("key-edit")).click()
        signed_in.page.wait_for_url(f"**/ui/keys/{admin_id}*")
        signed_in.page.click(tid("key-revoke"))
        signed_in.page.locator(tid("key-status"), has_text="revoked").wait_for()

        other.goto("/ui/accounts")
        assert other.path().startswith("/ui/login")
    finally:
        other.close()


def test_the_sign_in_key_stays_out_of_urls_pages_and_scripts(
    signed_in: Console, console_gateway: GatewayServer
) -> None:
    master = console_gateway.master_key
    for name in NAV:
        signed_in.page.click(tid(f"nav-{name}"))
        signed_in.page.wait_for_url(f"**/ui/{name}*")
        assert master not in signed_in.page.content(), name
    assert signed_in.urls and not [url for url in signed_in.urls if master in url]
    (cookie,) = signed_in.context.cookies()
    assert master not in cookie["value"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/ui"
    assert signed_in.page.evaluate("document.cookie") == ""


def test_sign_out_ends_the_session(signed_in: Console) -> None:
    signed_in.page.click(tid("sign-out"))
    signed_in.page.wait_for_url("**/ui/login*")
    signed_in.goto("/ui/keys")
    assert signed_in.path().startswith("/ui/login")


def test_the_nav_works_on_a_phone(
    browser: Browser, console_gateway: GatewayServer, server_errors: ServerErrors
) -> None:
    phone = Console.open(browser, console_gateway.url, PHONE)
    try:
        phone.sign_in(console_gateway.master_key)
        for name in NAV:
            link = phone.page.locator(tid(f"nav-{name}"))
            link.click()  # Playwright refuses a link that is hidden, covered or off-screen
            phone.page.wait_for_url(f"**/ui/{name}*")
            overflow = phone.page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 0, f"/ui/{name} is {overflow}px wider than a 375px phone"
        assert phone.errors == [] and phone.broken == [] and server_errors.seen == []
    finally:
        phone.close()


def test_every_page_renders_at_desktop_and_phone_size(signed_in: Console, console_gateway: GatewayServer) -> None:
    """Screenshots of every page for a person to look at (test-artifacts/console/), and what a machine can see
    in them: each page answers, runs its scripts without error, and fits a phone's width."""
    console, page = signed_in, signed_in.page
    request_id = chat(console_gateway, console_gateway.master_key, "screenshots")
    key_id, _ = create_key(console, "screenshots")
    account_id = account_of(console_gateway, key_id)
    overflows: dict[str, int] = {}
    pages = {
        "keys": "/ui/keys",
        "key": f"/ui/keys/{key_id}",
        "accounts": "/ui/accounts",
        "account": f"/ui/accounts/{account_id}",
        "usage": "/ui/usage",
        "requests": "/ui/requests",
        "request": f"/ui/requests/{request_id}",
        "providers": "/ui/providers",
        "models": "/ui/models",
    }
    for name, path in pages.items():
        console.goto_when_found(path)
        overflows[name] = console.shoot(name)
    assert page.locator(tid("model-row")).count() == len(console_gateway.config.models)
    console.goto("/ui/providers")
    deployments = page.locator(tid("deployment-row"))
    assert deployments.count() >= 1
    assert page.locator(tid("breaker-state")).first.inner_text().strip().lower() == "closed"
    signed_in.page.click(tid("sign-out"))
    page.wait_for_url("**/ui/login*")
    overflows["login"] = console.shoot("login")
    assert console.errors == []
    assert {name: px for name, px in overflows.items() if px > 0} == {}


def key_with_requests(console: Console, gateway: GatewayServer, name: str, count: int) -> tuple[str, list[str]]:
    """A funded key made in the page, and the ids of `count` chat requests made with it, oldest first."""
    key_id, secret = create_key(console, name, credits_micros=5_000_000)
    return key_id, [chat(gateway, secret, f"{name} {i}") for i in range(count)]


def test_older_requests_load_into_the_same_page(signed_in: Console, console_gateway: GatewayServer) -> None:
    """The request log shows 50 rows; "Older requests" (htmx, in place) brings the rest."""
    key_id, ids = key_with_requests(signed_in, console_gateway, "paged", 51)
    page = signed_in.page
    signed_in.goto(f"/ui/requests?key={key_id}")
    # usage rows are written in order, in batches: once the newest is there, so are the 50 before it
    until_present(signed_in, f'{tid("request-row")}[data-request-id="{ids[-1]}"]')
    rows = page.locator(tid("request-row"))
    assert rows.count() == 50
    page.click(tid("request-more"))
    page.locator(f'{tid("request-row")}[data-request-id="{ids[0]}"]').wait_for()
    shown = [rows.nth(i).get_attribute("data-request-id") for i in range(rows.count())]
    assert shown == ids[::-1]
    assert page.locator(tid("request-more")).count() == 0
    assert signed_in.path() == f"/ui/requests?key={key_id}"


def test_older_requests_after_the_session_ended_go_to_sign_in(
    signed_in: Console, console_gateway: GatewayServer
) -> None:
    """htmx's in-place load with no session left: the whole tab goes to the sign-in page (no login form
    swapped into the table)."""
    key_id, ids = key_with_requests(signed_in, console_gateway, "paged-out", 51)
    page = signed_in.page
    signed_in.goto(f"/ui/requests?key={key_id}")
    until_present(signed_in, f'{tid("request-row")}[data-request-id="{ids[-1]}"]')
    signed_in.context.clear_cookies()
    page.click(tid("request-more"))
    page.wait_for_url("**/ui/login*")
    assert page.locator(tid("login-key")).count() == 1
    assert page.locator(tid("request-row")).count() == 0


def test_a_failing_deployment_shows_its_open_breaker(signed_in: Console, console_gateway: GatewayServer) -> None:
    """Three upstream 500s open error-500's breaker (cooldown.failures): the providers page shows it open and
    lists the failed attempts; the other deployments stay closed."""
    with pytest.raises(openai.InternalServerError):
        chat_with(console_gateway, "error-500", "fail")
    page = signed_in.page
    signed_in.goto("/ui/providers")
    row = page.locator(f'{tid("deployment-row")}[data-deployment="fake/error-500"]')
    assert row.locator(tid("breaker-state")).get_attribute("data-state") == "open"
    echo = page.locator(f'{tid("deployment-row")}[data-deployment="fake/gpt-echo"]').first
    assert echo.locator(tid("breaker-state")).get_attribute("data-state") == "closed"
    until_present(signed_in, f'{tid("recent-error-row")}[data-deployment="fake/error-500"]')
    signed_in.shoot("providers-breaker-open")


def test_a_page_on_another_origin_cannot_make_changes(signed_in: Console, console_gateway: GatewayServer) -> None:
    """Cross-site request forgery from a page on the same host but another port: the same *site*, so
    SameSite=Strict still sends the session cookie; the CSRF token and the Origin check must refuse it."""
    key_id, _ = create_key(signed_in, "forgery-target")
    evil = f"http://127.0.0.1:{free_port()}/prize"
    forged = f"""<form id="f" method="post" action="{console_gateway.url}/ui/keys/{key_id}/revoke">
        <input type="hidden" name="csrf" value="guessed"></form><script>f.submit()</script>"""
    signed_in.page.route(evil, lambda route: route.fulfill(body=forged, content_type="text/html"))
    with signed_in.page.expect_response(f"**/ui/keys/{key_id}/revoke") as answer:
        signed_in.page.goto(evil)
    assert answer.value.status == 403
    # the browser did send the session: the refusal is the gateway's CSRF defence, not SameSite's
    assert "ipx_console=" in answer.value.request.all_headers().get("cookie", "")
    status = httpx.get(f"{console_gateway.url}/admin/keys/{key_id}", headers=console_gateway.auth).json()
    assert status["revoked_at"] is None


def test_the_usage_range_and_grouping_chosen_in_the_page(signed_in: Console, console_gateway: GatewayServer) -> None:
    """A key's three requests today: a from/to range on today counts them by model, drawn in every chart; a
    range that ends yesterday counts none."""
    key_id, secret = create_key(signed_in, "usage-range", credits_micros=5_000_000)
    today = datetime.now(UTC).date()
    for i in range(3):
        chat(console_gateway, secret, f"range {i}")
    if datetime.now(UTC).date() != today:
        pytest.skip("the requests straddled midnight UTC")
    page = signed_in.page

    def choose(since: date, until: date) -> None:
        signed_in.goto("/ui/usage")
        form = page.locator(tid("usage-filters"))
        form.locator("summary").click()
        form.locator('[name="key"]').fill(key_id)
        page.fill(tid("usage-range-from"), since.isoformat())
        page.fill(tid("usage-range-to"), until.isoformat())
        page.select_option(tid("usage-group"), "model")
        page.click(tid("usage-apply"))
        page.wait_for_url(f"**key={key_id}*")

    choose(today, today)
    row = page.locator(f'{tid("usage-row")}[data-group="echo-model"]')
    assert row.locator(tid("usage-requests")).inner_text().strip() == "3"
    assert page.locator(tid("usage-row")).count() == 1
    assert page.locator(tid("usage-total-requests")).inner_text().strip() == "3"
    chart = page.locator(f'{tid("usage-chart")}[data-drawn="true"]')
    assert chart.locator("canvas").count() == chart.locator(".chart").count() >= 4
    signed_in.shoot("usage-today-by-model")

    yesterday = today - timedelta(days=1)
    choose(yesterday - timedelta(days=1), yesterday)
    assert page.locator(tid("usage-row")).count() == 0
    assert page.locator(tid("usage-total-requests")).inner_text().strip() == "0"


def test_a_request_logged_with_its_bodies_shows_them(signed_in: Console, console_gateway: GatewayServer) -> None:
    """A caller asking for its bodies to be logged (log_query_body / log_response_body) finds both on the
    request's page; one that did not sees that they were not kept."""
    logged = client(console_gateway, console_gateway.master_key).chat.completions.with_raw_response.create(
        model="echo-model",
        messages=[{"role": "user", "content": "keep <b>this</b>"}],
        extra_body={"log_query_body": True, "log_response_body": True},
    )
    page = signed_in.page
    signed_in.goto_when_found(f"/ui/requests/{logged.headers['x-inferplex-request-id']}")
    assert "keep <b>this</b>" in page.locator(tid("request-body")).inner_text()  # shown as text, not markup
    assert "echo: keep <b>this</b>" in page.locator(tid("response-body")).inner_text()
    assert page.locator("b", has_text="this").count() == 0
    signed_in.shoot("request-with-bodies")

    signed_in.goto_when_found(f"/ui/requests/{chat(console_gateway, console_gateway.master_key, 'forget this')}")
    assert page.locator(tid("bodies-off")).count() == 1
    assert "forget this" not in page.locator(tid("request-detail")).inner_text()


def test_without_chromium_the_set_up_installs_it_or_says_why_it_cannot(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The fixture's decision, without touching the machine: not root → a reason naming what is needed;
    root with apt-get → `apt-get update` then `apt-get install -y chromium`, each bounded, and a failure is
    the reason to skip."""
    monkeypatch.setattr(conftest, "CHROMIUM", tmp_path / "chromium")
    monkeypatch.setattr(conftest.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(conftest.os, "geteuid", lambda: 1000)
    reason = conftest._install_chromium()
    assert reason is not None and "root" in reason and "apt-get" in reason

    ran: list[tuple[list[str], float]] = []

    def run(command: list[str], **kw: Any) -> None:
        ran.append((command, kw["timeout"]))
        if command[1] == "install":
            raise subprocess.CalledProcessError(100, command)

    monkeypatch.setattr(conftest.os, "geteuid", lambda: 0)
    monkeypatch.setattr(conftest.subprocess, "run", run)
    reason = conftest._install_chromium()
    assert [command for command, _ in ran] == [["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]]
    assert all(0 < limit <= 900 for _, limit in ran)
    assert reason is not None and "apt-get install -y chromium" in reason


def test_the_providers_page_refreshes_its_breakers_in_place(signed_in: Console, console_gateway: GatewayServer) -> None:
    """A breaker that opens while the page is open shows up there without a reload (htmx polls the table every
    10 s; the page's clock is moved on instead of waiting)."""
    page = signed_in.page
    page.clock.install()
    signed_in.goto("/ui/providers")
    row = f'{tid("deployment-row")}[data-deployment="fake/error-503"]'
    assert page.locator(f"{row} {tid('breaker-state')}").get_attribute("data-state") == "closed"
    page.evaluate("window.sameDocument = true")
    with pytest.raises(openai.InternalServerError):
        chat_with(console_gateway, "error-503", "fail")
    with page.expect_response("**/ui/providers*"):
        page.clock.run_for(10_500)
    page.locator(f'{row} {tid("breaker-state")}[data-state="open"]').wait_for()
    assert page.evaluate("window.sameDocument") is True
