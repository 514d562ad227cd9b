"""Property tests of request validation through the HTTP API, on the native provider adapters (Anthropic,
Gemini, Bedrock, Azure): any JSON value in any field of an OpenAI or Anthropic request gets a 2xx or a 4xx
in the dialect's error shape, never a 5xx, whichever adapter translates it. The fakes validate what they
receive as their providers do; a body the gateway translates into something a provider rejects comes back as
that provider's 4xx, which this test accepts as clean (the translator property tests check the bodies).

Same generators and checks as tests/test_properties_http.py; the gateway here is the real server on sockets.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.gateway_server import GatewayServer
from tests.test_properties_http import ROUTES, check_clean, json_values, with_field

TARGETS = ("claude-echo", "gemini-echo", "bedrock-claude", "azure-echo")
EXAMPLES = int(os.environ.get("INFERPLEX_FUZZ_EXAMPLES", "40"))  # deeper: set it higher


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["openai-chat", "anthropic-messages", "anthropic-count"])
def test_any_value_in_any_field_is_answered_cleanly_by_every_adapter(
    name: str, target: str, native_gateway: GatewayServer
) -> None:
    """Health checks: too_slow is off because each example is a whole proxied request."""
    route = ROUTES[name]
    base = {**route.body, "model": target}
    fields = sorted({*base, *route.fields})

    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(field=st.sampled_from(fields), value=json_values, delete=st.booleans())
    def run(field: str, value: Any, delete: bool) -> None:
        body = with_field(base, field, value, delete)
        response = httpx.post(native_gateway.url + route.path, json=body, headers=native_gateway.auth, timeout=30)
        check_clean(route, response, body)

    run()
