"""The bundled audio models' parts, without a gateway: codecs, resampling, Whisper's features and windowing,
the worker pool's bound, the start-up checks, and that no offered voice can reach the network."""

from __future__ import annotations

import asyncio
import io
import threading
import time
import types
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferplex.config import ConfigError
from inferplex.errors import InvalidRequest
from inferplex.providers import local_audio, local_speech, local_transcribe
from inferplex.providers.local_audio import ModelPool, decode, encode, resample
from inferplex.providers.local_transcribe import Whisper, _Window, log_mel, transcribe_spec

RATE = 24000


def _tone(seconds: float = 1.0, rate: int = RATE, hz: float = 440.0) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


@pytest.mark.parametrize(
    ("fmt", "content_type", "magic"),
    [
        ("wav", "audio/wav", b"RIFF"),
        ("flac", "audio/flac", b"fLaC"),
        ("mp3", "audio/mpeg", b"\xff"),
        ("opus", "audio/ogg", b"OggS"),
    ],
)
def test_each_format_is_written_and_reads_back(tmp_path: Path, fmt: str, content_type: str, magic: bytes) -> None:
    data, ctype = encode(_tone(), RATE, fmt)
    assert ctype == content_type and data.startswith(magic)
    path = tmp_path / f"a.{fmt}"
    path.write_bytes(data)
    back = decode(path, 16000, 60)
    assert abs(back.size - 16000) < 1200  # one second at 16 kHz (codec padding aside)
    spectrum = np.abs(np.fft.rfft(back[2000:14000]))
    assert abs(np.argmax(spectrum) * 16000 / 12000 - 440) < 5  # the tone survives encoding and resampling


def test_pcm_is_raw_16_bit_little_endian() -> None:
    samples = np.array([0.0, 0.5, -0.5, 1.5], np.float32)
    data, ctype = encode(samples, RATE, "pcm")
    assert ctype == "audio/pcm"
    assert np.frombuffer(data, "<i2").tolist() == [0, 16383, -16383, 32767]


def test_wav_header_says_mono_16_bit_24_khz() -> None:
    data, _ = encode(_tone(0.5), RATE, "wav")
    with wave.open(io.BytesIO(data)) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes()) == (1, 2, RATE, RATE // 2)


def test_aac_is_refused_naming_the_formats_that_work() -> None:
    with pytest.raises(InvalidRequest) as caught:
        encode(_tone(), RATE, "aac")
    assert caught.value.param == "response_format"
    for fmt in ("mp3", "opus", "flac", "wav", "pcm"):
        assert fmt in caught.value.message


def test_undecodable_upload_is_a_400_naming_what_is_decoded(tmp_path: Path) -> None:
    path = tmp_path / "a.m4a"
    path.write_bytes(b"\x00\x00\x00\x20ftypM4A " + bytes(200))
    with pytest.raises(InvalidRequest) as caught:
        decode(path, 16000, 60)
    assert caught.value.param == "file" and "wav" in caught.value.message


def test_resampling_keeps_the_pitch_and_removes_what_cannot_be_kept() -> None:
    low = resample(_tone(1.0, 48000, 1000.0), 48000, 16000)
    assert low.size == 16000
    assert abs(np.argmax(np.abs(np.fft.rfft(low))) - 1000) <= 1
    alias = resample(_tone(1.0, 48000, 12000.0), 48000, 16000)  # above the new Nyquist: filtered out
    assert np.sqrt(np.mean(alias[100:-100] ** 2)) < 0.01  # unfiltered, it would alias to 4 kHz at 0.35 RMS
    up = resample(_tone(1.0, 8000, 300.0), 8000, 16000)
    assert up.size == 16000 and abs(np.argmax(np.abs(np.fft.rfft(up))) - 300) <= 1


def test_streamed_resampling_equals_one_pass() -> None:
    audio = np.random.default_rng(2).standard_normal(44100 * 3).astype(np.float32)
    whole = resample(audio, 44100, 16000)
    stream = local_audio.Resampler(44100, 16000)
    pieces = [stream.feed(audio[i : i + 10007]) for i in range(0, audio.size, 10007)]
    streamed = np.concatenate([*pieces, stream.feed(np.zeros(0, np.float32), last=True)])
    assert streamed.size == whole.size == 48000
    assert np.allclose(streamed, whole, atol=1e-5)


def test_stereo_is_mixed_down_and_long_files_are_refused(tmp_path: Path) -> None:
    import soundfile

    left, right = _tone(2.0, 16000, 440.0), _tone(2.0, 16000, 1000.0)
    path = tmp_path / "stereo.flac"
    soundfile.write(str(path), np.stack([left, right], axis=1), 16000)
    mono = decode(path, 16000, 60)
    assert mono.size == 32000 and np.allclose(mono, (left + right) / 2, atol=1e-3)
    with pytest.raises(InvalidRequest, match="at most 1 s") as caught:
        decode(path, 16000, 1)
    assert caught.value.param == "file"


def test_a_runtime_failure_is_the_providers_502() -> None:
    def work(model: object) -> None:
        raise RuntimeError("onnxruntime: bad input")

    async def main() -> None:
        pool: ModelPool[object] = ModelPool("t", object, parallel=1)
        with pytest.raises(Exception, match="failed: onnxruntime: bad input") as caught:
            await pool.run(work)
        assert getattr(caught.value, "status", None) == 502
        with pytest.raises(InvalidRequest):  # the gateway's own errors pass as they are
            await pool.run(lambda m: (_ for _ in ()).throw(InvalidRequest("no", param="x")))
        await pool.aclose()

    asyncio.run(main())


def test_log_mel_is_whisper_shaped_and_normalised() -> None:
    mel = log_mel(_tone(2.0, 16000))
    assert mel.shape == (80, 200 + 3000)  # the audio's frames, then 30 s of silence
    assert mel.dtype == np.float32
    assert mel.max() <= 1.5 and mel.max() - mel.min() <= 2.0 + 1e-6  # (log10 clamped to max - 8 + 4) / 4


def test_a_long_file_is_computed_in_blocks_equal_to_one_pass() -> None:
    audio = np.random.default_rng(1).standard_normal(16000 * 40).astype(np.float32) * 0.1
    blocked = log_mel(audio)
    saved = local_transcribe.BLOCK_FRAMES
    local_transcribe.BLOCK_FRAMES = 10**9
    try:
        whole = log_mel(audio)
    finally:
        local_transcribe.BLOCK_FRAMES = saved
    assert np.allclose(blocked, whole, atol=1e-5)


class _Tokenizer:
    def decode(self, tokens: list[int]) -> str:
        return "".join(f" w{t}" for t in tokens)


def _whisper() -> Whisper:
    model = Whisper.__new__(Whisper)
    model.eot, model.timestamp_begin, model.tokenizer = 100, 200, _Tokenizer()  # type: ignore[assignment]
    return model


SEGMENT_CASES: list[tuple[list[int], list[tuple[float, float, str]], int]] = [
    # <|0.00|> w1 w2 <|1.00|><|1.00|> w3 <|2.00|>  (ends on a single timestamp: the window is done)
    ([200, 1, 2, 250, 250, 3, 300], [(0.0, 1.0, " w1 w2"), (1.0, 2.0, " w3")], 3000),
    # <|0.00|> w1 <|1.00|><|1.00|> w2  (an unfinished segment: resume where the last complete one ended)
    ([200, 1, 250, 250, 2], [(0.0, 1.0, " w1")], 100),
    # no timestamps at all: one segment over the window
    ([1, 2], [(10.0, 40.0, " w1 w2")], 3000),
]


@pytest.mark.parametrize(("tokens", "expected", "advance"), SEGMENT_CASES)
def test_segments_are_cut_at_timestamp_pairs(
    tokens: list[int], expected: list[tuple[float, float, str]], advance: int
) -> None:
    model = _whisper()
    seek = 1000 if expected[0][0] == 10.0 else 0
    window = _Window(seek=seek, size=3000, tokens=tokens, avg_logprob=-0.1, temperature=0.0, ratio=1.0, no_speech=0.0)
    segments: list[Any] = []
    model._segments(window, segments)
    assert [(s["start"], s["end"], s["text"]) for s in segments] == expected
    assert [s["id"] for s in segments] == list(range(len(expected)))
    assert model._advance(window) == advance


def test_the_pool_runs_one_at_a_time_and_reports_the_wait() -> None:
    loads: list[int] = []
    active, most = [0], [0]
    lock = threading.Lock()

    def work(model: object) -> int:
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
        time.sleep(0.1)
        with lock:
            active[0] -= 1
        return 1

    async def main() -> list[tuple[int, float]]:
        pool: ModelPool[object] = ModelPool("t", lambda: loads.append(1) or object(), parallel=1)
        try:
            return await asyncio.gather(*(pool.run(work) for _ in range(3)))
        finally:
            await pool.aclose()

    results = asyncio.run(main())
    assert most[0] == 1 and len(loads) == 1  # one slot, loaded once
    waits = sorted(q for _, q in results)
    assert waits[0] == 0.0 and waits[-1] >= 150


def test_a_failed_load_is_a_503_and_the_slot_comes_back() -> None:
    calls = [0]

    def load() -> object:
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError("corrupt")
        return object()

    async def main() -> None:
        pool: ModelPool[object] = ModelPool("t", load, parallel=1)
        with pytest.raises(Exception, match="could not be loaded: corrupt") as caught:
            await pool.run(lambda m: 1)
        assert getattr(caught.value, "status", None) == 503
        assert (await pool.run(lambda m: 2))[0] == 2
        await pool.aclose()

    asyncio.run(main())


def test_bundled_specs_resolve_and_bad_options_refuse_to_start(tmp_path: Path) -> None:
    speech = local_speech.speech_spec("local", "hibari-tts", {})
    assert speech is not None and list(speech.voices) == ["heart"]
    assert all(p.is_file() and p.is_relative_to(speech.package) for p in speech.voices.values())
    heard = transcribe_spec("local", "whisper-tiny-en", {"beam_size": 2})
    assert heard is not None and (heard.directory / "model.bin").is_file() and heard.beam_size == 2
    assert local_speech.speech_spec("local", "smollm2-135m-instruct", {}) is None
    assert transcribe_spec("local", "all-minilm-l6-v2", {}) is None
    with pytest.raises(ConfigError, match="unknown option"):
        local_speech.speech_spec("local", "hibari-tts", {"voice": "emma"})
    with pytest.raises(ConfigError, match="parallel"):
        local_speech.speech_spec("local", "hibari-tts", {"parallel": 0})
    with pytest.raises(ConfigError, match="beam_size"):
        transcribe_spec("local", "whisper-tiny-en", {"beam_size": "wide"})
    (tmp_path / "model.bin").write_bytes(b"x")
    with pytest.raises(ConfigError, match=r"lacks config\.json, tokenizer\.json"):
        transcribe_spec("local", "mine", {"path": str(tmp_path)})


def test_the_local_provider_serves_audio_models_beside_chat_and_embeddings() -> None:
    from inferplex.config import parse_config
    from inferplex.defaults import DEFAULT_CONFIG
    from inferplex.providers import local

    heard = transcribe_spec("local", "whisper-tiny-en", {})
    assert heard is not None
    config = parse_config(
        {
            **DEFAULT_CONFIG,
            "providers": [
                {
                    "name": "local",
                    "kind": "local",
                    "options": {"models": {"my-whisper": {"path": str(heard.directory)}}},
                }
            ],
        }
    )
    provider = local.create(config.providers[0], types.SimpleNamespace(config=config))
    assert set(provider._speech) == {"hibari-tts"}
    assert set(provider._transcribe) == {"whisper-tiny-en", "my-whisper"}  # any CTranslate2 Whisper by path
    assert set(provider._chat) == {"smollm2-135m-instruct"} and set(provider._embed_specs) == {"all-minilm-l6-v2"}
    target: Any = types.SimpleNamespace(upstream_model="smollm2-135m-instruct", model=types.SimpleNamespace(name="c"))
    with pytest.raises(InvalidRequest, match="not a speech model"):
        provider.voices(target)


def test_no_offered_voice_downloads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every voice the gateway offers loads and speaks with the network refused outright."""
    import urllib.request

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a download was attempted")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    monkeypatch.setenv("HIBARI_HOME", "/nonexistent/hibari-cache")
    spec = local_speech.speech_spec("local", "hibari-tts", {})
    assert spec is not None
    for voice in spec.voices:
        audio = local_speech.Synthesizer(spec, voice).speak("Offline.", 1.0)
        assert audio.size > RATE // 4


def test_pcm_is_streamed_a_sentence_at_a_time() -> None:
    from inferplex.families.speech import SpeechRequest
    from inferplex.providers.base import CallInfo

    provider = local_speech.LocalSpeech()
    spec = local_speech.speech_spec("local", "hibari-tts", {})
    assert spec is not None
    provider.serve_speech({"hibari-tts": spec})
    target: Any = types.SimpleNamespace(upstream_model="hibari-tts", model=types.SimpleNamespace(name="tts"))
    text = "One sentence here. Another one follows. And a third."

    def request(fmt: str) -> Any:
        body = SpeechRequest.model_validate({"model": "tts", "input": text, "voice": "heart", "response_format": fmt})
        return types.SimpleNamespace(body=body)

    async def main() -> tuple[list[bytes], bytes, bytes]:
        streamed = await provider.speak(request("pcm"), target, CallInfo())
        parts = [p async for p in streamed.audio]
        whole = await provider.speak(request("wav"), target, CallInfo())
        wav = b"".join([p async for p in whole.audio])
        # a caller who leaves after the first sentence frees the slot: the next request is not stuck behind it
        left = await provider.speak(request("pcm"), target, CallInfo())
        first = await anext(left.audio)
        await left.aclose()
        again = await asyncio.wait_for(provider.speak(request("wav"), target, CallInfo()), 30)
        assert b"".join([p async for p in again.audio]) == wav
        await provider.close_speech()
        return parts, wav, first

    parts, wav, first = asyncio.run(main())
    assert len(parts) == 3 and first == parts[0]  # one chunk per sentence
    assert b"".join(parts) == wav[44:]  # the same samples as the whole WAV


def test_speech_request_checks_come_before_the_model() -> None:
    from inferplex.families.speech import SpeechRequest
    from inferplex.providers.base import CallInfo

    provider = local_speech.LocalSpeech()
    spec = local_speech.speech_spec("local", "hibari-tts", {})
    assert spec is not None
    provider.serve_speech({"hibari-tts": spec})
    target: Any = types.SimpleNamespace(upstream_model="hibari-tts", model=types.SimpleNamespace(name="tts"))
    cases = [
        ({"voice": "alloy"}, "voice", "heart"),
        ({"speed": 3.0}, "speed", "0.5"),
        ({"response_format": "aac"}, "response_format", "wav"),
    ]
    for extra, param, named in cases:
        body = SpeechRequest.model_validate({"model": "tts", "input": "Hi.", "voice": "heart", **extra})
        request: Any = types.SimpleNamespace(body=body)
        with pytest.raises(InvalidRequest) as caught:
            asyncio.run(provider.speak(request, target, CallInfo()))
        assert caught.value.param == param and named in caught.value.message
    assert local_audio.speech_formats() == ["wav", "pcm", "flac", "mp3", "opus"]
