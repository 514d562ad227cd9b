"""The console's sign-in, sessions, CSRF defence and forms, driven over HTTP as a browser would (httpx with
cookies, urlencoded forms), and their effect checked where it matters: through the admin API and through
the API with the keys the pages made (the openai SDK)."""

from __future__ import annotations

import datetime as dt
import re
import sqlite3
from collections.abc import Iterator
from http.cookies import SimpleCookie
from pathlib import Path

import httpx
import openai
import pytest

from tests.accounts.conftest import own_database
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


def test_an_expired_session_sends_to_the_sign_in_page(server: GatewayServer) -> None:
    browser = Browser(server)
    browser.sign_in(server.master_key)
    token = _csrf(browser.get("/ui/keys").text)
    with sqlite3.connect(Path(server.config.server.data_dir) / "inferplex.db") as conn:
        conn.execute("UPDATE console_sessions SET expires_at = 1 WHERE csrf = ?", (token,))
    assert browser.get("/ui/keys").status_code == 303


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


def test_an_admin_key_is_refused_from_an_address_it_may_not_use(server: GatewayServer) -> None:
    body = {"name": "fenced", "scopes": ["admin"], "allowed_ips": ["10.0.0.0/8"]}
    made = _admin(server, "POST", "/admin/keys", json=body).json()
    refused = Browser(server).sign_in(made["key"])  # from 127.0.0.1
    assert refused.status_code == 403 and "set-cookie" not in refused.headers
    # signed in from an allowed address, then fenced off: the next page sends to the sign-in page
    body["allowed_ips"] = ["127.0.0.0/8"]
    made = _admin(server, "POST", "/admin/keys", json=body).json()
    browser = Browser(server)
    assert browser.sign_in(made["key"]).status_code == 303
    assert browser.get("/ui/keys").status_code == 200
    assert _admin(server, "PATCH", f"/admin/keys/{made['id']}", json={"allowed_ips": ["10.0.0.0/8"]}).status_code == 200
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


def test_an_allowed_origin_is_accepted_behind_a_proxy_that_rewrites_host(fake_openai: FakeOpenAI) -> None:
    config = openai_config(fake_openai)
    config["console"] = {"allowed_origins": ["https://console.example.com"]}
    with GatewayServer(config) as gateway:
        for origin, status in (("https://console.example.com", 303), ("https://other.example.com", 403)):
            answer = httpx.post(gateway.url + "/ui/login", data={"key": gateway.master_key}, headers={"origin": origin})
            assert answer.status_code == status, origin


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


# ---- keys ------------------------------------------------------------------------------------------------


def _new_key(browser: Browser, **form: object) -> tuple[str, str]:
    """Create a key through the page: (its id, the secret the page showed once)."""
    created = browser.post("/ui/keys", {"scopes_shown": "1", **form})
    assert created.status_code == 200, created.text
    secret = _testid(created.text, "new-secret")
    found = re.search(r'href="/ui/keys/(key_[^"]+)"', created.text)
    assert found
    return found.group(1), secret


def test_a_key_made_in_the_page_has_every_field_and_works_through_the_api(
    server: GatewayServer, browser: Browser
) -> None:
    account = _admin(server, "POST", "/admin/accounts", json={"name": "acme", "credits_micros": 10**9}).json()
    key_id, secret = _new_key(
        browser,
        name="web",
        account_id=account["id"],
        scopes=["chat", "models:read"],
        allowed_models="echo-*, embed-model",
        allowed_ips="127.0.0.1, 10.0.0.0/8",
        tags="team-a, beta",
        rpm="120",
        tpm="50000",
        max_concurrent="4",
        monthly_cap_micros="5000000",
        expires_at="2099-01-02T03:04",
        metadata='{"owner": "ana"}',
        default_processors="",
        enforced_processors="",
        limit_rules='[{"metric": "requests", "period": "day", "max": 1000}]',
        user_limit_rules="",
    )
    stored = _admin(server, "GET", f"/admin/keys/{key_id}").json()
    assert stored["name"] == "web" and stored["account_id"] == account["id"]
    assert stored["scopes"] == ["chat", "models:read"]
    assert stored["allowed_models"] == ["echo-*", "embed-model"]
    assert stored["allowed_ips"] == ["127.0.0.1", "10.0.0.0/8"]
    assert stored["tags"] == ["team-a", "beta"] and stored["metadata"] == {"owner": "ana"}
    assert (stored["rpm"], stored["tpm"], stored["max_concurrent"]) == (120, 50000, 4)
    assert stored["monthly_cap_micros"] == 5_000_000
    assert stored["expires_at"] == dt.datetime(2099, 1, 2, 3, 4, tzinfo=dt.UTC).timestamp()
    assert stored["limit_rules"][0]["max"] == 1000
    assert secret.startswith("ipx-") and stored["prefix"] in secret
    answer = _client(server, secret).chat.completions.create(model="echo-model", messages=HI)  # type: ignore[arg-type]
    assert answer.choices[0].message.content
    # the secret was shown once: neither the key's page nor the list shows it again
    for path in (f"/ui/keys/{key_id}", "/ui/keys", f"/ui/accounts/{account['id']}"):
        assert secret not in browser.get(path).text
    listed = browser.get("/ui/keys").text
    assert f'data-testid="key-row" data-key-id="{key_id}"' in listed


def test_a_refused_key_form_names_the_field_and_creates_nothing(server: GatewayServer, browser: Browser) -> None:
    before = len(_admin(server, "GET", "/admin/keys").json()["data"])
    for field, value, said in (
        ("allowed_ips", "not-an-ip", "allowed_ips"),
        ("rpm", "many", "rpm"),
        ("rpm", "0", "rpm"),
        ("metadata", "[1]", "metadata"),
        ("enforced_processors", "no-such-processor", "enforced_processors"),
        ("account_id", "acct_missing", "account"),
        ("name", "", "name"),
    ):
        refused = browser.post("/ui/keys", {"name": "bad", "scopes": "chat", field: value})
        assert refused.status_code == 400, (field, refused.text)
        assert said in _testid(refused.text, "form-error"), field
        assert 'data-testid="key-create-form"' in refused.text  # the form comes back, filled in
    assert len(_admin(server, "GET", "/admin/keys").json()["data"]) == before


def test_editing_a_key_in_the_page_changes_what_the_api_allows(server: GatewayServer, browser: Browser) -> None:
    key_id, secret = _new_key(browser, name="edit-me", scopes=["chat"], credits_micros="100000000", rpm="10")
    client = _client(server, secret)
    client.chat.completions.create(model="echo-model", messages=HI)  # type: ignore[arg-type]
    page = browser.get(f"/ui/keys/{key_id}").text
    assert 'value="10"' in page and _testid(page, "key-status") == "active"
    edit = {
        "name": "edited",
        "scopes_shown": "1",
        "scopes": ["embeddings"],
        "rpm": "",
        "tpm": "777",
        "max_concurrent": "",
        "monthly_cap_micros": "",
        "allowed_models": "embed-*",
        "allowed_ips": "",
        "tags": "x",
        "expires_at": "",
        "metadata": "",
        "default_processors": "",
        "enforced_processors": "",
        "limit_rules": "",
        "user_limit_rules": "",
    }
    saved = browser.post(f"/ui/keys/{key_id}", edit)
    assert (saved.status_code, saved.headers["location"]) == (303, f"/ui/keys/{key_id}")
    stored = _admin(server, "GET", f"/admin/keys/{key_id}").json()
    assert stored["name"] == "edited" and stored["scopes"] == ["embeddings"]
    assert stored["rpm"] is None and stored["tpm"] == 777 and stored["allowed_models"] == ["embed-*"]
    with pytest.raises(openai.PermissionDeniedError):  # no longer has the chat scope
        client.chat.completions.create(model="echo-model", messages=HI)  # type: ignore[arg-type]
    assert client.embeddings.create(model="embed-model", input="hi").data
    # a refused edit changes nothing and says why
    refused = browser.post(f"/ui/keys/{key_id}", {**edit, "tpm": "-5"})
    assert refused.status_code == 400 and "tpm" in _testid(refused.text, "form-error")
    assert _admin(server, "GET", f"/admin/keys/{key_id}").json()["tpm"] == 777


def test_rotating_and_revoking_a_key_in_the_page(server: GatewayServer, browser: Browser) -> None:
    key_id, old = _new_key(browser, name="rot", scopes=["chat"], credits_micros="100000000")
    rotated = browser.post(f"/ui/keys/{key_id}/rotate", page=f"/ui/keys/{key_id}")
    assert rotated.status_code == 200
    new = _testid(rotated.text, "new-secret")
    assert new != old and old not in rotated.text
    with pytest.raises(openai.AuthenticationError):
        _client(server, old).chat.completions.create(model="echo-model", messages=HI)  # type: ignore[arg-type]
    _client(server, new).chat.completions.create(model="echo-model", messages=HI)  # type: ignore[arg-type]
    revoked = browser.post(f"/ui/keys/{key_id}/revoke", page=f"/ui/keys/{key_id}")
    assert (revoked.status_code, revoked.headers["location"]) == (303, f"/ui/keys/{key_id}")
    page = browser.get(f"/ui/keys/{key_id}").text
    assert _testid(page, "key-status") == "revoked" and 'data-testid="key-revoke"' not in page
    with pytest.raises(openai.AuthenticationError):
        _client(server, new).chat.completions.create(model="echo-model", messages=HI)  # type: ignore[arg-type]
    assert _admin(server, "GET", f"/admin/keys/{key_id}").json()["revoked_at"] is not None


def test_unknown_ids_and_bad_parameters_are_pages_with_their_status(browser: Browser) -> None:
    assert browser.get("/ui/keys/key_nope").status_code == 404
    assert browser.get("/ui/accounts/acct_nope").status_code == 404
    assert browser.get("/ui/keys/a%00b").status_code == 400
    assert browser.get("/ui/accounts", params={"x": "\x00"}).status_code == 400
    missing = browser.get("/ui/static/nope.js")
    assert missing.status_code == 404 and missing.headers["content-type"].startswith("text/html")
    assert browser.get("/ui/static/htmx.min.js").headers["content-type"].startswith("text/javascript")


# ---- accounts and credits ----------------------------------------------------------------------------------


def test_accounts_top_up_adjust_and_the_ledger(server: GatewayServer, browser: Browser) -> None:
    made = browser.post("/ui/accounts", {"name": "shop", "credits_micros": "1000000", "rpm": "60"})
    assert made.status_code == 303
    account_id = made.headers["location"].rsplit("/", 1)[1]
    listed = browser.get("/ui/accounts").text
    assert f'data-testid="account-row" data-account-id="{account_id}"' in listed
    page = f"/ui/accounts/{account_id}"
    topped = browser.post(page + "/credits", {"amount": "12.50", "kind": "topup", "note": "invoice 7"}, page=page)
    assert (topped.status_code, topped.headers["location"]) == (303, page)
    adjusted = browser.post(page + "/credits", {"amount": "-0.25", "kind": "adjust"}, page=page)
    assert adjusted.status_code == 303
    account = _admin(server, "GET", f"/admin/accounts/{account_id}").json()
    assert account["balance_micros"] == 1_000_000 + 12_500_000 - 250_000 and account["rpm"] == 60
    shown = browser.get(page).text
    assert _testid(shown, "account-balance") == "$13.25"
    rows = re.findall(r'data-testid="ledger-row"', shown)
    assert len(rows) == 3 and "invoice 7" in shown
    for bad in ("abc", "1.0000001", "", "NaN", "1e30"):
        refused = browser.post(page + "/credits", {"amount": bad, "kind": "topup"}, page=page)
        assert refused.status_code == 400, bad
        assert _testid(refused.text, "credit-error")
    assert _admin(server, "GET", f"/admin/accounts/{account_id}").json()["balance_micros"] == 13_250_000
    edited = browser.post(page, {"name": "shop2", "rpm": "", "tpm": "9", "max_concurrent": "", "monthly_cap_micros": "",
                                 "limit_rules": ""})  # fmt: skip
    assert edited.status_code == 303
    account = _admin(server, "GET", f"/admin/accounts/{account_id}").json()
    assert (account["name"], account["rpm"], account["tpm"]) == ("shop2", None, 9)


def test_the_ledger_pages_by_cursor(server: GatewayServer, browser: Browser) -> None:
    account_id = _admin(server, "POST", "/admin/accounts", json={"name": "many"}).json()["id"]
    for n in range(1, 56):
        credit = {"amount_micros": n, "note": f"n{n}"}
        assert _admin(server, "POST", f"/admin/accounts/{account_id}/credits", json=credit).status_code == 200
    first = browser.get(f"/ui/accounts/{account_id}").text
    ids = [int(i) for i in re.findall(r'data-testid="ledger-row" data-entry-id="(\d+)"', first)]
    assert len(ids) == 50 and ids == sorted(ids, reverse=True)
    older = re.search(r'href="([^"]+)" data-testid="ledger-older"', first)
    assert older
    second = browser.get(older.group(1).replace("&amp;", "&")).text
    rest = [int(i) for i in re.findall(r'data-testid="ledger-row" data-entry-id="(\d+)"', second)]
    assert len(rest) == 5 and max(rest) < min(ids) and 'data-testid="ledger-older"' not in second
    assert browser.get(f"/ui/accounts/{account_id}", params={"before": "x"}).status_code == 400


def test_sessions_and_forms_on_postgresql(fake_openai: FakeOpenAI) -> None:
    config = openai_config(fake_openai)
    with own_database("inferplex_console_") as url:
        config["storage"] = {"database_url": url}
        with GatewayServer(config) as gateway:
            browser = Browser(gateway)
            assert browser.sign_in(gateway.master_key).status_code == 303
            key_id, secret = _new_key(browser, name="pg", scopes=["chat"], credits_micros="100000000")
            _client(gateway, secret).chat.completions.create(model="echo-model", messages=HI)  # type: ignore[arg-type]
            assert browser.post(f"/ui/keys/{key_id}/revoke", page=f"/ui/keys/{key_id}").status_code == 303
            with pytest.raises(openai.AuthenticationError):
                _client(gateway, secret).chat.completions.create(model="echo-model", messages=HI)  # type: ignore[arg-type]
            assert browser.get("/ui/keys/a%00b").status_code == 400  # NUL never reaches PostgreSQL
            assert browser.post("/ui/logout", page="/ui/keys").status_code == 303
            assert browser.get("/ui/keys").status_code == 303


def test_a_key_s_and_an_account_s_traffic_links_open(server: GatewayServer, browser: Browser) -> None:
    key = _admin(server, "POST", "/admin/keys", json={"name": "linked"}).json()
    for page, testids in (
        (f"/ui/keys/{key['id']}", ("key-requests", "key-usage")),
        (f"/ui/accounts/{key['account_id']}", ("account-requests", "account-usage")),
    ):
        html = browser.get(page).text
        for testid in testids:
            link = re.search(rf'href="([^"]+)" data-testid="{testid}"', html)
            assert link, testid
            assert browser.get(link.group(1).replace("&amp;", "&")).status_code == 200, testid
