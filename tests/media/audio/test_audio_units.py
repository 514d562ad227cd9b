"""The audio families' pure parts as tables: measuring an upload, the meters, subtitles, the format asked of
an upstream, and Gemini's speech translation."""

from __future__ import annotations

import base64
import io
import wave
from pathlib import Path
from typing import Any

import pytest

from inferplex.accounts.pricing import Media, Tokens, media_cost_micros
from inferplex.config import ModelConfig, Pricing
from inferplex.dialects.openai_audio import deltas, srt, vtt
from inferplex.errors import InvalidRequest
from inferplex.families.speech import Speech, SpeechMeter, SpeechRequest
from inferplex.families.transcription import (
    AudioFile,
    Segment,
    Transcript,
    TranscriptionRequest,
    TranscriptMeter,
    measure_ms,
    worst_ms,
)
from inferplex.providers.failures import ProviderFailure
from inferplex.translate import gemini_speech as gs
from inferplex.translate.openai_audio import upstream_format
from tests.fakes.openai_audio_upstream import wav_bytes

MODEL = ModelConfig.model_validate({"name": "m", "type": "speech", "deployments": [{"provider": "p", "model": "m"}]})


def mp3_frames(count: int) -> bytes:
    """`count` MPEG-1 Layer III frames at 128 kbit/s, 44.1 kHz (417 bytes, 1152 samples each), silent."""
    return (b"\xff\xfb\x90\x00" + b"\x00" * 413) * count


def test_measure_a_wav_exactly_and_an_mp3_from_its_frames(tmp_path: Path) -> None:
    wav = tmp_path / "a.wav"
    wav.write_bytes(wav_bytes(2.5, rate=8000))
    assert measure_ms(str(wav)) == 2500
    mp3 = tmp_path / "a.mp3"
    mp3.write_bytes(mp3_frames(100))  # 100 x 26.1 ms
    measured = measure_ms(str(mp3))
    assert measured is not None and 2550 <= measured <= 2650
    junk = tmp_path / "a.webm"
    junk.write_bytes(b"\x1aE\xdf\xa3" + b"\x00" * 500)
    assert measure_ms(str(junk)) is None


def _file(duration_ms: int | None, size: int = 7500) -> dict[str, Any]:
    """An upload as the dialect puts it in the request's fields (openai_audio.audio_fields)."""
    return {"path": "/x", "filename": "a.wav", "content_type": "audio/wav", "bytes": size, "duration_ms": duration_ms}


def test_an_unmeasured_file_is_bounded_by_its_size() -> None:
    assert worst_ms(AudioFile.model_validate(_file(None, 7500))) == 10_000  # 6 kbit/s
    assert worst_ms(AudioFile.model_validate(_file(1234))) == 1234


@pytest.mark.parametrize(
    "usage,duration,measured,expected",
    [
        ({"type": "duration", "seconds": 9}, 8.47, 8000, (Tokens(), Media(audio_ms=9000))),
        (None, 8.47, 8000, (Tokens(), Media(audio_ms=8470))),
        (None, None, 8000, (Tokens(), Media(audio_ms=8000))),
        (None, None, None, (Tokens(), Media(audio_ms=10_000))),
        (
            {"type": "tokens", "input_tokens": 14, "input_token_details": {"text_tokens": 10, "audio_tokens": 4},
             "output_tokens": 101},
            None, 3000, (Tokens(prompt=10, completion=101), Media(audio_input_tokens=4, audio_ms=3000)),
        ),
        ({"type": "tokens", "input_tokens": 7, "output_tokens": 2}, None, 3000,
         (Tokens(prompt=0, completion=2), Media(audio_input_tokens=7, audio_ms=3000))),
    ],
)  # fmt: skip
def test_transcripts_are_metered_never_zero(usage: Any, duration: Any, measured: Any, expected: Any) -> None:
    request = TranscriptionRequest.model_validate({"model": "m", "file": _file(measured)})
    answer = Transcript("hi", duration=duration, usage=usage)
    assert TranscriptMeter().used(request, answer) == expected


def test_per_second_and_token_prices_of_a_transcript() -> None:
    request = TranscriptionRequest.model_validate({"model": "m", "file": _file(3000)})
    per_second = Pricing(audio_second="0.0001")
    assert media_cost_micros(per_second, *TranscriptMeter().used(request, Transcript("hi"))) == 300
    tokens = Pricing(input="2.5", output="10", audio_input="6")
    usage: Any = {"type": "tokens", "input_token_details": {"audio_tokens": 30, "text_tokens": 4}, "output_tokens": 11}
    assert (
        media_cost_micros(tokens, *TranscriptMeter().used(request, Transcript("hi", usage=usage))) == 30 * 6 + 10 + 110
    )
    worst = TranscriptMeter().worst(request, MODEL)
    assert media_cost_micros(per_second, *worst) == 300 and media_cost_micros(tokens, *worst) >= 290


def test_speech_meter() -> None:
    request = SpeechRequest.model_validate({"model": "m", "input": "x" * 100, "voice": "alloy"})
    assert SpeechMeter().used(request, None) == (Tokens(), Media(characters=100))
    speech = Speech("audio/mpeg", _nothing(), usage={"input_tokens": 20, "output_tokens": 500})
    assert SpeechMeter().used(request, speech) == (Tokens(prompt=20), Media(characters=100, audio_output_tokens=500))
    tokens, media = SpeechMeter().worst(request, MODEL)
    assert media.characters == 100 and media.audio_output_tokens >= 500 and tokens.prompt >= 20


async def _nothing() -> Any:
    yield b""


def test_subtitles_from_segments() -> None:
    segments: list[Segment] = [
        {"id": 0, "start": 0.0, "end": 1.2345, "text": " Hi."},
        {"id": 1, "start": 3725.5, "end": 3726.0, "text": "Later. "},
    ]
    assert srt(segments) == "1\n00:00:00,000 --> 00:00:01,235\nHi.\n\n2\n01:02:05,500 --> 01:02:06,000\nLater.\n\n"
    assert vtt(segments) == "WEBVTT\n\n00:00:00.000 --> 00:00:01.235\nHi.\n\n01:02:05.500 --> 01:02:06.000\nLater.\n\n"
    assert "".join(deltas(Transcript(" Hello  there. "))) == " Hello  there."


@pytest.mark.parametrize(
    "want,formats,json_usage,asked",
    [
        ("json", {"json", "text", "verbose_json"}, True, "json"),
        ("text", {"json", "text", "verbose_json"}, True, "json"),
        ("text", {"json", "text", "verbose_json"}, False, "verbose_json"),
        ("srt", {"json", "text", "verbose_json"}, True, "verbose_json"),
        ("vtt", {"json", "text", "srt", "vtt", "verbose_json"}, True, "verbose_json"),
        ("diarized_json", {"json", "diarized_json"}, True, "diarized_json"),
        ("srt", {"json", "text"}, True, None),
        ("diarized_json", {"json", "text", "verbose_json"}, True, None),
    ],
)
def test_the_format_asked_of_the_upstream(want: str, formats: set[str], json_usage: bool, asked: str | None) -> None:
    request = TranscriptionRequest.model_validate({"model": "m", "file": _file(1), "response_format": want})
    if asked is None:
        with pytest.raises(InvalidRequest) as caught:
            upstream_format(request, frozenset(formats), "m", json_usage=json_usage)
        assert caught.value.param == "response_format"
    else:
        assert upstream_format(request, frozenset(formats), "m", json_usage=json_usage) == asked


def test_gemini_pcm_becomes_a_wav_and_its_usage_is_read() -> None:
    pcm = b"\x01\x00\x02\x00" * 1000
    data = {
        "candidates": [{"content": {"parts": [{"inlineData": {"mimeType": "audio/L16;codec=pcm;rate=24000",
                                                               "data": base64.b64encode(pcm).decode()}}]}}],
        "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 75},
    }  # fmt: skip
    got, rate = gs.audio_of(data)
    assert (got, rate) == (pcm, 24_000) and gs.encode(got, rate, "pcm") == pcm
    with wave.open(io.BytesIO(gs.encode(got, rate, "wav"))) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (24_000, 1, 2)
        assert w.readframes(w.getnframes()) == pcm
    assert gs.speech_usage(data) == {"input_tokens": 3, "output_tokens": 75, "total_tokens": 78}
    request = SpeechRequest.model_validate({"model": "m", "input": "Hi", "voice": "Kore", "instructions": "Whisper"})
    assert gs.speech_body(request)["contents"][0]["parts"] == [{"text": "Whisper: Hi"}]


@pytest.mark.parametrize(
    "data",
    [
        {"candidates": []},
        {"promptFeedback": {"blockReason": "SAFETY"}},
        {"candidates": [{"content": {"parts": [{"text": "no audio"}]}}]},
        {"candidates": [{"content": {"parts": [{"inlineData": {"mimeType": "audio/L16", "data": "%%%"}}]}}]},
        [],
    ],
)
def test_a_gemini_answer_without_audio_is_the_providers_failure(data: Any) -> None:
    with pytest.raises(ProviderFailure):
        gs.audio_of(data)


def test_gemini_transcription_usage_by_modality() -> None:
    data = {
        "candidates": [{"content": {"parts": [{"text": " Hello. "}]}}],
        "usageMetadata": {"promptTokenCount": 80, "candidatesTokenCount": 3,
                          "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 5},
                                                  {"modality": "AUDIO", "tokenCount": 75}]},
    }  # fmt: skip
    assert gs.text_of(data) == "Hello."
    assert gs.hear_usage(data) == {
        "type": "tokens",
        "input_tokens": 80,
        "input_token_details": {"audio_tokens": 75, "text_tokens": 5},
        "output_tokens": 3,
        "total_tokens": 83,
    }


def test_a_logged_transcription_body_names_the_file_not_the_gateways_spool_path() -> None:
    """The guard logs `request.body.model_dump(mode="json", exclude_none=True)` when log_query_body is on."""
    file = AudioFile(path="/var/spool/inferplex/upload-1234", filename="a.wav", content_type="audio/wav", bytes=44)
    logged = TranscriptionRequest(file=file, model="whisper-1").model_dump(mode="json", exclude_none=True)
    assert logged["file"] == {"filename": "a.wav", "content_type": "audio/wav", "bytes": 44}
    assert "/var/spool" not in str(logged)
