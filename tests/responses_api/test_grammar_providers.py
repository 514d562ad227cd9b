"""The Responses API's stream, event by event, against OpenAI's published schema, for every provider kind.

For each kind with a fake (OpenAI-compatible, the same fake passed through natively, Azure, Anthropic,
Gemini, Bedrock, the bundled local model) and each behaviour its fake can produce (text, a tool call,
parallel calls, reasoning, reasoning then a call, a cut answer, a filtered one; tests/responses_api/
upstreams.py): a streamed `POST /v1/responses` read as raw SSE, every event validated against the schema
of its type and the whole stream against OpenAI's grammar (schema.check_stream: sequence numbers 0..n,
created, in_progress, items opened and closed in order, deltas adding up, one terminal event whose
response holds exactly the finished items), and the stored response read back is that terminal one; the
same request buffered is validated against `Response`, its input items against `ResponseItemList`.

Then what a client meets beyond the happy path, per kind: an upstream refusing (buffered and streamed,
OpenAI's error schema), failing mid-stream (`response.failed`), refused requests; background responses
streamed, replayed from `starting_after`, failed, cancelled; a tool's output sent back by
`previous_response_id`, also to another provider than the one that made the call; and the official
`openai` SDK reading it all (typed events, the stream helper, `responses.parse` for structured output);
and the usage's cache and reasoning tokens as each provider reports them.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import httpx
import openai
import orjson
import pydantic
import pytest

from tests.gateway_server import GatewayServer
from tests.responses_api.schema import check, check_cancelled_stream, check_response, check_stream, sse_events
from tests.responses_api.upstreams import (  # noqa: F401 (fixtures)
    LONG_INPUT,
    TIME_TOOL,
    WEATHER_TOOL,
    Fakes,
    _native_keys,
    fake_anthropic,
    fake_azure,
    fake_bedrock,
    fake_gemini,
    fake_openai,
    fakes_fixture,
    gateway_fixture,
    kinds,
    model,
)

BEHAVIOURS = ("text", "tool", "parallel", "think", "think-tool", "truncated", "filtered")
CASES = [(kind, behaviour) for behaviour in BEHAVIOURS for kind in kinds(behaviour)]
CALLS = {"tool": 1, "think-tool": 1, "parallel": 2}  # function calls each tool-calling behaviour makes


def body_for(kind: str, behaviour: str, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model(kind, behaviour), "input": "What is the weather in Paris?", **extra}
    if behaviour in CALLS:
        body["tools"] = [WEATHER_TOOL, TIME_TOOL] if behaviour == "parallel" else [WEATHER_TOOL]
    if behaviour == "truncated":
        body.update(input=LONG_INPUT, max_output_tokens=16)
    if kind == "local":
        body.update(max_output_tokens=16, temperature=0.0)
    return body


def post(gateway: GatewayServer, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(gateway.base_url + "/responses", json=body, headers=gateway.auth, timeout=60)


def streamed(gateway: GatewayServer, body: dict[str, Any]) -> list[dict[str, Any]]:
    r = post(gateway, {**body, "stream": True})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream"), r.headers["content-type"]
    return sse_events(r.text)


def expect(kind: str, behaviour: str, response: dict[str, Any]) -> None:
    """What the fake of `kind` answered, as the response's output and status must say it."""
    output = response["output"]
    kinds_out = [item["type"] for item in output]
    usage = response["usage"]
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0, usage
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"], usage
    if behaviour in CALLS:
        assert response["status"] == "completed", response["status"]
        calls = [item for item in output if item["type"] == "function_call"]
        assert len(calls) == CALLS[behaviour], kinds_out
        assert [c["name"] for c in calls] == ["get_weather", "get_time"][: len(calls)], calls
        assert len({c["call_id"] for c in calls}) == len(calls) and all(c["call_id"] for c in calls), calls
        assert all(orjson.loads(c["arguments"]) == {"city": "Paris"} for c in calls), calls
        assert kinds_out[0] == "reasoning" if behaviour == "think-tool" else "reasoning" not in kinds_out, kinds_out
        return
    messages = [item for item in output if item["type"] == "message"]
    assert len(messages) == 1, kinds_out
    text = "".join(part["text"] for part in messages[0]["content"] if part["type"] == "output_text")
    assert text, messages[0]
    if kind != "local":
        assert text.startswith("echo:") or behaviour == "filtered", text
    if behaviour == "think":
        assert kinds_out == ["reasoning", "message"], kinds_out
    if behaviour == "truncated":
        assert response["status"] == "incomplete", response["status"]
        assert response["incomplete_details"] == {"reason": "max_output_tokens"}, response["incomplete_details"]
    elif behaviour == "filtered":
        assert response["status"] == "incomplete", response["status"]
        assert response["incomplete_details"] == {"reason": "content_filter"}, response["incomplete_details"]
    elif kind != "local":
        assert response["status"] == "completed", response["status"]


@pytest.mark.parametrize(("kind", "behaviour"), CASES)
def test_stream_fits_openais_schema_and_grammar(gateway: GatewayServer, kind: str, behaviour: str) -> None:
    events = streamed(gateway, body_for(kind, behaviour))
    final = check_stream(events)
    expect(kind, behaviour, final)
    assert final["model"] == model(kind, behaviour)
    stored = httpx.get(f"{gateway.base_url}/responses/{final['id']}", headers=gateway.auth, timeout=60)
    assert stored.json() == final, "the stored response is not the one the stream ended with"


@pytest.mark.parametrize(("kind", "behaviour"), CASES)
def test_buffered_fits_openais_response_schema(gateway: GatewayServer, kind: str, behaviour: str) -> None:
    """The answer, the stored response read back, and its input items, each against OpenAI's schema."""
    body = body_for(kind, behaviour)
    r = post(gateway, body)
    assert r.status_code == 200, r.text
    response = r.json()
    check_response(response)
    expect(kind, behaviour, response)
    assert response["id"].startswith("resp_") and response["object"] == "response"
    url = f"{gateway.base_url}/responses/{response['id']}"
    stored = httpx.get(url, headers=gateway.auth, timeout=60).json()
    check_response(stored)
    assert stored == response
    items = httpx.get(url + "/input_items", headers=gateway.auth, timeout=60).json()
    check("ResponseItemList", items)
    assert [item["content"] for item in items["data"]] == [[{"type": "input_text", "text": body["input"]}]]


@pytest.mark.parametrize("kind", kinds("midstream"))
def test_upstream_failing_midstream_ends_with_response_failed(gateway: GatewayServer, kind: str) -> None:
    events = streamed(gateway, {"model": model(kind, "midstream"), "input": "tell me"})
    final = check_stream(events)
    assert events[-1]["type"] == "response.failed"
    assert final["status"] == "failed" and final["error"]["message"], final["error"]


@pytest.mark.parametrize("kind", kinds("error"))
def test_upstream_refusing_is_an_openai_error(gateway: GatewayServer, kind: str) -> None:
    """Before any output: buffered, an HTTP error with OpenAI's error body; streamed, the same error before
    the stream opens, or a stream that fits the grammar and ends with `response.failed`."""
    body = {"model": model(kind, "error"), "input": "tell me"}
    r = post(gateway, body)
    assert r.status_code >= 500 or r.status_code == 429, (r.status_code, r.text)
    check("ErrorResponse", r.json())
    s = post(gateway, {**body, "stream": True})
    if s.status_code == 200:
        final = check_stream(sse_events(s.text))
        assert final["status"] == "failed" and final["error"]["message"], final
    else:
        assert s.status_code == r.status_code, (s.status_code, s.text)
        check("ErrorResponse", s.json())


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"tools": [{"type": "web_search"}]}, 400, "tools[0].type"),
        ({"input": [{"type": "bogus"}]}, 400, "input[0].type"),
        ({"previous_response_id": "resp_unknown"}, 404, "previous_response_id"),
        ({"model": "no-such-model"}, 404, "model"),
        ({"background": True, "store": False}, 400, "background"),
        # OpenAI refuses these (CreateResponse's minimum 16; metadata's 16 keys)
        ({"max_output_tokens": 15}, 400, "max_output_tokens"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, 400, "metadata"),
    ],
)
def test_refused_requests_fit_openais_error_schema(
    gateway: GatewayServer, body: dict[str, Any], status: int, param: str
) -> None:
    for stream in (False, True):
        r = post(gateway, {"model": "openai-text", "input": "hi", **body, "stream": stream})
        assert r.status_code == status, r.text
        check("ErrorResponse", r.json())
        assert r.json()["error"]["param"] == param, r.json()


@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini"])
def test_background_stream_and_its_replay(gateway: GatewayServer, client: openai.OpenAI, kind: str) -> None:
    """A background response streamed as it runs fits the grammar; `GET ?stream=true&starting_after=N`
    replays exactly the events after N (also as the SDK's `responses.retrieve(stream=True)` reads them),
    and the stored response is the terminal event's."""
    events = streamed(gateway, {**body_for(kind, "tool"), "background": True})
    final = check_stream(events)
    assert final["background"] is True and final["status"] == "completed"
    url = f"{gateway.base_url}/responses/{final['id']}"
    replay = httpx.get(url, params={"stream": "true", "starting_after": 2}, headers=gateway.auth, timeout=60)
    assert replay.status_code == 200, replay.text
    assert sse_events(replay.text) == events[3:]
    resumed = client.responses.retrieve(final["id"], stream=True, starting_after=2)
    assert [(e.type, e.sequence_number) for e in resumed] == [(e["type"], e["sequence_number"]) for e in events[3:]]
    stored = httpx.get(url, headers=gateway.auth, timeout=60).json()
    check_response(stored)
    assert stored["output"] == final["output"] and stored["status"] == "completed"


def test_an_uploaded_file_goes_to_the_provider_inline(gateway: GatewayServer, fakes: Fakes) -> None:
    """An `input_file` naming a file the caller uploaded to the gateway (`/v1/files`) reaches Anthropic as a
    document block with the file's bytes (this suite found it refused under chat's `messages`; 17b036a)."""
    files = {"file": ("a.pdf", b"%PDF-1.4\n%%EOF", "application/pdf")}
    uploaded = httpx.post(gateway.base_url + "/files", files=files, data={"purpose": "user_data"}, headers=gateway.auth)
    assert uploaded.status_code == 200, uploaded.text
    part = {"type": "input_file", "file_id": uploaded.json()["id"]}
    content = [{"type": "input_text", "text": "read it"}, part]
    r = post(gateway, {"model": model("anthropic", "text"), "input": [{"role": "user", "content": content}]})
    assert r.status_code == 200, r.text
    blocks = fakes.anthropic.last("/v1/messages").body["messages"][-1]["content"]
    document = next(b for b in blocks if b["type"] == "document")
    assert base64.b64decode(document["source"]["data"]) == b"%PDF-1.4\n%%EOF", document


def finished(gateway: GatewayServer, response_id: str) -> dict[str, Any]:
    """The stored response once its background run is over (polled as a client does)."""
    url = f"{gateway.base_url}/responses/{response_id}"
    deadline = time.monotonic() + 20
    while True:
        stored: dict[str, Any] = httpx.get(url, headers=gateway.auth, timeout=60).json()
        if stored["status"] not in ("queued", "in_progress") or time.monotonic() > deadline:
            return stored
        time.sleep(0.05)


@pytest.mark.parametrize("kind", ["openai", "native", "anthropic", "gemini"])
def test_background_upstream_failure_is_a_failed_response(gateway: GatewayServer, kind: str) -> None:
    """A background run whose upstream refuses: polled, a `failed` response that fits `Response`; its
    events replayed, a stream that fits the grammar and ends with `response.failed`."""
    r = post(gateway, {"model": model(kind, "error"), "input": "tell me", "background": True})
    assert r.status_code == 200, r.text
    check_response(r.json())
    assert r.json()["status"] in ("queued", "in_progress"), r.json()["status"]
    stored = finished(gateway, r.json()["id"])
    check_response(stored)
    assert stored["status"] == "failed" and stored["error"]["message"], stored
    url = f"{gateway.base_url}/responses/{stored['id']}"
    replay = sse_events(httpx.get(url, params={"stream": "true"}, headers=gateway.auth, timeout=60).text)
    assert check_stream(replay)["status"] == "failed"


def hangups(kind: str, fakes: Fakes) -> list[float]:
    """When the slow fake of `kind` saw its caller hang up."""
    return {"openai": fakes.openai.state.disconnects, "anthropic": fakes.anthropic.disconnects}.get(
        kind, fakes.gemini.hangups
    )


@pytest.mark.parametrize("kind", kinds("slow"))
def test_cancelled_background_response_fits_the_schema(gateway: GatewayServer, fakes: Fakes, kind: str) -> None:
    """Cancelled while its upstream streams: the cancel's answer and the stored response fit `Response`
    with status `cancelled`, and the worker hangs up on the upstream."""
    before = len(hangups(kind, fakes))
    r = post(gateway, {"model": model(kind, "slow"), "input": "tell me", "background": True})
    url = f"{gateway.base_url}/responses/{r.json()['id']}"
    deadline = time.monotonic() + 10
    while httpx.get(url, headers=gateway.auth).json()["status"] == "queued" and time.monotonic() < deadline:
        time.sleep(0.05)
    cancelled = httpx.post(url + "/cancel", headers=gateway.auth, timeout=60)
    assert cancelled.status_code == 200, cancelled.text
    check_response(cancelled.json())
    assert cancelled.json()["status"] == "cancelled"
    stored = finished(gateway, r.json()["id"])
    check_response(stored)
    assert stored["status"] == "cancelled"
    deadline = time.monotonic() + 5
    while len(hangups(kind, fakes)) == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(hangups(kind, fakes)) > before, "the upstream call went on after the cancel"


def test_cancelled_background_response_keeps_what_it_produced(gateway: GatewayServer) -> None:
    """Cancelled while it streams: the stream closes its open item and ends (OpenAI's grammar has no event
    for a cancel), and the stored response keeps the text streamed and the usage charged for it. (This test
    found the events ending mid-item and the stored response empty; fixed in 3ebd2bf.)"""
    body = {"model": model("anthropic", "slow"), "input": "tell me", "background": True, "stream": True}
    text, cancelled = "", False
    with httpx.stream("POST", gateway.base_url + "/responses", json=body, headers=gateway.auth, timeout=60) as r:
        for chunk in r.iter_text():
            text += chunk
            if not cancelled and text.count("response.output_text.delta") > 3:
                response_id = sse_events(text[: text.rindex("\n\n") + 2])[0]["response"]["id"]
                url = f"{gateway.base_url}/responses/{response_id}"
                assert httpx.post(url + "/cancel", headers=gateway.auth, timeout=60).status_code == 200
                cancelled = True
    events = sse_events(text)
    stored = finished(gateway, events[0]["response"]["id"])
    streamed_text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert stored["status"] == "cancelled" and stored["usage"] is not None, stored
    assert [part["text"] for item in stored["output"] for part in item["content"]] == [streamed_text]
    assert stored["output"] == check_cancelled_stream(events)
    check_response(stored)


@pytest.mark.parametrize("kind", kinds("tool"))
def test_tool_output_round_trip_streamed(gateway: GatewayServer, kind: str) -> None:
    """The function call's output sent back by `previous_response_id`: the fake answers `tool said: ...`,
    so it received the output, and the second stream fits the grammar too."""
    first = check_stream(streamed(gateway, body_for(kind, "tool")))
    call = next(item for item in first["output"] if item["type"] == "function_call")
    output = {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny, 21 C"}
    body = {**body_for(kind, "tool"), "input": [output], "previous_response_id": first["id"]}
    second = check_stream(streamed(gateway, body))
    assert second["status"] == "completed" and second["previous_response_id"] == first["id"]
    message = next(item for item in second["output"] if item["type"] == "message")
    assert message["content"][0]["text"] == "tool said: sunny, 21 C", message


@pytest.fixture(scope="module")
def client(gateway: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=gateway.master_key, max_retries=0)


@pytest.mark.parametrize(("kind", "behaviour"), [(k, b) for k, b in CASES if b in ("text", "tool", "parallel")])
def test_openai_sdk_reads_the_stream(client: openai.OpenAI, kind: str, behaviour: str) -> None:
    """Each event parses into the SDK's own type for it (an event it does not know would stay a bare
    model), and the SDK's stream helper assembles the same response the terminal event carries."""
    body = body_for(kind, behaviour)
    seen = []
    for event in client.responses.create(**body, stream=True):
        assert type(event).__module__.startswith("openai.types.responses."), type(event)
        seen.append(event.type)
    assert seen[0] == "response.created" and seen[-1] in ("response.completed", "response.incomplete"), seen
    if seen[-1] == "response.incomplete":
        return  # (the local model, cut short) the SDK's stream helper wants `response.completed`
    with client.responses.stream(**body) as stream:
        final = stream.get_final_response()
    if behaviour in CALLS:
        calls = [item for item in final.output if item.type == "function_call"]
        assert len(calls) == CALLS[behaviour] and calls[0].name == "get_weather"
        assert all(orjson.loads(c.arguments) == {"city": "Paris"} for c in calls)
    else:
        assert final.output_text
    assert final.usage is not None and final.usage.total_tokens > 0


class Weather(pydantic.BaseModel):
    city: str
    degrees: int


@pytest.mark.parametrize("kind", ["anthropic", "gemini", "bedrock"])
def test_structured_output_parsed_by_the_sdk(client: openai.OpenAI, kind: str) -> None:
    """`text.format` json_schema, as the SDK's `responses.parse` sends it, reaches the provider as its own
    structured output (each fake answers a sample of the schema it got: the integer is 3), buffered and
    streamed, and the SDK parses the answer into the caller's type."""
    expected = Weather(city="Paris", degrees=3)
    parsed = client.responses.parse(model=model(kind, "text"), input="weather?", text_format=Weather)
    assert parsed.output_parsed == expected
    with client.responses.stream(model=model(kind, "text"), input="weather?", text_format=Weather) as stream:
        assert stream.get_final_response().output_parsed == expected


# where a conversation's calls were made, and where it continues: any provider after any other
CHAIN = [
    "openai-tool",
    "native-tool",
    "anthropic-think-tool",
    "gemini-think-tool",
    "gemini-signed-tool",
    "bedrock-think-tool",
]
# (this test found a call another provider made refused by a signing Gemini model: it now goes with Google's
# documented placeholder signature, 2031a41)


@pytest.mark.parametrize(
    ("first", "then"),
    [(a, b) for a in CHAIN for b in CHAIN if a != b],
)
def test_tool_call_continued_on_another_provider(gateway: GatewayServer, first: str, then: str) -> None:
    """A function call made by one provider (with its reasoning), its output sent by `previous_response_id`
    to another: the second provider accepts the translated history and answers from the tool's output."""
    r = post(gateway, {"model": first, "input": "weather in Paris?", "tools": [WEATHER_TOOL]})
    assert r.status_code == 200, r.text
    call = next(item for item in r.json()["output"] if item["type"] == "function_call")
    output = {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}
    body = {"model": then, "previous_response_id": r.json()["id"], "input": [output], "tools": [WEATHER_TOOL]}
    final = check_stream(streamed(gateway, body))
    message = next(item for item in final["output"] if item["type"] == "message")
    assert message["content"][0]["text"] == "tool said: sunny"


# model -> (cached_tokens, cache_write_tokens, reasoning_tokens) its fake reports in its own usage
USAGE_DETAILS = {
    "anthropic-cache": (100, 20, 0),
    "gemini-cache": (50, 0, 0),
    "bedrock-cache": (40, 10, 0),
    "gemini-think": (0, 0, 3),
    "native-think": (0, 0, 5),
}


@pytest.mark.parametrize("name", list(USAGE_DETAILS))
def test_usage_details_carry_the_providers_cache_and_reasoning_tokens(gateway: GatewayServer, name: str) -> None:
    """Cache reads, cache writes and reasoning tokens, as each provider reports them, in the Responses usage,
    the same buffered and streamed."""
    body = {"model": name, "input": "hello there"}
    buffered = post(gateway, body).json()["usage"]
    final = check_stream(streamed(gateway, body))
    assert final["usage"] == buffered
    details = (
        buffered["input_tokens_details"]["cached_tokens"],
        buffered["input_tokens_details"]["cache_write_tokens"],
        buffered["output_tokens_details"]["reasoning_tokens"],
    )
    assert details == USAGE_DETAILS[name]
    assert buffered["total_tokens"] == buffered["input_tokens"] + buffered["output_tokens"]
