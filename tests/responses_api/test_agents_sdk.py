"""The OpenAI Agents SDK (`openai-agents`) runs an agent with a function tool through the gateway's Responses API.

The agent's model is the SDK's own `OpenAIResponsesModel` on an `AsyncOpenAI` client whose base URL is the
gateway, tracing off, so nothing leaves the machine. Behind the gateway sits a fake of each provider kind
(OpenAI-compatible through the chat translation, the same fake passed through natively as a provider that
speaks Responses, Anthropic, Gemini, and Bedrock): it calls the tool first, then, given the tool's
output, answers `tool said: <output>`. A run passes when the tool ran once with the fake's arguments, the
agent's final output is that answer, and the fake's last request carried the tool's output, answering the
call it made, in the provider's own shape. Each run is made buffered (`Runner.run`) and streamed
(`Runner.run_streamed`), sending the whole conversation each turn (the SDK's default) or chaining turns by
`previous_response_id` (the gateway's stored history), and the streamed run's raw Responses events are
checked against OpenAI's schema.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from agents import Agent, ModelSettings, OpenAIResponsesModel, RunConfig, Runner, function_tool
from openai import AsyncOpenAI, DefaultAsyncHttpxClient, NotFoundError

from tests.gateway_server import GatewayServer
from tests.responses_api.schema import check_event
from tests.responses_api.upstreams import (  # noqa: F401 (fixtures)
    Fakes,
    _native_keys,
    fake_anthropic,
    fake_azure,
    fake_bedrock,
    fake_gemini,
    fake_openai,
    fakes_fixture,
    gateway_fixture,
    model,
    tool_output_sent,
)

# agent -> (the provider kind behind it, the behaviour its model is named after); `gemini-signed` is a thinking
# model whose call carries a thought signature that must come back with the call next turn (a call without one
# would go with Google's placeholder, which the fake accepts, so the exact signature is checked where the parts
# are compared: test_agent_without_store_sends_signed_reasoning_back, tests/providers/test_gemini.py)
AGENTS = {
    "openai": ("openai", "tool"),
    "native": ("native", "tool"),
    "anthropic": ("anthropic", "tool"),
    "gemini": ("gemini", "tool"),
    "gemini-signed": ("gemini", "signed-tool"),
    "bedrock": ("bedrock", "tool"),
}
# what the tool's output must answer on each fake: the id of the call the fake made (Gemini: the function)
CALLED = {
    "openai": "call_abc123",
    "native": "call_fake123",
    "anthropic": "toolu_01",
    "gemini": "get_weather",
    "bedrock": "tooluse_0",
}
# the SDK sends the whole conversation each turn, or (chained) only what is new with previous_response_id
CHAINING = {"full-input": False, "chained": True}


def weather_agent(gateway: GatewayServer, agent: str, calls: list[str], sent: list[dict[str, Any]]) -> Agent[Any]:
    """The agent; the tool notes each city it is asked about in `calls`, the client each request body in
    `sent`."""

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city.

        Args:
            city: The city's name.
        """
        calls.append(city)
        return f"sunny in {city}"

    async def record(request: Any) -> None:
        sent.append(orjson.loads(request.content))

    http = DefaultAsyncHttpxClient(event_hooks={"request": [record]})
    client = AsyncOpenAI(base_url=gateway.base_url, api_key=gateway.master_key, max_retries=0, http_client=http)
    return Agent(
        name="weather",
        instructions="Answer questions about the weather with the get_weather tool.",
        tools=[get_weather],
        model=OpenAIResponsesModel(model=model(*AGENTS[agent]), openai_client=client),
    )


def check_run(agent: str, fakes: Fakes, chaining: str, sent: list[dict[str, Any]], first_id: str) -> None:
    """The fake got the tool's output answering its call, and the SDK sent what `chaining` says: chained, the
    second request holds only the tool's output, so the fake's whole conversation came from the gateway's
    stored history."""
    kind = AGENTS[agent][0]
    answered, text = tool_output_sent(kind, fakes)
    assert (answered, text) == (CALLED[kind], "sunny in Paris")
    assert len(sent) == 2, sent
    kinds = [item.get("type", "message") for item in sent[1]["input"]]
    if CHAINING[chaining]:
        assert sent[1]["previous_response_id"] == first_id
        assert kinds == ["function_call_output"], kinds
    else:
        assert "previous_response_id" not in sent[1]
        assert kinds == ["message", "function_call", "function_call_output"], kinds


@pytest.mark.parametrize("chaining", list(CHAINING))
@pytest.mark.parametrize("agent", list(AGENTS))
async def test_agent_runs_a_function_tool(gateway: GatewayServer, fakes: Fakes, agent: str, chaining: str) -> None:
    calls: list[str] = []
    sent: list[dict[str, Any]] = []
    result = await Runner.run(
        weather_agent(gateway, agent, calls, sent),
        "What is the weather in Paris?",
        run_config=RunConfig(tracing_disabled=True),
        max_turns=4,
        auto_previous_response_id=CHAINING[chaining],
    )
    assert calls == ["Paris"]
    assert result.final_output == "tool said: sunny in Paris"
    assert result.raw_responses[0].response_id is not None
    check_run(agent, fakes, chaining, sent, result.raw_responses[0].response_id)
    kinds = [item.type for item in result.new_items]
    assert kinds == ["tool_call_item", "tool_call_output_item", "message_output_item"], kinds
    assert len(result.raw_responses) == 2
    for response in result.raw_responses:
        assert response.response_id and response.response_id.startswith("resp_")
        assert response.usage.total_tokens > 0


@pytest.mark.parametrize("chaining", list(CHAINING))
@pytest.mark.parametrize("agent", list(AGENTS))
async def test_agent_runs_a_function_tool_streamed(
    gateway: GatewayServer, fakes: Fakes, agent: str, chaining: str
) -> None:
    calls: list[str] = []
    sent: list[dict[str, Any]] = []
    result = Runner.run_streamed(
        weather_agent(gateway, agent, calls, sent),
        "What is the weather in Paris?",
        run_config=RunConfig(tracing_disabled=True),
        max_turns=4,
        auto_previous_response_id=CHAINING[chaining],
    )
    raw: list[dict[str, Any]] = []
    async for event in result.stream_events():
        if event.type == "raw_response_event":
            raw.append(event.data.model_dump(mode="json", exclude_unset=True))
    assert calls == ["Paris"]
    assert result.final_output == "tool said: sunny in Paris"
    kinds = [e["type"] for e in raw]
    assert kinds.count("response.created") == 2 and kinds.count("response.completed") == 2, kinds
    check_run(agent, fakes, chaining, sent, raw[0]["response"]["id"])
    for one in raw:
        check_event(one)


# the assistant turn each fake must get back: its signed reasoning (or the call's signature) before the call
SIGNED_TURN: dict[str, Any] = {
    "anthropic-think-tool": [
        {"type": "thinking", "thinking": "Let me think.", "signature": "sig-abc"},
        {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}},
    ],
    "bedrock-think-tool": [
        {"reasoningContent": {"reasoningText": {"text": "Pondering.", "signature": "sig-b"}}},
        {"toolUse": {"toolUseId": "tooluse_0", "name": "get_weather", "input": {"city": "Paris"}}},
    ],
    "gemini-signed-tool": [
        {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "c2lnbmF0dXJl"}
    ],
}


@pytest.mark.parametrize("name", list(SIGNED_TURN))
async def test_agent_without_store_sends_signed_reasoning_back(gateway: GatewayServer, fakes: Fakes, name: str) -> None:
    """`store: false` with `include: reasoning.encrypted_content` (an organisation that keeps nothing): the
    gateway keeps no history, so the provider's signed reasoning rides in the items the SDK sends back,
    and the provider gets it back in its own shape before its call."""
    calls: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city.

        Args:
            city: The city's name.
        """
        calls.append(city)
        return f"sunny in {city}"

    client = AsyncOpenAI(base_url=gateway.base_url, api_key=gateway.master_key, max_retries=0)
    agent = Agent(
        name="weather",
        tools=[get_weather],
        model=OpenAIResponsesModel(model=name, openai_client=client),
        model_settings=ModelSettings(store=False, response_include=["reasoning.encrypted_content"]),
    )
    result = await Runner.run(agent, "What is the weather in Paris?", run_config=RunConfig(tracing_disabled=True))
    assert calls == ["Paris"] and result.final_output == "tool said: sunny in Paris"
    if name.startswith("anthropic"):
        turn = fakes.anthropic.last("/v1/messages").body["messages"][1]["content"]
    elif name.startswith("bedrock"):
        turn = fakes.bedrock.last().body["messages"][1]["content"]
    else:
        turn = fakes.gemini.last().body["contents"][1]["parts"]
    assert turn == SIGNED_TURN[name]
    for response in result.raw_responses:  # and nothing was kept
        with pytest.raises(NotFoundError):
            await client.responses.retrieve(str(response.response_id))
