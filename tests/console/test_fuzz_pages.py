"""Every console route (E1's and the data pages') fuzzed signed in: tests/test_schema_fuzz.py fuzzes them
signed out, where each is a 303. schemathesis draws parameters and forms from the console's part of
/openapi.json and sends them with a live session cookie and its CSRF token, so every form's parsing and
every page's parameters are reached. Every answer must be documented, and never a 5xx."""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from inferplex.openapi.console import OPERATIONS as CONSOLE
from inferplex.openapi.console_views import OPERATIONS as VIEWS
from tests.conftest import openai_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer
from tests.test_schema_fuzz import CHECKS, EXAMPLES

# signing out would end the session the other cases run in (it is tested in test_pages.py)
OPERATIONS = [(op.method, op.path) for op in (*CONSOLE, *VIEWS) if op.path != "/ui/logout"]


KNOWN: dict[str, str] = {}


def steer(case: Any) -> None:
    """Half the cases (chosen by their own bytes, so shrinking stays stable) name a key and an account that
    exist, so the edit, credit, rotate and revoke forms are parsed rather than met with a 404."""
    params = case.path_parameters or {}
    if params and zlib.crc32(repr((case.body, case.query)).encode()) % 2 == 0:
        case.path_parameters = {name: KNOWN.get(name, value) for name, value in params.items()}


@pytest.fixture(scope="module")
def signed_in(fake_openai: FakeOpenAI) -> Iterator[tuple[Any, dict[str, str]]]:
    with GatewayServer(openai_config(fake_openai)) as server:
        http = httpx.Client(base_url=server.url)
        assert http.post("/ui/login", data={"key": server.master_key}).status_code == 303
        token = re.search(r'name="csrf" value="([^"]+)"', http.get("/ui/keys").text)
        assert token
        cookie = f"ipx_console={http.cookies['ipx_console']}"
        schema = schemathesis.openapi.from_url(server.url + "/openapi.json")
        schema.config.update(base_url=server.url)
        key = http.post("/admin/keys", headers=server.auth, json={"name": "fuzzed", "credits_micros": 10}).json()
        KNOWN.update(key_id=key["id"], account_id=key["account_id"])
        yield schema, {"cookie": cookie, "x-csrf-token": token.group(1)}
        http.close()


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m.upper()} {p}" for m, p in OPERATIONS])
def test_signed_in_answers_are_documented(signed_in: tuple[Any, dict[str, str]], method: str, path: str) -> None:
    schema, headers = signed_in
    operation = schema[path][method.upper()]
    cases = st.one_of(operation.as_strategy(mode) for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE))

    @settings(
        max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None
    )
    @given(case=cases)
    def run(case: Any) -> None:
        steer(case)
        case.call_and_validate(headers=headers, checks=CHECKS, timeout=20)

    run()
