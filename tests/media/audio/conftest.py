"""The audio families' fixtures: strict fakes of OpenAI's, Groq's and Azure's audio endpoints and of Gemini's
speech models, and one gateway in front of them all, with a store so keyed accounts are billed.

Prices are chosen to reason about in micro-USD: `tts-1` costs 15 per character; `whisper-1` 100 per second
of audio; `gpt-4o-transcribe` 6 per audio token, 2.5 per text token in, 10 per token out; `gpt-4o-mini-tts`
0.6 per text token in, 12 per audio token out.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.accounts.conftest import Admin, sqlite_url
from tests.fakes.gemini_speech_upstream import FakeGeminiSpeech
from tests.fakes.openai_audio_upstream import FakeOpenAIAudio, wav_bytes
from tests.gateway_server import GatewayServer

KEYS = {"AUDIO_OAI_KEY": "sk-audio", "AUDIO_GROQ_KEY": "gsk-audio", "AUDIO_AZ_KEY": "az-audio",
        "AUDIO_GM_KEY": "gm-speech"}  # fmt: skip


@pytest.fixture(scope="session")
def fakes() -> Iterator[dict[str, Any]]:
    started = {
        "oai": FakeOpenAIAudio("openai", KEYS["AUDIO_OAI_KEY"]).start(),
        "groq": FakeOpenAIAudio("groq", KEYS["AUDIO_GROQ_KEY"]).start(),
        "az": FakeOpenAIAudio("azure", KEYS["AUDIO_AZ_KEY"]).start(),
        "gm": FakeGeminiSpeech(KEYS["AUDIO_GM_KEY"]).start(),
    }
    yield started
    for fake in started.values():
        fake.stop()


def _model(name: str, kind: str, provider: str, upstream: str, **pricing: str) -> dict[str, Any]:
    return {"name": name, "type": kind, "deployments": [{"provider": provider, "model": upstream}], "pricing": pricing}


def audio_config(fakes: dict[str, Any], tmp: Path, **extra: Any) -> dict[str, Any]:
    return {
        "server": {"data_dir": str(tmp)},
        "storage": {"database_url": sqlite_url(tmp)},
        "accounts": {},
        "providers": [
            {"name": "oai", "kind": "openai", "base_url": fakes["oai"].base_url, "api_key": "env:AUDIO_OAI_KEY",
             "timeouts": {"connect": 2, "read": 5}},
            {"name": "groq", "kind": "openai", "profile": "groq", "base_url": fakes["groq"].base_url,
             "api_key": "env:AUDIO_GROQ_KEY"},
            {"name": "groq-small", "kind": "openai", "profile": "groq", "base_url": fakes["groq"].base_url,
             "api_key": "env:AUDIO_GROQ_KEY", "options": {"max_file_bytes": 50_000}},
            {"name": "az", "kind": "azure", "base_url": fakes["az"].url, "api_key": "env:AUDIO_AZ_KEY"},
            {"name": "gm", "kind": "gemini", "base_url": fakes["gm"].base_url, "api_key": "env:AUDIO_GM_KEY"},
        ],
        "models": [
            _model("tts-1", "speech", "oai", "tts-1", character="15"),
            _model("gpt-4o-mini-tts", "speech", "oai", "gpt-4o-mini-tts", input="0.6", audio_output="12"),
            _model("tts-die", "speech", "oai", "die-midstream", character="15"),
            _model("tts-slow", "speech", "oai", "slow-audio", character="15"),
            _model("groq-small", "transcription", "groq-small", "whisper-large-v3", audio_second="0.0001"),
            _model("tts-empty", "speech", "oai", "empty-audio", character="15"),
            _model("tts-broken", "speech", "oai", "error-500", character="15"),
            _model("whisper-1", "transcription", "oai", "whisper-1", audio_second="0.0001"),
            _model("gpt-4o-transcribe", "transcription", "oai", "gpt-4o-transcribe", input="2.5", output="10",
                   audio_input="6"),
            _model("whisper-bare", "transcription", "oai", "whisper-bare", audio_second="0.0001"),
            _model("whisper-broken", "transcription", "oai", "error-500", audio_second="0.0001"),
            _model("groq-whisper", "transcription", "groq", "whisper-large-v3", audio_second="0.0001"),
            _model("groq-tts", "speech", "groq", "canopylabs/orpheus-v1-english", character="50"),
            _model("azure-whisper", "transcription", "az", "whisper-1", audio_second="0.0001"),
            _model("azure-tts", "speech", "az", "tts-1", character="15"),
            _model("gemini-tts", "speech", "gm", "gemini-2.5-flash-preview-tts", input="0.5", audio_output="10"),
            _model("gemini-stt", "transcription", "gm", "gemini-2.5-flash", input="0.3", output="2.5",
                   audio_input="1"),
        ],
        **extra,
    }  # fmt: skip


@pytest.fixture(scope="session", autouse=True)
def _audio_keys() -> Iterator[None]:
    mp = pytest.MonkeyPatch()
    for name, value in KEYS.items():
        mp.setenv(name, value)
    yield
    mp.undo()


@pytest.fixture(scope="session")
def server(fakes: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    with GatewayServer(audio_config(fakes, tmp_path_factory.mktemp("audio"))) as gw:
        yield gw


@pytest.fixture(scope="session")
def client(server: GatewayServer) -> OpenAI:
    """The official SDK with the master key (not billed)."""
    return OpenAI(base_url=server.base_url, api_key=server.master_key, max_retries=0, timeout=30)


@pytest.fixture
def admin(server: GatewayServer) -> Iterator[Admin]:
    a = Admin(server.url, server.master_key)
    yield a
    a.close()


def keyed(server: GatewayServer, key: str) -> OpenAI:
    return OpenAI(base_url=server.base_url, api_key=key, max_retries=0, timeout=30)


@pytest.fixture(scope="session")
def wav_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3.0 seconds of 16 kHz mono WAV."""
    path = tmp_path_factory.mktemp("wav") / "speech.wav"
    path.write_bytes(wav_bytes(3.0, rate=16_000))
    return path


def raw_post(server: GatewayServer, path: str, **kw: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {server.master_key}", **kw.pop("headers", {})}
    return httpx.post(server.base_url + path, headers=headers, timeout=30, **kw)
