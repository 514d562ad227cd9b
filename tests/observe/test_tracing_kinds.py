"""Every remote provider kind passes the attempt's trace context upstream, whichever road its call takes.

One traced gateway fronts each kind's fake (OpenAI-compatible, Azure, Anthropic, Gemini, Bedrock); a chat,
buffered and streamed, must arrive at the fake with a `traceparent` whose parent is that attempt's CLIENT
span as the collector received it, and with content capture on, the spans carry the prompt as that kind's
wire format sent it and the answer the caller received. Audio covers the calls an adapter makes on the session itself: a
transcription's multipart upload (`session.post`) and speech's stream.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.fakes.anthropic_upstream import FakeAnthropic
from tests.fakes.azure_upstream import FakeAzure
from tests.fakes.bedrock_upstream import FakeBedrock
from tests.fakes.gemini_upstream import FakeGemini
from tests.fakes.openai_audio_upstream import FakeOpenAIAudio, wav_bytes
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer
from tests.observe.otlp_collector import Collector, Span
from tests.providers.conftest import (  # noqa: F401 (fixtures, used by name)
    _native_keys,
    every_kind,
    fake_anthropic,
    fake_azure,
    fake_bedrock,
    fake_gemini,
)

ECHO = {
    "openai": ("oa", "gpt-echo"),
    "azure": ("az", "gpt4o-prod"),
    "anthropic": ("claude", "claude-echo-1"),
    "gemini": ("gem", "gemini-echo"),
    "bedrock": ("br", "anthropic.claude-3-5-sonnet-20240620-v1:0"),
}
AUDIO_KEY = "sk-audio-traced"
MSG: Any = [{"role": "user", "content": "trace me"}]


@pytest.fixture(scope="module")
def audio(monkeypatch_module: pytest.MonkeyPatch) -> Iterator[FakeOpenAIAudio]:
    monkeypatch_module.setenv("TRACED_AUDIO_KEY", AUDIO_KEY)
    fake = FakeOpenAIAudio("openai", AUDIO_KEY).start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


@pytest.fixture(scope="module")
def gateway(
    fake_openai: FakeOpenAI,
    fake_anthropic: FakeAnthropic,  # noqa: F811
    fake_gemini: FakeGemini,  # noqa: F811
    fake_azure: FakeAzure,  # noqa: F811
    fake_bedrock: FakeBedrock,  # noqa: F811
    audio: FakeOpenAIAudio,
    collector: Collector,
) -> Iterator[GatewayServer]:
    providers = every_kind(fake_openai, fake_anthropic, fake_gemini, fake_azure, fake_bedrock)
    providers.append({"name": "voice", "kind": "openai", "base_url": audio.base_url, "api_key": "env:TRACED_AUDIO_KEY"})
    models: list[dict[str, Any]] = [
        {"name": f"{kind}-echo", "deployments": [{"provider": p, "model": m}], "routing": {"retries": 0}}
        for kind, (p, m) in ECHO.items()
    ]
    models += [
        {"name": "whisper-1", "type": "transcription", "deployments": [{"provider": "voice", "model": "whisper-1"}]},
        {"name": "tts-1", "type": "speech", "deployments": [{"provider": "voice", "model": "tts-1"}]},
    ]
    tracing = {"enabled": True, "endpoint": collector.endpoint, "export_interval_s": 0.05, "capture_content": True}
    config = {"providers": providers, "models": models, "observability": {"tracing": tracing}}
    with GatewayServer(config) as gw:
        yield gw


@pytest.fixture(scope="module")
def fakes(
    fake_openai: FakeOpenAI,
    fake_anthropic: FakeAnthropic,  # noqa: F811
    fake_gemini: FakeGemini,  # noqa: F811
    fake_azure: FakeAzure,  # noqa: F811
    fake_bedrock: FakeBedrock,  # noqa: F811
    audio: FakeOpenAIAudio,
) -> dict[str, Any]:
    return {
        "openai": fake_openai,
        "azure": fake_azure,
        "anthropic": fake_anthropic,
        "gemini": fake_gemini,
        "bedrock": fake_bedrock,
        "audio": audio,
    }


def received_headers(fake: Any) -> list[dict[str, str]]:
    """The headers of every request the fake recorded (the OpenAI fake keeps its own list)."""
    requests = fake.state.requests if isinstance(fake, FakeOpenAI) else fake.requests
    return [{k.lower(): v for k, v in r.headers.items()} for r in requests]


def caller() -> tuple[str, dict[str, str]]:
    trace_id = secrets.token_hex(16)
    return trace_id, {"traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"}


def attempt_parent(fake: Any, trace_id: str) -> str:
    """The parent span id of the one upstream request of this trace."""
    sent = [h["traceparent"] for h in received_headers(fake) if trace_id in h.get("traceparent", "")]
    assert len(sent) == 1, f"the upstream should have received one request of trace {trace_id}: {sent}"
    return sent[0].split("-")[2]


def attempt_span(collector: Collector, trace_id: str, span_id: str) -> Span:
    def arrived(spans: list[Span]) -> bool:  # the attempt's span and its request's (batches may part them)
        mine = [s for s in spans if s.trace_id == trace_id]
        return any(s.span_id == span_id for s in mine) and any(s.kind == "server" for s in mine)

    spans = collector.wait_for(arrived)
    span = next(s for s in spans if s.span_id == span_id)
    server = next(s for s in spans if s.trace_id == trace_id and s.kind == "server")
    assert span.kind == "client" and span.trace_id == trace_id and span.parent_id == server.span_id
    return span


@pytest.mark.parametrize("stream", [False, True], ids=["buffered", "streamed"])
@pytest.mark.parametrize("kind", list(ECHO))
def test_every_kind_sends_the_attempts_traceparent(
    gateway: GatewayServer, collector: Collector, fakes: dict[str, Any], kind: str, stream: bool
) -> None:
    trace_id, headers = caller()
    client = openai.OpenAI(base_url=gateway.base_url, api_key=gateway.master_key, max_retries=0)
    if stream:
        text = "".join(
            c.choices[0].delta.content or ""
            for c in client.chat.completions.create(
                model=f"{kind}-echo", messages=MSG, stream=True, extra_headers=headers
            )
            if c.choices
        )
    else:
        text = client.chat.completions.create(model=f"{kind}-echo", messages=MSG, extra_headers=headers).choices[0]
        text = text.message.content or ""
    assert text
    span = attempt_span(collector, trace_id, attempt_parent(fakes[kind], trace_id))
    assert span.attributes["inferplex.deployment"] == f"{ECHO[kind][0]}/{ECHO[kind][1]}"

    # content capture reads each wire format: the prompt as sent, the answer as the caller received it
    sent = json.loads(span.attributes["gen_ai.input.messages"])
    assert {"role": "user", "parts": [{"type": "text", "content": "trace me"}]} in sent
    server = next(s for s in collector.trace(trace_id) if s.kind == "server")
    if kind == "bedrock" and stream:  # AWS's binary event stream is decoded in the adapter, not by providers/http
        assert "gen_ai.output.messages" not in server.attributes  # (known gap: docs/operate.md, traces)
        return
    (answer,) = json.loads(server.attributes["gen_ai.output.messages"])
    assert answer["role"] == "assistant" and answer["parts"] == [{"type": "text", "content": text}]


def test_a_multipart_upload_and_a_speech_stream_carry_it_too(
    gateway: GatewayServer, collector: Collector, fakes: dict[str, Any], tmp_path: Path
) -> None:
    client = openai.OpenAI(base_url=gateway.base_url, api_key=gateway.master_key, max_retries=0)
    wav = tmp_path / "said.wav"
    wav.write_bytes(wav_bytes(1.0, rate=16_000))
    trace_id, headers = caller()
    assert client.audio.transcriptions.create(model="whisper-1", file=wav, extra_headers=headers).text
    span = attempt_span(collector, trace_id, attempt_parent(fakes["audio"], trace_id))
    assert span.attributes["gen_ai.operation.name"] == "transcription"

    trace_id, headers = caller()
    speech = client.audio.speech.create(model="tts-1", voice="alloy", input="hello", extra_headers=headers)
    assert speech.content
    attempt_span(collector, trace_id, attempt_parent(fakes["audio"], trace_id))
