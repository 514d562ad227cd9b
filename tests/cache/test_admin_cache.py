"""`GET /admin/cache` and `POST /admin/cache/purge` through HTTP, as an operator's script uses them.

- The state: the store's entries and bytes, and the hit rate over a window read from the usage rows, overall
  and by model; answers fit what /openapi.json documents.
- A purge by model, namespace, key, entry, scope or everything removes exactly the entries it selects: the
  next such request is a miss (the fake upstream sees another call) while every other entry still hits.
- Refusals in the admin API's error shape: a body that selects nothing, or `all` with a selector, an unknown
  field, a wrong type, NUL, not JSON (400, naming the field); the cache off (409 `cache_disabled`); a caller
  without the admin scope (401/403).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from inferplex.admin.openapi import openapi_document
from inferplex.store.engine import default_url, open_database
from inferplex.store.usage import UsageStore
from tests.cache.support_ops import Operator, ask, cached_config, prompt, scrape, total, upstream_calls, usage_row
from tests.conftest import openai_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer, free_port

SECOND = {"name": "echo-two", "deployments": [{"provider": "fake", "model": "gpt-echo"}]}


def _config(fake: FakeOpenAI) -> dict[str, Any]:
    config = cached_config(fake)
    config["models"].append(SECOND)
    return config


@pytest.fixture(scope="module")
def cached_gateway(fake_openai: FakeOpenAI) -> Iterator[GatewayServer]:
    with GatewayServer(_config(fake_openai)) as gateway:
        yield gateway


def fits(path: str, method: str, response: httpx.Response) -> None:
    """The answer's body fits the schema /openapi.json documents for its status."""
    document = openapi_document()
    responses = document["paths"][path][method]["responses"]
    assert str(response.status_code) in responses, f"{method} {path}: undocumented {response.status_code}"
    schema = responses[str(response.status_code)]["content"]["application/json"]["schema"]
    validator = Draft202012Validator({**schema, "components": document["components"]})
    problems = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(response.json())]
    assert not problems, problems


def test_the_state_shows_the_store_and_the_hit_rate_by_model(
    cached_gateway: GatewayServer, operator: Operator, fake_openai: FakeOpenAI
) -> None:
    before = operator.cache()
    assert before["enabled"] is True and before["backend"] == "memory" and before["max_bytes"] == 256 * 1024 * 1024
    one, two = prompt("state one"), prompt("state two")
    for _ in range(3):
        ask(cached_gateway, one)
    ask(cached_gateway, two, model="echo-two")
    ask(cached_gateway, two, model="echo-two", extra_headers={"x-inferplex-cache": "bypass"})
    assert upstream_calls(fake_openai, one) == 1 and upstream_calls(fake_openai, two) == 2

    r = operator.http.get("/admin/cache")
    fits("/admin/cache", "get", r)
    after = r.json()
    assert after["entries"] == before["entries"] + 2
    assert after["bytes"] > before["bytes"]
    window = after["window"]
    assert window["window_s"] == 86400 and abs(window["since"] - (time.time() - 86400)) < 60
    gained = {k: window[k] - before["window"][k] for k in ("hits", "misses", "bypass", "semantic_hits", "requests")}
    assert gained == {"hits": 2, "misses": 2, "bypass": 1, "semantic_hits": 0, "requests": 5}
    models = {m["model"]: m for m in window["by_model"]}
    assert models["echo-two"] == {
        "model": "echo-two", "requests": 2, "hits": 0, "semantic_hits": 0, "misses": 1, "bypass": 1, "hit_rate": 0.0
    }  # fmt: skip
    echo = models["echo-model"]
    assert echo["hit_rate"] == round(echo["hits"] / (echo["hits"] + echo["misses"]), 6) and echo["hits"] >= 2
    total = window["hits"] + window["misses"]
    assert window["hit_rate"] == round(window["hits"] / total, 6)


def test_the_window_counts_only_its_own_rows(cached_gateway: GatewayServer, operator: Operator) -> None:
    text = prompt("window")
    ask(cached_gateway, text)
    time.sleep(1.2)
    _, headers = ask(cached_gateway, text)
    operator.request_row(headers["x-inferplex-request-id"])
    recent = operator.cache(window_s=1)["window"]
    assert (recent["hits"], recent["misses"]) == (1, 0) and recent["hit_rate"] == 1.0
    assert recent["window_s"] == 1


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "soon", "40000000"])
def test_a_bad_window_is_refused_naming_it(operator: Operator, value: str) -> None:
    r = operator.http.get("/admin/cache", params={"window_s": value})
    assert r.status_code == 400 and r.json()["error"]["param"] == "window_s"
    fits("/admin/cache", "get", r)


def test_an_unknown_query_parameter_is_refused(operator: Operator) -> None:
    r = operator.http.get("/admin/cache", params={"window": "60"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "window"


# ---- purges ---------------------------------------------------------------------------------------------------


@pytest.fixture
def fresh(fake_openai: FakeOpenAI) -> Iterator[tuple[GatewayServer, Operator]]:
    """A gateway of the test's own: its store holds exactly the entries the test made."""
    with GatewayServer(_config(fake_openai)) as gateway:
        op = Operator(gateway)
        yield gateway, op
        op.close()


class Entries:
    """Requests that each stored one entry, and whether asking again still hits."""

    def __init__(self, gateway: GatewayServer, fake: FakeOpenAI) -> None:
        self.gateway, self.fake = gateway, fake
        self.made: dict[str, tuple[str, dict[str, Any]]] = {}
        self.entry: dict[str, str] = {}

    def make(self, name: str, **how: Any) -> None:
        text = prompt(name)
        _, headers = ask(self.gateway, text, **how)
        assert headers["x-inferplex-cache"] == "miss"
        self.made[name] = (text, how)
        self.entry[name] = headers["x-inferplex-cache-entry"]

    def hits(self) -> dict[str, bool]:
        """Each entry: asked again, was it a hit? (A miss stores it again, so ask once per purge.)"""
        out = {}
        for name, (text, how) in self.made.items():
            calls = upstream_calls(self.fake, text)
            _, headers = ask(self.gateway, text, **how)
            hit = headers["x-inferplex-cache"] == "hit"
            assert upstream_calls(self.fake, text) == calls + (0 if hit else 1)  # a miss went upstream
            out[name] = hit
        return out


def test_a_purge_removes_exactly_what_it_selects(
    fresh: tuple[GatewayServer, Operator], fake_openai: FakeOpenAI
) -> None:
    gateway, op = fresh
    key_id, secret, _ = op.key("purge-test", scopes=["chat"])
    _, other_secret, other_account = op.key("purge-other", scopes=["chat"])
    e = Entries(gateway, fake_openai)
    e.make("plain")
    e.make("second-model", model="echo-two")
    e.make("namespaced", extra_headers={"x-inferplex-cache": "namespace=team-a"})
    e.make("namespaced-two", model="echo-two", extra_headers={"x-inferplex-cache": "namespace=team-a"})
    e.make("keyed", key=secret)
    e.make("other-key", key=other_secret)
    e.make("by-entry")
    assert op.cache()["entries"] == 7

    def purge(expected: int, **body: Any) -> dict[str, bool]:
        r = op.http.post("/admin/cache/purge", json=body)
        fits("/admin/cache/purge", "post", r)
        assert r.status_code == 200 and r.json() == {"object": "cache.purge", "purged": expected}, (body, r.text)
        return e.hits()

    everything = dict.fromkeys(e.made, True)
    # a model and a namespace: only that model's entries in that namespace
    assert purge(1, model="echo-two", namespace="team-a") == {**everything, "namespaced-two": False}
    assert purge(2, namespace="team-a") == {**everything, "namespaced": False, "namespaced-two": False}
    assert purge(2, model="echo-two") == {**everything, "second-model": False, "namespaced-two": False}
    assert purge(1, key_id=key_id) == {**everything, "keyed": False}
    assert purge(1, scope=f"account:{other_account}") == {**everything, "other-key": False}
    assert purge(1, entry=e.entry["by-entry"]) == {**everything, "by-entry": False}
    assert purge(0, entry="0" * 64) == everything
    assert purge(7, all=True) == dict.fromkeys(e.made, False)
    assert op.cache()["entries"] == 7  # each asked again, so stored again


BAD_BODIES: list[tuple[Any, str | None, str]] = [
    ({}, None, "name what to purge"),
    ({"all": False}, None, "name what to purge"),
    ({"all": True, "model": "echo-model"}, None, "give it alone"),
    ({"model": ""}, "model", "at least 1 character"),
    ({"model": 5}, "model", "valid string"),
    ({"all": "yes"}, "all", "valid boolean"),
    ({"modle": "echo-model"}, "modle", "Extra inputs"),
    ({"namespace": "a\u0000b"}, "namespace", "NUL"),
    ({"entry": "x" * 129}, "entry", "at most 128"),
    ([], None, "valid dictionary"),
]


@pytest.mark.parametrize(("body", "param", "says"), BAD_BODIES)
def test_a_bad_purge_body_is_a_400_naming_its_field(
    operator: Operator, body: Any, param: str | None, says: str
) -> None:
    r = operator.http.post("/admin/cache/purge", json=body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and says in error["message"] and error["type"] == "invalid_request_error"
    fits("/admin/cache/purge", "post", r)


def test_a_purge_that_is_not_json_is_refused(operator: Operator) -> None:
    assert (
        operator.http.post(
            "/admin/cache/purge", content=b"{model", headers={"content-type": "application/json"}
        ).status_code
        == 400
    )
    assert operator.http.post("/admin/cache/purge", content=b"model=x").status_code == 415


def test_only_an_admin_may_read_or_purge(cached_gateway: GatewayServer, operator: Operator) -> None:
    _, secret, _ = operator.key("not-admin", scopes=["chat"])
    with httpx.Client(base_url=cached_gateway.url) as http:
        assert http.get("/admin/cache").status_code == 401
        assert http.post("/admin/cache/purge", json={"all": True}).status_code == 401
        keyed = {"Authorization": f"Bearer {secret}"}
        assert http.get("/admin/cache", headers=keyed).status_code == 403
        refused = http.post("/admin/cache/purge", json={"all": True}, headers=keyed)
        assert refused.status_code == 403 and refused.json()["error"]["type"]


def test_with_the_cache_off_the_state_says_so_and_a_purge_is_a_409(fake_openai: FakeOpenAI) -> None:
    with GatewayServer(openai_config(fake_openai)) as gateway:
        op = Operator(gateway)
        try:
            ask(gateway, prompt("off"))
            r = op.http.get("/admin/cache")
            fits("/admin/cache", "get", r)
            state = r.json()
            assert state["enabled"] is False
            assert [state[k] for k in ("backend", "entries", "bytes", "vectors", "max_bytes")] == [None] * 5
            assert state["window"]["requests"] == 0 and state["window"]["hit_rate"] is None
            refused = op.http.post("/admin/cache/purge", json={"all": True})
            fits("/admin/cache/purge", "post", refused)
            assert refused.status_code == 409
            assert (
                refused.json()["error"]["code"] == "cache_disabled"
                and "cache.enabled" in refused.json()["error"]["message"]
            )
        finally:
            op.close()


def test_the_hit_rate_is_the_fleet_s_read_from_every_replica_s_rows(
    fresh: tuple[GatewayServer, Operator], fake_openai: FakeOpenAI
) -> None:
    """Rows another replica logged into the shared store count in this one's window (semantic hits too: each
    replica's answers are in the usage table, whichever of them is asked)."""
    gateway, op = fresh
    text = prompt("fleet")
    ask(gateway, text)
    _, hit = ask(gateway, text)
    op.request_row(hit["x-inferplex-request-id"])
    now = time.time()
    elsewhere = [usage_row(f"other-{i}", created_at=now, model="echo-model", cache=c) for i, c in
                 enumerate(["semantic-hit", "semantic-hit", "miss", "bypass"])]  # fmt: skip
    elsewhere.append(usage_row("other-old", created_at=now - 7200, model="echo-model", cache="hit"))

    async def logged_by_another_replica() -> None:
        db = open_database(default_url(gateway.config.server.data_dir))
        try:
            await UsageStore(db).append(elsewhere)
        finally:
            await db.aclose()

    asyncio.run(logged_by_another_replica())
    window = op.cache(window_s=3600)["window"]
    assert {k: window[k] for k in ("hits", "semantic_hits", "misses", "bypass", "requests")} == {
        "hits": 1, "semantic_hits": 2, "misses": 2, "bypass": 1, "requests": 6
    }  # fmt: skip
    assert window["hit_rate"] == 0.6  # (1 + 2) / (1 + 2 + 2): a bypass made no lookup
    assert window["by_model"] == [
        {"model": "echo-model", "requests": 6, "hits": 1, "semantic_hits": 2, "misses": 2, "bypass": 1,
         "hit_rate": 0.6}
    ]  # fmt: skip
    assert op.cache(window_s=3 * 3600)["window"]["hits"] == 2  # the older row, in a longer window


def test_a_store_that_cannot_be_reached_is_a_503_and_metrics_go_on(fake_openai: FakeOpenAI) -> None:
    config = cached_config(fake_openai, backend="redis", redis_url=f"redis://127.0.0.1:{free_port()}/0")
    with GatewayServer(config) as gateway:
        op = Operator(gateway)
        try:
            for answer in (op.http.get("/admin/cache"), op.http.post("/admin/cache/purge", json={"all": True})):
                assert answer.status_code == 503, answer.text
                assert answer.json()["error"]["code"] == "cache_unavailable"
                assert "try again shortly" in answer.json()["error"]["message"]
            fits("/admin/cache", "get", op.http.get("/admin/cache"))
            samples = scrape(gateway)  # served, without the sizes it could not read
            assert not [k for k in samples if k[0].startswith("inferplex_cache_entries")]
            refused = total(samples, "inferplex_requests_total", route="/admin/cache", status="503")
            assert (
                refused == 2 and total(samples, "inferplex_requests_total", error_type="gateway.store_unavailable") == 3
            )
        finally:
            op.close()
