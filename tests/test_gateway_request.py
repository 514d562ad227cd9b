"""The request as it travels (gateway_request.py): the gateway's options parsed out of the caller's JSON, one
row per option (a good value, and a bad one refused with a 400 naming it), and the JSON an OpenAI-compatible
upstream is sent (`wire()`): the caller's own object while nothing rewrote the body, derived from the body
after a stage did."""

from __future__ import annotations

from typing import Any

import pytest

from inferplex import capabilities as caps
from inferplex.canonical import ChatRequest, EmbeddingRequest, parse
from inferplex.config import Capabilities
from inferplex.dialects.anthropic.translate import strip_anthropic, to_canonical
from inferplex.dialects.anthropic.wire import MessagesRequest
from inferplex.errors import InvalidRequest
from inferplex.gateway_request import GATEWAY_KEYS, NO_OPTIONS, GatewayOptions, GatewayRequest, parse_request
from inferplex.processors.spec import Spec
from inferplex.processors.text import rewrite
from inferplex.providers.openai_caps import CAPABILITIES

USER = [{"role": "user", "content": "hi"}]


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": USER, **extra}


# (option, value sent, what the options read) -- every key the gateway takes out of the caller's JSON
GOOD: list[tuple[str, Any, Any]] = [
    ("provider", "openai", lambda o: o.provider_name == "openai"),
    ("provider", {"order": ["a"]}, lambda o: o.provider == {"order": ["a"]} and o.provider_name is None),
    ("models", ["a", "b"], lambda o: o.models == ("a", "b")),
    ("endpoint_id", "ep-1", lambda o: o.endpoint_id == "ep-1"),
    ("region", "eu", lambda o: o.region == "eu"),
    ("timeout", 2.5, lambda o: o.timeout == 2.5),
    ("timeout", 3, lambda o: o.timeout == 3),
    ("drop_params", False, lambda o: o.drop_params is False),
    ("tags", " a , ,b ", lambda o: o.tags == ["a", "b"]),
    ("tags", ["x", "y z"], lambda o: o.tags == ["x", "y z"]),
    ("log_query_body", True, lambda o: o.log_query_body is True),
    ("log_response_body", False, lambda o: o.log_response_body is False),
    ("processors", ["pii_redact"], lambda o: o.processors.specs == [Spec("pii_redact")]),
    (
        "inferada",
        {"processors": ["pii_redact"], "language": "FR"},
        lambda o: o.processors.inferada and o.processors.language == "fr",
    ),
    ("use_custom_keys", True, lambda o: o.use_custom_keys is True),
    ("signature", "python", lambda o: o.signature == "python"),
]


@pytest.mark.parametrize(("name", "value", "check"), GOOD, ids=[f"{g[0]}={g[1]!r}" for g in GOOD])
def test_a_good_option_is_parsed_and_never_forwarded(name: str, value: Any, check: Any) -> None:
    data = chat(**{name: value}, vendor_x=1)
    request = parse_request(ChatRequest, data)
    assert check(request.options)
    assert name not in request.wire() and name not in (request.body.model_extra or {})
    assert request.wire()["vendor_x"] == 1  # what the gateway does not know passes through


BAD: list[tuple[str, Any, str | None]] = [
    ("provider", 5, "Invalid value for 'provider': Input should be a valid string."),
    ("models", "a", "Invalid value for 'models': Input should be a valid list."),
    ("models", ["a", 1], "Invalid value for 'models[1]': Input should be a valid string."),
    ("endpoint_id", 3, "Invalid value for 'endpoint_id': Input should be a valid string."),
    ("region", ["eu"], "Invalid value for 'region': Input should be a valid string."),
    ("timeout", 0, "Invalid value for 'timeout': Input should be greater than 0."),
    ("timeout", "5", "Invalid value for 'timeout': Input should be a valid number."),
    ("drop_params", "no", "Invalid value for 'drop_params': expected a boolean."),
    ("tags", 5, "Invalid value for 'tags': expected a comma-separated string or a list of strings."),
    ("tags", ["a", 1], "Invalid value for 'tags': expected a comma-separated string or a list of strings."),
    ("log_query_body", "yes", "Invalid value for 'log_query_body': expected a boolean."),
    ("log_response_body", 0, "Invalid value for 'log_response_body': expected a boolean."),
    ("processors", "pii", "`processors` must be a list of processor names or objects."),
    ("inferada", 3, "`inferada` must be an object."),
    ("use_custom_keys", "true", "Invalid value for 'use_custom_keys': expected a boolean."),
    ("signature", 3, "Invalid value for 'signature': expected a string."),
]


@pytest.mark.parametrize(("name", "value", "message"), BAD, ids=[f"{b[0]}={b[1]!r}" for b in BAD])
def test_a_bad_option_is_a_400_naming_it(name: str, value: Any, message: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_request(ChatRequest, chat(**{name: value}))
    assert info.value.status == 400
    assert (info.value.param or "").split("[")[0] == name
    assert info.value.message == message


def test_the_options_are_checked_before_the_body_and_routing_after_it() -> None:
    """The flags are the dialect's first check; the routing fields follow the body, as when they were its
    last fields."""
    with pytest.raises(InvalidRequest) as info:
        parse_request(ChatRequest, {"model": "m", "tags": 5})
    assert info.value.param == "tags"
    with pytest.raises(InvalidRequest) as info:
        parse_request(ChatRequest, {"model": "m", "timeout": 0})
    assert info.value.param == "messages"


def test_embeddings_take_a_provider_name_only() -> None:
    request = parse_request(EmbeddingRequest, {"model": "e", "input": "hi", "provider": "openai", "tags": "t"})
    assert request.options.provider_name == "openai" and request.options.tags == ["t"]
    assert request.wire() == {"model": "e", "input": "hi"}
    with pytest.raises(InvalidRequest) as info:
        parse_request(EmbeddingRequest, {"model": "e", "input": "hi", "provider": {"order": ["a"]}})
    assert info.value.param == "provider"


def test_not_an_object_is_refused() -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_request(ChatRequest, [1])
    assert info.value.message == "The request body must be a JSON object."


def test_without_options_the_defaults_are_shared() -> None:
    assert parse_request(ChatRequest, chat()).options is NO_OPTIONS
    assert NO_OPTIONS == GatewayOptions() and NO_OPTIONS.drop_params and not NO_OPTIONS.routes
    assert NO_OPTIONS.log_query_body is None and NO_OPTIONS.processors.specs is None  # the operator decides


# ---- wire() ----------------------------------------------------------------------------------------------

TOOL = {"type": "function", "function": {"name": "f", "parameters": {"properties": {"a": {"default": None}}}}}


def test_untouched_the_wire_is_the_callers_own_object() -> None:
    data = chat(seed=1, vendor_x={"k": None}, tags="a")
    request = parse_request(ChatRequest, data)
    assert request.wire() is data  # no copy, no second serialisation
    assert data == chat(seed=1, vendor_x={"k": None})  # only the gateway's key taken out


def test_replaced_the_wire_is_derived_from_the_new_body() -> None:
    request = parse_request(ChatRequest, chat(seed=1, tools=[TOOL], vendor_x=2, drop_params=False))
    body = request.body.model_copy(update={"seed": None, "temperature": 0.5})
    replaced = request.replace(body)
    assert replaced.options is request.options and replaced.body is body
    wire = replaced.wire()
    assert "seed" not in wire  # a field a stage cleared is omitted, not sent as null
    assert wire["temperature"] == 0.5 and wire["vendor_x"] == 2
    assert wire["tools"] == [TOOL]  # nested values as they were: the schema's `"default": null` survives
    assert "top_p" not in wire and "stream" not in wire  # what nobody set is not sent
    assert replaced.wire() is wire  # derived once


def test_a_gateway_key_on_a_body_built_directly_is_never_forwarded() -> None:
    body = ChatRequest.model_validate(chat(provider="p", tags=["t"], region="eu"))
    assert GatewayRequest(body).wire() == chat()


def test_a_text_rewrite_reaches_the_wire() -> None:
    request = parse_request(ChatRequest, chat(n=2))
    redacted = rewrite(request, lambda text: text.upper())
    assert redacted.wire()["messages"] == [{"role": "user", "content": "HI"}]
    assert redacted.wire()["n"] == 2 and request.wire()["messages"] == USER


def test_the_anthropic_dialects_forward_rule_strips_its_own_keys() -> None:
    wire = MessagesRequest.model_validate(
        {
            "model": "m",
            "max_tokens": 8,
            "top_k": 3,
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "x"}}]}],
        }
    )
    full, stripped = to_canonical(wire)
    request = GatewayRequest(parse(ChatRequest, full), NO_OPTIONS, stripped, strip_anthropic)
    assert request.wire() is stripped
    replaced = rewrite(request, lambda text: text + "!").wire()
    assert "top_k" not in replaced and "thinking" not in replaced and "cache_control" not in str(replaced)
    assert replaced["messages"][0]["content"][0]["text"] == "hi!"
    assert (request.body.model_extra or {})["top_k"] == 3  # an Anthropic target still reads them


def test_a_plan_that_changes_nothing_keeps_the_callers_wire() -> None:
    def planned(data: dict[str, Any]) -> GatewayRequest[ChatRequest]:
        request = parse_request(ChatRequest, data)
        decided = caps.plan(
            request, CAPABILITIES, Capabilities(tools=False), provider_name="p", model_name="m", unsupported=()
        )
        return decided.apply(request)

    data = chat(seed=1)
    assert planned(data).wire() is data
    narrowed = planned(chat(tools=[TOOL], tool_choice="auto"))
    assert "tools" not in narrowed.wire() and "tool_choice" not in narrowed.wire()


def test_the_key_list_is_the_options() -> None:
    """Every option is a key the dialects take out, and every key is an option (`inferada` is Inferada's
    spelling of `processors`)."""
    internal = {"location", "refuse_when_all_open"}  # set by a processor or a dialect, never from the caller's JSON
    internal |= {"use_default_prompt"}  # read from under `inferada` (prompting/assembly.py), not a key of its own
    assert set(GatewayOptions.__dataclass_fields__) - internal | {"inferada"} == GATEWAY_KEYS
