"""The adapter contract: what every provider kind owes a caller, one table row per kind, through HTTP.

One gateway fronts every kind's fake (OpenAI-compatible, Azure, Anthropic, Gemini, Bedrock) and the bundled
local model; each behaviour is a test parametrised over the kinds whose fake can produce it (`ROWS`: the
upstream model id that makes the fake do it, or None where the kind has no such thing: a local model has
no 429). Read with the official `openai` SDK or raw httpx, as a caller would:

- buffered: an answer with text, a known finish_reason and usage that adds up;
- streamed: one id, each choice finished once, and usage on the last chunk (`choices: []`), nothing after;
  without `include_usage`, no usage chunk at all;
- an unknown finish reason (and content block) from the provider becomes `stop`, the text kept;
- 429 (with the provider's Retry-After passed on) and overloaded (a retryable 503; an OpenAI-compatible
  503 says no more than a 502);
- a failure mid-stream ends the stream with an error event, then `[DONE]`;
- a caller who hangs up cancels the upstream request within a second;
- a parameter the target cannot honour is named in `x-inferplex-dropped-params`, or refused (400 naming
  it) with `drop_params: false`;
- n > 1, buffered and streamed: n choices, indexed 0..n-1, each its own candidate.
Per-provider files (`test_<kind>.py`) keep only what is specific to one provider.

Cells left out, and why: an unknown finish reason on the OpenAI-compatible kinds (openai, azure) passes
through as the provider sent it, like every field of their answers; the local model has no 429, overload or
transport to fail mid-stream, and its cancellation on hang-up is tested in test_local.py (the next request
does not wait for the abandoned generation).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from tests.fakes.anthropic_upstream import FakeAnthropic
from tests.fakes.azure_upstream import FakeAzure
from tests.fakes.bedrock_upstream import FakeBedrock
from tests.fakes.gemini_upstream import FakeGemini
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer
from tests.providers.conftest import every_kind

KINDS = ("openai", "azure", "anthropic", "gemini", "bedrock", "local")
PROVIDER = {"openai": "oa", "azure": "az", "anthropic": "claude", "gemini": "gem", "bedrock": "br", "local": "local"}
LOCAL_CHAT = "smollm2-135m-instruct"
_BR = "anthropic.claude-{}-v1:0"

# behaviour -> kind -> the upstream id that makes that kind's fake do it (None: not applicable to the kind)
ROWS: dict[str, dict[str, str | None]] = {
    "echo": {
        "openai": "gpt-echo",
        "azure": "gpt4o-prod",
        "anthropic": "claude-echo-1",
        "gemini": "gemini-echo",
        "bedrock": _BR.format("3-5-sonnet"),
        "local": LOCAL_CHAT,
    },
    "future": {"anthropic": "claude-future-1", "gemini": "gemini-future", "bedrock": _BR.format("future")},
    "rate-limited": {
        "openai": "error-429",
        "azure": "error-429",
        "anthropic": "claude-error-429",
        "gemini": "gemini-error-429",
        "bedrock": _BR.format("throttle"),
    },
    "overloaded": {
        "openai": "error-503",
        "azure": "error-503",
        "anthropic": "claude-error-529",
        "gemini": "gemini-error-503",
        "bedrock": _BR.format("overloaded"),
    },
    "midstream": {
        "openai": "die-midstream",
        "azure": "midstream",
        "anthropic": "claude-midstream-1",
        "gemini": "gemini-midstream",
        "bedrock": _BR.format("midstream"),
    },
    "slow": {
        "openai": "slow-stream",
        "azure": "slow",
        "anthropic": "claude-slow-1",
        "gemini": "gemini-slow",
        "bedrock": _BR.format("slow"),
    },
    "choices": {
        "openai": "choices-model",
        "azure": "choices",
        "anthropic": "claude-numbered-1",
        "gemini": "gemini-choices",
        "bedrock": _BR.format("numbered"),
        "local": LOCAL_CHAT,
    },
}
RETRY_AFTER = {"openai": "7", "azure": "7", "anthropic": "7", "gemini": "7", "bedrock": None}
OVERLOADED = {"openai": (502, "upstream_error"), "azure": (502, "upstream_error")}  # else (503, upstream_overloaded)
# what each kind cannot honour on the model `<kind>-narrow` (tools: false), and the local runtime
DROPS: dict[str, tuple[str, dict[str, Any]]] = {
    "local": ("logit_bias", {"logit_bias": {"1": 5}}),
    **{
        k: (
            "tools",
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]},
        )
        for k in KINDS
        if k != "local"
    },
}
MSG = [{"role": "user", "content": "tell me"}]


def rows(behaviour: str) -> list[str]:
    return [k for k in KINDS if ROWS[behaviour].get(k)]


def name(kind: str, behaviour: str) -> str:
    return f"{kind}-{behaviour}"


@pytest.fixture(scope="module")
def gateway(
    fake_openai: FakeOpenAI,
    fake_anthropic: FakeAnthropic,
    fake_gemini: FakeGemini,
    fake_azure: FakeAzure,
    fake_bedrock: FakeBedrock,
) -> Iterator[GatewayServer]:
    providers = every_kind(fake_openai, fake_anthropic, fake_gemini, fake_azure, fake_bedrock)
    models: list[dict[str, Any]] = []
    for behaviour, by_kind in ROWS.items():
        for kind, upstream in by_kind.items():
            if upstream:
                deployment = {"provider": PROVIDER[kind], "model": upstream}
                models.append({"name": name(kind, behaviour), "deployments": [deployment], "routing": {"retries": 0}})
    for kind in KINDS:
        deployment = {"provider": PROVIDER[kind], "model": ROWS["echo"][kind]}
        models.append({"name": name(kind, "narrow"), "deployments": [deployment], "capabilities": {"tools": False}})
    # a model declared `streaming: false`: its stream is replayed from one buffered call with the native n
    replayed = {"provider": "oa", "model": ROWS["choices"]["openai"]}
    models.append({"name": "replayed-choices", "deployments": [replayed], "capabilities": {"streaming": False}})
    with GatewayServer({"providers": providers, "models": models}) as server:
        yield server


@pytest.fixture(scope="module")
def client(gateway: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=gateway.master_key, max_retries=0)


def _limit(kind: str) -> dict[str, Any]:
    """The local model writes until told to stop: a few tokens keep its rows fast."""
    return {"max_tokens": 8, "temperature": 0.0, "seed": 7} if kind == "local" else {}


def _post(gateway: GatewayServer, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(gateway.base_url + "/chat/completions", json=body, headers=gateway.auth, timeout=60)


def _events(resp: httpx.Response) -> list[Any]:
    out: list[Any] = []
    for line in resp.text.splitlines():
        if line.startswith("data: "):
            data = line.removeprefix("data: ")
            out.append(data if data == "[DONE]" else orjson.loads(data))
    return out


@pytest.mark.parametrize("kind", rows("echo"))
def test_buffered(client: openai.OpenAI, kind: str) -> None:
    r = client.chat.completions.create(model=name(kind, "echo"), messages=MSG, **_limit(kind))
    choice = r.choices[0]
    assert isinstance(choice.message.content, str) and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert r.usage is not None and r.usage.completion_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


@pytest.mark.parametrize("kind", rows("echo"))
def test_streamed_with_usage_last(client: openai.OpenAI, kind: str) -> None:
    chunks = list(
        client.chat.completions.create(
            model=name(kind, "echo"), messages=MSG, stream=True, stream_options={"include_usage": True}, **_limit(kind)
        )
    )
    assert len({c.id for c in chunks}) == 1
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finishes) == 1 and finishes[0] in ("stop", "length")
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None and last.usage.completion_tokens > 0
    assert all(c.usage is None for c in chunks[:-1])


@pytest.mark.parametrize("kind", rows("echo"))
def test_streamed_without_include_usage_has_no_usage_chunk(client: openai.OpenAI, kind: str) -> None:
    chunks = list(client.chat.completions.create(model=name(kind, "echo"), messages=MSG, stream=True, **_limit(kind)))
    assert chunks[-1].choices and all(c.usage is None for c in chunks)  # Azure's first chunk has no choices


@pytest.mark.parametrize("kind", rows("future"))
@pytest.mark.parametrize("stream", [False, True])
def test_unknown_finish_reason_becomes_stop(gateway: GatewayServer, kind: str, stream: bool) -> None:
    resp = _post(gateway, {"model": name(kind, "future"), "messages": MSG, "stream": stream})
    assert resp.status_code == 200, resp.text
    if stream:
        choices = [c for e in _events(resp) if isinstance(e, dict) for c in e.get("choices") or ()]
        assert [c["finish_reason"] for c in choices if c.get("finish_reason")] == ["stop"]
        assert "".join((c.get("delta") or {}).get("content") or "" for c in choices)
    else:
        choice = resp.json()["choices"][0]
        assert choice["finish_reason"] == "stop" and choice["message"]["content"]


@pytest.mark.parametrize("kind", rows("rate-limited"))
@pytest.mark.parametrize("stream", [False, True])
def test_429_passes_retry_after_on(gateway: GatewayServer, kind: str, stream: bool) -> None:
    resp = _post(gateway, {"model": name(kind, "rate-limited"), "messages": MSG, "stream": stream})
    assert resp.status_code == 429, resp.text
    assert resp.json()["error"]["type"] == "rate_limit_error"
    assert resp.headers.get("retry-after") == RETRY_AFTER[kind]


@pytest.mark.parametrize("kind", rows("overloaded"))
@pytest.mark.parametrize("stream", [False, True])
def test_overloaded(gateway: GatewayServer, kind: str, stream: bool) -> None:
    resp = _post(gateway, {"model": name(kind, "overloaded"), "messages": MSG, "stream": stream})
    status, code = OVERLOADED.get(kind, (503, "upstream_overloaded"))
    assert (resp.status_code, resp.json()["error"]["code"]) == (status, code), resp.text


@pytest.mark.parametrize("kind", rows("midstream"))
def test_a_midstream_failure_ends_the_stream_with_an_error_then_done(gateway: GatewayServer, kind: str) -> None:
    resp = _post(gateway, {"model": name(kind, "midstream"), "messages": MSG, "stream": True})
    assert resp.status_code == 200
    events = _events(resp)
    content = [c for e in events[:-2] for c in e.get("choices") or () if (c.get("delta") or {}).get("content")]
    assert content, "the failure came after some text"
    assert "error" in events[-2] and events[-2]["error"]["message"]
    assert events[-1] == "[DONE]"


@pytest.mark.parametrize("kind", rows("slow"))
def test_a_caller_hanging_up_cancels_the_upstream_within_a_second(
    gateway: GatewayServer,
    fake_openai: FakeOpenAI,
    fake_anthropic: FakeAnthropic,
    fake_gemini: FakeGemini,
    fake_azure: FakeAzure,
    fake_bedrock: FakeBedrock,
    kind: str,
) -> None:
    disconnects = {
        "openai": fake_openai.state.disconnects,
        "anthropic": fake_anthropic.disconnects,
        "gemini": fake_gemini.hangups,
        "azure": fake_azure.hangups,
        "bedrock": fake_bedrock.hangups,
    }[kind]
    seen = len(disconnects)
    body = {"model": name(kind, "slow"), "messages": MSG, "stream": True}
    with (
        httpx.Client(timeout=10) as http,
        http.stream("POST", gateway.base_url + "/chat/completions", json=body, headers=gateway.auth) as resp,
    ):
        assert resp.status_code == 200
        next(resp.iter_lines())
        left = time.monotonic()
    while len(disconnects) == seen and time.monotonic() - left < 1.0:
        time.sleep(0.02)
    assert len(disconnects) > seen, "the upstream was still streaming a second after the caller left"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("stream", [False, True])
def test_a_parameter_the_target_cannot_honour_is_named(gateway: GatewayServer, kind: str, stream: bool) -> None:
    param, extra = DROPS[kind]
    body = {"model": name(kind, "narrow"), "messages": MSG, "stream": stream, **extra, **_limit(kind)}
    resp = _post(gateway, body)
    assert resp.status_code == 200, resp.text
    assert param in resp.headers["x-inferplex-dropped-params"].split(",")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("stream", [False, True])
def test_drop_params_false_refuses_it_naming_it(gateway: GatewayServer, kind: str, stream: bool) -> None:
    param, extra = DROPS[kind]
    body = {"model": name(kind, "narrow"), "messages": MSG, "stream": stream, "drop_params": False, **extra}
    resp = _post(gateway, body)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == param


@pytest.mark.parametrize("kind", rows("choices"))
def test_n_choices_buffered(client: openai.OpenAI, kind: str) -> None:
    n = 2 if kind == "local" else 3
    r = client.chat.completions.create(model=name(kind, "choices"), messages=MSG, n=n, **_limit(kind))
    assert [c.index for c in r.choices] == list(range(n))
    assert all(c.message.content for c in r.choices)
    if kind != "local":  # the fakes give every candidate (or every call) its own text
        assert len({c.message.content for c in r.choices}) == n


@pytest.mark.parametrize("kind", [*rows("choices"), "replayed"])
def test_n_choices_streamed_are_one_stream(client: openai.OpenAI, kind: str) -> None:
    """One id, choices 0..n-1 each finished once, each choice one candidate's text (the fakes give each its
    own; the local model's greedy decoding makes its texts those of a buffered call)."""
    n = 2 if kind == "local" else 3
    model = name(kind, "choices")
    chunks = list(
        client.chat.completions.create(
            model=model,
            messages=MSG,
            n=n,
            stream=True,
            stream_options={"include_usage": True},
            **_limit(kind),
        )
    )
    assert len({c.id for c in chunks}) == 1
    texts: dict[int, str] = defaultdict(str)
    finishes: dict[int, int] = defaultdict(int)
    for c in chunks:
        for choice in c.choices:
            texts[choice.index] += choice.delta.content or ""
            finishes[choice.index] += choice.finish_reason is not None
    assert dict(finishes) == {i: 1 for i in range(n)}
    assert chunks[-1].usage is not None and chunks[-1].choices == []
    if kind == "local":
        buffered = client.chat.completions.create(model=model, messages=MSG, n=n, **_limit(kind))
        assert dict(texts) == {c.index: c.message.content for c in buffered.choices}
    else:
        assert len(set(texts.values())) == n
