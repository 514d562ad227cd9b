"""Property tests of the pure translators in `inferplex.translate`.

- Any valid canonical request (one that `ChatRequest` accepts, odd values and unknown fields included)
  translates to every native provider's body, or is refused with a `GatewayError` (a 400 the caller can
  read); no other exception, and the body is JSON-serialisable as it must be to be sent.
- Any valid Anthropic Messages request (one that the dialect's wire schema accepts) becomes a canonical
  request that `ChatRequest` accepts or refuses with a 400.
- Any valid provider answer (buffered, or a sequence of stream events, with unknown event and block types
  mixed in) becomes OpenAI chunks and completions of the documented shape (`openai_responses`), and those
  render as an Anthropic message or event stream of Anthropic's documented shape (`dialects/anthropic/responses.py`).
- A buffered completion replayed as chunks adds back up to the same completion.

Bounded by max_examples; deadline off (pydantic validation of generated requests varies in speed).
"""

from __future__ import annotations

import os
from typing import Any

import orjson
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError
from typing_extensions import TypedDict

from inferplex.canonical import ChatRequest, parse
from inferplex.dialects import openai_responses as oa
from inferplex.dialects.anthropic import responses as ar
from inferplex.dialects.anthropic import translate as a2o
from inferplex.dialects.anthropic.wire import MessagesRequest
from inferplex.errors import GatewayError
from inferplex.providers import anthropic, gemini
from inferplex.providers.failures import ProviderFailure
from inferplex.sse import SSEDecoder
from inferplex.translate import openai_shapes
from inferplex.translate import openai_to_anthropic as o2a
from inferplex.translate import openai_to_bedrock as o2b
from inferplex.translate import openai_to_gemini as o2g

SETTINGS = settings(
    max_examples=int(os.environ.get("INFERPLEX_FUZZ_EXAMPLES", "150")),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class _Completion(TypedDict):
    """A translator's buffered output: a chat.completion before the dialect adds timings and cost."""

    id: str
    object: str
    created: int
    model: str
    choices: list[oa.CompletionChoice]
    usage: oa.CompletionUsage


class _Chunk(TypedDict):
    id: str
    object: str
    created: int
    model: str
    choices: list[oa.ChunkChoice]


COMPLETION = TypeAdapter(_Completion)
CHUNK = TypeAdapter(_Chunk)
ANTHROPIC_MESSAGE = TypeAdapter(ar.AnthropicMessage)

# ---- values -------------------------------------------------------------------------------------------------

text = st.text(max_size=20)
# What orjson (the gateway's JSON reader, for callers and providers alike) can produce: 64-bit integers.
integers = st.integers(-(2**63), 2**64 - 1)
names = st.from_regex(r"[A-Za-z0-9_.:-]{1,64}", fullmatch=True)
json_values = st.recursive(
    st.none() | st.booleans() | integers | st.floats(allow_nan=False, allow_infinity=False) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=10,
)
json_objects = st.dictionaries(text, json_values, max_size=4)
# A JSON schema's keywords with any value: what a caller may put in `parameters` or `response_format`.
odd_schemas = st.dictionaries(
    st.sampled_from(["type", "properties", "items", "anyOf", "required", "enum", "description", "nullable"]),
    json_values,
    max_size=4,
)
urls = st.sampled_from(["https://example.com/a.png", "data:image/png;base64,iVBORw0KGgo=", "data:oops", "x"])
schemas = st.recursive(
    st.fixed_dictionaries({"type": st.sampled_from(["string", "integer", "number", "boolean", "null"])})
    | st.just({"type": ["string", "null"]}),
    lambda inner: (
        st.fixed_dictionaries(
            {"type": st.just("object"), "properties": st.dictionaries(names, inner, max_size=3)},
            optional={"required": st.lists(names, max_size=2), "additionalProperties": st.booleans()},
        )
        | st.fixed_dictionaries({"type": st.just("array"), "items": inner})
        | st.fixed_dictionaries({"anyOf": st.lists(inner, min_size=1, max_size=2)})
    ),
    max_leaves=6,
)

# ---- canonical requests ---------------------------------------------------------------------------------------

parts = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, text),
    st.builds(lambda u: {"type": "image_url", "image_url": {"url": u}}, urls),
    st.just({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}),
    st.builds(lambda u: {"type": "file", "file": {"file_data": u}}, urls),
    st.builds(lambda t: {"type": "refusal", "refusal": t}, text),
)
contents = text | st.lists(parts, min_size=1, max_size=3)
tool_calls = st.lists(
    st.builds(
        lambda i, n, a: {"id": i, "type": "function", "function": {"name": n, "arguments": a}},
        names,
        names,
        st.one_of(json_values.map(lambda v: orjson.dumps(v).decode()), text),
    ),
    min_size=1,
    max_size=2,
)
messages = st.one_of(
    st.builds(lambda r, c: {"role": r, "content": c}, st.sampled_from(["system", "developer", "user"]), contents),
    st.builds(lambda c, t: {"role": "assistant", "content": c, "tool_calls": t}, st.none() | contents, tool_calls),
    st.builds(lambda c: {"role": "assistant", "content": c}, contents),
    st.builds(lambda i, c: {"role": "tool", "tool_call_id": i, "content": c}, names, contents),
    st.builds(lambda n, c: {"role": "function", "name": n, "content": c}, names, text),
)
tools = st.lists(
    st.builds(
        lambda n, d, p: {"type": "function", "function": {"name": n, "description": d, "parameters": p}},
        names,
        st.none() | text,
        st.none() | schemas | json_objects | odd_schemas,
    ),
    max_size=3,
)
chat_requests = st.fixed_dictionaries(
    {"model": names, "messages": st.lists(messages, min_size=1, max_size=5)},
    optional={
        "temperature": st.floats(0, 2),
        "top_p": st.floats(0, 1),
        "max_tokens": st.integers(1, 10**6),
        "stop": text | st.lists(text, max_size=3),
        "n": st.integers(1, 4),
        "seed": integers,
        "tools": tools,
        "tool_choice": st.sampled_from(["none", "auto", "required"])
        | names.map(lambda n: {"type": "function", "function": {"name": n}}),
        "response_format": st.sampled_from([{"type": "text"}, {"type": "json_object"}])
        | (schemas | odd_schemas).map(lambda s: {"type": "json_schema", "json_schema": {"name": "o", "schema": s}}),
        "user": text,
        "metadata": st.dictionaries(text, text, max_size=2),
        "frequency_penalty": st.floats(-2, 2),
        "presence_penalty": st.floats(-2, 2),
        # fields only some providers read, with any value: they arrive as unknown (extra) fields
        "top_k": json_values,
        "thinking": json_values,
        "reasoning_effort": json_values,
        "cache_control": json_values,
        "anthropic_extra": json_values,
        "unknown": json_values,
    },
)


def _canonical(raw: dict[str, Any]) -> ChatRequest:
    try:
        return ChatRequest.model_validate(raw)
    except ValidationError:
        assume(False)
        raise


@SETTINGS
@given(raw=chat_requests, stream=st.booleans(), family=st.sampled_from(["anthropic.claude-3", "meta.llama3"]))
def test_any_valid_request_translates_for_every_native_provider(raw: dict[str, Any], stream: bool, family: str) -> None:
    _translates_everywhere(_canonical(raw), stream, family)


def _translates_everywhere(request: ChatRequest, stream: bool, family: str) -> None:
    for translate in (
        lambda: o2a.build_request(request, "claude-x", 4096, stream=stream),
        lambda: o2g.build_request(request),
        lambda: o2b.build_request(request, family, 4096),
    ):
        try:
            body = translate()
        except GatewayError as err:
            assert 400 <= err.status < 500, err
            continue
        orjson.dumps(body)  # what is sent upstream must be JSON


@SETTINGS
@given(schema=schemas | odd_schemas | json_objects, where=st.sampled_from(["tool", "response_format"]))
def test_any_json_schema_a_caller_sends_translates(schema: dict[str, Any], where: str) -> None:
    """Tool parameters and response schemas are the caller's own JSON, translated keyword by keyword for
    Gemini: any JSON there is translated or refused, as the rest of the request is."""
    raw: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    if where == "tool":
        raw["tools"] = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
    else:
        raw["response_format"] = {"type": "json_schema", "json_schema": {"name": "o", "schema": schema}}
    _translates_everywhere(_canonical(raw), False, "anthropic.x")


# ---- Anthropic wire requests ------------------------------------------------------------------------------------

blocks = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, text),
    st.builds(lambda u: {"type": "image", "source": {"type": "url", "url": u}}, urls),
    st.just({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}}),
    st.builds(lambda t: {"type": "document", "source": {"type": "text", "data": t}}, text),
    st.builds(lambda i, n, v: {"type": "tool_use", "id": i, "name": n, "input": v}, names, names, json_objects),
    st.builds(
        lambda i, c: {"type": "tool_result", "tool_use_id": i, "content": c},
        names,
        text | st.lists(st.builds(lambda t: {"type": "text", "text": t}, text), max_size=2),
    ),
    st.builds(lambda t: {"type": "thinking", "thinking": t, "signature": "sig"}, text),
    st.just({"type": "redacted_thinking", "data": "x"}),
)
anthropic_requests = st.fixed_dictionaries(
    {
        "model": names,
        "max_tokens": st.integers(1, 10**6),
        "messages": st.lists(
            st.fixed_dictionaries(
                {"role": st.sampled_from(["user", "assistant"]), "content": text | st.lists(blocks, max_size=3)}
            ),
            max_size=4,
        ),
    },
    optional={
        "system": text | st.lists(st.builds(lambda t: {"type": "text", "text": t}, text), max_size=2),
        "tools": st.lists(
            st.builds(lambda n, s: {"name": n, "input_schema": s}, names, schemas)
            | st.builds(lambda n: {"name": n, "type": "web_search_20250305"}, names),
            max_size=2,
        ),
        "tool_choice": st.sampled_from([{"type": "auto"}, {"type": "any"}, {"type": "none"}])
        | names.map(lambda n: {"type": "tool", "name": n}),
        "stop_sequences": st.lists(text, max_size=2),
        "temperature": st.floats(0, 1),
        "top_p": st.floats(0, 1),
        "top_k": st.integers(0, 500),
        "stream": st.booleans(),
        "metadata": st.fixed_dictionaries({}, optional={"user_id": text, "other": json_values}),
        "thinking": json_objects,
        "output_config": json_objects,
        "container": json_values,
    },
)


@SETTINGS
@given(raw=anthropic_requests)
def test_any_valid_anthropic_request_becomes_a_canonical_request_or_a_400(raw: dict[str, Any]) -> None:
    try:
        wire = MessagesRequest.model_validate(raw)
    except ValidationError:
        assume(False)
        raise
    full, stripped = a2o.to_canonical(wire)
    orjson.dumps(stripped)
    try:
        parse(ChatRequest, full)
    except GatewayError as err:
        assert err.status == 400, err


# ---- provider answers -------------------------------------------------------------------------------------------

counts = st.integers(0, 10**6)
anthropic_blocks = st.one_of(
    blocks.filter(lambda b: b["type"] in ("text", "tool_use", "thinking", "redacted_thinking")),
    st.builds(lambda t: {"type": "server_tool_use", "id": "x", "name": "web", "input": {}, "extra": t}, text),
)
anthropic_answers = st.fixed_dictionaries(
    {
        "id": text,
        "type": st.just("message"),
        "role": st.just("assistant"),
        "content": st.lists(anthropic_blocks, max_size=4),
        "stop_reason": st.none() | st.sampled_from(["end_turn", "max_tokens", "stop_sequence", "tool_use", "refusal"]),
        "stop_sequence": st.none() | text,
        "usage": st.fixed_dictionaries(
            {"input_tokens": counts, "output_tokens": counts},
            optional={"cache_read_input_tokens": st.none() | counts, "cache_creation_input_tokens": st.none() | counts},
        ),
    }
)
gemini_parts = st.one_of(
    st.builds(lambda t: {"text": t}, text),
    st.builds(lambda t: {"text": t, "thought": True}, text),
    st.builds(lambda n, a: {"functionCall": {"name": n, "args": a}}, names, json_objects),
    st.builds(lambda n, a: {"functionCall": {"name": n, "args": a}, "thoughtSignature": "c2ln"}, names, json_objects),
    st.just({"executableCode": {"code": "print(1)"}}),
)
gemini_candidates = st.fixed_dictionaries(
    {"content": st.fixed_dictionaries({"role": st.just("model"), "parts": st.lists(gemini_parts, max_size=3)})},
    optional={"finishReason": st.sampled_from(["STOP", "MAX_TOKENS", "SAFETY", "OTHER", "NEW_REASON"])},
)
gemini_usage = st.fixed_dictionaries(
    {"promptTokenCount": counts},
    optional={"candidatesTokenCount": counts, "thoughtsTokenCount": counts, "cachedContentTokenCount": counts},
)
gemini_answers = st.fixed_dictionaries(
    {"candidates": st.lists(gemini_candidates, max_size=2)},
    optional={"responseId": text, "usageMetadata": gemini_usage, "promptFeedback": st.just({"blockReason": "SAFETY"})},
)
bedrock_blocks = st.one_of(
    st.builds(lambda t: {"text": t}, text),
    st.builds(lambda i, n, v: {"toolUse": {"toolUseId": i, "name": n, "input": v}}, names, names, json_objects),
    st.builds(lambda t: {"reasoningContent": {"reasoningText": {"text": t, "signature": "s"}}}, text),
    st.just({"image": {"format": "png"}}),
)
bedrock_answers = st.fixed_dictionaries(
    {
        "output": st.fixed_dictionaries(
            {"message": st.fixed_dictionaries({"role": st.just("assistant"), "content": st.lists(bedrock_blocks)})}
        ),
        "stopReason": st.sampled_from(["end_turn", "tool_use", "max_tokens", "stop_sequence", "guardrail_intervened"]),
        "usage": st.fixed_dictionaries({"inputTokens": counts, "outputTokens": counts}),
    }
)


def _check_completion(completion: dict[str, Any]) -> None:
    COMPLETION.validate_python(completion)
    ANTHROPIC_MESSAGE.validate_python(a2o.to_message(completion, "claude-any"))
    chunks = openai_shapes.completion_chunks(completion)
    for chunk in chunks:
        CHUNK.validate_python(chunk)
    _check_anthropic_stream(chunks)


def _check_anthropic_stream(chunks: list[dict[str, Any]]) -> None:
    """The chunks rendered in Anthropic's event grammar: well-formed events, message_start first, message_stop
    last, every content block opened before its deltas and closed once."""
    writer = a2o.MessageStreamWriter("claude-any", 10)
    frames = b"".join(b"".join(writer.feed(dict(c))) for c in chunks) + b"".join(writer.end())
    decoder = SSEDecoder()
    decoded = [decoder.feed(line) for line in frames.split(b"\n")]
    events = [(e.event, orjson.loads(e.data)) for e in decoded if e is not None]
    kinds = [name for name, _ in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop", kinds
    ANTHROPIC_MESSAGE.validate_python(events[0][1]["message"])
    open_block: int | None = None
    for name, data in events:
        assert data["type"] == name
        if name == "content_block_start":
            assert open_block is None
            open_block = data["index"]
        elif name == "content_block_delta":
            assert data["index"] == open_block
        elif name == "content_block_stop":
            assert data["index"] == open_block
            open_block = None
    assert open_block is None


@SETTINGS
@given(answer=anthropic_answers)
def test_any_anthropic_answer_translates(answer: dict[str, Any]) -> None:
    _check_completion(o2a.to_completion(answer, "public"))


@SETTINGS
@given(answer=gemini_answers)
def test_any_gemini_answer_translates_or_is_a_gateway_error(answer: dict[str, Any]) -> None:
    try:
        completion = o2g.to_completion(answer, "public")
    except ProviderFailure as failure:  # no candidates at all: the provider answered nothing
        assert gemini.ERRORS.failure(failure).status >= 500 and not answer["candidates"]
        return
    _check_completion(completion)


@SETTINGS
@given(answer=bedrock_answers)
def test_any_bedrock_answer_translates(answer: dict[str, Any]) -> None:
    _check_completion(o2b.to_completion(answer, "public"))


# ---- provider streams -------------------------------------------------------------------------------------------

anthropic_events = st.one_of(
    st.builds(
        lambda a: ("message_start", {"type": "message_start", "message": {**a, "content": []}}), anthropic_answers
    ),
    st.builds(
        lambda i, b: ("content_block_start", {"type": "content_block_start", "index": i, "content_block": b}),
        st.integers(0, 4),
        anthropic_blocks,
    ),
    st.builds(
        lambda i, d: ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": d}),
        st.integers(0, 4),
        st.one_of(
            st.builds(lambda t: {"type": "text_delta", "text": t}, text),
            st.builds(lambda t: {"type": "thinking_delta", "thinking": t}, text),
            st.builds(lambda t: {"type": "signature_delta", "signature": t}, text),
            st.builds(lambda t: {"type": "input_json_delta", "partial_json": t}, text),
            st.just({"type": "citations_delta", "citation": {}}),
        ),
    ),
    st.builds(lambda i: ("content_block_stop", {"type": "content_block_stop", "index": i}), st.integers(0, 4)),
    st.builds(
        lambda r, u: ("message_delta", {"type": "message_delta", "delta": {"stop_reason": r}, "usage": u}),
        st.none() | st.sampled_from(["end_turn", "tool_use", "max_tokens"]),
        st.fixed_dictionaries({"output_tokens": counts}),
    ),
    st.just(("message_stop", {"type": "message_stop"})),
    st.just(("ping", {"type": "ping"})),
    st.just(("new_event", {"type": "new_event", "x": 1})),
)
bedrock_events = st.one_of(
    st.just(("messageStart", {"role": "assistant"})),
    st.builds(
        lambda i, n, b: (
            "contentBlockStart",
            {"contentBlockIndex": i, "start": {"toolUse": {"toolUseId": n, "name": n}} if b else {}},
        ),
        st.integers(0, 3),
        names,
        st.booleans(),
    ),
    st.builds(
        lambda i, d: ("contentBlockDelta", {"contentBlockIndex": i, "delta": d}),
        st.integers(0, 3),
        st.one_of(
            st.builds(lambda t: {"text": t}, text),
            st.builds(lambda t: {"toolUse": {"input": t}}, text),
            st.builds(lambda t: {"reasoningContent": {"text": t}}, text),
            st.builds(lambda t: {"reasoningContent": {"signature": t}}, text),
        ),
    ),
    st.builds(lambda i: ("contentBlockStop", {"contentBlockIndex": i}), st.integers(0, 3)),
    st.builds(lambda r: ("messageStop", {"stopReason": r}), st.sampled_from(["end_turn", "tool_use", "max_tokens"])),
    st.builds(
        lambda u: ("metadata", {"usage": u, "metrics": {"latencyMs": 1}}),
        st.fixed_dictionaries({"inputTokens": counts, "outputTokens": counts}),
    ),
)
gemini_events = st.fixed_dictionaries(
    {"candidates": st.lists(gemini_candidates.map(lambda c: {**c, "index": 0}), max_size=1)},
    optional={"usageMetadata": gemini_usage, "responseId": text},
)


def _check_chunks(chunks: list[dict[str, Any]]) -> None:
    for chunk in chunks:
        if chunk.get("choices"):
            CHUNK.validate_python(chunk)
        else:
            assert chunk.get("usage") is not None or chunk["choices"] == []
    _check_anthropic_stream(chunks)
    openai_shapes.completion_from_chunks(chunks)  # what the usage log keeps of a stream


@SETTINGS
@given(events=st.lists(anthropic_events, max_size=12))
def test_any_anthropic_event_sequence_translates(events: list[tuple[str, dict[str, Any]]]) -> None:
    stream = o2a.AnthropicStream("public")
    _check_chunks([chunk for name, data in events for chunk in stream.feed(name, data)])


@SETTINGS
@given(events=st.lists(bedrock_events, max_size=12))
def test_any_bedrock_event_sequence_translates(events: list[tuple[str, dict[str, Any]]]) -> None:
    stream = o2b.BedrockStream("public")
    _check_chunks([chunk for name, data in events for chunk in stream.feed(name, data)])


@SETTINGS
@given(events=st.lists(gemini_events, max_size=8))
def test_any_gemini_event_sequence_translates(events: list[dict[str, Any]]) -> None:
    stream = o2g.GeminiStream("public")
    chunks = [chunk for data in events for chunk in stream.feed(data)]
    _check_chunks([*chunks, stream.end()])


@SETTINGS
@given(
    error=st.fixed_dictionaries(
        {
            "type": st.just("error"),
            "error": st.fixed_dictionaries(
                {
                    "type": st.sampled_from(
                        ["overloaded_error", "api_error", "rate_limit_error", "invalid_request_error", "new"]
                    ),
                    "message": text,
                }
            ),
        }
    )
)
def test_a_stream_error_event_is_a_gateway_error(error: dict[str, Any]) -> None:
    stream = o2a.AnthropicStream("public")
    try:
        stream.feed("error", error)
    except ProviderFailure as failure:
        assert anthropic.ERRORS.failure(failure).status >= 400
    else:
        raise AssertionError("an error event must end the stream with a GatewayError")


# ---- replaying a completion as chunks ---------------------------------------------------------------------------


@SETTINGS
@given(answer=anthropic_answers)
def test_a_completion_replayed_as_chunks_adds_back_up_to_itself(answer: dict[str, Any]) -> None:
    completion = o2a.to_completion(answer, "public")
    rebuilt = openai_shapes.completion_from_chunks(openai_shapes.completion_chunks(completion))
    for before, after in zip(completion["choices"], rebuilt["choices"], strict=True):
        assert (after["message"]["content"] or "") == (before["message"]["content"] or "")
        assert after["message"].get("tool_calls", []) == before["message"].get("tool_calls", [])
        assert after["finish_reason"] == before["finish_reason"]
    assert rebuilt["usage"] == completion["usage"]
