"""The seed dialects with real keys, tokens and credits: OneInfer's token flow, its 403 for insufficient
credit, Unify's tags in the usage log, and InferExchange billed per token exactly like the OpenAI route."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.dialects.seed_examples import SEED_000_EXAMPLE
from tests.gateway_server import GatewayServer

USER = [{"role": "user", "content": "What is machine learning?"}]


@pytest.fixture(scope="module")
def admin(seed_gateway: GatewayServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=seed_gateway.url, headers=seed_gateway.auth, timeout=30) as client:
        yield client


def new_key(admin: httpx.Client, credits_micros: int, **body: Any) -> dict[str, Any]:
    resp = admin.post("/admin/keys", json={"name": "seed-dialects", "credits_micros": credits_micros, **body})
    assert resp.status_code == 201, resp.text
    key: dict[str, Any] = resp.json()
    return key


def usage_rows(admin: httpx.Client, key_id: str, expected: int) -> list[dict[str, Any]]:
    """The key's usage rows, newest first, once all `expected` are written (settling ends after the answer)."""
    deadline = time.monotonic() + 10
    while True:
        resp = admin.get("/admin/usage", params={"key_id": key_id})
        assert resp.status_code == 200, resp.text
        rows: list[dict[str, Any]] = resp.json()["data"]
        if len(rows) >= expected or time.monotonic() > deadline:
            assert len(rows) == expected, rows
            return rows
        time.sleep(0.05)


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def test_oneinfer_flow_exchange_the_key_for_a_token_then_call(seed_gateway: GatewayServer, admin: httpx.Client) -> None:
    key = new_key(admin, 10_000_000)
    exchanged = httpx.post(seed_gateway.url + "/v1/auth/token", headers=bearer(key["key"]), timeout=10)
    assert exchanged.status_code == 200, exchanged.text
    token = exchanged.json()["access_token"]
    assert exchanged.json()["token_type"] == "Bearer" and token != key["key"]

    url = seed_gateway.url + "/v1/ula/chat/completions"
    resp = httpx.post(url, json=SEED_000_EXAMPLE, headers=bearer(token), timeout=10)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["api_details"]["api_status"] == "success"
    assert body["data"]["text"] == "echo: Tell me about AI."

    with httpx.stream("POST", url, json={**SEED_000_EXAMPLE, "stream": True}, headers=bearer(token)) as stream:
        lines = [line for line in stream.iter_lines() if line]
    assert stream.status_code == 200 and lines[-1] == "data: [DONE]"
    assert json.loads(lines[-2].removeprefix("data: "))["id"] == "chunk_final"

    rows = usage_rows(admin, key["id"], 2)
    assert all(r["model"] == "gpt-4o-mini" and r["cost_micros"] > 0 for r in rows)
    account = admin.get(f"/admin/accounts/{key['account_id']}").json()
    assert account["balance_micros"] == 10_000_000 - sum(r["cost_micros"] for r in rows)


def test_oneinfer_bad_token_is_a_401_envelope(seed_gateway: GatewayServer) -> None:
    url = seed_gateway.url + "/v1/ula/chat/completions"
    resp = httpx.post(url, json=SEED_000_EXAMPLE, headers=bearer("ipxt.e30.bogus"), timeout=10)
    assert resp.status_code == 401
    assert resp.json()["api_details"]["api_status"] == "error" and resp.json()["error"]["status"] == 401


def test_oneinfer_insufficient_credit_is_a_403_envelope(seed_gateway: GatewayServer, admin: httpx.Client) -> None:
    key = new_key(admin, 0)
    url = seed_gateway.url + "/v1/ula/chat/completions"
    resp = httpx.post(url, json=SEED_000_EXAMPLE, headers=bearer(key["key"]), timeout=10)
    assert resp.status_code == 403, resp.text
    body = resp.json()
    assert body["api_details"]["api_status"] == "error" and body["data"] == {}
    assert body["error"]["status"] == 403 and "credit" in body["error"]["message"].lower()


def test_unify_tags_and_log_flags_reach_the_usage_log(seed_gateway: GatewayServer, admin: httpx.Client) -> None:
    key = new_key(admin, 10_000_000)
    body = {
        "model": "gpt-4o-mini@openai",
        "messages": USER,
        "tags": "team-a, nightly",
        "signature": "python",
        "log_query_body": True,
        "log_response_body": False,
    }
    resp = httpx.post(seed_gateway.url + "/v0/chat/completions", json=body, headers=bearer(key["key"]), timeout=10)
    assert resp.status_code == 200, resp.text
    (row,) = usage_rows(admin, key["id"], 1)
    assert {"team-a", "nightly"} <= set(row["tags"])
    assert row["request_body"] is not None and row["response_body"] is None
    totals = admin.get("/admin/usage/totals", params={"by": "tag", "key_id": key["id"]})
    assert totals.status_code == 200, totals.text
    assert {"team-a", "nightly"} <= {g["group"] for g in totals.json()["data"]}


def test_inferexchange_is_billed_per_token_like_the_openai_route(
    seed_gateway: GatewayServer, admin: httpx.Client
) -> None:
    key = new_key(admin, 10_000_000)
    body = {"model": "llama-3.1-8b", "messages": USER, "temperature": 0.7, "max_tokens": 500}
    for path in ("/api/v1/chat/completions", "/v1/chat/completions"):
        resp = httpx.post(seed_gateway.url + path, json=body, headers=bearer(key["key"]), timeout=10)
        assert resp.status_code == 200, resp.text
    inferexchange, openai_route = reversed(usage_rows(admin, key["id"], 2))
    for name in ("model", "prompt_tokens", "completion_tokens", "cost_micros"):
        assert inferexchange[name] == openai_route[name], name
    assert inferexchange["cost_micros"] > 0


def test_unify_log_flags_omitted_follow_the_operator(seed_gateway: GatewayServer, admin: httpx.Client) -> None:
    """This gateway's operator keeps no bodies (accounts.log_query_body / log_response_body default false):
    a Unify caller who sends neither flag gets no bodies stored; one who asks for them does."""
    assert not seed_gateway.config.accounts.log_query_body and not seed_gateway.config.accounts.log_response_body
    key = new_key(admin, 10_000_000)
    url = seed_gateway.url + "/v0/chat/completions"
    body: dict[str, Any] = {"model": "gpt-4o-mini@openai", "messages": USER, "tags": ["omitted"]}
    for stream in (False, True):
        resp = httpx.post(url, json={**body, "stream": stream}, headers=bearer(key["key"]), timeout=10)
        assert resp.status_code == 200, resp.text
    asked = {**body, "tags": ["asked"], "log_query_body": True, "log_response_body": True}
    assert httpx.post(url, json=asked, headers=bearer(key["key"]), timeout=10).status_code == 200
    rows = usage_rows(admin, key["id"], 3)
    omitted = [r for r in rows if "omitted" in r["tags"]]
    assert len(omitted) == 2
    assert all(r["request_body"] is None and r["response_body"] is None for r in omitted), omitted
    (kept,) = [r for r in rows if "asked" in r["tags"]]
    assert kept["request_body"] is not None and kept["response_body"] is not None
    assert kept["tags"].count("asked") == 1  # a request's tags are recorded once


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/api/v1/chat/completions", "/v0/chat/completions"])
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tags", 5),
        ("tags", [1, 2]),
        ("tags", {"team": "a"}),
        ("log_query_body", "no"),
        ("log_response_body", 1),
        ("drop_params", "false"),
        ("use_custom_keys", "yes"),
        ("signature", 5),
    ],
)
def test_gateway_options_of_the_wrong_type_are_refused(
    seed_gateway: GatewayServer, admin: httpx.Client, path: str, field: str, value: Any
) -> None:
    """They used to be skipped without a word (a body logged though the caller said "no"); now a 400 naming
    the field, before anything is reserved or logged."""
    key = new_key(admin, 10_000_000)
    model = "gpt-4o-mini@openai" if path.startswith("/v0") else "gpt-4o-mini"
    body = {"model": model, "messages": USER, field: value}
    resp = httpx.post(seed_gateway.url + path, json=body, headers=bearer(key["key"]), timeout=10)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == field
    assert admin.get("/admin/usage", params={"key_id": key["id"]}).json()["data"] == []


def test_gateway_options_are_checked_on_embeddings_and_oneinfer(seed_gateway: GatewayServer) -> None:
    embed = {"model": "embed-model", "input": "hi", "log_query_body": "yes"}
    resp = httpx.post(seed_gateway.url + "/v1/embeddings", json=embed, headers=seed_gateway.auth, timeout=10)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "log_query_body", resp.text
    chat = {"provider": "openai", "model": "gpt-4o-mini", "messages": USER, "tags": 7}
    resp = httpx.post(seed_gateway.url + "/v1/ula/chat/completions", json=chat, headers=seed_gateway.auth, timeout=10)
    assert resp.status_code == 422 and resp.json()["error"]["param"] == "tags", resp.text


def test_tags_as_a_string_on_v1_reach_the_usage_log(seed_gateway: GatewayServer, admin: httpx.Client) -> None:
    key = new_key(admin, 10_000_000)
    body = {"model": "gpt-4o-mini", "messages": USER, "tags": "v1-a, v1-b"}
    resp = httpx.post(seed_gateway.url + "/v1/chat/completions", json=body, headers=bearer(key["key"]), timeout=10)
    assert resp.status_code == 200, resp.text
    (row,) = usage_rows(admin, key["id"], 1)
    assert row["tags"].count("v1-a") == 1 and row["tags"].count("v1-b") == 1
