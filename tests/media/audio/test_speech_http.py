"""`/v1/audio/speech` and `/v1/audio/voices` through the official SDK and raw HTTP, on OpenAI, Groq, Azure and
Gemini behind their strict fakes."""

from __future__ import annotations

import base64
import io
import time
import wave
from typing import Any

import httpx
import openai
import orjson
import pytest
from openai import OpenAI

from tests.fakes.openai_audio_upstream import fake_audio, speech_usage
from tests.gateway_server import GatewayServer
from tests.media.audio.conftest import raw_post

TEXT = "The quick brown fox jumps over the lazy dog."


def test_speech_is_the_upstreams_audio_with_its_content_type(client: OpenAI, fakes: dict[str, Any]) -> None:
    response = client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT)
    assert response.content == fake_audio(TEXT, "mp3")
    assert response.response.headers["content-type"] == "audio/mpeg"
    sent = fakes["oai"].last("/audio/speech").body
    assert sent == {"model": "tts-1", "voice": "alloy", "input": TEXT}


def test_speech_streams_with_the_sdks_streaming_response(client: OpenAI) -> None:
    chunks: list[bytes] = []
    with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice="nova", input=TEXT, response_format="flac"
    ) as response:
        assert response.headers["content-type"] == "audio/flac"
        chunks.extend(response.iter_bytes(64))
    assert b"".join(chunks) == fake_audio(TEXT, "flac")


def test_wav_is_a_real_wav(client: OpenAI) -> None:
    audio = client.audio.speech.create(model="tts-1", voice="echo", input="Hi there", response_format="wav")
    with wave.open(io.BytesIO(audio.content)) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 24_000)


def _events(body: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line[6:]) for line in body.split(b"\n") if line.startswith(b"data: ")]


def test_sse_speech_sends_openais_events_with_usage(server: GatewayServer) -> None:
    r = raw_post(server, "/audio/speech", json={"model": "gpt-4o-mini-tts", "voice": "coral", "input": TEXT,
                                                "stream_format": "sse", "response_format": "pcm"})  # fmt: skip
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = _events(r.content)
    assert [e["type"] for e in events[:-1]] == ["speech.audio.delta"] * (len(events) - 1)
    audio = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    assert audio == fake_audio(TEXT, "pcm")
    assert events[-1] == {"type": "speech.audio.done", "usage": speech_usage(TEXT)}


def test_the_sdks_sse_stream_format(client: OpenAI) -> None:
    with client.audio.speech.with_streaming_response.create(
        model="gpt-4o-mini-tts", voice="marin", input=TEXT, stream_format="sse", instructions="Speak slowly."
    ) as response:
        body = response.read()
    assert _events(body)[-1]["type"] == "speech.audio.done"


def test_an_unknown_voice_is_a_400_listing_the_models_voices(client: OpenAI, fakes: dict[str, Any]) -> None:
    before = len(fakes["oai"].requests)
    with pytest.raises(openai.BadRequestError) as caught:
        client.audio.speech.create(model="tts-1", voice="ballad", input=TEXT)  # gpt-4o-mini-tts only
    error = caught.value.body
    assert isinstance(error, dict) and error["param"] == "voice" and error["code"] == "unsupported_voice"
    assert "alloy" in error["message"] and "shimmer" in error["message"]
    assert len(fakes["oai"].requests) == before  # refused before any call


@pytest.mark.parametrize(
    "body,param",
    [
        ({"model": "tts-1", "voice": "alloy", "input": TEXT, "response_format": "ogg"}, "response_format"),
        ({"model": "tts-1", "voice": "alloy", "input": "x" * 4097}, "input"),
        ({"model": "tts-1", "voice": "alloy", "input": ""}, "input"),
        ({"model": "tts-1", "voice": "alloy", "input": TEXT, "speed": 5}, "speed"),
        ({"model": "tts-1", "voice": "alloy", "input": TEXT, "stream_format": "chunks"}, "stream_format"),
        ({"model": "tts-1", "input": TEXT}, "voice"),
        ({"model": "tts-1", "voice": 7, "input": TEXT}, "voice"),
    ],
)
def test_bad_requests_are_openai_400s(server: GatewayServer, body: dict[str, Any], param: str) -> None:
    r = raw_post(server, "/audio/speech", json=body)
    assert r.status_code == 400, r.text
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    assert r.json()["error"]["param"] == param


def test_a_speech_model_on_the_transcription_route_and_back_is_a_clean_error(server: GatewayServer) -> None:
    r = raw_post(server, "/audio/speech", json={"model": "whisper-1", "voice": "alloy", "input": TEXT})
    assert 400 <= r.status_code < 500 and "error" in r.json()


def test_an_upstream_failure_is_an_openai_error_not_a_500(client: OpenAI) -> None:
    with pytest.raises(openai.APIStatusError) as caught:
        client.audio.speech.create(model="tts-broken", voice="alloy", input=TEXT)
    assert caught.value.status_code == 502
    assert "fake failure" in str(caught.value.body)


def test_an_upstream_that_answers_no_audio_is_a_502(server: GatewayServer) -> None:
    r = raw_post(server, "/audio/speech", json={"model": "tts-empty", "voice": "alloy", "input": TEXT})
    assert r.status_code == 502 and "sent no audio" in r.json()["error"]["message"]


def test_a_caller_who_hangs_up_hangs_up_the_upstream(server: GatewayServer, fakes: dict[str, Any]) -> None:
    fake = fakes["oai"]
    before = len(fake.hangups)
    headers = {"Authorization": f"Bearer {server.master_key}"}
    body = {"model": "tts-slow", "voice": "alloy", "input": TEXT}
    with httpx.stream("POST", server.base_url + "/audio/speech", json=body, headers=headers, timeout=10) as r:
        assert r.status_code == 200
        next(r.iter_bytes())
    deadline = time.monotonic() + 3
    while len(fake.hangups) == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(fake.hangups) > before


def test_a_stream_cut_upstream_is_cut_for_the_caller(server: GatewayServer) -> None:
    with pytest.raises(httpx.HTTPError):
        raw_post(server, "/audio/speech", json={"model": "tts-die", "voice": "alloy", "input": TEXT})


def test_groq_speaks_wav_only_with_its_own_voices(client: OpenAI, fakes: dict[str, Any]) -> None:
    audio = client.audio.speech.create(model="groq-tts", voice="autumn", input=TEXT, response_format="wav")
    assert audio.content == fake_audio(TEXT, "wav")
    assert fakes["groq"].last("/audio/speech").headers["Authorization"] == "Bearer gsk-audio"
    with pytest.raises(openai.BadRequestError) as caught:
        client.audio.speech.create(model="groq-tts", voice="autumn", input=TEXT)  # mp3 by default
    assert "supported: wav" in str(caught.value.body)
    with pytest.raises(openai.BadRequestError):
        client.audio.speech.create(model="groq-tts", voice={"id": "voice_123"}, input=TEXT, response_format="wav")


def test_azure_speech_at_the_deployment_url(client: OpenAI, fakes: dict[str, Any]) -> None:
    audio = client.audio.speech.create(model="azure-tts", voice="alloy", input=TEXT, response_format="aac")
    assert audio.content == fake_audio(TEXT, "aac")
    sent = fakes["az"].last("/audio/speech")
    assert sent.path == "/openai/deployments/tts-1/audio/speech" and sent.query["api-version"]
    assert sent.headers["api-key"] == "az-audio" and "Authorization" not in sent.headers


def test_gemini_speech_is_wav_or_pcm_from_its_pcm(client: OpenAI, fakes: dict[str, Any]) -> None:
    audio = client.audio.speech.create(model="gemini-tts", voice="Kore", input=TEXT, response_format="wav")
    with wave.open(io.BytesIO(audio.content)) as w:
        assert (w.getframerate(), w.getsampwidth(), w.getnchannels()) == (24_000, 2, 1)
        frames = w.readframes(w.getnframes())
    pcm = client.audio.speech.create(model="gemini-tts", voice="Kore", input=TEXT, response_format="pcm")
    assert pcm.content == frames and audio.response.headers["content-type"] == "audio/wav"
    sent = fakes["gm"].last(":generateContent").body
    assert sent["generationConfig"] == {
        "responseModalities": ["AUDIO"],
        "speechConfig": {"voiceConfig": {"prebuiltVoiceConfig": {"voiceName": "Kore"}}},
    }
    with pytest.raises(openai.BadRequestError) as caught:
        client.audio.speech.create(model="gemini-tts", voice="Kore", input=TEXT)  # mp3
    assert "supported: pcm, wav" in str(caught.value.body)
    with pytest.raises(openai.BadRequestError):
        client.audio.speech.create(model="gemini-tts", voice="alloy", input=TEXT, response_format="wav")


def test_gemini_drops_and_names_speed(server: GatewayServer) -> None:
    body = {"model": "gemini-tts", "voice": "Puck", "input": TEXT, "response_format": "pcm", "speed": 1.5}
    r = raw_post(server, "/audio/speech", json=body)
    assert r.status_code == 200 and r.headers["x-inferplex-dropped-params"] == "speed"
    r = raw_post(server, "/audio/speech", json={**body, "drop_params": False})
    assert r.status_code == 400 and r.json()["error"]["param"] == "speed"


def test_voices_lists_each_speech_models_voices(server: GatewayServer) -> None:
    r = httpx.get(server.base_url + "/audio/voices", headers={"Authorization": f"Bearer {server.master_key}"})
    assert r.status_code == 200 and r.json()["object"] == "list"
    by_model: dict[str, list[str]] = {}
    for v in r.json()["data"]:
        assert set(v) == {"id", "object", "name", "model"}
        by_model.setdefault(v["model"], []).append(v["id"])
    assert "ballad" in by_model["gpt-4o-mini-tts"] and "ballad" not in by_model["tts-1"]
    assert by_model["groq-tts"] == ["autumn", "diana", "hannah", "austin", "daniel", "troy"]
    assert "Kore" in by_model["gemini-tts"]
    assert "whisper-1" not in by_model
    one = httpx.get(server.base_url + "/audio/voices", params={"model": "groq-tts"},
                    headers={"Authorization": f"Bearer {server.master_key}"})  # fmt: skip
    assert {v["model"] for v in one.json()["data"]} == {"groq-tts"}
