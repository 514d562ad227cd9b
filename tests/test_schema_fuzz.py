"""Schema fuzzing: schemathesis generates requests from the gateway's own `/openapi.json` (valid and invalid,
for every operation) and sends them to a real gateway on a fake upstream. Every answer must be documented:
no 5xx, a status the document lists for that operation, a content type it declares, and a body that fits the
declared schema (headers too). Run twice: with the master key on PostgreSQL, and with an ordinary key that
has credit and limits on SQLite.

Bounded: a few examples per operation (about thirty operations) and no hypothesis deadline, so the whole
module takes about a minute on this machine. A failure prints the request as a curl line to replay.
"""

from __future__ import annotations

import os
import secrets
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from inferplex.admin.openapi import openapi_document
from tests.accounts.conftest import _pg
from tests.conftest import openai_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer
from tests.test_properties_http import asked_for_its_timeout

# A deeper run, e.g. before a release: INFERPLEX_FUZZ_EXAMPLES=200 make test
EXAMPLES = int(os.environ.get("INFERPLEX_FUZZ_EXAMPLES", "15"))

# A body that names a served model (half the cases, chosen by the body's own bytes, so shrinking stays
# stable) reaches the fake upstream and exercises the success answers; the others mostly meet 400 and 404.
_SERVED = {
    "/v1/chat/completions": "echo-model",
    "/api/v1/chat/completions": "echo-model",
    "/v1/messages": "echo-model",
    "/v1/messages/count_tokens": "echo-model",
    "/v1/embeddings": "embed-model",
    "/v0/chat/completions": "echo-model@fake",
    "/v1/ula/chat/completions": "echo-model",
}


def no_unasked_5xx(ctx: Any, response: Any, case: Any) -> bool | None:
    """not_a_server_error, but for the 5xx a request asks for: the 504 of a request that set its own `timeout`
    (5e-324 s is a valid one) and was answered with its expiry."""
    status = response.status_code
    asked = asked_for_its_timeout(case.body, response)
    assert status < 500 or asked, f"{status}: {response.text}"
    return None


CHECKS = [
    no_unasked_5xx,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]


@dataclass(frozen=True)
class Fuzzed:
    schema: Any  # the document as the gateway serves it, read over HTTP as a client generator would
    headers: dict[str, str]


@pytest.fixture(scope="module", params=["master-postgresql", "keyed-sqlite"])
def fuzzed(request: pytest.FixtureRequest, fake_openai: FakeOpenAI) -> Iterator[Fuzzed]:
    """A gateway and a caller: the master key (every admin route) on PostgreSQL, where the store refuses
    most (NUL in text, integers past their column), and an ordinary key with credit, generous limits and
    every non-admin scope (the guard's reservations and settlements) on SQLite."""
    config = openai_config(fake_openai)
    # The response cache on (in memory on PostgreSQL, its SQLite file on SQLite): its control headers and the
    # body's `cache` object are fuzzed like every other field.
    config["cache"] = {"enabled": True}
    name = "inferplex_fuzz_" + secrets.token_hex(6)
    postgres = request.param.endswith("postgresql")
    if postgres:
        _pg(f'CREATE DATABASE "{name}"')
        config["storage"] = {"database_url": f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"}
    try:
        with GatewayServer(config) as server:
            headers = server.auth
            if request.param.startswith("keyed"):
                made = httpx.post(
                    server.url + "/admin/keys",
                    headers=server.auth,
                    json={"name": "fuzz", "credits_micros": 10**9, "rpm": 100_000},
                )
                assert made.status_code == 201, made.text
                headers = {"Authorization": f"Bearer {made.json()['key']}"}
            schema = schemathesis.openapi.from_url(server.url + "/openapi.json")
            schema.config.update(base_url=server.url)
            yield Fuzzed(schema, headers)
    finally:
        if postgres:
            _pg(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


_HI = [{"role": "user", "content": "hi"}]
_KEEP = ("temperature", "top_p", "max_tokens", "n", "stream", "seed", "stop", "user", "top_k", "system")


def _minimal(path: str) -> dict[str, Any]:
    """A valid request for the route at `path`, for a served model."""
    if path == "/v1/embeddings":
        return {"model": _SERVED[path], "input": "hi"}
    body: dict[str, Any] = {"model": _SERVED[path], "messages": _HI}
    if path.startswith("/v1/messages"):
        body["max_tokens"] = 16
    if path == "/v1/ula/chat/completions":
        body["provider"] = "fake"
    return body


def _served(case: Any) -> Any:
    """Steer half the bodies (chosen by their own bytes, so shrinking stays stable) to a served model, and a
    quarter to a minimal valid request (alone, or with a few generated fields), so that the fuzz reaches the
    success answers too: a generated body of this size is almost never valid as a whole."""
    path = case.operation.path
    body = case.body
    if path not in _SERVED or not isinstance(body, dict):
        return case
    pick = zlib.crc32(repr(body).encode()) % 8
    if pick < 4:
        case.media_type = "application/json"  # a steered body holds JSON values (OneInfer also takes a form)
        minimal = _minimal(path)
        if pick < 2:  # 0: the minimal request; 1: with the generated values of a few fields
            case.body = {k: v for k, v in body.items() if k in _KEEP and pick == 1} | minimal
        else:  # the generated body, for a served model
            case.body = body | {k: v for k, v in minimal.items() if k in ("model", "provider")}
    return case


OPERATIONS = [(method, path) for path, item in openapi_document()["paths"].items() for method in item]


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m.upper()} {p}" for m, p in OPERATIONS])
def test_every_answer_is_documented(fuzzed: Fuzzed, method: str, path: str) -> None:
    """Valid and invalid requests alike get an answer the document describes, and never a 5xx.

    schemathesis' own pytest loader (`from_fixture`) does not run on pytest 9 (it sets `Function._nodeid`,
    which pytest 9 removed), so each operation's strategies drive a hypothesis test here. Health checks
    are off because generating from these large request schemas is slow by design (too_slow,
    filter_too_much, large_base_example) and the gateway is a module fixture on purpose."""
    operation = fuzzed.schema[path][method.upper()]
    cases = st.one_of(operation.as_strategy(mode) for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE))

    @settings(
        max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None
    )
    @given(case=cases.map(_served))
    def run(case: Any) -> None:
        case.call_and_validate(headers=fuzzed.headers, checks=CHECKS, timeout=20)

    run()
    if path in _SERVED:  # and the success answers, streamed or not, fit too, whatever the draws reached
        for stream in (False, True):
            body = _minimal(path) | ({"stream": True} if stream else {})
            case = operation.Case(body=body, media_type="application/json")
            answered = case.call_and_validate(headers=fuzzed.headers, checks=CHECKS, timeout=20)
            assert answered.status_code == 200, answered.text
