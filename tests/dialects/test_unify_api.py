"""Unify's `/v0` platform routes (seed 002 and the unifyai SDK's calls) against Inferplex, through HTTP.

The requests are the ones unifyai sends: its `get_queries`, `log_query`, `get_query_tags`,
`get_query_metrics`, `get_endpoint_metrics`, `get_credits`, `list_models`, `list_providers` and
`list_endpoints` build them with `requests`, which sends a datetime parameter as `str(datetime)` and a
boolean as `True`/`False`; these tests send exactly that with httpx. (The SDK itself is not installed: see
docs/dialects.md, "Unify".) Each caller is a key of its own account, so what one test logs is invisible to
the others, which is itself one of the things checked.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from inferplex.dialects.unify_metrics import endpoint_metrics, intervals, percentile
from inferplex.dialects.unify_wire import iso, parse_time
from inferplex.store.backend import Database
from inferplex.store.usage import QueryFilter, UsageStore
from tests.accounts.conftest import pg_url, sqlite_url  # noqa: F401
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

USER = [{"role": "user", "content": "Say hello."}]
# unifyai's own test of log_query (tests/test_universal_api/test_queries.py), as it sends it.
LOGGED = {
    "endpoint": "local_model_test@external",
    "query_body": {
        "messages": [
            {"role": "system", "content": "You are an useful assistant"},
            {"role": "user", "content": "Explain who Newton was."},
        ],
        "model": "llama-3-8b-chat@aws-bedrock",
        "max_tokens": 100,
        "temperature": 0.5,
    },
    "response_body": {
        "model": "meta.llama3-8b-instruct-v1:0",
        "created": 1725396241,
        "id": "chatcmpl-92d3b36e-7b64-4ae8-8102-9b7e3f5dd30f",
        "object": "chat.completion",
        "usage": {"completion_tokens": 100, "prompt_tokens": 44, "total_tokens": 144},
        "choices": [
            {
                "finish_reason": "stop",
                "index": 0,
                "message": {"content": "Sir Isaac Newton was an English mathematician.", "role": "assistant"},
            }
        ],
    },
    "tags": ["test_tag"],
    "consume_credits": False,  # unifyai 0.9 sends it; a logged query never costs here
}


class Caller:
    """One key (and its account) speaking to the gateway as unifyai does."""

    def __init__(self, gw: GatewayServer, secret: str, key: dict[str, Any] | None = None) -> None:
        self.gw = gw
        self.key = key or {}
        self.headers = {"Authorization": f"Bearer {secret}", "accept": "application/json"}

    def get(self, path: str, **params: Any) -> httpx.Response:
        return httpx.get(self.gw.url + path, params=params, headers=self.headers, timeout=10)

    def post(self, path: str, body: Any) -> httpx.Response:
        return httpx.post(self.gw.url + path, json=body, headers=self.headers, timeout=10)

    def ok(self, path: str, **params: Any) -> Any:
        resp = self.get(path, **params)
        assert resp.status_code == 200, resp.text
        assert resp.headers["content-type"].startswith("application/json")
        return resp.json()

    def chat(self, model: str, **extra: Any) -> httpx.Response:
        body = {"model": model, "messages": USER, **extra}
        if not extra.get("stream"):
            return self.post("/v0/chat/completions", body)
        with httpx.stream("POST", self.gw.url + "/v0/chat/completions", json=body, headers=self.headers) as r:
            r.read()
            return r

    def queries(self, expected: int, **params: Any) -> list[dict[str, Any]]:
        """The history once `expected` items are there (a stream's row is written after its last byte)."""
        deadline = time.monotonic() + 10
        while True:
            found: list[dict[str, Any]] = self.ok("/v0/queries", **params)
            if len(found) >= expected or time.monotonic() > deadline:
                assert len(found) == expected, found
                return found
            time.sleep(0.05)


@pytest.fixture(scope="module")
def admin(seed_gateway: GatewayServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=seed_gateway.url, headers=seed_gateway.auth, timeout=30) as client:
        yield client


@pytest.fixture
def new_caller(seed_gateway: GatewayServer, admin: httpx.Client) -> Any:
    def make(credits_micros: int = 10_000_000, **body: Any) -> Caller:
        resp = admin.post("/admin/keys", json={"name": "unify-api", "credits_micros": credits_micros, **body})
        assert resp.status_code == 201, resp.text
        key = resp.json()
        return Caller(seed_gateway, key["key"], key)

    return make


@pytest.fixture
def master(seed_gateway: GatewayServer) -> Caller:
    return Caller(seed_gateway, seed_gateway.master_key)


def assert_detail(resp: httpx.Response, status: int) -> Any:
    """FastAPI's error body, as Unify's platform routes answer it."""
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"detail"}, body
    return body["detail"]


def assert_422(resp: httpx.Response, *locs: list[str]) -> list[dict[str, Any]]:
    detail = assert_detail(resp, 422)
    assert isinstance(detail, list) and all(set(d) == {"loc", "msg", "type"} for d in detail), detail
    assert [d["loc"] for d in detail] == [list(loc) for loc in locs]
    assert all(isinstance(d["msg"], str) and d["msg"] and isinstance(d["type"], str) for d in detail)
    return detail


# ---- the catalogue ----------------------------------------------------------------------------------------


def test_models_providers_and_endpoints_are_bare_lists_of_what_the_caller_may_use(
    master: Caller, new_caller: Any
) -> None:
    models = master.ok("/v0/models")
    assert {"gpt-4o-mini", "claude-sonnet-4-6", "llama-3.1-8b"} <= set(models) and models == sorted(models)
    assert master.ok("/v0/models", provider="groq") == ["gpt-4o-mini", "llama-3.1-8b"]
    providers = master.ok("/v0/providers")
    assert {"openai", "groq", "anthropic"} <= set(providers) and providers == sorted(providers)
    assert master.ok("/v0/providers", model="gpt-4o-mini") == ["groq", "openai"]  # unifyai's list_providers(model)
    assert master.ok("/v0/models", provider="nope") == [] and master.ok("/v0/providers", model="nope") == []
    assert master.ok("/v0/endpoints", model="gpt-4o-mini") == ["gpt-4o-mini@openai", "gpt-4o-mini@groq"]
    narrow = new_caller(allowed_models=["llama-*"])
    assert narrow.ok("/v0/models") == ["llama-3.1-8b"]
    assert narrow.ok("/v0/providers") == ["groq"]
    assert narrow.ok("/v0/endpoints") == ["llama-3.1-8b@groq"]


@pytest.mark.parametrize("path", ["/v0/endpoints", "/v0/models", "/v0/providers", "/v0/queries", "/v0/credits"])
def test_platform_routes_fail_as_fastapi_does(seed_gateway: GatewayServer, path: str) -> None:
    detail = assert_detail(httpx.get(seed_gateway.url + path, timeout=10), 401)
    assert isinstance(detail, str) and "API key" in detail
    bad = httpx.get(seed_gateway.url + path, headers={"Authorization": "Bearer ipx-nope"}, timeout=10)
    assert isinstance(assert_detail(bad, 401), str)


def test_a_nul_in_a_filter_is_a_422_naming_it(master: Caller) -> None:
    assert_422(master.get("/v0/endpoints", model="a\x00b"), ["query", "model"])
    assert_422(master.get("/v0/models", provider="\x00"), ["query", "provider"])


def test_scopes(new_caller: Any) -> None:
    catalogue_only = new_caller(scopes=["models:read"])
    assert catalogue_only.ok("/v0/models")
    assert "chat" in assert_detail(catalogue_only.get("/v0/queries"), 403)
    assert_detail(catalogue_only.post("/v0/queries", LOGGED), 403)
    assert_detail(catalogue_only.get("/v0/credits"), 403)
    chat_only = new_caller(scopes=["chat"])
    assert chat_only.ok("/v0/queries") == []
    assert "models:read" in assert_detail(chat_only.get("/v0/endpoints"), 403)
    assert_detail(chat_only.get("/v0/endpoint-metrics", model="gpt-4o-mini", provider="openai"), 403)


# ---- the query log ----------------------------------------------------------------------------------------


def test_query_history_filters_as_unifyai_sends_them(new_caller: Any, fake_openai: FakeOpenAI) -> None:
    caller = new_caller()
    start = datetime.now(UTC)
    assert caller.chat("gpt-4o-mini@openai", tags=["alpha"]).status_code == 200
    assert caller.chat("gpt-4o-mini@openai", tags="beta,gamma", stream=True).status_code == 200
    assert caller.chat("error-500@openai").status_code == 502  # the upstream fails: logged, not charged
    assert caller.chat("llama-3.1-8b@groq").status_code == 200
    assert fake_openai.state.last().body["model"] == "llama-3.1-8b-instant"

    everything = caller.queries(4, failures="True", start_time=str(start))
    assert [q["endpoint"] for q in everything] == [
        "llama-3.1-8b@groq",
        "error-500@openai",
        "gpt-4o-mini@openai",
        "gpt-4o-mini@openai",
    ]  # newest first
    stamps = [parse_time(q["timestamp"]) for q in everything]
    assert stamps == sorted(stamps, reverse=True) and all(s is not None and s >= start.timestamp() for s in stamps)
    failed = caller.queries(1, failures="only")
    assert failed[0]["status"] >= 500 and failed[0]["failed"] and failed[0]["cost"] == 0  # the upstream's status
    successes = caller.queries(3)  # failures: false by default
    assert all(q["status"] == 200 and not q["failed"] and q["cost"] > 0 for q in successes)
    assert caller.queries(3, failures="False") == successes
    assert all(q["prompt_tokens"] > 0 and q["completion_tokens"] > 0 for q in successes)

    assert [q["tags"] for q in caller.queries(1, tags="alpha")] == [["alpha"]]
    assert caller.queries(2, tags=["alpha", "gamma"])[0]["tags"] == ["beta", "gamma"]  # any of the tags
    assert caller.queries(0, tags="nope") == []
    assert len(caller.queries(2, endpoints="gpt-4o-mini@openai")) == 2
    assert len(caller.queries(3, endpoints=["gpt-4o-mini@openai", "llama-3.1-8b@groq"])) == 3
    assert len(caller.queries(3, endpoints="gpt-4o-mini@openai,llama-3.1-8b@groq")) == 3
    assert caller.queries(0, endpoints="gpt-4o-mini@groq") == []
    later = datetime.now(UTC) + timedelta(seconds=1)
    assert caller.queries(0, start_time=str(later)) == []
    assert len(caller.queries(3, end_time=later.strftime("%Y-%m-%d %H:%M:%S"))) == 3
    assert caller.queries(0, end_time=start.strftime("%Y-%m-%d %H:%M:%S")) == []
    assert caller.queries(0, page_number=2) == []

    assert sorted(caller.ok("/v0/tags")) == ["alpha", "beta", "gamma"]
    assert new_caller().ok("/v0/queries", failures=True) == []  # another account sees none of it
    assert new_caller().ok("/v0/tags") == []


def test_query_bodies_are_kept_when_the_request_asks(new_caller: Any) -> None:
    caller = new_caller()
    assert caller.chat("gpt-4o-mini@openai", log_query_body=True, log_response_body=True).status_code == 200
    [item] = caller.queries(1)
    assert item["query_body"]["messages"] == USER
    assert item["response_body"]["choices"][0]["message"]["content"] == "echo: Say hello."
    assert caller.chat("gpt-4o-mini@openai", log_query_body=False, log_response_body=False).status_code == 200
    newest = caller.queries(2)[0]
    assert newest["query_body"] is None and newest["response_body"] is None


def test_pages_of_one_hundred(new_caller: Any) -> None:
    caller = new_caller()
    for i in range(101):
        assert caller.post("/v0/queries", {**LOGGED, "tags": [f"n{i}"]}).status_code == 200
    first = caller.queries(100)
    assert caller.queries(100, page_number=1) == first
    [last] = caller.queries(1, page_number=2)
    assert last["tags"] == ["n0"] and first[0]["tags"] == ["n100"]
    assert [q["tags"] for q in caller.queries(1, tags="n0", page_number=1)] == [["n0"]]
    assert caller.queries(0, tags="n0", page_number=2) == []


@pytest.mark.parametrize(
    "params,locs",
    [
        ({"page_number": "first"}, [["query", "page_number"]]),
        ({"page_number": "0"}, [["query", "page_number"]]),
        ({"failures": "sometimes"}, [["query", "failures"]]),
        ({"start_time": "yesterday"}, [["query", "start_time"]]),
        ({"endpoints": "gpt-4o-mini"}, [["query", "endpoints"]]),
        (
            {"start_time": "2024-13-01 00:00:00", "end_time": "never", "page_number": "-1"},
            [["query", "start_time"], ["query", "end_time"], ["query", "page_number"]],
        ),
    ],
)
def test_bad_query_parameters_are_one_422_listing_them_all(
    master: Caller, params: dict[str, str], locs: list[list[str]]
) -> None:
    assert_422(master.get("/v0/queries", **params), *locs)


# ---- logging an external query ----------------------------------------------------------------------------


def test_log_query_is_kept_and_costs_nothing(new_caller: Any) -> None:
    caller = new_caller(credits_micros=5_000_000)
    before = caller.ok("/v0/credits")
    when = datetime.now(UTC) - timedelta(hours=2)
    resp = caller.post("/v0/queries", {**LOGGED, "timestamp": when.isoformat()})
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"info": "Query logged successfully"}
    assert resp.headers["x-request-id"]

    [item] = caller.queries(1, endpoints="local_model_test@external", start_time=str(when - timedelta(seconds=1)))
    assert item["query_body"] == LOGGED["query_body"] and item["response_body"] == LOGGED["response_body"]
    assert item["tags"] == ["test_tag"] and item["cost"] == 0 and item["status"] == 200
    assert (item["prompt_tokens"], item["completion_tokens"]) == (44, 100)
    assert abs((parse_time(item["timestamp"]) or 0) - when.timestamp()) < 0.01
    assert caller.queries(0, endpoints="local_model_test@external", start_time=str(datetime.now(UTC))) == []
    assert "test_tag" in caller.ok("/v0/tags")
    assert caller.ok("/v0/credits") == before == {"id": caller.key["account_id"], "credits": 5.0}
    minimal = caller.post("/v0/queries", {"endpoint": "mine@local", "query_body": {}, "tags": "a, b"})
    assert minimal.status_code == 200, minimal.text
    assert caller.queries(1, endpoints="mine@local")[0]["tags"] == ["a", "b"]


@pytest.mark.parametrize(
    "body,locs",
    [
        ({}, [["body", "endpoint"], ["body", "query_body"]]),
        ({"endpoint": "x@y", "query_body": []}, [["body", "query_body"]]),
        ({"endpoint": "x@y", "query_body": {}, "tags": 5}, [["body", "tags", "list[str]"], ["body", "tags", "str"]]),
        ({"endpoint": "no-provider", "query_body": {}}, [["body", "endpoint"]]),
        ({"endpoint": "x" * 201 + "@y", "query_body": {}}, [["body", "endpoint"]]),
        ({"endpoint": "x@y", "query_body": {}, "timestamp": "soon"}, [["body", "timestamp"]]),
        ({"endpoint": "x", "query_body": {}, "timestamp": "soon"}, [["body", "endpoint"], ["body", "timestamp"]]),
    ],
)
def test_log_query_refusals_are_422s(master: Caller, body: dict[str, Any], locs: list[list[str]]) -> None:
    assert_422(master.post("/v0/queries", body), *locs)


def test_log_query_body_that_is_not_json(master: Caller) -> None:
    resp = httpx.post(
        master.gw.url + "/v0/queries",
        content=b"{",
        headers={**master.headers, "content-type": "application/json"},
        timeout=10,
    )
    assert isinstance(assert_detail(resp, 400), str)
    assert_422(master.post("/v0/queries", [1, 2]), ["body"])


# ---- metrics ----------------------------------------------------------------------------------------------


def test_metrics_per_interval(new_caller: Any) -> None:
    caller = new_caller()
    for _ in range(3):
        assert caller.chat("gpt-4o-mini@openai", user="team-7").status_code == 200
    assert caller.chat("llama-3.1-8b@groq").status_code == 200
    caller.queries(4)
    window = {"start_time": str(datetime.now(UTC) - timedelta(minutes=5)), "interval": 3600}
    [hour] = caller.ok("/v0/metrics", **window)
    assert hour["request_count"] == 4 and hour["user_id"] is None
    assert hour["prompt_tokens"] > 0 and hour["completion_tokens"] > 0
    assert 0 < hour["generation_time_p50"] <= hour["generation_time_p95"]
    assert 0 < hour["tokens_per_second_p50"] <= hour["tokens_per_second_p95"]
    assert parse_time(hour["end_time"]) == (parse_time(hour["start_time"]) or 0) + 3600
    [mini] = caller.ok("/v0/metrics", models="gpt-4o-mini", providers="openai,groq", **window)
    assert mini["request_count"] == 3
    [user] = caller.ok("/v0/metrics", secondary_user_id="team-7", **window)
    assert user["request_count"] == 3 and user["user_id"] == "team-7"
    assert caller.ok("/v0/metrics", models="claude-sonnet-4-6", **window) == []
    assert sum(i["request_count"] for i in caller.ok("/v0/metrics")) == 4  # the last day, by 300 s
    assert new_caller().ok("/v0/metrics") == []


def test_metrics_refusals(master: Caller) -> None:
    assert_422(master.get("/v0/metrics", interval="five"), ["query", "interval"])
    detail = assert_422(master.get("/v0/metrics", interval="0"), ["query", "interval"])
    assert detail[0]["type"] == "greater_than_equal"


def test_endpoint_metrics_are_measured_from_streamed_traffic(new_caller: Any) -> None:
    caller = new_caller()
    start = datetime.now(UTC) - timedelta(seconds=1)
    for _ in range(2):
        assert caller.chat("gpt-4o-mini@openai", stream=True).status_code == 200
    assert caller.chat("gpt-4o-mini@openai").status_code == 200  # buffered: no first token to time
    caller.queries(3)
    # unifyai's get_endpoint_metrics("gpt-4o-mini@openai", start_time=...) splits the endpoint so:
    found = caller.ok("/v0/endpoint-metrics", model="gpt-4o-mini", provider="openai", start_time=str(start))
    assert 1 <= len(found) <= 2  # one per clock hour with traffic
    newest = found[-1]
    assert set(newest) >= {"time_to_first_token", "inter_token_latency", "input_cost", "output_cost", "measured_at"}
    assert newest["time_to_first_token"] > 0 and newest["inter_token_latency"] >= 0
    assert (newest["input_cost"], newest["output_cost"]) == (0.15, 0.60)  # USD per million tokens, as priced
    assert sum(m["requests"] for m in found) == 3
    assert (parse_time(newest["measured_at"]) or 0) >= start.timestamp()
    latest = caller.ok("/v0/endpoint-metrics", model="gpt-4o-mini", provider="openai")
    assert latest == found[-1:]  # no window: only the latest measurement
    assert caller.ok("/v0/endpoint-metrics", model="gpt-4o-mini", provider="groq") == []
    assert new_caller().ok("/v0/endpoint-metrics", model="gpt-4o-mini", provider="openai") == []


def test_endpoint_metrics_refusals(master: Caller, new_caller: Any) -> None:
    assert_422(master.get("/v0/endpoint-metrics"), ["query", "model"], ["query", "provider"])
    assert_422(master.get("/v0/endpoint-metrics", model="gpt-4o-mini"), ["query", "provider"])
    unknown = master.get("/v0/endpoint-metrics", model="gpt-4o-mini", provider="nope")
    assert "gpt-4o-mini@nope" in assert_detail(unknown, 404)
    narrow = new_caller(allowed_models=["llama-*"])
    assert_detail(narrow.get("/v0/endpoint-metrics", model="gpt-4o-mini", provider="openai"), 404)


# ---- credits ----------------------------------------------------------------------------------------------


def test_credits_are_the_accounts_balance_in_usd(new_caller: Any, master: Caller) -> None:
    caller = new_caller(credits_micros=2_500_000)
    assert caller.ok("/v0/credits") == {"id": caller.key["account_id"], "credits": 2.5}
    resp = caller.chat("claude-sonnet-4-6@anthropic", max_tokens=32)
    assert resp.status_code == 200, resp.text
    cost = resp.json()["cost"]["micros"]
    assert cost > 0
    assert caller.ok("/v0/credits")["credits"] == (2_500_000 - cost) / 1_000_000
    assert master.ok("/v0/credits") == {"id": "master", "credits": None}  # the master key has no account


# ---- pure pieces ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values,p,expected",
    [([], 50, None), ([3.0], 95, 3.0), ([1.0, 2.0, 3.0, 4.0], 50, 2.0), ([4.0, 1.0, 3.0, 2.0], 95, 4.0)],
)
def test_percentile_is_nearest_rank(values: list[float], p: float, expected: float | None) -> None:
    assert percentile(values, p) == expected


@pytest.mark.parametrize(
    "text,seconds",
    [
        ("2024-07-12 04:20:32", 1720758032.0),
        ("2024-07-12T04:20:32.5", 1720758032.5),
        ("2024-07-12 06:20:32+02:00", 1720758032.0),
        ("2024-07-12T04:20:32Z", 1720758032.0),
        ("2024-07-12", 1720742400.0),
        ("yesterday", None),
        ("", None),
        ("2024-07-12 25:00:00", None),
    ],
)
def test_parse_time_table(text: str, seconds: float | None) -> None:
    assert parse_time(text) == seconds


def test_times_past_year_9999_are_clamped_not_a_crash() -> None:
    assert iso(1e20) == "9999-12-31T23:59:59+00:00" and iso(-1e20) == "0001-01-01T00:00:00+00:00"
    late = parse_time("9999-12-31 23:59:00") or 0
    [item] = intervals([_row(late)], late, 366 * 86_400, None)
    assert item["end_time"] == "9999-12-31T23:59:59+00:00"


def _row(at: float, **kw: Any) -> dict[str, Any]:
    base = {"created_at": at, "prompt_tokens": 10, "completion_tokens": 5, "upstream_ms": 500.0}
    return {**base, "total_ms": 600.0, "ttft_ms": None, **kw}


def test_intervals_table() -> None:
    rows = [_row(10), _row(20, upstream_ms=1000.0), _row(700, completion_tokens=0, upstream_ms=None)]
    [first, third] = intervals(rows, 0.0, 300, None)
    assert (first["request_count"], first["prompt_tokens"], first["completion_tokens"]) == (2, 20, 10)
    assert (first["generation_time_p50"], first["generation_time_p95"]) == (0.5, 1.0)
    assert (first["tokens_per_second_p50"], first["tokens_per_second_p95"]) == (5.0, 10.0)
    assert third["start_time"].startswith("1970-01-01T00:10:00") and third["generation_time_p50"] is None


def test_endpoint_metrics_table() -> None:
    rows = [
        _row(10, ttft_ms=100.0, total_ms=500.0, completion_tokens=5),  # 400 ms over 4 tokens after the first
        _row(20, ttft_ms=300.0, total_ms=300.0, completion_tokens=1),  # one token: no latency between tokens
        _row(3700),  # buffered: no first token
    ]
    first, second = endpoint_metrics(rows, 0.15, 0.6)
    assert (first["time_to_first_token"], first["inter_token_latency"], first["requests"]) == (100.0, 100.0, 2)
    assert first["measured_at"].startswith("1970-01-01T00:00:20")
    assert (second["time_to_first_token"], second["inter_token_latency"]) == (None, None)
    assert (second["input_cost"], second["output_cost"]) == (0.15, 0.6)


# ---- the usage store's reads, on every engine -------------------------------------------------------------


@pytest.fixture
def db(migrated_db: Database) -> Database:
    return migrated_db


def _usage_row(i: int, account: str | None, key: str, **kw: Any) -> dict[str, Any]:
    return {
        "request_id": f"unify_{i}",
        "created_at": 1_000_000.0 + i,
        "key_id": key,
        "account_id": account,
        "model": "m",
        "provider": "p",
        "deployment": None,
        "status": 200,
        "prompt_tokens": 1,
        "completion_tokens": 2,
        "cached_tokens": 0,
        "estimated": 0,
        "cost_micros": 0,
        "total_ms": 10.0,
        "upstream_ms": 5.0,
        "ttft_ms": None,
        "queued_ms": 0.0,
        "tags": [],
        "end_user": None,
        "request_body": None,
        "response_body": None,
        **kw,
    }


async def test_the_query_reads_are_scoped_and_filtered_on_every_engine(db: Database) -> None:
    store = UsageStore(db)
    await store.append(
        [
            _usage_row(1, "acct_a", "k1", tags=["x", "y"]),
            _usage_row(2, "acct_a", "k2", model="n", status=502),
            _usage_row(3, "acct_b", "k3", tags=["x"]),
            _usage_row(4, None, "k4", tags=["café"]),
        ]
    )
    # the row-by-row path serialises JSON itself (SQLAlchemy's encoder, not orjson): tags still match
    await store.append_each([_usage_row(5, "acct_a", "k1", tags=["é", "x"], end_user="u")])
    a = QueryFilter(account_id="acct_a", key_id="k1")
    ids = [r["request_id"] for r in await store.page(a, frozenset(), 0, 10)]
    assert ids == ["unify_5", "unify_2", "unify_1"]
    assert [r["request_id"] for r in await store.page(a, frozenset({"x"}), 0, 10)] == ["unify_5", "unify_1"]
    assert [r["request_id"] for r in await store.page(a, frozenset({"x"}), 1, 1)] == ["unify_1"]
    assert [r["request_id"] for r in await store.page(a, frozenset({"é"}), 0, 10)] == ["unify_5"]
    assert await store.page(replace(a, failures="only"), frozenset(), 0, 10) == [
        r for r in await store.page(a, frozenset(), 0, 10) if r["status"] >= 400
    ]
    assert [r["request_id"] for r in await store.page(replace(a, endpoints=(("n", "p"),)), frozenset(), 0, 9)] == [
        "unify_2"
    ]
    since = replace(a, since=1_000_002.0, until=1_000_005.0, failures="exclude")
    assert await store.page(since, frozenset(), 0, 10) == []
    no_account = QueryFilter(account_id=None, key_id="k4")  # a key without an account sees its own rows only
    assert [r["request_id"] for r in await store.page(no_account, frozenset(), 0, 10)] == ["unify_4"]
    everyone = QueryFilter(everyone=True)
    assert len(await store.page(everyone, frozenset(), 0, 10)) == 5
    assert await store.tag_names(a) == ["x", "y", "é"]
    assert await store.tag_names(QueryFilter(account_id="acct_b")) == ["x"]
    measured = await store.measures(replace(a, end_user="u"), 10)
    assert [(m["model"], m["completion_tokens"], m["upstream_ms"]) for m in measured] == [("m", 2, 5.0)]
    assert len(await store.measures(everyone, 2)) == 2
