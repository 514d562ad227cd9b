"""The console's sign-in, sessions, CSRF defence and forms, driven over HTTP as a browser would (httpx with
cookies, urlencoded forms), and their effect checked where it matters: through the admin API and through
the API with the keys the pages made (the openai SDK)."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from http.cookies import SimpleCookie
from pathlib import Path

import httpx
import openai
import pytest

from tests.conftest import openai_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def server(fake_openai: FakeOpenAI) -> Iterator[GatewayServer]:
    with GatewayServer(openai_config(fake_openai)) as gateway:
        yield gateway


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF field in the page"
    return found.group(1)


def _testid(html: str, testid: str) -> str:
    """The text inside the first element with this data-testid."""
    found = re.search(rf'data-testid="{testid}"[^>]*>([^<]*)<', html)
    assert found, f"no {testid} in the page"
    return found.group(1).strip()


class Browser:
    """An httpx client keeping cookies, as a browser keeps them (per path, HttpOnly or not)."""

    def __init__(self, server: GatewayServer) -> None:
        self.server = server
        self.http = httpx.Client(base_url=server.url, timeout=30)

    def sign_in(self, key: str) -> httpx.Response:
        return self.http.post("/ui/login", data={"key": key})

    def get(self, path: str, **kw: object) -> httpx.Response:
        return self.http.get(path, **kw)  # type: ignore[arg-type]

    def post(self, path: str, data: dict[str, object] | None = None, *, page: str | None = None, **kw: object):  # type: ignore[no-untyped-def]
        """POST a form with the CSRF token of `page` (the form's own page, read first), as the form would."""
        token = _csrf(self.get(page or path).text)
        return self.http.post(path, data={"csrf": token, **(data or {})}, **kw)  # type: ignore[arg-type]


def _admin(server: GatewayServer, method: str, path: str, **kw: object) -> httpx.Response:
    return httpx.request(method, server.url + path, headers=server.auth, timeout=30, **kw)  # type: ignore[arg-type]


def _client(server: GatewayServer, secret: str) -> openai.OpenAI:
    return openai.OpenAI(api_key=secret, base_url=server.base_url, max_retries=0)


@pytest.fixture
def browser(server: GatewayServer) -> Iterator[Browser]:
    signed = Browser(server)
    assert signed.sign_in(server.master_key).status_code == 303
    yield signed
    signed.http.close()


# ---- signing in and out ------------------------------------------------------------------------------------


def test_a_page_before_sign_in_sends_to_the_sign_in_page(server: GatewayServer) -> None:
    for path in ("/ui", "/ui/keys", "/ui/accounts"):
        answer = httpx.get(server.url + path)
        assert (answer.status_code, answer.headers["location"]) == (303, "/ui/login")
    page = httpx.get(server.url + "/ui/login")
    assert page.status_code == 200
    assert 'data-testid="login-key"' in page.text and 'data-testid="login-submit"' in page.text


def test_master_key_sign_in_gives_a_strict_http_only_cookie_and_never_shows_the_key(server: GatewayServer) -> None:
    browser = Browser(server)
    answer = browser.sign_in(server.master_key)
    assert (answer.status_code, answer.headers["location"]) == (303, "/ui/keys")
    cookie = SimpleCookie(answer.headers["set-cookie"])["ipx_console"]
    assert cookie["httponly"] and cookie["samesite"].lower() == "strict" and cookie["path"] == "/ui"
    assert not cookie["secure"]  # console.secure_cookie is off in this config
    assert server.master_key not in cookie.value
    keys = browser.get("/ui/keys")
    assert keys.status_code == 200
    for testid in ("nav-keys", "nav-accounts", "nav-usage", "nav-requests", "nav-providers", "nav-models", "sign-out"):
        assert f'data-testid="{testid}"' in keys.text
    assert server.master_key not in keys.text and server.master_key not in answer.text
    assert "no-store" in keys.headers["cache-control"]
    assert "script-src 'self'" in keys.headers["content-security-policy"]


def test_the_database_keeps_only_the_session_id_s_hash(server: GatewayServer) -> None:
    browser = Browser(server)
    value = SimpleCookie(browser.sign_in(server.master_key).headers["set-cookie"])["ipx_console"].value
    database = Path(server.config.server.data_dir) / "inferplex.db"
    with sqlite3.connect(database) as conn:
        rows = conn.execute("SELECT id_hash, key_id, csrf FROM console_sessions").fetchall()
    assert rows and all(value not in row[0] for row in rows)
    assert ("master" in {row[1] for row in rows}) and all(len(row[0]) == 64 for row in rows)


def test_a_wrong_key_and_a_key_without_admin_are_refused(server: GatewayServer) -> None:
    browser = Browser(server)
    wrong = browser.sign_in("ipx-not-a-key")
    assert wrong.status_code == 401 and 'data-testid="login-error"' in wrong.text
    assert "ipx-not-a-key" not in wrong.text  # the key is not written back into the page
    made = _admin(server, "POST", "/admin/keys", json={"name": "no-admin", "scopes": ["chat"]}).json()
    refused = browser.sign_in(made["key"])
    assert refused.status_code == 403 and "admin scope" in refused.text
    assert made["key"] not in refused.text
    assert "set-cookie" not in refused.headers
    assert browser.get("/ui/keys").status_code == 303


def test_an_admin_key_signs_in_and_its_revocation_or_rotation_ends_the_session(server: GatewayServer) -> None:
    for ending in ("revoke", "rotate"):
        made = _admin(server, "POST", "/admin/keys", json={"name": "ops", "scopes": ["admin"]}).json()
        browser = Browser(server)
        assert browser.sign_in(made["key"]).status_code == 303
        page = browser.get("/ui/keys")
        assert page.status_code == 200 and f"ops ({made['id']})" in page.text
        assert _admin(server, "POST", f"/admin/keys/{made['id']}/{ending}").status_code == 200
        assert browser.get("/ui/keys").status_code == 303


def test_an_admin_key_that_loses_the_admin_scope_is_signed_out(server: GatewayServer) -> None:
    made = _admin(server, "POST", "/admin/keys", json={"name": "ops", "scopes": ["admin", "chat"]}).json()
    browser = Browser(server)
    assert browser.sign_in(made["key"]).status_code == 303
    assert _admin(server, "PATCH", f"/admin/keys/{made['id']}", json={"scopes": ["chat"]}).status_code == 200
    assert browser.get("/ui/accounts").status_code == 303


def test_sign_out_deletes_the_session(server: GatewayServer) -> None:
    browser = Browser(server)
    value = SimpleCookie(browser.sign_in(server.master_key).headers["set-cookie"])["ipx_console"].value
    out = browser.post("/ui/logout", page="/ui/keys")
    assert (out.status_code, out.headers["location"]) == (303, "/ui/login")
    assert 'ipx_console=""' in out.headers["set-cookie"] or "Max-Age=0" in out.headers["set-cookie"]
    assert browser.get("/ui/keys").status_code == 303
    replayed = httpx.get(server.url + "/ui/keys", cookies={"ipx_console": value})  # a copy of the old cookie
    assert replayed.status_code == 303


def test_secure_cookie_when_configured(fake_openai: FakeOpenAI) -> None:
    config = openai_config(fake_openai)
    config["console"] = {"secure_cookie": True, "session_ttl_s": 600}
    with GatewayServer(config) as gateway:
        answer = httpx.post(gateway.url + "/ui/login", data={"key": gateway.master_key})
        cookie = SimpleCookie(answer.headers["set-cookie"])["ipx_console"]
        assert cookie["secure"] and cookie["max-age"] == "600"


def test_the_console_can_be_switched_off(fake_openai: FakeOpenAI) -> None:
    config = openai_config(fake_openai)
    config["console"] = {"enabled": False}
    with GatewayServer(config) as gateway:
        assert httpx.get(gateway.url + "/ui/login").status_code == 404


# ---- CSRF ------------------------------------------------------------------------------------------------


def test_a_change_without_the_token_or_from_another_origin_is_refused(server: GatewayServer, browser: Browser) -> None:
    before = len(_admin(server, "GET", "/admin/keys").json()["data"])
    token = _csrf(browser.get("/ui/keys").text)
    form = {"name": "csrf-probe", "scopes": "chat"}
    attempts = [
        ({}, {}),
        ({"csrf": "not-the-token"}, {}),
        ({"csrf": token}, {"origin": "https://evil.example"}),
        ({"csrf": token}, {"referer": "https://evil.example/page"}),
        ({"csrf": token}, {"sec-fetch-site": "cross-site"}),
    ]
    for extra, headers in attempts:
        answer = browser.http.post("/ui/keys", data={**form, **extra}, headers=headers)
        assert answer.status_code == 403, (extra, headers)
        assert 'data-testid="error-message"' in answer.text
    assert len(_admin(server, "GET", "/admin/keys").json()["data"]) == before
    # the same form from this origin with its token (a form field, or htmx's header) is taken
    own = {"origin": server.url}
    assert browser.http.post("/ui/keys", data={**form, "csrf": token}, headers=own).status_code == 200
    htmx = browser.http.post("/ui/keys", data=form, headers={**own, "x-csrf-token": token})
    assert htmx.status_code == 200
    assert len(_admin(server, "GET", "/admin/keys").json()["data"]) == before + 2


def test_sign_in_from_another_origin_is_refused(server: GatewayServer) -> None:
    answer = httpx.post(
        server.url + "/ui/login", data={"key": server.master_key}, headers={"origin": "https://evil.example"}
    )
    assert answer.status_code == 403 and "set-cookie" not in answer.headers


def test_another_session_s_token_is_refused(server: GatewayServer, browser: Browser) -> None:
    other = Browser(server)
    other.sign_in(server.master_key)
    foreign = _csrf(other.get("/ui/keys").text)
    assert browser.http.post("/ui/keys", data={"name": "x", "csrf": foreign}).status_code == 403
