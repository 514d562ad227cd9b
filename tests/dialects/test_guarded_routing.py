"""Routing rules of the seed dialects that behave correctly but that no test guarded (issue 19, item 21).

A dedicated deployment is reached only by its `endpoint_id`, and only by a key whose allowlist names that
endpoint (or a key with no allowlist). A key that may use the model but not the endpoint is told the
endpoint does not exist, exactly as for an unknown one, so the answer does not reveal it: in OneInfer's
envelope that is its 400 `endpoint_not_found` (OneInfer's status table has no 404 for a chat request), on
the OpenAI route a 404. The test was seen to fail with the allowlist check removed from the router's plan.
Unify's `GET /v0/endpoints` lists only what the key may use (it listed everything with its filter removed,
and no test noticed).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.accounts.conftest import Admin
from tests.dialects.conftest import seed_config
from tests.dialects.test_oneinfer import assert_error, assert_success
from tests.fakes.anthropic_upstream import FakeAnthropic
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

DEDICATED = "ep-dedicated"
DEDICATED_UPSTREAM = "gpt-4o-mini-dedicated"
USER = [{"role": "user", "content": "hi there"}]


@pytest.fixture(scope="module")
def server(
    fake_openai: FakeOpenAI,
    seed_anthropic: FakeAnthropic,
    byok_openai: FakeOpenAI,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[GatewayServer]:
    """The seed gateway's config, with a dedicated deployment of `gpt-4o-mini` on `openai`."""
    config = seed_config(fake_openai, seed_anthropic, byok_openai, str(tmp_path_factory.mktemp("guarded-routing")))
    mini = next(m for m in config["models"] if m["name"] == "gpt-4o-mini")
    mini["deployments"].append({"provider": "openai", "model": DEDICATED_UPSTREAM, "id": DEDICATED, "dedicated": True})
    with GatewayServer(config) as gw:
        yield gw


def oneinfer(server: GatewayServer, key: str, **extra: Any) -> httpx.Response:
    body = {"provider": "openai", "model": "gpt-4o-mini", "messages": USER, **extra}
    return httpx.post(
        server.url + "/v1/ula/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=10
    )


def openai_route(server: GatewayServer, key: str, **extra: Any) -> httpx.Response:
    body = {"model": "gpt-4o-mini", "messages": USER, **extra}
    return httpx.post(
        server.base_url + "/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=10
    )


def dedicated_hits(fake: FakeOpenAI) -> int:
    return sum(1 for r in fake.state.requests if r.body.get("model") == DEDICATED_UPSTREAM)


def test_a_dedicated_endpoint_not_in_the_keys_allowlist_does_not_exist_for_it(
    server: GatewayServer, admin: Admin, fake_openai: FakeOpenAI
) -> None:
    model_only = admin.create_key(allowed_models=["gpt-4o-mini"], credits_micros=10**6)["key"]
    before = dedicated_hits(fake_openai)
    # the model itself is allowed: a request without endpoint_id is served by a shared deployment
    assert_success(oneinfer(server, model_only))
    refused = oneinfer(server, model_only, endpoint_id=DEDICATED)
    assert_error(refused, 400, "endpoint_not_found", "endpoint_id")
    unknown = oneinfer(server, model_only, endpoint_id="ep-no-such-endpoint")
    assert_error(unknown, 400, "endpoint_not_found", "endpoint_id")
    r = openai_route(server, model_only, endpoint_id=DEDICATED)
    assert r.status_code == 404, r.text
    assert r.json()["error"]["code"] == "endpoint_not_found" and r.json()["error"]["param"] == "endpoint_id"
    assert dedicated_hits(fake_openai) == before


def test_a_key_whose_allowlist_names_the_endpoint_reaches_it(
    server: GatewayServer, admin: Admin, fake_openai: FakeOpenAI
) -> None:
    entitled = admin.create_key(allowed_models=["gpt-4o-mini", DEDICATED], credits_micros=10**6)["key"]
    before = dedicated_hits(fake_openai)
    r = oneinfer(server, entitled, endpoint_id=DEDICATED)
    assert_success(r)
    assert r.headers["x-inferplex-deployment"] == DEDICATED
    assert dedicated_hits(fake_openai) == before + 1


def test_unify_endpoint_list_applies_the_model_allowlist(server: GatewayServer, admin: Admin) -> None:
    key = admin.create_key(allowed_models=["llama-*"])["key"]

    def listed(credential: str) -> list[str]:
        r = httpx.get(server.url + "/v0/endpoints", headers={"Authorization": f"Bearer {credential}"}, timeout=10)
        assert r.status_code == 200, r.text
        names: list[str] = r.json()
        return names

    assert listed(key) == ["llama-3.1-8b@groq"]
    assert {"llama-3.1-8b@groq", "gpt-4o-mini@openai", "claude-sonnet-4-6@anthropic"} <= set(listed(server.master_key))
