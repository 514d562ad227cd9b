"""`n > 1` streamed through every adapter, native and emulated, read with the official `openai` SDK.

Whatever serves the choices (the upstream's own `n`, Gemini's `candidateCount`, or the gateway's parallel
calls for Anthropic and Bedrock), the caller must see one stream: one chunk id throughout, choices indexed
0..n-1, each finishing exactly once, and each choice's text being one candidate's text, not a mix of them.
The fakes give every candidate (or every call) its own text, and Gemini's fake interleaves its candidates
and leaves out `index: 0` as proto3 JSON does, so a mix-up shows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.fakes.anthropic_upstream import FakeAnthropic
from tests.fakes.azure_upstream import FakeAzure
from tests.fakes.bedrock_upstream import FakeBedrock
from tests.fakes.gemini_upstream import FakeGemini
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

N = 3
PROMPT = "tell me"


@pytest.fixture(scope="module")
def fakes() -> Iterator[dict[str, Any]]:
    started: dict[str, Any] = {
        "openai": FakeOpenAI("sk-n-fake").start(),
        "anthropic": FakeAnthropic("sk-ant-n").start(),
        "gemini": FakeGemini("gm-n").start(),
        "azure": FakeAzure("az-n").start(),
        "bedrock": FakeBedrock("AKIDFAKE", "fake-secret", "us-east-1").start(),
    }
    yield started
    for fake in started.values():
        fake.stop()


@pytest.fixture(scope="module")
def client(fakes: dict[str, Any]) -> Iterator[openai.OpenAI]:
    mp = pytest.MonkeyPatch()
    mp.setenv("AWS_ACCESS_KEY_ID", "AKIDFAKE")
    mp.setenv("AWS_SECRET_ACCESS_KEY", "fake-secret")
    mp.delenv("AWS_SESSION_TOKEN", raising=False)
    mp.delenv("AWS_PROFILE", raising=False)
    mp.setenv("N_OPENAI_KEY", "sk-n-fake")
    mp.setenv("N_ANTHROPIC_KEY", "sk-ant-n")
    mp.setenv("N_GEMINI_KEY", "gm-n")
    mp.setenv("N_AZURE_KEY", "az-n")
    providers = [
        {"name": "oa", "kind": "openai", "base_url": fakes["openai"].base_url, "api_key": "env:N_OPENAI_KEY"},
        {"name": "claude", "kind": "anthropic", "base_url": fakes["anthropic"].url, "api_key": "env:N_ANTHROPIC_KEY"},
        {"name": "gem", "kind": "gemini", "base_url": fakes["gemini"].url + "/v1beta", "api_key": "env:N_GEMINI_KEY"},
        {"name": "az", "kind": "azure", "base_url": fakes["azure"].url, "api_key": "env:N_AZURE_KEY"},
        {"name": "br", "kind": "bedrock", "base_url": fakes["bedrock"].url, "options": {"region": "us-east-1"}},
    ]
    models = [
        ("via-openai", "oa", "choices-model"),
        ("via-azure", "az", "choices"),
        ("via-anthropic", "claude", "claude-numbered-1"),
        ("via-gemini", "gem", "gemini-choices"),
        ("via-bedrock", "br", "anthropic.claude-numbered-v1:0"),
    ]
    config: dict[str, Any] = {
        "providers": providers,
        "models": [{"name": n, "deployments": [{"provider": p, "model": m}]} for n, p, m in models],
    }
    # a model declared `streaming: false`: its stream is replayed from one buffered call with the native n
    replayed = {"provider": "oa", "model": "choices-model"}
    config["models"].append({"name": "via-replay", "deployments": [replayed], "capabilities": {"streaming": False}})
    with GatewayServer(config) as server:
        yield openai.OpenAI(base_url=server.base_url, api_key=server.master_key, max_retries=0)
    mp.undo()


def _expected(model: str) -> set[str]:
    """The texts the upstream produced for the candidates of one request (emulated: one call each)."""
    echo = f"echo: {PROMPT}"
    if model in ("via-openai", "via-azure", "via-replay"):
        return {f"{echo} (choice {i})" for i in range(N)}
    if model == "via-gemini":
        return {f"{echo} (candidate {i})" for i in range(N)}
    return set()  # numbered calls: checked by shape below


@pytest.mark.parametrize(
    "model", ["via-openai", "via-azure", "via-anthropic", "via-gemini", "via-bedrock", "via-replay"]
)
def test_streamed_choices_are_one_stream(client: openai.OpenAI, model: str) -> None:
    chunks = list(
        client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": PROMPT}],
            n=N,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert len({c.id for c in chunks}) == 1, f"chunk ids differ: {sorted({c.id for c in chunks})}"
    texts: dict[int, str] = defaultdict(str)
    finishes: dict[int, list[str]] = defaultdict(list)
    for c in chunks:
        for choice in c.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.finish_reason is not None:
                finishes[choice.index].append(choice.finish_reason)
    assert set(texts) == set(range(N))
    assert {i: len(f) for i, f in finishes.items()} == {i: 1 for i in range(N)}
    assert chunks[-1].usage is not None and chunks[-1].choices == []
    expected = _expected(model)
    if expected:
        assert set(texts.values()) == expected
    else:  # each choice is one whole answer `echo: tell me #k`, each from its own call
        numbers = set()
        for text in texts.values():
            head, _, k = text.rpartition(" #")
            assert head == f"echo: {PROMPT}" and k.isdigit(), text
            numbers.add(int(k))
        assert len(numbers) == N


@pytest.fixture(scope="module")
def local_client() -> Iterator[openai.OpenAI]:
    pytest.importorskip("llama_cpp", reason="the bundled local model needs the `local` extra")
    from inferplex.defaults import DEFAULT_CONFIG

    with GatewayServer(DEFAULT_CONFIG) as server:
        yield openai.OpenAI(base_url=server.base_url, api_key=server.master_key, max_retries=0)


def test_local_model_streams_n_choices_as_one_stream(local_client: openai.OpenAI) -> None:
    """The bundled model runs n natively; greedy decoding makes each choice's text known from a buffered call."""
    from inferplex.defaults import DEFAULT_CHAT_MODEL

    args: Any = {"model": DEFAULT_CHAT_MODEL, "messages": [{"role": "user", "content": "Say hello."}]}
    args.update(n=2, max_tokens=6, temperature=0.0, seed=7)
    buffered = local_client.chat.completions.create(**args)
    chunks = list(local_client.chat.completions.create(**args, stream=True))
    assert len({c.id for c in chunks}) == 1
    texts: dict[int, str] = defaultdict(str)
    finishes: dict[int, int] = defaultdict(int)
    for c in chunks:
        for choice in c.choices:
            texts[choice.index] += choice.delta.content or ""
            finishes[choice.index] += choice.finish_reason is not None
    assert dict(finishes) == {0: 1, 1: 1}
    assert dict(texts) == {c.index: c.message.content for c in buffered.choices}
