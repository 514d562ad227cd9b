"""Unify's custom keys and endpoints through HTTP: register an account's own OpenAI-compatible upstream, call
it as `name@custom`, and check what a caller must never get: another account's endpoint, a key read back,
a key in the database in the clear, or a connection to the gateway's own network.

The requests are the ones Unify's service tests and the unifyai SDK send (every argument a query
parameter). Two gateways: one whose operator allows private addresses (the fake upstreams listen on
127.0.0.1), and one that does not, for the refusals. Name lookups go through a resolver the test controls
(`addresses.lookup`, read on every check), so a DNS answer can change between registration and the call.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from inferplex.custom_endpoints import addresses
from inferplex.custom_endpoints.store import CustomStore
from inferplex.store.engine import open_database
from tests.accounts.conftest import pg_url  # noqa: F401
from tests.conftest import openai_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer
from tests.migrating import down_and_up

UPSTREAM_KEY = "sk-own-upstream-0123456789-abcd"
SECRET_ENV = "IPX_TEST_CUSTOM_ENDPOINTS_KEY"
USER = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def own_upstream() -> Iterator[FakeOpenAI]:
    """The account's own upstream: it answers only when sent UPSTREAM_KEY."""
    fake = FakeOpenAI(api_key=UPSTREAM_KEY).start()
    yield fake
    fake.stop()


def _gateway(fake: FakeOpenAI, allow_private: bool) -> GatewayServer:
    os.environ[SECRET_ENV] = "a-test-secret-of-enough-length-0123456789"
    config: dict[str, Any] = openai_config(fake)
    config["custom_endpoints"] = {"encryption_key": f"env:{SECRET_ENV}", "allow_private_addresses": allow_private}
    return GatewayServer(config)


@pytest.fixture(scope="module")
def open_gw(fake_openai: FakeOpenAI) -> Iterator[GatewayServer]:
    with _gateway(fake_openai, allow_private=True) as server:
        yield server


@pytest.fixture(scope="module")
def strict_gw(fake_openai: FakeOpenAI) -> Iterator[GatewayServer]:
    with _gateway(fake_openai, allow_private=False) as server:
        yield server


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """Host name -> the answers of its next lookups, in turn (the last one stays); an answer is its
    addresses separated by spaces."""
    answers: dict[str, list[str]] = {}

    async def lookup(host: str, port: int) -> list[str]:
        queue = answers.get(host)
        if not queue:
            raise OSError(f"{host} does not resolve")
        return (queue.pop(0) if len(queue) > 1 else queue[0]).split()

    monkeypatch.setattr(addresses, "lookup", lookup)
    return answers


class Account:
    """A key of an account of its own, speaking as unifyai does."""

    def __init__(self, gw: GatewayServer) -> None:
        resp = httpx.post(
            gw.url + "/admin/keys", json={"name": "unify-custom", "credits_micros": 1_000_000}, headers=gw.auth
        )
        assert resp.status_code in (200, 201), resp.text
        self.gw, self.id = gw, resp.json()["account_id"]
        self.headers = {"Authorization": f"Bearer {resp.json()['key']}", "accept": "application/json"}

    def call(self, method: str, path: str, **params: Any) -> httpx.Response:
        return httpx.request(method, self.gw.url + path, params=params, headers=self.headers, timeout=10)

    def chat(self, model: str, path: str = "/v0/chat/completions", **extra: Any) -> httpx.Response:
        body = {"model": model, "messages": USER, **extra}
        return httpx.post(self.gw.url + path, json=body, headers=self.headers, timeout=10)

    def register(self, name: str, url: str, key_name: str = "own", model_arg: str = "my-model") -> httpx.Response:
        resp = self.call("POST", "/v0/custom_api_key", name=key_name, value=UPSTREAM_KEY)
        assert resp.status_code in (200, 400), resp.text  # 400: the key is already there
        return self.call("POST", "/v0/custom_endpoint", name=name, url=url, key_name=key_name, model_arg=model_arg)


def test_a_custom_endpoint_from_registration_to_chat(open_gw: GatewayServer, own_upstream: FakeOpenAI) -> None:
    me = Account(open_gw)
    created = me.call("POST", "/v0/custom_api_key", name="own", value=UPSTREAM_KEY)
    assert created.status_code == 200 and created.json() == {"info": "API key created successfully!"}
    # The key is never shown again: masked, with its last four characters.
    assert me.call("GET", "/v0/custom_api_key", name="own").json() == {"name": "own", "value": "****abcd"}
    assert me.call("GET", "/v0/custom_api_key/list").json() == [{"name": "own", "value": "****abcd"}]
    resp = me.call(
        "POST",
        "/v0/custom_endpoint",
        name="mine@custom",
        url=own_upstream.base_url,
        key_name="own",
        model_arg="my-model",
    )
    assert resp.status_code == 200 and resp.json() == {"info": "Custom endpoint created successfully!"}
    listed = me.call("GET", "/v0/custom_endpoint/list").json()
    assert listed == [{"name": "mine@custom", "url": own_upstream.base_url, "key": "own", "model_arg": "my-model"}]

    before = len(own_upstream.state.requests)
    for path in ("/v0/chat/completions", "/v1/chat/completions"):
        answer = me.chat("mine@custom", path)
        assert answer.status_code == 200, answer.text
        assert answer.json()["model"] == "mine@custom" and answer.json()["choices"][0]["message"]["content"]
        assert answer.headers["x-inferplex-provider"] == "custom"
        assert answer.headers.get("x-inferplex-cost-micros", "0") == "0"  # no configured price: nothing charged
    sent = own_upstream.state.requests[before:]
    assert len(sent) == 2
    assert all(r.headers["Authorization"] == f"Bearer {UPSTREAM_KEY}" and r.body["model"] == "my-model" for r in sent)

    with httpx.stream(
        "POST",
        open_gw.url + "/v0/chat/completions",
        json={"model": "mine@custom", "messages": USER, "stream": True},
        headers=me.headers,
        timeout=10,
    ) as stream:
        assert stream.status_code == 200
        body = "".join(stream.iter_text())
    assert body.rstrip().endswith("data: [DONE]") and '"mine@custom"' in body
    credits = me.call("GET", "/v0/credits").json()
    assert credits["credits"] == pytest.approx(1.0)  # three calls, nothing charged


def test_rename_and_delete(open_gw: GatewayServer, own_upstream: FakeOpenAI) -> None:
    me = Account(open_gw)
    assert me.register("first@custom", own_upstream.base_url).status_code == 200
    renamed = me.call("POST", "/v0/custom_endpoint/rename", name="first@custom", new_name="second@custom")
    assert renamed.status_code == 200, renamed.text
    assert [e["name"] for e in me.call("GET", "/v0/custom_endpoint/list").json()] == ["second@custom"]
    assert me.chat("first@custom").status_code == 404
    assert me.chat("second@custom").status_code == 200
    # Renaming the key keeps the endpoint working: it points at the key, not at its name.
    assert me.call("POST", "/v0/custom_api_key/rename", name="own", new_name="renamed").status_code == 200
    assert me.call("GET", "/v0/custom_endpoint/list").json()[0]["key"] == "renamed"
    assert me.chat("second@custom").status_code == 200
    gone = me.call("DELETE", "/v0/custom_endpoint", name="second@custom")
    assert gone.status_code == 200 and gone.json() == {"info": "Custom endpoint deleted successfully!"}
    assert me.call("GET", "/v0/custom_endpoint/list").json() == []
    missing = me.call("DELETE", "/v0/custom_endpoint", name="second@custom")
    assert missing.status_code == 404 and missing.json() == {"detail": "Custom endpoint not found."}
    assert me.chat("second@custom").json()["error"]["code"] == "model_not_found"
    assert me.call("DELETE", "/v0/custom_api_key", name="renamed").status_code == 200
    assert me.call("GET", "/v0/custom_api_key/list").json() == []


def test_earlier_sdk_arguments_and_short_keys(open_gw: GatewayServer, own_upstream: FakeOpenAI) -> None:
    """unifyai's earlier `create_custom_endpoint` sends a bare name with `provider` and `model_name`."""
    me = Account(open_gw)
    assert me.call("POST", "/v0/custom_api_key", name="short", value="1234").status_code == 200
    assert me.call("GET", "/v0/custom_api_key", name="short").json() == {"name": "short", "value": "****"}
    resp = me.call(
        "POST",
        "/v0/custom_endpoint",
        name="bare",
        provider="custom",
        url=own_upstream.base_url,
        key_name="short",
        model_name="older-model",
    )
    assert resp.status_code == 200, resp.text
    listed = me.call("GET", "/v0/custom_endpoint/list").json()
    assert listed == [{"name": "bare@custom", "url": own_upstream.base_url, "key": "short", "model_arg": "older-model"}]
    again = me.call("POST", "/v0/custom_endpoint", name="bare@custom", url=own_upstream.base_url, key_name="short")
    assert again.status_code == 400 and "already exists" in again.json()["detail"]


@pytest.mark.parametrize(
    ("params", "status", "where"),
    [
        ({"name": "plain", "url": "https://api.example.com/v1", "key_name": "own"}, 400, "name"),
        ({"name": "x@imaginary-provider", "url": "https://api.example.com/v1", "key_name": "own"}, 400, "name"),
        ({"name": "x@custom", "url": "https://api.example.com/v1", "key_name": "nobody"}, 404, None),
        ({"name": "x@custom", "url": "ftp://api.example.com/", "key_name": "own"}, 400, "url"),
        ({"name": "x@custom", "url": "https://user:pw@api.example.com/", "key_name": "own"}, 400, "url"),
        ({"name": "x@custom", "key_name": "own"}, 422, "url"),
    ],
)
def test_bad_registrations(
    strict_gw: GatewayServer, lookups: dict[str, list[str]], params: dict[str, str], status: int, where: str | None
) -> None:
    lookups["api.example.com"] = ["93.184.216.34"]
    me = Account(strict_gw)
    assert me.call("POST", "/v0/custom_api_key", name="own", value=UPSTREAM_KEY).status_code == 200
    resp = me.call("POST", "/v0/custom_endpoint", **params)
    assert resp.status_code == status, resp.text
    detail = resp.json()["detail"]
    if status == 422:
        assert detail[0]["loc"] == ["query", where]
    elif where is not None:
        assert detail.startswith(f"{where}:")
    else:
        assert detail == "Custom API Key not found."


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/v1",
        "http://localhost.example/v1",  # a name that resolves to loopback
        "http://[::1]/v1",
        "http://169.254.169.254/latest/meta-data",
        "http://[fd00:ec2::254]/",
        "http://10.1.2.3/v1",
        "http://172.16.0.1/v1",
        "http://192.168.1.10/v1",
        "http://100.64.0.1/v1",
        "http://0.0.0.0/v1",
        "http://224.0.0.1/v1",
        "http://[fe80::1]/v1",
        "http://[fc00::1]/v1",
        "http://[::ffff:127.0.0.1]/v1",
        "http://[::ffff:a9fe:a9fe]/v1",
        "http://[64:ff9b::a00:1]/v1",
        "http://2130706433/v1",  # 127.0.0.1 as one integer
        "http://mixed.example/v1",  # one public and one private address: refused
    ],
)
def test_internal_addresses_are_refused(strict_gw: GatewayServer, lookups: dict[str, list[str]], url: str) -> None:
    lookups["localhost.example"] = ["127.0.0.1"]
    lookups["2130706433"] = ["127.0.0.1"]
    me = Account(strict_gw)
    lookups["mixed.example"] = ["93.184.216.34 10.0.0.7"]
    resp = me.register("internal@custom", url)
    assert resp.status_code == 400, resp.text
    assert resp.json()["detail"].startswith("url: its host")
    assert me.call("GET", "/v0/custom_endpoint/list").json() == []


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:4700:4700::1111"])
def test_public_addresses_are_accepted(strict_gw: GatewayServer, lookups: dict[str, list[str]], address: str) -> None:
    lookups["api.public.example"] = [address]
    me = Account(strict_gw)
    assert me.register("public@custom", "https://api.public.example/v1").status_code == 200
    literal = f"https://[{address}]/v1" if ":" in address else f"https://{address}/v1"
    assert me.register("literal@custom", literal).status_code == 200


def test_use_custom_keys_on_a_custom_endpoint_keeps_its_stored_key(
    open_gw: GatewayServer, own_upstream: FakeOpenAI
) -> None:
    me = Account(open_gw)
    assert me.register("stored@custom", own_upstream.base_url).status_code == 200
    resp = httpx.post(
        open_gw.url + "/v0/chat/completions",
        json={"model": "stored@custom", "messages": USER, "use_custom_keys": True},
        headers={**me.headers, "x-provider-api-key": "sk-something-else"},
        timeout=10,
    )
    assert resp.status_code == 200, resp.text
    assert own_upstream.state.last().headers["Authorization"] == f"Bearer {UPSTREAM_KEY}"


def test_a_dns_change_after_registration_does_not_reach_inside(
    strict_gw: GatewayServer, own_upstream: FakeOpenAI, lookups: dict[str, list[str]]
) -> None:
    url = f"http://rebind.example:{own_upstream.port}/v1"
    lookups["rebind.example"] = ["93.184.216.34"]  # public when registered
    me = Account(strict_gw)
    assert me.register("rebind@custom", url).status_code == 200
    before = len(own_upstream.state.requests)
    lookups["rebind.example"] = ["127.0.0.1"]  # then the name is pointed inside
    resp = me.chat("rebind@custom")
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["code"] == "custom_endpoint_address_refused"
    # The check before the call passes, the connection's own lookup turns internal: the connection is refused.
    lookups["rebind.example"] = ["93.184.216.34", "127.0.0.1"]
    resp = me.chat("rebind@custom")
    # (the router's retry then meets the internal answer in the check before the call: the same 400)
    assert resp.status_code in (400, 502), resp.text
    assert len(own_upstream.state.requests) == before  # the upstream on 127.0.0.1 was never reached


def test_the_connection_goes_to_the_checked_address(
    open_gw: GatewayServer, own_upstream: FakeOpenAI, lookups: dict[str, list[str]]
) -> None:
    """`pinned.example` exists only in the test's resolver: a call that reaches the upstream connected to
    the address that resolver answered, and sent the URL's own host name."""
    lookups["pinned.example"] = ["127.0.0.1"]
    me = Account(open_gw)
    assert me.register("pinned@custom", f"http://pinned.example:{own_upstream.port}/v1").status_code == 200
    assert me.chat("pinned@custom").status_code == 200
    assert own_upstream.state.last().headers["Host"] == f"pinned.example:{own_upstream.port}"


def test_an_account_sees_only_its_own(open_gw: GatewayServer, own_upstream: FakeOpenAI) -> None:
    owner, other = Account(open_gw), Account(open_gw)
    assert owner.register("private@custom", own_upstream.base_url).status_code == 200
    resp = other.chat("private@custom")
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "model_not_found"
    assert other.call("GET", "/v0/custom_endpoint/list").json() == []
    assert other.call("GET", "/v0/custom_api_key/list").json() == []
    assert other.call("GET", "/v0/custom_api_key", name="own").status_code == 404
    assert other.call("DELETE", "/v0/custom_endpoint", name="private@custom").status_code == 404
    assert (
        other.call("POST", "/v0/custom_endpoint/rename", name="private@custom", new_name="x@custom").status_code == 404
    )
    # The other account may use the same names for its own.
    assert other.register("private@custom", own_upstream.base_url, model_arg="theirs").status_code == 200
    assert other.chat("private@custom").status_code == 200
    assert own_upstream.state.last().body["model"] == "theirs"
    assert owner.chat("private@custom").status_code == 200
    assert own_upstream.state.last().body["model"] == "my-model"


def test_the_database_holds_no_plaintext_key(open_gw: GatewayServer, own_upstream: FakeOpenAI) -> None:
    me = Account(open_gw)
    assert me.register("sealed@custom", own_upstream.base_url).status_code == 200
    path = Path(open_gw.config.server.data_dir) / "inferplex.db"
    with sqlite3.connect(path) as db:
        sealed = db.execute("SELECT sealed FROM custom_api_keys WHERE account_id = ?", (me.id,)).fetchone()[0]
        dump = "\n".join(db.iterdump())
    assert sealed.startswith("v1.") and UPSTREAM_KEY not in sealed
    assert UPSTREAM_KEY not in dump
    for suffix in ("-wal", ""):
        file = Path(str(path) + suffix)
        if file.exists():
            assert UPSTREAM_KEY.encode() not in file.read_bytes()


def test_without_an_encryption_key_the_routes_are_off(fake_openai: FakeOpenAI) -> None:
    with GatewayServer(openai_config(fake_openai)) as gw:
        resp = httpx.post(gw.url + "/v0/custom_api_key", params={"name": "k", "value": "v" * 20}, headers=gw.auth)
        assert resp.status_code == 403 and "encryption_key" in resp.json()["detail"]
        chat = httpx.post(
            gw.url + "/v0/chat/completions", json={"model": "x@custom", "messages": USER}, headers=gw.auth
        )
        assert chat.status_code == 404


def _migrations(url: str) -> list[set[str]]:
    """The custom tables present after upgrade, downgrade to 0009, and upgrade again."""
    return down_and_up(url, "0009", lambda found: {t for t in found.get_table_names() if t.startswith("custom_")})


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_the_migration_upgrades_and_downgrades(engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}" if engine == "sqlite" else request.getfixturevalue("pg_url")
    both = {"custom_api_keys", "custom_endpoints"}
    assert _migrations(url) == [both, set(), both]


def test_the_store_keeps_accounts_apart_on_postgresql(pg_url: str) -> None:  # noqa: F811
    async def run() -> None:
        db = open_database(pg_url)
        try:
            await db.migrate()
            store = CustomStore(db)
            assert await store.add_key("acc_a", "cak_a", "k", "v1.sealed-a") == "ok"
            assert await store.add_key("acc_a", "cak_a2", "k", "v1.again") == "taken"
            assert await store.add_key("acc_b", "cak_b", "k", "v1.sealed-b") == "ok"
            assert await store.add_endpoint("acc_a", "e", "https://a.example/v1", "cak_a", "m") == "ok"
            assert await store.endpoint("acc_b", "e") is None
            found = await store.endpoint("acc_a", "e")
            assert found is not None and (found.key_name, found.sealed) == ("k", "v1.sealed-a")
            assert await store.rename_endpoint("acc_b", "e", "f") == "missing"
            assert await store.rename_key("acc_a", "k", "k2") == "ok"
            assert [e.key_name for e in await store.endpoints("acc_a")] == ["k2"]
            assert not await store.delete_endpoint("acc_b", "e")
            assert await store.delete_key("acc_a", "k2")
            gone = await store.endpoint("acc_a", "e")
            assert gone is not None and gone.key_id is None
        finally:
            await db.aclose()

    asyncio.run(run())
