"""The bundled speech and transcription models through HTTP with the official OpenAI SDK: the default config
(what `make run` serves with no config file), no key, no network.

The round trip is the point: a sentence read aloud by the bundled text-to-speech model (hibari) and heard back
by the bundled Whisper tiny.en gives the same words, in every audio format both can handle.
"""

from __future__ import annotations

import base64
import io
import json
import re
import wave
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest

from inferplex.defaults import DEFAULT_CONFIG, DEFAULT_SPEECH_MODEL, DEFAULT_TRANSCRIPTION_MODEL
from tests.gateway_server import GatewayServer

TTS = DEFAULT_SPEECH_MODEL
STT = DEFAULT_TRANSCRIPTION_MODEL
FOX = "The quick brown fox jumps over the lazy dog."
TWO = "The quick brown fox jumps over the lazy dog. It was the best of times, it was the worst of times."


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


@pytest.fixture(scope="module")
def gateway() -> Iterator[GatewayServer]:
    with GatewayServer(DEFAULT_CONFIG) as server:
        yield server


@pytest.fixture(scope="module")
def client(gateway: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=gateway.master_key, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def fox_wav(client: openai.OpenAI) -> bytes:
    return client.audio.speech.create(model=TTS, voice="heart", input=FOX, response_format="wav").content


def test_round_trip_speech_then_transcription(client: openai.OpenAI, fox_wav: bytes) -> None:
    with wave.open(io.BytesIO(fox_wav)) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 24000)
        seconds = w.getnframes() / w.getframerate()
    assert 1.5 < seconds < 6.0  # nine words at a speaking pace
    heard = client.audio.transcriptions.create(model=STT, file=("fox.wav", fox_wav, "audio/wav"))
    assert words(heard.text) == words(FOX)


@pytest.mark.parametrize(
    ("fmt", "content_type", "magic"),
    [("mp3", "audio/mpeg", b"\xff"), ("flac", "audio/flac", b"fLaC"), ("opus", "audio/ogg", b"OggS")],
)
def test_each_compressed_format_round_trips(client: openai.OpenAI, fmt: str, content_type: str, magic: bytes) -> None:
    spoken = client.audio.speech.create(model=TTS, voice="heart", input=FOX, response_format=fmt)  # type: ignore[arg-type]
    assert spoken.response.headers["content-type"] == content_type
    assert spoken.content.startswith(magic)
    heard = client.audio.transcriptions.create(model=STT, file=(f"fox.{fmt}", spoken.content, content_type))
    assert words(heard.text) == words(FOX)


def test_pcm_is_raw_24_khz_16_bit(client: openai.OpenAI, fox_wav: bytes) -> None:
    spoken = client.audio.speech.create(model=TTS, voice="heart", input=FOX, response_format="pcm")
    assert spoken.response.headers["content-type"] == "audio/pcm"
    assert spoken.content == fox_wav[44:]  # the same samples as the WAV, without its 44-byte header


def test_sse_carries_the_same_pcm_a_sentence_at_a_time(gateway: GatewayServer, client: openai.OpenAI) -> None:
    wav = client.audio.speech.create(model=TTS, voice="heart", input=TWO, response_format="wav").content
    body = {"model": TTS, "voice": "heart", "input": TWO, "response_format": "pcm", "stream_format": "sse"}
    with httpx.stream("POST", gateway.base_url + "/audio/speech", headers=gateway.auth, json=body, timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert len(deltas) >= 2 and events[-1]["type"] == "speech.audio.done"
    assert b"".join(base64.b64decode(e["audio"]) for e in deltas) == wav[44:]


def test_same_text_same_audio(client: openai.OpenAI, fox_wav: bytes) -> None:
    again = client.audio.speech.create(model=TTS, voice="heart", input=FOX, response_format="wav").content
    assert again == fox_wav


def test_verbose_json_has_segments_words_and_duration(client: openai.OpenAI) -> None:
    spoken = client.audio.speech.create(model=TTS, voice="heart", input=TWO, response_format="wav").content
    with wave.open(io.BytesIO(spoken)) as w:
        seconds = w.getnframes() / w.getframerate()
    heard = client.audio.transcriptions.create(
        model=STT,
        file=("two.wav", spoken, "audio/wav"),
        response_format="verbose_json",
        timestamp_granularities=["word", "segment"],
    )
    assert words(heard.text) == words(TWO)
    assert heard.duration == pytest.approx(seconds, abs=0.01)
    assert heard.language == "english"
    segments = heard.segments or []
    assert len(segments) >= 1 and words(" ".join(s.text for s in segments)) == words(TWO)
    assert all(0 <= s.start < s.end <= seconds + 0.5 for s in segments)
    found = heard.words or []
    assert [w.word.lower() for w in found] == words(TWO)
    starts = [w.start for w in found]
    assert starts == sorted(starts) and found[-1].end <= seconds + 0.5 and found[-1].start > 1.0


def test_subtitles_and_text(client: openai.OpenAI, fox_wav: bytes) -> None:
    srt: Any = client.audio.transcriptions.create(model=STT, file=("f.wav", fox_wav), response_format="srt")
    assert re.match(r"1\n00:00:00,000 --> 00:00:0\d,\d{3}\n", srt) and "lazy dog" in srt
    vtt: Any = client.audio.transcriptions.create(model=STT, file=("f.wav", fox_wav), response_format="vtt")
    assert vtt.startswith("WEBVTT") and "lazy dog" in vtt
    text: Any = client.audio.transcriptions.create(model=STT, file=("f.wav", fox_wav), response_format="text")
    assert words(text) == words(FOX)


def test_voices_lists_the_bundled_voice(gateway: GatewayServer) -> None:
    r = httpx.get(gateway.base_url + "/audio/voices", params={"model": TTS}, headers=gateway.auth)
    assert r.status_code == 200
    assert [v["id"] for v in r.json()["data"]] == ["heart"]


@pytest.mark.parametrize(
    ("args", "param", "named"),
    [
        ({"voice": "alloy"}, "voice", "heart"),
        ({"voice": "heart", "response_format": "aac"}, "response_format", "opus"),
        ({"voice": "heart", "speed": 4.0}, "speed", "0.5"),
    ],
)
def test_what_the_model_cannot_do_is_a_400_naming_it(
    client: openai.OpenAI, args: dict[str, Any], param: str, named: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.audio.speech.create(model=TTS, input=FOX, **args)
    error = caught.value.body
    assert isinstance(error, dict) and error.get("param") == param and named in str(error.get("message"))


def test_transcription_refusals_are_400s(client: openai.OpenAI, gateway: GatewayServer, fox_wav: bytes) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.audio.transcriptions.create(model=STT, file=("f.wav", fox_wav), language="fr")
    assert isinstance(caught.value.body, dict) and caught.value.body.get("param") == "language"
    # tiny.en cannot translate (the SDK's translations.create is deprecated, so raw HTTP)
    r = httpx.post(
        gateway.base_url + "/audio/translations",
        headers=gateway.auth,
        data={"model": STT},
        files={"file": ("f.wav", fox_wav, "audio/wav")},
        timeout=60,
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "model"


def test_silence_is_heard_as_nothing(client: openai.OpenAI) -> None:
    """Whisper hears "you" in digital silence; the gateway does not pass that on."""
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(bytes(2 * 16000 * 5))
    heard = client.audio.transcriptions.create(
        model=STT, file=("quiet.wav", out.getvalue()), response_format="verbose_json"
    )
    assert heard.text == "" and heard.duration == 5.0 and heard.segments == []


def test_unpronounceable_input_is_a_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.audio.speech.create(model=TTS, voice="heart", input="\U0001f642", response_format="wav")
    assert isinstance(caught.value.body, dict) and caught.value.body.get("param") == "input"


def test_an_undecodable_file_is_a_client_error(gateway: GatewayServer) -> None:
    fake_m4a = b"\x00\x00\x00\x20ftypM4A \x00\x00\x00\x00M4A mp42isom" + bytes(4000)
    r = httpx.post(
        gateway.base_url + "/audio/transcriptions",
        headers=gateway.auth,
        data={"model": STT},
        files={"file": ("a.m4a", fake_m4a, "audio/mp4")},
        timeout=60,
    )
    assert 400 <= r.status_code < 500 and r.json()["error"]["message"]


def test_concurrent_requests_queue_and_all_answer(client: openai.OpenAI, fox_wav: bytes) -> None:
    def hear(_: int) -> str:
        return client.audio.transcriptions.create(model=STT, file=("f.wav", fox_wav)).text

    def say(_: int) -> bytes:
        return client.audio.speech.create(model=TTS, voice="heart", input=FOX, response_format="wav").content

    with ThreadPoolExecutor(6) as pool:
        heard = list(pool.map(hear, range(3)))
        said = list(pool.map(say, range(3)))
    assert all(words(t) == words(FOX) for t in heard)
    assert all(s == fox_wav for s in said)
