"""`inferplex.responses` describes the answers callers really get (issue 20, item 1: responses are typed).

Each answer below comes from the running gateway, in front of the fake of each provider kind, buffered and
streamed. Where the gateway builds the answer itself (the native translators, the emulations, the dialect's
`timings` and `cost`), every key must be one the types name, with a value of the declared type: a key added
to a translator without its type fails here. An OpenAI-compatible upstream's answer is passed along as it
came, so there only the keys the types name are checked.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from typing import Any, get_args, get_origin, get_type_hints

import httpx
import orjson
import pytest

from inferplex.responses import ChatCompletion, ChatCompletionChunk, EmbeddingList
from tests.conftest import UPSTREAM_KEY
from tests.fakes.anthropic_upstream import FakeAnthropic
from tests.fakes.bedrock_upstream import FakeBedrock
from tests.fakes.gemini_upstream import FakeGemini
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

# public model -> (provider, upstream model id: it picks the fake's behaviour)
NATIVE = {
    "claude-echo": ("claude", "claude-echo-1"),
    "claude-tool": ("claude", "claude-tool-parallel-1"),
    "claude-think": ("claude", "claude-think-1"),
    "claude-cache": ("claude", "claude-cache-1"),
    "gemini-think": ("gemini", "gemini-think"),
    "gemini-tool-sig": ("gemini", "gemini-tool-sig"),
    "gemini-cache": ("gemini", "gemini-cache"),
    "bedrock-think": ("bedrock", "anthropic.claude-think-v1:0"),
    "bedrock-tool": ("bedrock", "us.anthropic.claude-tool-parallel-v1:0"),
    "bedrock-cache": ("bedrock", "anthropic.claude-cache-v1:0"),
}


@pytest.fixture(scope="module")
def gateway(fake_openai: FakeOpenAI) -> Iterator[GatewayServer]:
    anthropic = FakeAnthropic("sk-ant-fake").start()
    gemini = FakeGemini("gm-fake").start()
    bedrock = FakeBedrock("AKIDFAKE", "fake-secret", "us-east-1").start()
    mp = pytest.MonkeyPatch()
    mp.setenv("FAKE_ANTHROPIC_KEY", "sk-ant-fake")
    mp.setenv("FAKE_GEMINI_KEY", "gm-fake")
    mp.setenv("AWS_ACCESS_KEY_ID", "AKIDFAKE")
    mp.setenv("AWS_SECRET_ACCESS_KEY", "fake-secret")
    mp.delenv("AWS_SESSION_TOKEN", raising=False)
    mp.delenv("AWS_PROFILE", raising=False)
    models: list[dict[str, Any]] = [
        {"name": name, "deployments": [{"provider": provider, "model": upstream}]}
        for name, (provider, upstream) in NATIVE.items()
    ]
    models += [
        {"name": "claude-n2", "deployments": [{"provider": "claude", "model": "claude-echo-1"}]},
        {"name": "gpt-echo", "deployments": [{"provider": "openai", "model": "gpt-echo"}]},
        {"name": "gpt-tool", "deployments": [{"provider": "openai", "model": "tool-model"}]},
        {"name": "embed", "type": "embedding", "deployments": [{"provider": "openai", "model": "text-embedding-x"}]},
    ]
    for m in models:
        m["pricing"] = {"input": "1", "output": "2"}
    config = {
        "providers": [
            {"name": "claude", "kind": "anthropic", "base_url": anthropic.url, "api_key": "env:FAKE_ANTHROPIC_KEY"},
            {"name": "gemini", "kind": "gemini", "base_url": gemini.url + "/v1beta", "api_key": "env:FAKE_GEMINI_KEY"},
            {"name": "bedrock", "kind": "bedrock", "base_url": bedrock.url, "options": {"region": "us-east-1"}},
            {"name": "openai", "kind": "openai", "base_url": fake_openai.base_url, "api_key": "env:FAKE_UPSTREAM_KEY"},
        ],
        "models": models,
    }
    assert UPSTREAM_KEY
    try:
        with GatewayServer(config) as server:
            yield server
    finally:
        mp.undo()
        for fake in (anthropic, gemini, bedrock):
            fake.stop()


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__total__")


def check(tp: Any, value: Any, path: str, *, closed: bool) -> None:
    """`value` has type `tp`; with `closed`, every key of every object is one its TypedDict names."""
    if tp is Any:
        return
    origin = get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        errors = []
        for option in get_args(tp):
            try:
                check(option, value, path, closed=closed)
                return
            except AssertionError as err:
                errors.append(str(err))
        raise AssertionError(f"{path}: {value!r} matches none of {tp}: {errors}")
    if tp is None or tp is type(None):
        assert value is None, f"{path}: {value!r} is not null"
        return
    if _is_typeddict(tp):
        assert isinstance(value, dict), f"{path}: {value!r} is not an object ({tp.__name__})"
        hints = get_type_hints(tp)
        if closed:
            unknown = set(value) - set(hints)
            assert not unknown, f"{path}: keys {sorted(unknown)} are not named by {tp.__name__}"
        for key, item in value.items():
            if key in hints:
                check(hints[key], item, f"{path}.{key}", closed=closed)
        return
    if origin is list:
        assert isinstance(value, list), f"{path}: {value!r} is not a list"
        for i, item in enumerate(value):
            check(get_args(tp)[0], item, f"{path}[{i}]", closed=closed)
        return
    if origin is dict:
        assert isinstance(value, dict), f"{path}: {value!r} is not an object"
        return
    if tp is float:
        assert isinstance(value, int | float) and not isinstance(value, bool), f"{path}: {value!r} is not a number"
        return
    assert isinstance(value, tp) and not (tp is int and isinstance(value, bool)), f"{path}: {value!r} is not {tp}"


def _ask(gateway: GatewayServer, model: str, *, stream: bool, **extra: Any) -> list[dict[str, Any]]:
    body = {"model": model, "messages": [{"role": "user", "content": "What is 2+2? Use a tool if you have one."}]}
    body.update(extra)
    if stream:
        body["stream_options"] = {"include_usage": True}
    with httpx.Client(base_url=gateway.base_url, headers=gateway.auth, timeout=30) as http:
        reply = http.post("/chat/completions", json={**body, "stream": stream})
    assert reply.status_code == 200, reply.text
    if not stream:
        return [reply.json()]
    lines = [line[6:] for line in reply.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [orjson.loads(line) for line in lines[:-1]]


@pytest.mark.parametrize("model", [*NATIVE, "claude-n2"])
def test_a_native_providers_answers_have_only_typed_keys(gateway: GatewayServer, model: str) -> None:
    extra: dict[str, Any] = {"n": 2} if model == "claude-n2" else {}
    if model.endswith(("-tool", "-tool-sig")):
        extra["tools"] = [
            {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}
        ]
    (completion,) = _ask(gateway, model, stream=False, **extra)
    check(ChatCompletion, completion, "completion", closed=True)
    assert completion["choices"] and completion["usage"]["total_tokens"] > 0
    chunks = _ask(gateway, model, stream=True, **extra)
    for i, chunk in enumerate(chunks):
        check(ChatCompletionChunk, chunk, f"chunk[{i}]", closed=True)
    assert chunks[-1]["usage"] and "timings" in chunks[-1]


@pytest.mark.parametrize("model", ["gpt-echo", "gpt-tool"])
def test_an_openai_compatible_answer_matches_its_types(gateway: GatewayServer, model: str) -> None:
    (completion,) = _ask(gateway, model, stream=False)
    check(ChatCompletion, completion, "completion", closed=False)
    assert isinstance(completion["timings"]["total_ms"], float)
    for i, chunk in enumerate(_ask(gateway, model, stream=True)):
        check(ChatCompletionChunk, chunk, f"chunk[{i}]", closed=False)


def test_an_embeddings_list_matches_its_types(gateway: GatewayServer) -> None:
    with httpx.Client(base_url=gateway.base_url, headers=gateway.auth, timeout=30) as http:
        reply = http.post("/embeddings", json={"model": "embed", "input": ["a", "b"]})
    assert reply.status_code == 200, reply.text
    check(EmbeddingList, reply.json(), "list", closed=False)
    assert len(reply.json()["data"]) == 2


def test_the_checker_refuses_a_key_no_type_names() -> None:
    """The check above can fail: an unnamed key or a wrong type is reported with its path."""
    with pytest.raises(AssertionError, match=r"completion.choices\[0\]: keys \['surprise'\]"):
        check(ChatCompletion, {"choices": [{"index": 0, "surprise": 1}]}, "completion", closed=True)
    with pytest.raises(AssertionError, match=r"completion\.created"):
        check(ChatCompletion, {"created": "yesterday"}, "completion", closed=True)
