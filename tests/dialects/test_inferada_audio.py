"""Inferada's audio routes (dialects/inferada_audio.py): OpenAI's `/v1/audio/*` paths with Inferada's rules for
its clients (a key with `stt`/`tts` and not `audio`, or a request naming `service_id`), through a real gateway
with raw httpx against the strict fake of OpenAI's audio API. OpenAI's callers keep OpenAI's behaviour."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic import TypeAdapter

from inferplex.dialects.inferada_responses import InferadaError, ServiceList
from tests.accounts.conftest import Admin
from tests.fakes.openai_audio_upstream import SAID, TRANSLATED, FakeOpenAIAudio, fake_audio, wav_bytes
from tests.gateway_server import GatewayServer

KEY = "sk-inferada-audio"
SPEECH = {"model": "tts-1", "input": "Goedemorgen, dit is Inferada.", "voice": "nova"}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAIAudio]:
    mp = pytest.MonkeyPatch()
    mp.setenv("INFERADA_AUDIO_KEY", KEY)
    started = FakeOpenAIAudio("openai", KEY).start()
    yield started
    started.stop()
    mp.undo()


def _model(name: str, kind: str, upstream: str, **pricing: Any) -> dict[str, Any]:
    return {"name": name, "type": kind, "deployments": [{"provider": "oai", "model": upstream}], "pricing": pricing}


@pytest.fixture(scope="module")
def server(fake: FakeOpenAIAudio, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    tmp = tmp_path_factory.mktemp("inferada-audio")
    config = {
        "server": {"data_dir": str(tmp)},
        "storage": {"database_url": f"sqlite:///{tmp / 'inferplex.db'}"},
        "accounts": {},
        "providers": [
            {"name": "oai", "kind": "openai", "base_url": fake.base_url, "api_key": "env:INFERADA_AUDIO_KEY"}
        ],
        "models": [
            _model("whisper-1", "transcription", "whisper-1", audio_second="0.0001"),
            _model(
                "gpt-4o-transcribe", "transcription", "gpt-4o-transcribe", input="2.5", output="10", audio_input="6"
            ),
            _model("tts-1", "speech", "tts-1", character="15"),
            _model("gpt-4o-mini-tts", "speech", "gpt-4o-mini-tts", input="0.6", audio_output="12"),
        ],
    }
    with GatewayServer(config) as gw:
        yield gw


def key(admin: Admin, *scopes: str, **body: Any) -> str:
    made: str = admin.create_key(scopes=list(scopes), credits_micros=10**7, **body)["key"]
    return made


def call(server: GatewayServer, method: str, path: str, secret: str | None = None, **kw: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {secret or server.master_key}", **kw.pop("headers", {})}
    return httpx.request(method, server.url + path, headers=headers, timeout=30, **kw)


def wav(seconds: float = 2.0) -> dict[str, Any]:
    return {"file": ("speech.wav", wav_bytes(seconds, rate=16_000), "audio/wav")}


def inferada_error(resp: httpx.Response, status: int) -> str:
    """Inferada's `{"error", "request_id"}`, the id the same as the header's; the message."""
    assert resp.status_code == status, resp.text
    body = resp.json()
    TypeAdapter(InferadaError).validate_python(body)
    assert body["request_id"] == resp.headers["x-request-id"]
    message: str = body["error"]
    return message


def openai_error(resp: httpx.Response, status: int) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    error: dict[str, Any] = resp.json()["error"]
    assert isinstance(error, dict) and "message" in error and "request_id" not in resp.json()
    return error


# ---- scopes ------------------------------------------------------------------------------------------------


def test_tts_scope_speaks_and_stt_scope_hears(server: GatewayServer, admin: Admin) -> None:
    tts, stt = key(admin, "tts"), key(admin, "stt")
    resp = call(server, "POST", "/v1/audio/speech", tts, json=SPEECH)
    assert resp.status_code == 200 and resp.content == fake_audio(SPEECH["input"], "mp3")
    heard = call(server, "POST", "/v1/audio/transcriptions", stt, data={"model": "whisper-1"}, files=wav())
    assert heard.status_code == 200 and heard.json()["text"] == SAID
    translated = call(server, "POST", "/v1/audio/translations", stt, data={"model": "whisper-1"}, files=wav())
    assert translated.status_code == 200 and translated.json()["text"] == TRANSLATED
    assert call(server, "GET", "/v1/audio/voices", tts).status_code == 200


def test_a_key_without_tts_is_refused_speech_in_inferadas_shape(server: GatewayServer, admin: Admin) -> None:
    stt = key(admin, "stt")
    assert "'tts'" in inferada_error(call(server, "POST", "/v1/audio/speech", stt, json=SPEECH), 403)
    assert "'tts'" in inferada_error(call(server, "GET", "/v1/audio/voices", stt), 403)
    tts = key(admin, "tts")
    refused = call(server, "POST", "/v1/audio/transcriptions", tts, data={"model": "whisper-1"}, files=wav())
    assert "'stt'" in inferada_error(refused, 403)


def test_openai_callers_keep_openais_shape_and_the_broader_audio_scope(server: GatewayServer, admin: Admin) -> None:
    chat = key(admin, "chat")
    assert openai_error(call(server, "POST", "/v1/audio/speech", chat, json=SPEECH), 403)["code"] == "scope_not_allowed"
    audio = key(admin, "audio")  # the scope OpenAI's audio routes took before Inferada's: still enough
    assert call(server, "POST", "/v1/audio/speech", audio, json=SPEECH).status_code == 200
    heard = call(server, "POST", "/v1/audio/transcriptions", audio, data={"model": "whisper-1"}, files=wav())
    assert heard.status_code == 200 and "duration" not in heard.json()  # OpenAI's json: text (and usage)
    bad = call(server, "POST", "/v1/audio/speech", audio, json={**SPEECH, "voice": "nobody"})
    assert openai_error(bad, 400)["param"] == "voice"
    long_prompt = {"model": "whisper-1", "prompt": "x" * 1000}  # Inferada's limit is not OpenAI's
    assert call(server, "POST", "/v1/audio/transcriptions", audio, data=long_prompt, files=wav()).status_code == 200
    assert openai_error(httpx.post(server.url + "/v1/audio/speech", json=SPEECH), 401)


# ---- Inferada's rules --------------------------------------------------------------------------------------


def test_prompt_over_896_characters_is_a_422(server: GatewayServer, admin: Admin) -> None:
    stt = key(admin, "stt")
    at_limit = call(server, "POST", "/v1/audio/transcriptions", stt, data={"prompt": "p" * 896}, files=wav())
    assert at_limit.status_code == 200, at_limit.text
    over = call(server, "POST", "/v1/audio/transcriptions", stt, data={"prompt": "p" * 897}, files=wav())
    assert "896" in inferada_error(over, 422)
    # an OpenAI-scoped key that names a service_id is Inferada's client too
    audio = key(admin, "audio")
    form = {"prompt": "p" * 897, "service_id": "whisper-1"}
    inferada_error(call(server, "POST", "/v1/audio/transcriptions", audio, data=form, files=wav()), 422)


def test_transcription_json_is_text_and_duration(server: GatewayServer, admin: Admin) -> None:
    stt = key(admin, "stt")
    resp = call(server, "POST", "/v1/audio/transcriptions", stt, files=wav(2.5))  # no model: the default service
    assert resp.status_code == 200, resp.text
    assert resp.json()["text"] == SAID and resp.json()["duration"] == pytest.approx(2.5, abs=0.01)
    text = call(server, "POST", "/v1/audio/transcriptions", stt, data={"response_format": "text"}, files=wav())
    assert text.status_code == 200 and text.text == SAID + "\n"


def test_service_id_selects_the_model(server: GatewayServer, admin: Admin, fake: FakeOpenAIAudio) -> None:
    stt, tts = key(admin, "stt"), key(admin, "tts")
    form = {"service_id": "gpt-4o-transcribe"}
    assert call(server, "POST", "/v1/audio/transcriptions", stt, data=form, files=wav()).status_code == 200
    assert fake.last("/transcriptions").body["model"] == "gpt-4o-transcribe"
    speech = {"service_id": "gpt-4o-mini-tts", "input": "Hallo", "voice": "marin"}
    assert call(server, "POST", "/v1/audio/speech", tts, json=speech).status_code == 200
    assert fake.last("/speech").body["model"] == "gpt-4o-mini-tts" and "service_id" not in fake.last("/speech").body
    unknown = call(server, "POST", "/v1/audio/transcriptions", stt, data={"service_id": "nope"}, files=wav())
    assert "nope" in inferada_error(unknown, 404)
    wrong_scope = call(server, "POST", "/v1/audio/speech", tts, json={**speech, "service_id": "whisper-1"})
    inferada_error(wrong_scope, 404)
    both = {"service_id": "whisper-1", "model": "gpt-4o-transcribe"}
    inferada_error(call(server, "POST", "/v1/audio/transcriptions", stt, data=both, files=wav()), 400)
    services = call(server, "GET", "/v1/services", tts, params={"scope": "tts"}).json()
    TypeAdapter(ServiceList).validate_python(services)
    assert [(s["id"], s["active"], s["is_default"]) for s in services["services"]] == [
        ("tts-1", True, True),
        ("gpt-4o-mini-tts", True, False),
    ]


def test_unknown_voice_is_a_400_listing_the_voices(server: GatewayServer, admin: Admin) -> None:
    tts = key(admin, "tts")
    resp = call(server, "POST", "/v1/audio/speech", tts, json={**SPEECH, "voice": "nobody"})
    message = inferada_error(resp, 400)
    voices = resp.json()["available_voices"]
    assert "nova" in voices and "alloy" in voices and all(v in message for v in voices)
    assert "nobody" in message


def test_voices_by_service(server: GatewayServer, admin: Admin) -> None:
    tts = key(admin, "tts")
    rows = call(server, "GET", "/v1/audio/voices", tts, params={"service_id": "tts-1"}).json()["data"]
    assert rows and {r["model"] for r in rows} == {"tts-1"}
    inferada_error(call(server, "GET", "/v1/audio/voices", tts, params={"service_id": "whisper-1"}), 404)


def test_bad_bodies_are_inferadas_400s(server: GatewayServer, admin: Admin) -> None:
    tts, stt = key(admin, "tts"), key(admin, "stt")
    inferada_error(
        call(server, "POST", "/v1/audio/speech", tts, content=b"x", headers={"content-type": "text/plain"}), 400
    )
    inferada_error(call(server, "POST", "/v1/audio/speech", tts, json={"input": "hi"}), 400)  # no voice
    inferada_error(call(server, "POST", "/v1/audio/transcriptions", stt, data={"model": "whisper-1"}), 400)


# ---- rate limits -------------------------------------------------------------------------------------------


def test_characters_synthesised_limit_is_inferadas_429(server: GatewayServer, admin: Admin) -> None:
    rule = {"metric": "characters_synthesised", "period": "minute", "max": 40}
    tts = key(admin, "tts", limit_rules=[rule])
    body = {**SPEECH, "input": "x" * 30}
    assert call(server, "POST", "/v1/audio/speech", tts, json=body).status_code == 200
    refused = call(server, "POST", "/v1/audio/speech", tts, json=body)
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    got = refused.json()
    assert got["type"] == "limit_exceeded" and got["code"] == 429 and got["scope"] == "tts"
    assert got["limit"] == {**rule, "per_request": False} and got["current"] == 30 and got["requested"] == 30
    assert got["request_id"] == refused.headers["x-request-id"] and got["level"] == "token"
    short = {**SPEECH, "input": "x" * 10}
    assert call(server, "POST", "/v1/audio/speech", tts, json=short).status_code == 200  # 40 in all: room left


def test_audio_duration_seconds_limit_is_inferadas_429(server: GatewayServer, admin: Admin) -> None:
    rule = {"metric": "audio_duration_seconds", "period": "minute", "max": 5}
    stt = key(admin, "stt", limit_rules=[rule])
    assert call(server, "POST", "/v1/audio/transcriptions", stt, files=wav(3.0)).status_code == 200
    refused = call(server, "POST", "/v1/audio/transcriptions", stt, files=wav(3.0))
    assert refused.status_code == 429 and refused.json()["scope"] == "stt"
    assert refused.json()["current"] == 3 and refused.json()["requested"] == 3
