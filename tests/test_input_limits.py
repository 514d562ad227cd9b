"""Bodies built to hurt, on every route that reads JSON: nesting past the documented depth, arrays or
objects past the item cap, strings past the length cap. Each is a 400 in the route's own dialect, naming
the top-level field, before anything else reads the body; a body at the cap still works."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.accounts import conftest as acc
from tests.dialects import conftest as seed
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

USER = [{"role": "user", "content": "Say hello."}]
DEPTH = 64  # server.max_json_depth's default (docs/limits.md)
ITEMS = 1000  # this gateway's max_json_items
CHARS = 5000  # this gateway's max_json_string_chars


# The seed gateway's fakes, shared with tests/dialects (fixtures are found by their module-level names).
seed_anthropic, byok_openai, _seed_keys = seed.seed_anthropic, seed.byok_openai, seed._seed_keys


@pytest.fixture(scope="module")
def limited(
    request: pytest.FixtureRequest, fake_openai: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    anthropic, byok = request.getfixturevalue("seed_anthropic"), request.getfixturevalue("byok_openai")
    config = seed.seed_config(fake_openai, anthropic, byok, str(tmp_path_factory.mktemp("limits")))
    config["server"] |= {"max_json_items": ITEMS, "max_json_string_chars": CHARS}
    with GatewayServer(config) as server:
        yield server


def nest(levels: int) -> Any:
    """A value `levels` containers deep, alternating objects and arrays."""
    value: Any = "leaf"
    for i in range(levels):
        value = {"a": value} if i % 2 else [value]
    return value


def schema(levels: int) -> dict[str, Any]:
    """A JSON schema `levels` objects deep (tools[].function.parameters)."""
    value: dict[str, Any] = {"type": "string"}
    for _ in range(levels - 1):
        value = {"type": "object", "properties": {"x": value}}
    return value


# (path, body with `field` nested `levels` deep, dialect)
def chat(field: str, levels: int) -> dict[str, Any]:
    return {"model": "gpt-4o-mini", "messages": USER, field: nest(levels)}


ROUTES: list[tuple[str, Any, str]] = [
    ("/v1/chat/completions", lambda lv: chat("extra", lv), "openai"),
    ("/api/v1/chat/completions", lambda lv: chat("extra", lv), "openai"),
    ("/v0/chat/completions", lambda lv: {**chat("extra", lv), "model": "gpt-4o-mini@openai"}, "openai"),
    ("/v1/ula/chat/completions", lambda lv: {**chat("extra", lv), "provider": "openai"}, "oneinfer"),
    ("/v1/embeddings", lambda lv: {"model": "embed-model", "input": "hi", "extra": nest(lv)}, "openai"),
    (
        "/v1/messages",
        lambda lv: {"model": "claude-sonnet-4-6", "max_tokens": 5, "messages": USER, "extra": nest(lv)},
        "anthropic",
    ),
    (
        "/v1/messages/count_tokens",
        lambda lv: {"model": "claude-sonnet-4-6", "messages": USER, "x": nest(lv)},
        "anthropic",
    ),
    ("/admin/keys", lambda lv: {"name": "deep", "metadata": nest(lv)}, "openai"),
    ("/v1/auth/token", lambda lv: {"ttl_s": 60, "extra": nest(lv)}, "openai"),
]


def assert_refused(resp: httpx.Response, dialect: str, param: str | None, code: str) -> None:
    assert resp.status_code == 400, resp.text
    body = resp.json()
    if dialect == "anthropic":
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        message = body["error"]["message"]
    elif dialect == "oneinfer":
        assert body["api_details"]["api_status"] == "error"
        assert body["error"]["code"] == code and body["error"]["param"] == param
        message = body["error"]["message"]
    else:
        assert set(body["error"]) == {"message", "type", "param", "code"}
        assert body["error"]["code"] == code and body["error"]["param"] == param
        message = body["error"]["message"]
    assert param is None or f"'{param}'" in message


def post(gw: GatewayServer, path: str, body: Any) -> httpx.Response:
    return httpx.post(gw.url + path, json=body, headers=gw.auth, timeout=10)


@pytest.mark.parametrize("levels", [DEPTH, 300])
@pytest.mark.parametrize(("path", "make", "dialect"), ROUTES, ids=[r[0] for r in ROUTES])
def test_nesting_past_the_cap_is_a_400_in_the_dialect(
    limited: GatewayServer, path: str, make: Any, dialect: str, levels: int
) -> None:
    body = make(levels)  # the body object is level 1, so its member is DEPTH + 1 deep at the least
    field = next(k for k, v in body.items() if isinstance(v, list | dict) and k not in ("messages",))
    assert_refused(post(limited, path, body), dialect, field, "json_too_deep")


def test_nesting_inside_tool_parameters_and_anthropic_metadata(limited: GatewayServer) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": schema(200)}}]
    resp = post(limited, "/v1/chat/completions", {"model": "gpt-4o-mini", "messages": USER, "tools": tools})
    assert_refused(resp, "openai", "tools", "json_too_deep")
    wire = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 5,
        "messages": USER,
        "metadata": {"user_id": "u", "x": nest(300)},
    }
    assert_refused(post(limited, "/v1/messages", wire), "anthropic", "metadata", "json_too_deep")


def test_a_body_at_the_depth_cap_is_served(limited: GatewayServer) -> None:
    # tools(2) [0](3) function(4) parameters(5): a schema of DEPTH - 4 levels ends exactly at the cap
    tools = [{"type": "function", "function": {"name": "f", "parameters": schema((DEPTH - 4 + 1) // 2)}}]
    resp = post(limited, "/v1/chat/completions", {"model": "gpt-4o-mini", "messages": USER, "tools": tools})
    assert resp.status_code == 200, resp.text
    resp = post(limited, "/v1/chat/completions", {**chat("extra", DEPTH - 1)})
    assert resp.status_code == 200, resp.text


def test_arrays_and_objects_past_the_item_cap(limited: GatewayServer) -> None:
    resp = post(limited, "/v1/embeddings", {"model": "embed-model", "input": list(range(ITEMS + 1))})
    assert_refused(resp, "openai", "input", "json_too_large")
    many = {f"k{i}": i for i in range(ITEMS + 1)}
    wire = {"model": "claude-sonnet-4-6", "max_tokens": 5, "messages": USER, "metadata": many}
    assert_refused(post(limited, "/v1/messages", wire), "anthropic", "metadata", "json_too_large")
    assert post(limited, "/v1/embeddings", {"model": "embed-model", "input": list(range(ITEMS))}).status_code == 200


def test_strings_past_the_length_cap(limited: GatewayServer) -> None:
    resp = post(
        limited,
        "/v1/chat/completions",
        {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x" * (CHARS + 1)}]},
    )
    assert_refused(resp, "openai", "messages", "string_too_long")
    resp = post(
        limited, "/v1/ula/chat/completions", {"provider": "openai", "model": "x" * (CHARS + 1), "messages": USER}
    )
    assert_refused(resp, "oneinfer", "model", "string_too_long")
    ok = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x" * CHARS}]}
    assert post(limited, "/v1/chat/completions", ok).status_code == 200


def test_oneinfer_form_fields_are_held_to_the_same_caps(limited: GatewayServer) -> None:
    import orjson

    form = {
        "provider": "openai",
        "model": "gpt-4o-mini",
        "messages": orjson.dumps([{"role": "user", "content": nest(200)}]).decode(),
    }
    resp = httpx.post(
        limited.url + "/v1/ula/chat/completions",
        files={k: (None, v) for k, v in form.items()},
        headers=limited.auth,
        timeout=10,
    )
    assert_refused(resp, "oneinfer", "messages", "json_too_deep")


# ---- integers a caller sends (item 12): a 400 naming the field, never a 500 or a misleading 403 --------------

pg_url = acc.pg_url  # the accounts suite's PostgreSQL database fixture
BIG = 2**63


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def keyed(
    request: pytest.FixtureRequest, fake_openai: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[GatewayServer, str, str]]:
    """A gateway with keys in SQLite or PostgreSQL, and a (non-master) key whose account has credits."""
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    config = acc.billing_config(fake_openai, tmp_path_factory.mktemp("ints"), url)
    with GatewayServer(config) as gw:
        admin = acc.Admin(gw.url, gw.master_key)
        created = admin.create_key(credits_micros=1_000_000)
        admin.close()
        yield gw, created["key"], created["account_id"]


INTEGERS: list[tuple[str, dict[str, Any], str]] = [
    ("/v1/chat/completions", {"max_tokens": BIG}, "max_tokens"),
    ("/v1/chat/completions", {"max_completion_tokens": BIG}, "max_completion_tokens"),
    ("/v1/chat/completions", {"n": BIG}, "n"),
    ("/v1/chat/completions", {"seed": 2**64 - 1}, "seed"),
    ("/v1/chat/completions", {"logprobs": True, "top_logprobs": BIG}, "top_logprobs"),
    ("/api/v1/chat/completions", {"max_tokens": BIG}, "max_tokens"),
    ("/v0/chat/completions", {"max_tokens": BIG, "model": "priced@fake"}, "max_tokens"),
    ("/v1/ula/chat/completions", {"max_tokens": BIG, "provider": "fake"}, "max_tokens"),
    ("/v1/embeddings", {"model": "embed-model", "input": "hi", "dimensions": BIG}, "dimensions"),
    ("/v1/embeddings", {"model": "embed-model", "input": [[1, 2, BIG]]}, "input[0][2]"),
    ("/v1/messages", {"max_tokens": BIG}, "max_tokens"),
    ("/v1/messages", {"max_tokens": 5, "top_k": BIG}, "top_k"),
]


@pytest.mark.parametrize(("path", "fields", "param"), INTEGERS, ids=[f"{p}:{f}" for p, _, f in INTEGERS])
def test_out_of_range_integers_are_a_400_naming_the_field(
    keyed: tuple[GatewayServer, str, str], path: str, fields: dict[str, Any], param: str
) -> None:
    gw, key, account = keyed
    admin = acc.Admin(gw.url, gw.master_key)
    before = admin.account(account)["balance_micros"]
    body: dict[str, Any] = {"model": "priced", "messages": USER, **fields}
    if path == "/v1/embeddings":
        body.pop("messages")
    resp = httpx.post(gw.url + path, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=10)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    if path == "/v1/messages":
        assert error["type"] == "invalid_request_error" and param in error["message"]
    else:
        assert error["param"] == param
    assert admin.account(account)["balance_micros"] == before  # nothing reserved, nothing charged
    admin.close()


def test_the_largest_accepted_max_tokens_is_refused_for_credit_not_by_the_store(
    keyed: tuple[GatewayServer, str, str],
) -> None:
    gw, key, _ = keyed
    body = {"model": "priced", "messages": USER, "max_tokens": 2**31 - 1}
    resp = httpx.post(gw.base_url + "/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"})
    assert resp.status_code == 403 and resp.json()["error"]["code"] == "insufficient_credits", resp.text
