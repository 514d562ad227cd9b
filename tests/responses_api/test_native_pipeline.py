"""`maybe_native` on the gateway's real pipeline (catalog, adapters, router) in front of the fake OpenAI's
`/v1/responses` and an Azure resource's, with a guard that records what is admitted and settled.

What it must show: the upstream gets the caller's request (history in front, `store: false`, the gateway's
fields out, hosted tools kept), the caller gets the upstream's answer and events exactly (only the gateway's
id, model name and the caller's own fields changed), the call is routed with fallbacks like chat, settled
exactly once with the upstream's usage (before the terminal event reaches the caller), a failure before
any output is charged nothing, and the chat road is kept whenever a chat-only stage must run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import orjson
import pytest
from aiohttp import web

from inferplex.app import create_app
from inferplex.config import parse_config
from inferplex.context import Context
from inferplex.errors import GatewayError
from inferplex.pipeline import Pipeline
from inferplex.responses import Usage
from inferplex.responses_api.native import NativeStream, maybe_native
from inferplex.responses_api.wire import parse
from tests.fakes.azure_upstream import FakeAzure
from tests.fakes.openai_responses_upstream import respond
from tests.fakes.openai_upstream import FakeOpenAI
from tests.responses_api.schema import check_stream

AZURE_KEY = "az-native-fake"
FREE = {"input": "1", "output": "2"}


class AzureResponsesFake(FakeAzure):
    """The Azure fake with the resource's v1 Responses route (`/openai/v1/responses`, `api-key`)."""

    def routes(self) -> list[web.RouteDef]:
        own = [web.post(path, self.responses) for path in ("/openai/v1/responses", "/openai/responses")]
        return [*super().routes(), *own]

    async def responses(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        self.record(request, body)
        if request.headers.get("api-key") != self.api_key:
            return web.json_response({"error": {"code": "401", "message": "Access denied"}}, status=401)
        return await respond(request, body)


@pytest.fixture(scope="module")
def fake_azure_responses() -> Iterator[AzureResponsesFake]:
    fake = AzureResponsesFake(AZURE_KEY)
    fake.start()
    yield fake
    fake.stop()


def _config(fake: FakeOpenAI, azure: AzureResponsesFake, data_dir: str) -> dict[str, Any]:
    key = {"api_key": "env:FAKE_UPSTREAM_KEY", "timeouts": {"connect": 2, "read": 5}}
    native = {"name": "native", "kind": "openai", "base_url": fake.base_url, "options": {"responses_api": True}}
    az = {
        "name": "az",
        "kind": "azure",
        "base_url": azure.url,
        "api_key": "env:NATIVE_AZURE_KEY",
        "options": {"responses_api": True},
    }

    def model(name: str, *deployments: tuple[str, str], **extra: Any) -> dict[str, Any]:
        deps = [{"provider": p, "model": m} for p, m in deployments]
        return {"name": name, "deployments": deps, "pricing": FREE, **extra}

    once = {"retries": 0}
    return {
        "server": {"data_dir": data_dir},
        "providers": [
            {**native, **key},
            {"name": "chatonly", "kind": "openai", "base_url": fake.base_url, **key},
            az,
            {
                **az,
                "name": "az-preview",
                "options": {"responses_api": True, "responses_api_version": "2025-04-01-preview"},
            },
        ],
        "models": [
            model("gpt-native", ("native", "gpt-x")),
            model("tool-native", ("native", "tool-x")),
            model("search-native", ("native", "search-x")),
            model("reason-native", ("native", "reason-x")),
            model("die-native", ("native", "die-midstream"), routing=once),
            model("error-event-native", ("native", "error-event"), routing=once),
            model("fail-native", ("native", "fail-stream"), routing=once),
            model("broken", ("native", "error-500"), routing=once),
            model("rescued", ("native", "error-500"), routing={**once, "fallbacks": ["gpt-native"]}),
            model("az-model", ("az", "my-deploy")),
            model("az-preview-model", ("az-preview", "my-deploy")),
            model("mixed", ("native", "gpt-x"), ("chatonly", "gpt-x")),
            model("chat-only", ("chatonly", "gpt-x")),
            model("falls-to-chat", ("native", "error-500"), routing={**once, "fallbacks": ["chat-only"]}),
            model("prompted", ("native", "gpt-x"), system_prompt="Be brief."),
        ],
    }


class Recorder:
    """A guard that admits everything and records each admission and settlement."""

    def __init__(self) -> None:
        self.admitted: list[tuple[str, int]] = []
        self.settled: list[tuple[Usage | None, bool]] = []

    async def admit(self, ctx: Context, family: Any, model: Any, request: Any) -> Recorder:
        self.admitted.append((family.name, family.estimate_input(request.body)))
        return self

    async def settle(self, ctx: Context, usage: Usage | None, *, failed: bool) -> None:
        self.settled.append((usage, failed))


@pytest.fixture
async def rig(
    fake_openai: FakeOpenAI, fake_azure_responses: AzureResponsesFake, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Pipeline, Recorder]]:
    monkeypatch.setenv("NATIVE_AZURE_KEY", AZURE_KEY)
    config = parse_config(_config(fake_openai, fake_azure_responses, str(tmp_path)), "<test>")
    app = create_app(config, "ipx-test-master-key")
    async with app.router.lifespan_context(app):
        real: Pipeline = app.state.services.pipeline
        recorder = Recorder()
        pipeline = Pipeline(
            real.catalog, real.adapters, guard=recorder, router=real.router, processors=real._processors
        )
        yield pipeline, recorder


async def _native(
    pipeline: Pipeline, body: dict[str, Any], history: list[dict[str, Any]] | None = None
) -> tuple[Any, Context]:
    ctx = Context()
    answer = await maybe_native(pipeline, ctx, parse(body), history or [], response_id="resp_gateway1")
    return answer, ctx


def _sent(fake: FakeOpenAI) -> dict[str, Any]:
    return fake.state.last("/responses").body


async def test_buffered_is_relayed_with_the_gateways_fields(
    rig: tuple[Pipeline, Recorder], fake_openai: FakeOpenAI
) -> None:
    pipeline, recorder = rig
    body = {"model": "gpt-native", "input": "hello there", "metadata": {"k": "v"}, "x_vendor_field": 1}
    answer, ctx = await _native(pipeline, body)
    assert isinstance(answer, dict)
    assert answer["id"] == "resp_gateway1" and answer["model"] == "gpt-native"
    assert answer["store"] is True and answer["previous_response_id"] is None
    assert answer["output"][0]["content"][0]["text"] == "echo: hello there"
    sent = _sent(fake_openai)
    assert sent == {
        "model": "gpt-x",
        "input": "hello there",
        "metadata": {"k": "v"},
        "x_vendor_field": 1,
        "store": False,
    }
    usage = answer["usage"]
    assert recorder.admitted == [("responses", recorder.admitted[0][1])] and recorder.admitted[0][1] > 0
    assert recorder.settled == [
        (
            {
                "prompt_tokens": usage["input_tokens"],
                "completion_tokens": usage["output_tokens"],
                "total_tokens": usage["total_tokens"],
                "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0},
            },
            False,
        )
    ]
    assert ctx.target is not None and ctx.target.provider.name == "native"


async def test_history_goes_in_front_and_the_previous_id_stays_ours(
    rig: tuple[Pipeline, Recorder], fake_openai: FakeOpenAI
) -> None:
    pipeline, _ = rig
    first = {
        "id": "msg_gw1",
        "type": "message",
        "role": "user",
        "status": "completed",
        "content": [{"type": "input_text", "text": "my name is Ada"}],
    }
    said = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "hi Ada", "annotations": []}],
    }
    thought = {"id": "rs_1", "type": "reasoning", "summary": []}  # not replayable upstream without its content
    body = {"model": "gpt-native", "input": "what is my name?", "previous_response_id": "resp_earlier"}
    answer, _ = await _native(pipeline, body, [first, thought, said])
    assert answer["previous_response_id"] == "resp_earlier"
    sent = _sent(fake_openai)
    assert "previous_response_id" not in sent and sent["store"] is False
    unnamed = {k: v for k, v in first.items() if k != "id"}  # an input message has no id upstream
    assert sent["input"] == [unnamed, said, {"type": "message", "role": "user", "content": "what is my name?"}]


async def test_hosted_tools_and_reasoning_pass_through(rig: tuple[Pipeline, Recorder], fake_openai: FakeOpenAI) -> None:
    pipeline, recorder = rig
    tools = [{"type": "web_search"}]
    answer, _ = await _native(pipeline, {"model": "search-native", "input": "news", "tools": tools})
    assert [i["type"] for i in answer["output"]] == ["web_search_call", "message"]
    assert _sent(fake_openai)["tools"] == tools
    body = {"model": "reason-native", "input": "think", "reasoning": {"effort": "high", "summary": "auto"}}
    answer, _ = await _native(pipeline, body)
    assert answer["output"][0]["summary"][0]["text"] == "thinking about it"
    assert recorder.settled[-1][0]["completion_tokens_details"] == {"reasoning_tokens": 5}  # type: ignore[index]


async def _events(stream: NativeStream) -> list[dict[str, Any]]:
    try:
        return [event async for event in stream]
    finally:
        await stream.aclose()


async def test_stream_relays_the_upstreams_events_and_settles_before_the_last(
    rig: tuple[Pipeline, Recorder], fake_openai: FakeOpenAI
) -> None:
    pipeline, recorder = rig
    tools = [{"type": "function", "name": "weather", "parameters": {"type": "object", "properties": {}}}]
    stream, ctx = await _native(pipeline, {"model": "tool-native", "input": "weather?", "tools": tools, "stream": True})
    assert isinstance(stream, NativeStream)
    events: list[dict[str, Any]] = []
    async for event in stream:
        if event["type"] == "response.completed":
            assert len(recorder.settled) == 1  # settled (its cost known) before the caller gets the end
        events.append(event)
    await stream.aclose()
    final = check_stream(events)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert {e["response"]["id"] for e in events if "response" in e} == {"resp_gateway1"}
    assert final["output"][0]["type"] == "function_call" and final["output"][0]["arguments"] == '{"city": "Paris"}'
    assert stream.response is not None and stream.response["status"] == "completed"
    assert recorder.settled == [(recorder.settled[0][0], False)] and recorder.settled[0][0] is not None
    assert ctx.output_chars == len('{"city": "Paris"}')
    assert _sent(fake_openai)["stream"] is True


async def test_azure_gets_its_resource_url_and_key(
    rig: tuple[Pipeline, Recorder], fake_azure_responses: AzureResponsesFake
) -> None:
    pipeline, _ = rig
    answer, _ = await _native(pipeline, {"model": "az-model", "input": "hi"})
    assert answer["output"][-1]["content"][0]["text"] == "echo: hi"
    seen = fake_azure_responses.last("/openai/v1/responses")
    assert seen.headers["api-key"] == AZURE_KEY and "Authorization" not in seen.headers
    assert seen.body["model"] == "my-deploy" and seen.body["store"] is False
    await _native(pipeline, {"model": "az-preview-model", "input": "hi"})  # the preview route, by api-version
    seen = fake_azure_responses.last("/openai/responses")
    assert seen.query == {"api-version": "2025-04-01-preview"} and seen.headers["api-key"] == AZURE_KEY


async def test_a_failing_deployment_falls_back(rig: tuple[Pipeline, Recorder]) -> None:
    pipeline, recorder = rig
    answer, ctx = await _native(pipeline, {"model": "rescued", "input": "hi"})
    assert answer["model"] == "gpt-native"  # the fallback's public name, as chat reports it
    assert ctx.attempts == 2 and [a.outcome for a in ctx.attempt_log] == ["error", "ok"]
    assert [failed for _, failed in recorder.settled] == [False]


async def test_an_upstream_error_is_raised_and_charged_nothing(rig: tuple[Pipeline, Recorder]) -> None:
    pipeline, recorder = rig
    with pytest.raises(GatewayError) as caught:
        await _native(pipeline, {"model": "broken", "input": "hi"})
    assert caught.value.status >= 500
    with pytest.raises(GatewayError):
        await _native(pipeline, {"model": "broken", "input": "hi", "stream": True})
    assert recorder.settled == [(None, True), (None, True)]


async def test_a_stream_cut_mid_way_is_billed_for_what_came(rig: tuple[Pipeline, Recorder]) -> None:
    pipeline, recorder = rig
    stream, ctx = await _native(pipeline, {"model": "die-native", "input": "one two three", "stream": True})
    seen: list[dict[str, Any]] = []
    with pytest.raises(GatewayError):
        async for event in stream:
            seen.append(event)
    await stream.aclose()
    assert any(e["type"] == "response.output_text.delta" for e in seen)
    assert ctx.output_chars > 0 and recorder.settled == [(None, False)]
    closing = stream.fail({"code": "server_error", "message": "cut"})
    assert closing[0]["type"] == "response.failed"
    assert closing[0]["sequence_number"] == seen[-1]["sequence_number"] + 1
    assert closing[0]["response"]["id"] == "resp_gateway1" and closing[0]["response"]["status"] == "failed"


@pytest.mark.parametrize("model", ["error-event-native", "fail-native"])
async def test_an_upstream_that_fails_before_output_is_charged_nothing(
    rig: tuple[Pipeline, Recorder], model: str
) -> None:
    pipeline, recorder = rig
    stream, _ = await _native(pipeline, {"model": model, "input": "hi", "stream": True})
    events: list[dict[str, Any]] = []
    try:
        async for event in stream:
            events.append(event)
    except GatewayError:
        assert model == "error-event-native"
        assert recorder.settled == [(None, True)]
    else:  # the upstream's own response.failed is relayed as the terminal event
        assert events[-1]["type"] == "response.failed" and events[-1]["response"]["id"] == "resp_gateway1"
        assert len(recorder.settled) == 1
    await stream.aclose()
    assert len(recorder.settled) == 1


async def test_closing_early_settles_once(rig: tuple[Pipeline, Recorder]) -> None:
    pipeline, recorder = rig
    stream, _ = await _native(pipeline, {"model": "gpt-native", "input": "a b c d", "stream": True})
    first = await stream.__anext__()
    assert first["type"] == "response.created"
    await stream.aclose()
    await stream.aclose()
    assert recorder.settled == [(None, False)]


@pytest.mark.parametrize(
    "body",
    [
        {"model": "chat-only", "input": "hi"},  # its provider does not speak Responses
        {"model": "mixed", "input": "hi"},  # one deployment does not
        {"model": "falls-to-chat", "input": "hi"},  # its fallback does not
        {"model": "gpt-native", "input": "hi", "models": ["chat-only"]},  # the request's fallbacks do not
        {"model": "prompted", "input": "hi"},  # the model's own system prompt is assembled on the chat road
        {"model": "gpt-native", "input": "hi", "processors": [{"name": "secret_scan"}]},  # processors run on chat
    ],
)
async def test_the_chat_road_is_kept_when_a_chat_stage_must_run(
    rig: tuple[Pipeline, Recorder], body: dict[str, Any]
) -> None:
    pipeline, recorder = rig
    answer, _ = await _native(pipeline, body)
    assert answer is None
    assert recorder.admitted == [] and recorder.settled == []


async def test_relay_stores_before_the_end_and_ends_a_cut_stream_failed(rig: tuple[Pipeline, Recorder]) -> None:
    pipeline, recorder = rig
    stored: list[tuple[str, int]] = []  # (status, events the caller had when it was stored)
    seen: list[dict[str, Any]] = []

    async def store(response: dict[str, Any]) -> None:
        stored.append((response["status"], len(seen)))

    stream, _ = await _native(pipeline, {"model": "gpt-native", "input": "a b", "stream": True})
    async for event in stream.relay(store):
        seen.append(event)
    assert stored == [("completed", len(seen) - 1)] and seen[-1]["type"] == "response.completed"
    check_stream(seen)

    stored.clear()
    seen.clear()
    stream, _ = await _native(pipeline, {"model": "die-native", "input": "one two three", "stream": True})
    async for event in stream.relay(store):
        seen.append(event)
    assert seen[-1]["type"] == "response.failed" and stored == [("failed", len(seen) - 1)]
    assert seen[-1]["response"]["error"]["message"].startswith("provider native")
    assert seen[-1]["response"]["error"]["code"] == "server_error"  # OpenAI's codes only (not `upstream_error`)
    assert [e["sequence_number"] for e in seen] == list(range(len(seen)))
    assert [failed for _, failed in recorder.settled] == [False, False]  # the cut one: for what was delivered
