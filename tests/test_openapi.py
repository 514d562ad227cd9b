"""`/openapi.json` is the contract: it describes every route the app serves, it is valid OpenAPI 3.1, its
schemas are the routes' own models, and real answers (successes, streams and errors, in every dialect) fit
the schema it declares for their status.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate
from pydantic import TypeAdapter
from starlette.routing import Route

from inferplex.admin.models import KeyCreate
from inferplex.admin.openapi import openapi_document
from inferplex.app import Gateway, create_app
from inferplex.canonical import ChatRequest
from inferplex.config import parse_config
from inferplex.dialects import registry
from inferplex.dialects.oneinfer import FORM_FIELDS
from inferplex.dialects.seed_wire import OPTION_FIELDS
from inferplex.gateway_request import GATEWAY_KEYS
from inferplex.openapi.spec import HEAD_ERRORS, REF
from tests.conftest import openai_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def app(fake_openai: FakeOpenAI) -> Gateway:
    return create_app(parse_config(openai_config(fake_openai), "<test>"), "ipx-test-master-key")


@pytest.fixture(scope="module")
def server(fake_openai: FakeOpenAI) -> Iterator[GatewayServer]:
    with GatewayServer(openai_config(fake_openai)) as gateway:
        yield gateway


def _served(app: Gateway) -> set[tuple[str, str]]:
    """(method, OpenAPI path) of every route: Starlette's router and the app's own fixed-path dispatch."""
    out: set[tuple[str, str]] = set()
    for route in app.routes:
        assert isinstance(route, Route), route
        path = re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path)
        out |= {(method.lower(), path) for method in route.methods or () if method != "HEAD"}
    out |= {(method.lower(), path) for path, method in app._exact}
    return out


def test_every_route_the_app_serves_is_in_the_document_and_nothing_else(app: Gateway) -> None:
    document = openapi_document()
    documented = {(method, path) for path, item in document["paths"].items() for method in item}
    served = _served(app)
    assert served - documented == set(), "served but not documented"
    assert documented - served == set(), "documented but not served"
    assert {("post", "/v1/chat/completions"), ("post", "/v1/messages"), ("get", "/v0/endpoints")} <= documented
    assert {(m.lower(), p) for p, m in app._exact} <= documented  # the dispatch that skips the router


def test_the_document_is_valid_openapi_and_served_as_built(server: GatewayServer) -> None:
    document = openapi_document()
    validate(document)  # OpenAPI 3.1 (openapi-spec-validator: the spec's own meta-schema and rules)
    served = httpx.get(server.url + "/openapi.json")
    assert served.status_code == 200
    assert served.json() == orjson.loads(orjson.dumps(document))


def test_schemas_are_the_routes_own_models() -> None:
    schemas = openapi_document()["components"]["schemas"]
    assert not [name for name in schemas if "__" in name], "two types share a name (pydantic qualified them)"
    chat = TypeAdapter(ChatRequest).json_schema(ref_template=REF)["properties"]
    published = schemas["GatewayChatRequest"]["properties"]
    assert {k: published[k] for k in chat} == chat  # the canonical fields, exactly as ChatRequest has them
    assert schemas["KeyCreate"]["properties"].keys() == KeyCreate.model_json_schema()["properties"].keys()
    # the gateway's own options are exactly the keys the dialects take out before the upstream
    assert OPTION_FIELDS == GATEWAY_KEYS and OPTION_FIELDS <= published.keys()
    assert schemas["UnifyChatRequest"]["properties"]["model"]["pattern"] == "^.+@.+$"
    form = openapi_document()["paths"]["/v1/ula/chat/completions"]["post"]["requestBody"]["content"]
    assert set(FORM_FIELDS) <= form["multipart/form-data"]["schema"]["properties"].keys()


def test_every_operation_declares_its_answers_and_errors_in_its_dialect() -> None:
    errors = {
        "Anthropic": "AnthropicError",
        "OneInfer": "OneInferError",
        "Inferada": "InferadaError",
        "Unify platform": "UnifyError",
        "InferExchange": "InferExchangeError",
    }
    for path, item in openapi_document()["paths"].items():
        for method, op in item.items():
            statuses = op["responses"]
            ok = [s for s in statuses if s.startswith("2")]
            assert ok, (method, path)
            for status in ok:
                content = statuses[status]["content"]  # JSON, or a binary body (spec.Operation.ok_media)
                binary = [c for c in content.values() if c["schema"] == {"type": "string", "format": "binary"}]
                assert content.get("application/json", {}).get("schema") or binary, (method, path)
            expected = errors.get(op["tags"][0], "OpenAIError")
            for status, response in statuses.items():
                if status.startswith(("4", "5")):
                    assert response["content"]["application/json"]["schema"] == {"$ref": REF.format(model=expected)}
            if op["security"]:
                assert "401" in statuses, (method, path)


def test_errors_answered_before_a_route_runs_fit_each_path_s_documented_error_schema() -> None:
    """The HTTP server's and the router's own errors (400, 404, 405, 414, 431) take the shape of the dialect
    that owns the path (dialects/registry.py); the document declares that same shape for the path."""
    for path, item in openapi_document()["paths"].items():
        for op in item.values():
            for status in HEAD_ERRORS:
                body = registry.error_payload(path, registry.plain_error("refused", status, "refused"))
                _fits(op["responses"][str(status)]["content"]["application/json"]["schema"], body)


# ---- real answers fit the document --------------------------------------------------------------------------


def _schema(
    path: str, method: str, status: int, media: str = "application/json", *, headers: bool = False
) -> dict[str, Any]:
    """The schema documented for an answer's body (or, with `headers`, its headers)."""
    document = openapi_document()
    responses = document["paths"][path][method]["responses"]
    assert str(status) in responses, f"{method.upper()} {path} answered an undocumented {status}"
    schema: dict[str, Any] = responses[str(status)]["headers" if headers else "content"]
    return schema if headers else schema[media]["schema"]


def _frame_schema(event: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """(the JSON schema of an SSE event's data, whether `[DONE]` may end the stream) from an event schema."""
    data = event["properties"]["data"]
    if "anyOf" in data:
        assert data["anyOf"][0] == {"const": "[DONE]"}
        return data["anyOf"][1]["contentSchema"], True
    return data["contentSchema"], False


def _fits(schema: dict[str, Any], value: Any) -> None:
    _fits_in(schema, openapi_document()["components"], value)


def _fits_in(schema: dict[str, Any], components: dict[str, Any], value: Any) -> None:
    validator = Draft202012Validator({**schema, "components": components})
    problems = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(value)]
    assert not problems, problems


class Caller:
    def __init__(self, server: GatewayServer, headers: dict[str, str]) -> None:
        self.server = server
        self.headers = headers
        self.seen: set[tuple[str, str, int]] = set()

    def __call__(self, method: str, template: str, path: str | None = None, **kw: Any) -> httpx.Response:
        headers = {**self.headers, **kw.pop("headers", {})}
        response = httpx.request(method, self.server.url + (path or template), headers=headers, timeout=30, **kw)
        self.seen.add((method.lower(), template, response.status_code))
        media = response.headers["content-type"].split(";")[0]
        if media == "text/event-stream":
            schema, done = _frame_schema(_schema(template, method.lower(), response.status_code, media))
            frames = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
            assert frames and (frames[-1] == "[DONE]") == done, frames[-1:]
            for frame in frames[:-1] if done else frames:
                _fits(schema, orjson.loads(frame))
        else:
            assert media == "application/json", response.text
            _fits(_schema(template, method.lower(), response.status_code), response.json())
        return response


def test_real_answers_fit_the_documented_schemas(server: GatewayServer) -> None:
    call = Caller(server, server.auth)
    # OpenAI, InferExchange, Unify
    for prefix, model in (("/v1", "echo-model"), ("/api/v1", "echo-model"), ("/v0", "echo-model@fake")):
        route = prefix + "/chat/completions"
        assert call("POST", route, json={"model": model, "messages": HI}).status_code == 200
        streamed = call(
            "POST",
            route,
            json={"model": model, "messages": HI, "stream": True, "stream_options": {"include_usage": True}},
        )
        assert streamed.status_code == 200
        assert call("POST", route, json={"model": model, "messages": []}).status_code == 400
    cut = {"model": "die-midstream", "messages": HI, "stream": True}  # an error frame after the first byte
    assert '"error"' in call("POST", "/v1/chat/completions", json=cut).text
    assert "event: error" in call("POST", "/v1/messages", json={**cut, "max_tokens": 20}).text
    assert '"error"' in call("POST", "/v1/ula/chat/completions", json={**cut, "provider": "fake"}).text
    assert call("POST", "/v1/chat/completions", json={"model": "nope", "messages": HI}).status_code == 404
    limited = call("POST", "/v1/chat/completions", json={"model": "error-429", "messages": HI})
    assert limited.status_code == 429
    header = _schema("/v1/chat/completions", "post", 429, headers=True)["Retry-After"]["schema"]
    _fits(header, limited.headers["retry-after"])
    assert call("POST", "/v1/chat/completions", json={"model": "error-500", "messages": HI}).status_code == 502
    assert call("POST", "/v1/chat/completions", content=b"x", headers={"content-type": "text/plain"}).status_code == 415
    stranger = Caller(server, {"Authorization": "Bearer ipx-not-a-key"})
    assert stranger("POST", "/v1/chat/completions", json={"model": "echo-model", "messages": HI}).status_code == 401
    assert stranger("POST", "/v1/messages", json={"model": "echo-model", "messages": HI}).status_code == 401
    assert stranger("POST", "/v1/ula/chat/completions", json={"messages": HI}).status_code == 401
    assert call("POST", "/v1/embeddings", json={"model": "embed-model", "input": ["a", "b"]}).status_code == 200
    assert (
        call(
            "POST", "/v1/embeddings", json={"model": "embed-model", "input": "a", "encoding_format": "base64"}
        ).status_code
        == 200
    )
    for prefix in ("/v1", "/api/v1"):
        assert call("GET", prefix + "/models").status_code == 200
        assert call("GET", prefix + "/models/{model_id}", prefix + "/models/echo-model").status_code == 200
        assert call("GET", prefix + "/models/{model_id}", prefix + "/models/nope").status_code == 404
    assert call("GET", "/v1/endpoints", params={"provider": "fake"}).status_code == 200
    assert call("GET", "/v0/endpoints").status_code == 200
    # Unify's platform routes (the chat calls above are in the query log)
    logged = {"endpoint": "local@external", "query_body": {"messages": HI}, "tags": ["t"]}
    assert call("POST", "/v0/queries", json=logged).status_code == 200
    assert call("POST", "/v0/queries", json={"endpoint": "x"}).status_code == 422
    for route in ("/v0/models", "/v0/providers", "/v0/queries", "/v0/tags", "/v0/metrics", "/v0/credits"):
        assert call("GET", route).status_code == 200
    assert call("GET", "/v0/queries", params={"page_number": "x"}).status_code == 422
    measured = {"model": "echo-model", "provider": "fake", "start_time": "2020-01-01 00:00:00"}
    assert call("GET", "/v0/endpoint-metrics", params=measured).status_code == 200
    assert call("GET", "/v0/endpoint-metrics", params={**measured, "model": "nope"}).status_code == 404
    assert stranger("GET", "/v0/queries").status_code == 401
    assert call("GET", "/health").status_code == 200
    # Anthropic
    message = {"model": "echo-model", "max_tokens": 20, "messages": HI}
    assert call("POST", "/v1/messages", json=message).status_code == 200
    assert call("POST", "/v1/messages", json={**message, "stream": True}).status_code == 200
    assert call("POST", "/v1/messages", json={"model": "echo-model", "messages": HI}).status_code == 400
    assert call("POST", "/v1/messages", json={**message, "model": "nope"}).status_code == 404
    assert call("POST", "/v1/messages/count_tokens", json={"model": "echo-model", "messages": HI}).status_code == 200
    # OneInfer
    ula = {"provider": "fake", "model": "echo-model", "messages": HI}
    assert call("POST", "/v1/ula/chat/completions", json=ula).status_code == 200
    assert call("POST", "/v1/ula/chat/completions", json={**ula, "stream": True}).status_code == 200
    assert call("POST", "/v1/ula/chat/completions", json={**ula, "temperature": "hot"}).status_code == 422
    assert call("POST", "/v1/ula/chat/completions", json={**ula, "provider": "nope"}).status_code == 400
    assert call("POST", "/v1/ula/generate-image", json={}).status_code == 400  # no prompt
    exchange = "/v1/ula/oauth-authentication"
    assert call("POST", exchange, params={"api_key": server.master_key}).status_code == 200
    assert call("POST", exchange, params={"api_key": "ipx-not-a-key"}).status_code == 403
    assert call("POST", exchange).status_code == 422
    assert call("GET", "/v1/ula/models").status_code == 200
    assert stranger("GET", "/v1/ula/models").status_code == 401
    for path in ("/v1/messages", "/v1/ula/chat/completions", "/v1/chat/completions"):  # refused before routing
        assert call("POST", path, json={}, headers={"x-big": "x" * 70_000}).status_code == 431
    assert call("POST", "/v1/ula/generate-video", json={}).status_code == 400  # no prompt
    _admin_answers_fit(call)


def _admin_answers_fit(call: Caller) -> None:
    account = call("POST", "/admin/accounts", json={"name": "acme", "credits_micros": 5_000_000}).json()
    account_path = f"/admin/accounts/{account['id']}"
    key = call("POST", "/admin/keys", json={"name": "k", "account_id": account["id"], "tags": ["t"]}).json()
    key_path = f"/admin/keys/{key['id']}"
    keyed = Caller(call.server, {"Authorization": f"Bearer {key['key']}"})
    assert keyed("POST", "/v1/chat/completions", json={"model": "echo-model", "messages": HI}).status_code == 200
    assert keyed("GET", "/admin/keys").status_code == 403
    assert keyed("POST", "/v1/auth/token", json={"ttl_s": 60, "scopes": ["chat"]}).status_code == 200
    assert keyed("POST", "/v1/auth/token").status_code == 200
    assert keyed("POST", "/v1/auth/token", json={"ttl_s": -1}).status_code == 400
    for template, path in (
        ("/admin/keys", "/admin/keys"),
        ("/admin/keys/{key_id}", key_path),
        ("/admin/accounts", "/admin/accounts"),
        ("/admin/accounts/{account_id}", account_path),
        ("/admin/accounts/{account_id}/ledger", account_path + "/ledger"),
        ("/admin/usage", "/admin/usage"),
    ):
        assert call("GET", template, path).status_code == 200
    for by in ("day", "model", "key", "account", "tag"):
        assert call("GET", "/admin/usage/totals", params={"by": by}).status_code == 200
    assert call("GET", "/admin/usage/totals", params={"by": "week"}).status_code == 400
    assert call("PATCH", "/admin/keys/{key_id}", key_path, json={"rpm": 10}).status_code == 200
    assert call("PATCH", "/admin/keys/{key_id}", key_path, json={"nope": 1}).status_code == 400
    assert call("PATCH", "/admin/accounts/{account_id}", account_path, json={"name": "acme2"}).status_code == 200
    assert (
        call(
            "POST",
            "/admin/accounts/{account_id}/credits",
            account_path + "/credits",
            json={"amount_micros": 7, "note": "n"},
        ).status_code
        == 200
    )
    assert call("POST", "/admin/keys/{key_id}/rotate", key_path + "/rotate").status_code == 200
    assert call("POST", "/admin/keys/{key_id}/revoke", key_path + "/revoke").status_code == 200
    assert call("GET", "/admin/keys/{key_id}", "/admin/keys/key_nope").status_code == 404
    assert call("POST", "/admin/keys", json={"name": ""}).status_code == 400
    assert call("GET", "/openapi.json").status_code == 200


# ---- and OpenAI's own published schemas -------------------------------------------------------------------


def _nullable(schema: Any) -> Any:
    """OpenAI's document says 3.1 but still writes 3.0's `nullable: true`: read it as 3.0 meant it."""
    if isinstance(schema, list):
        return [_nullable(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _nullable(v) for k, v in schema.items() if k != "nullable"}
    return {"anyOf": [out, {"type": "null"}]} if schema.get("nullable") is True else out


OPENAI_SCHEMAS = _nullable(
    orjson.loads((Path(__file__).parent / "fixtures" / "openai_response_schemas.json").read_bytes())
)
# OpenAI's stream chunks carry `finish_reason: null` until the last (its own API does, and its SDKs type it
# so); the document forgets the null.
_STREAM_CHOICE = OPENAI_SCHEMAS["components"]["schemas"]["CreateChatCompletionStreamResponse"]["properties"]
_STREAM_CHOICE["choices"]["items"]["properties"]["finish_reason"] = _nullable(
    {**_STREAM_CHOICE["choices"]["items"]["properties"]["finish_reason"], "nullable": True}
)


def _fits_openai(name: str, value: Any) -> None:
    """`value` is valid against OpenAI's published schema `name` (tests/fixtures, from openai/openai-openapi)."""
    _fits_in({"$ref": f"#/components/schemas/{name}"}, OPENAI_SCHEMAS["components"], value)


def test_openai_shaped_answers_fit_openais_own_published_schemas(server: GatewayServer) -> None:
    """What an OpenAI client generated from OpenAI's own document expects: our additions (timings, cost,
    pricing) are extra keys, never a changed or missing one."""
    auth = server.auth
    for prefix, model in (("/v1", "echo-model"), ("/api/v1", "echo-model"), ("/v0", "echo-model@fake")):
        url = server.url + prefix + "/chat/completions"
        body = {"model": model, "messages": HI}
        _fits_openai("CreateChatCompletionResponse", httpx.post(url, json=body, headers=auth).json())
        streamed = httpx.post(
            url, json={**body, "stream": True, "stream_options": {"include_usage": True}}, headers=auth
        )
        frames = [line[6:] for line in streamed.text.splitlines() if line.startswith("data: ")]
        assert frames[-1] == "[DONE]"
        for frame in frames[:-1]:
            _fits_openai("CreateChatCompletionStreamResponse", orjson.loads(frame))
        refused = httpx.post(url, json={**body, "messages": []}, headers=auth)
        assert refused.status_code == 400
        _fits_openai("ErrorResponse", refused.json())
    embedded = httpx.post(server.url + "/v1/embeddings", json={"model": "embed-model", "input": "a"}, headers=auth)
    _fits_openai("CreateEmbeddingResponse", embedded.json())
    _fits_openai("ListModelsResponse", httpx.get(server.url + "/v1/models", headers=auth).json())
    _fits_openai("Model", httpx.get(server.url + "/v1/models/echo-model", headers=auth).json())
