"""What is Azure's own, end to end: deployment URLs, `api-version`, `api-key`, content-filter results passed
through (buffered, streamed, and as Anthropic's `refusal`), its error bodies, and what a model's capabilities
keep from it. What every kind owes a caller (streaming, 429, overload, a mid-stream failure, hang-up,
drop_params, n) is in test_contract.py.
"""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from tests.fakes.azure_upstream import FakeAzure
from tests.gateway_server import GatewayServer


@pytest.fixture
def client(native_gateway: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=native_gateway.base_url, api_key=native_gateway.master_key, max_retries=0)


def test_deployment_url_key_and_version(client: openai.OpenAI, fake_azure: FakeAzure) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="azure-echo", messages=[{"role": "user", "content": "hello"}]
    )
    done = raw.parse()
    assert done.choices[0].message.content == "echo: hello" and done.model == "azure-echo"
    sent = fake_azure.last()
    assert sent.path == "/openai/deployments/gpt4o-prod/chat/completions"
    assert sent.query == {"api-version": "2024-10-21"}
    assert sent.headers["api-key"] == "az-fake" and "Authorization" not in sent.headers
    body: dict[str, Any] = raw.http_response.json()
    assert body["prompt_filter_results"][0]["content_filter_results"]["hate"]["filtered"] is False
    assert body["choices"][0]["content_filter_results"]["violence"]["severity"] == "safe"


def test_content_filter_buffered_and_streamed(client: openai.OpenAI) -> None:
    filtered = client.chat.completions.create(model="azure-filtered", messages=[{"role": "user", "content": "x"}])
    assert filtered.choices[0].finish_reason == "content_filter"
    results = (filtered.choices[0].model_extra or {})["content_filter_results"]
    assert results["violence"] == {"filtered": True, "severity": "medium"}
    streamed = list(
        client.chat.completions.create(model="azure-filtered", messages=[{"role": "user", "content": "x"}], stream=True)
    )
    assert [c.choices[0].finish_reason for c in streamed if c.choices][-1] == "content_filter"


def test_errors_keep_azures_message(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as filtered:
        client.chat.completions.create(model="azure-prompt-filtered", messages=[{"role": "user", "content": "x"}])
    assert "content management policy" in filtered.value.body["message"]  # type: ignore[index]
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="azure-missing", messages=[{"role": "user", "content": "x"}])
    assert "deployment for this resource does not exist" in missing.value.body["message"]  # type: ignore[index]


def test_anthropic_dialect_in_front_of_azure(native_gateway: GatewayServer) -> None:
    client = anthropic.Anthropic(base_url=native_gateway.url, api_key=native_gateway.master_key, max_retries=0)
    with client.messages.stream(model="azure-echo", max_tokens=20, messages=[{"role": "user", "content": "hi"}]) as s:
        assert "".join(s.text_stream) == "echo: hi"
    filtered = client.messages.create(
        model="azure-filtered", max_tokens=20, messages=[{"role": "user", "content": "x"}]
    )
    assert filtered.stop_reason == "refusal"


def test_model_capabilities_narrow_what_azure_is_sent(client: openai.OpenAI, fake_azure: FakeAzure) -> None:
    image: Any = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    tools: Any = [{"type": "function", "function": {"name": "f"}}]
    raw = client.chat.completions.with_raw_response.create(
        model="azure-text", messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}, image]}], tools=tools
    )
    assert raw.http_response.headers["x-inferplex-dropped-params"] == "image_url,tools"
    sent = fake_azure.last().body
    assert "tools" not in sent and sent["messages"][0]["content"] == [{"type": "text", "text": "hi"}]
    chunks = list(
        client.chat.completions.create(
            model="azure-text",
            messages=[{"role": "user", "content": "a b"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "echo: a b"
    assert chunks[-1].usage is not None and "stream" not in fake_azure.last().body
