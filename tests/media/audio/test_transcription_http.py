"""`/v1/audio/transcriptions` and `/v1/audio/translations` through the official SDK and raw HTTP: every
response_format rendered by the gateway, streams, Groq, Azure and Gemini, and the errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
from openai import OpenAI

from tests.fakes.openai_audio_upstream import SAID, TRANSLATED
from tests.gateway_server import GatewayServer
from tests.media.audio.conftest import raw_post

# The SDK marks `audio.translations` deprecated; the route is still OpenAI's (and Groq's, and Azure's).
TRANSLATIONS = pytest.mark.filterwarnings("ignore:deprecated:DeprecationWarning")
# The fake splits SAID into two segments at half the audio's duration (3.0 s here).
SRT = (
    "1\n00:00:00,000 --> 00:00:01,500\nHello there.\n\n"
    "2\n00:00:01,500 --> 00:00:03,000\nThis is a test of the gateway.\n\n"
)
VTT = (
    "WEBVTT\n\n00:00:00.000 --> 00:00:01.500\nHello there.\n\n"
    "00:00:01.500 --> 00:00:03.000\nThis is a test of the gateway.\n\n"
)


def test_json_is_the_text_and_the_usage(client: OpenAI, wav_file: Path, fakes: dict[str, Any]) -> None:
    t = client.audio.transcriptions.create(model="whisper-1", file=wav_file)
    assert t.text == SAID
    assert t.usage is not None and t.usage.type == "duration" and t.usage.seconds == 3
    sent = fakes["oai"].last("/audio/transcriptions").body
    assert sent["model"] == "whisper-1" and sent["response_format"] == "json"
    assert sent["file"]["file"][0] == "speech.wav" and sent["file"]["file"][1] == wav_file.stat().st_size


def test_text_srt_and_vtt_are_rendered_exactly(client: OpenAI, wav_file: Path, fakes: dict[str, Any]) -> None:
    assert client.audio.transcriptions.create(model="whisper-1", file=wav_file, response_format="text") == SAID + "\n"
    assert client.audio.transcriptions.create(model="whisper-1", file=wav_file, response_format="srt") == SRT
    # the gateway asked for verbose_json (with segments) and rendered the subtitles itself
    assert fakes["oai"].last("/audio/transcriptions").body["response_format"] == "verbose_json"
    assert client.audio.transcriptions.create(model="whisper-1", file=wav_file, response_format="vtt") == VTT


def test_verbose_json_with_words_and_segments(client: OpenAI, wav_file: Path, fakes: dict[str, Any]) -> None:
    t = client.audio.transcriptions.create(
        model="whisper-1", file=wav_file, response_format="verbose_json", timestamp_granularities=["word", "segment"]
    )
    assert t.text == SAID and t.duration == 3.0 and t.language == "english"
    assert t.segments is not None and [s.text for s in t.segments] == [
        "Hello there.",
        " This is a test of the gateway.",
    ]
    assert (t.segments[1].start, t.segments[1].end) == (1.5, 3.0)
    assert t.words is not None and [w.word for w in t.words][:2] == ["Hello", "there"]
    assert fakes["oai"].last("/audio/transcriptions").body["timestamp_granularities[]"] == ["word", "segment"]
    only_words = client.audio.transcriptions.create(
        model="whisper-1", file=wav_file, response_format="verbose_json", timestamp_granularities=["word"]
    )
    assert only_words.words and not only_words.segments


def test_stream_true_sends_text_deltas_then_done(client: OpenAI, wav_file: Path) -> None:
    events = list(client.audio.transcriptions.create(model="gpt-4o-transcribe", file=wav_file, stream=True))
    deltas = [e for e in events if e.type == "transcript.text.delta"]
    assert "".join(d.delta for d in deltas) == SAID and len(deltas) > 3
    done = events[-1]
    assert done.type == "transcript.text.done" and done.text == SAID
    assert done.usage is not None and done.usage.type == "tokens" and done.usage.input_tokens == 30


@TRANSLATIONS
def test_translations(client: OpenAI, wav_file: Path, fakes: dict[str, Any]) -> None:
    t = client.audio.translations.create(model="whisper-1", file=wav_file)
    assert t.text == TRANSLATED
    assert client.audio.translations.create(model="whisper-1", file=wav_file, response_format="srt").startswith(
        "1\n00:00:00,000 --> 00:00:01,500\nHello there.\n"
    )
    assert fakes["oai"].last("/audio/translations").path == "/v1/audio/translations"


@TRANSLATIONS
def test_groq_whisper_gets_subtitles_from_its_verbose_json(
    client: OpenAI, wav_file: Path, fakes: dict[str, Any]
) -> None:
    assert client.audio.transcriptions.create(model="groq-whisper", file=wav_file, response_format="srt") == SRT
    sent = fakes["groq"].last("/audio/transcriptions")
    assert sent.path == "/openai/v1/audio/transcriptions" and sent.body["model"] == "whisper-large-v3"
    assert sent.body["response_format"] == "verbose_json"
    t = client.audio.transcriptions.create(model="groq-whisper", file=wav_file)
    assert t.text == SAID and fakes["groq"].last("/audio/transcriptions").body["response_format"] == "verbose_json"
    assert client.audio.translations.create(model="groq-whisper", file=wav_file).text == TRANSLATED


def test_azure_whisper_at_the_deployment_url(client: OpenAI, wav_file: Path, fakes: dict[str, Any]) -> None:
    assert client.audio.transcriptions.create(model="azure-whisper", file=wav_file, response_format="vtt") == VTT
    sent = fakes["az"].last("/audio/transcriptions")
    assert sent.path == "/openai/deployments/whisper-1/audio/transcriptions" and "api-version" in sent.query


def test_gemini_transcribes_json_and_text_and_refuses_subtitles(
    client: OpenAI, wav_file: Path, fakes: dict[str, Any]
) -> None:
    t = client.audio.transcriptions.create(model="gemini-stt", file=wav_file, language="en")
    assert t.text == SAID and t.usage is not None and t.usage.type == "tokens"
    parts = fakes["gm"].last(":generateContent").body["contents"][0]["parts"]
    assert parts[1]["inlineData"]["mimeType"] == "audio/wav" and "en" in parts[0]["text"]
    with pytest.raises(openai.BadRequestError) as caught:
        client.audio.transcriptions.create(model="gemini-stt", file=wav_file, response_format="srt")
    assert "timestamped segments" in str(caught.value.body)


def test_a_file_over_a_providers_limit_is_a_413_before_the_call(
    client: OpenAI, wav_file: Path, fakes: dict[str, Any]
) -> None:
    before = len(fakes["groq"].requests)
    with pytest.raises(openai.APIStatusError) as caught:
        client.audio.transcriptions.create(model="groq-small", file=wav_file)  # 96 kB > 50 kB
    assert caught.value.status_code == 413 and "at most 50000 bytes" in str(caught.value.body)
    assert len(fakes["groq"].requests) == before


def test_include_and_chunking_strategy_reach_the_upstream(
    client: OpenAI, wav_file: Path, fakes: dict[str, Any]
) -> None:
    client.audio.transcriptions.create(
        model="gpt-4o-transcribe", file=wav_file, include=["logprobs"], chunking_strategy="auto", language="en"
    )
    sent = fakes["oai"].last("/audio/transcriptions").body
    assert sent["include[]"] == ["logprobs"] and sent["chunking_strategy"] == "auto" and sent["language"] == "en"


@TRANSLATIONS
def test_gemini_and_azure_translate(client: OpenAI, wav_file: Path, fakes: dict[str, Any]) -> None:
    assert client.audio.translations.create(model="gemini-stt", file=wav_file).text == SAID
    assert "into English" in fakes["gm"].last(":generateContent").body["contents"][0]["parts"][0]["text"]
    assert client.audio.translations.create(model="azure-whisper", file=wav_file).text == TRANSLATED
    assert fakes["az"].last("/audio/translations").path == "/openai/deployments/whisper-1/audio/translations"


def test_a_model_that_cannot_give_segments_says_so(client: OpenAI, wav_file: Path) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.audio.transcriptions.create(model="gpt-4o-transcribe", file=wav_file, response_format="vtt")
    assert "verbose_json" in str(caught.value.body)


# ---- errors: OpenAI error objects, never a 500 --------------------------------------------------------------


def _form(wav: Path, **fields: str) -> dict[str, Any]:
    return {"files": {"file": ("speech.wav", wav.read_bytes(), "audio/wav")}, "data": {"model": "whisper-1", **fields}}


def _is_openai_error(r: Any, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    error: dict[str, Any] = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


def test_a_missing_file_is_a_400(server: GatewayServer) -> None:
    r = raw_post(server, "/audio/transcriptions", data={"model": "whisper-1"}, files={"x": ("a.txt", b"hi")})
    assert r.status_code == 400 and r.json()["error"]["param"] in ("file", "x")
    r = raw_post(server, "/audio/transcriptions", files={"model": (None, "whisper-1")})
    assert _is_openai_error(r, 400)["param"] == "file"


def test_a_file_that_is_not_audio_is_refused(server: GatewayServer, wav_file: Path) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"0" * 64
    r = raw_post(
        server, "/audio/transcriptions", files={"file": ("notes.png", png, "image/png")}, data={"model": "whisper-1"}
    )
    _is_openai_error(r, 415)
    r = raw_post(server, "/audio/transcriptions", files={"file": ("a.mp3", wav_file.read_bytes(), "audio/mpeg")},
                 data={"model": "whisper-1"})  # fmt: skip
    assert _is_openai_error(r, 400)["code"] == "invalid_file_type"


def test_a_file_too_large_is_a_413(server: GatewayServer) -> None:
    big = b"RIFF" + b"\0" * (26 * 1024 * 1024)
    r = raw_post(
        server, "/audio/transcriptions", files={"file": ("big.wav", big, "audio/wav")}, data={"model": "whisper-1"}
    )
    _is_openai_error(r, 413)


@pytest.mark.parametrize(
    "fields,param",
    [
        ({"response_format": "xml"}, "response_format"),
        ({"temperature": "3"}, "temperature"),
        ({"temperature": "warm"}, "temperature"),
        ({"timestamp_granularities[]": "char"}, "timestamp_granularities[0]"),
        ({"stream": "maybe"}, "stream"),
    ],
)
def test_bad_fields_are_400s_naming_them(
    server: GatewayServer, wav_file: Path, fields: dict[str, str], param: str
) -> None:
    r = raw_post(server, "/audio/transcriptions", **_form(wav_file, **fields))
    assert _is_openai_error(r, 400)["param"] == param


def test_a_json_body_is_a_415_and_an_unknown_model_a_404(server: GatewayServer, wav_file: Path) -> None:
    _is_openai_error(raw_post(server, "/audio/transcriptions", content=orjson.dumps({"model": "whisper-1"}),
                              headers={"content-type": "application/json"}), 415)  # fmt: skip
    _is_openai_error(raw_post(server, "/audio/transcriptions", **_form(wav_file, model="nope")), 404)


def test_an_upstream_failure_is_an_openai_error(client: OpenAI, wav_file: Path) -> None:
    with pytest.raises(openai.APIStatusError) as caught:
        client.audio.transcriptions.create(model="whisper-broken", file=wav_file)
    assert caught.value.status_code == 502
