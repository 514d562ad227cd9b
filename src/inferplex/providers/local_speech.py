"""Speech from the bundled text-to-speech model, in-process, on the CPU, with no key and no network.

The bundled model is hibari (package `hibari-tts`, Apache-2.0): a 7.9 MB ONNX model distilled from Kokoro-82M,
with its own grapheme-to-phoneme rules and lexicons (no espeak-ng, no spaCy), run by onnxruntime at ~50x
real time on one core of the reference machine; American English, 24 kHz mono. Only the voice that ships
inside the wheel ("heart", female, American) is offered: the package can fetch its other voices from a hub,
and the gateway never lets it (`voice_path(..., download_missing=False)`), so nothing is downloaded at run
time. The package is located with `importlib.util.find_spec` at start-up and imported on the first request.

Configuration, under the `local` provider's `options.models` (all optional):

    hibari-tts:
      parallel: 1       # concurrent syntheses (one model instance each; ~30 MB resident per instance)
      threads: 1        # onnxruntime threads per synthesis

`speed` is honoured between 0.5 and 2.0 (the model's range; outside it a 400 says so); `instructions`
cannot steer this model and is dropped and named in the response headers, as any dropped parameter is.
`pcm` (headerless) is streamed a sentence at a time, each as soon as it is synthesized, so the first audio
of a long text comes after its first sentence; the other formats are encoded whole (a WAV header holds the
length, and a compressed file is one encoder run), then sent in chunks.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from inferplex.config import ConfigError
from inferplex.errors import InvalidRequest
from inferplex.families.speech import CONTENT_TYPES, Speech, SpeechRequest
from inferplex.providers.local_audio import F32, ModelPool, check_format, encode

if TYPE_CHECKING:
    from inferplex.gateway_request import GatewayRequest
    from inferplex.providers.base import CallInfo
    from inferplex.targets import Target

BUNDLED_SPEECH = {"hibari-tts": ("hibari", "hibari-tts==0.2.1")}
SPEECH_KEYS = {"parallel", "threads"}
SPEED_RANGE = (0.5, 2.0)
CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class SpeechSpec:
    """The bundled speech model: its package directory, the voices inside it, and how to run it."""

    name: str
    package: Path
    voices: dict[str, Path]  # voice name -> its ONNX file, inside the package
    parallel: int = 1
    threads: int = 1


def bundled_voices(package: Path) -> dict[str, Path]:
    """The voices whose model ships in the package (the registry also lists voices it would download)."""
    registry: dict[str, dict[str, Any]] = json.loads((package / "assets" / "voices.json").read_text())
    voices = {name: package / "assets" / str(v["file"]) for name, v in registry.items() if v.get("bundled")}
    return {name: path for name, path in voices.items() if path.is_file()}


def speech_spec(provider: str, upstream: str, options: dict[str, Any]) -> SpeechSpec | None:
    """The spec of a bundled speech model, checked (ConfigError naming the problem); None for another model."""
    if upstream not in BUNDLED_SPEECH:
        return None
    where = f"provider {provider}: options.models.{upstream}"
    module, requirement = BUNDLED_SPEECH[upstream]
    unknown = sorted(set(options) - SPEECH_KEYS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown option(s) {', '.join(unknown)} (allowed: {', '.join(sorted(SPEECH_KEYS))})"
        )
    for key, value in options.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{where}.{key}: must be a positive integer")
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ConfigError(f"{where}: the bundled model is not installed (pip install {requirement}, or `make run`)")
    if importlib.util.find_spec("onnxruntime") is None:
        raise ConfigError(f"{where}: onnxruntime is not installed (pip install 'inferplex[local]')")
    package = Path(spec.origin).parent
    try:
        voices = bundled_voices(package)
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(f"{where}: {package} is not a usable hibari package: {exc}") from None
    if not voices:
        raise ConfigError(f"{where}: {package} holds no voice model")
    return SpeechSpec(name=upstream, package=package, voices=voices, **options)


class Synthesizer:
    """One loaded voice: hibari's G2P and ONNX session. `speak` is synchronous, for a worker thread."""

    def __init__(self, spec: SpeechSpec, voice: str) -> None:
        from hibari import Hibari

        # `model=` names the file inside the package: hibari never looks for (or downloads) another one.
        self.tts = Hibari(voice=voice, model=str(spec.voices[voice]), threads=spec.threads)
        self.rate = int(Hibari.sample_rate)

    def speak(self, text: str, speed: float) -> F32:
        # A fixed seed for the noise component: the same text in the same voice is the same audio.
        samples: F32 = self.tts(text, speed=speed, seed=0)
        return samples.astype(np.float32, copy=False)

    def sentences(self, text: str, speed: float) -> Iterator[F32]:
        """The same audio as `speak`, a sentence at a time, each as soon as it is synthesized."""
        for part in self.tts.stream(text, speed=speed, seed=0):
            if part.size:
                yield part.astype(np.float32, copy=False)


async def _chunks(data: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(data), CHUNK):
        yield data[start : start + CHUNK]


async def _then(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    try:
        yield first
        async for part in rest:
            yield part
    finally:
        close = getattr(rest, "aclose", None)
        if close is not None:
            await close()


class LocalSpeech:
    """The `local` provider's speech: the bundled voices, each a pool of lazily loaded synthesizers."""

    _speech: dict[str, SpeechSpec]
    _voice_pools: dict[tuple[str, str], ModelPool[Synthesizer]]

    def serve_speech(self, specs: dict[str, SpeechSpec]) -> None:
        self._speech = specs
        self._voice_pools = {}

    def _speech_spec(self, target: Target) -> SpeechSpec:
        specs: dict[str, SpeechSpec] = getattr(self, "_speech", {})
        spec = specs.get(target.upstream_model)
        if spec is None:
            raise InvalidRequest(f"{target.model.name} is not a speech model.", param="model")
        return spec

    def voices(self, target: Target) -> list[str]:
        return list(self._speech_spec(target).voices)

    def _pool(self, spec: SpeechSpec, voice: str) -> ModelPool[Synthesizer]:
        pool = self._voice_pools.get((spec.name, voice))
        if pool is None:
            pool = ModelPool(f"{spec.name}-{voice}", lambda: Synthesizer(spec, voice), spec.parallel)
            self._voice_pools[(spec.name, voice)] = pool
        return pool

    async def speak(self, request: GatewayRequest[SpeechRequest], target: Target, info: CallInfo) -> Speech:
        body = request.body
        spec = self._speech_spec(target)
        voice = body.voice_id
        if voice not in spec.voices:
            raise InvalidRequest(
                f"Unknown voice {voice!r} for {target.model.name}; available voices: {', '.join(spec.voices)}.",
                param="voice",
            )
        low, high = SPEED_RANGE
        if not low <= body.speed <= high:
            raise InvalidRequest(f"{target.model.name} speaks at speeds from {low} to {high} only.", param="speed")
        response_format = body.response_format
        check_format(response_format)  # before the model runs
        if body.instructions:
            info.dropped_params = [*info.dropped_params, "instructions"]

        silent = InvalidRequest(f"{target.model.name} found nothing it can pronounce in the input.", param="input")
        if response_format == "pcm":  # headerless: streamed a sentence at a time, as each is synthesized
            return await self._stream_pcm(spec, voice, body.input, body.speed, silent, info)

        def work(model: Synthesizer) -> tuple[bytes, str]:
            samples = model.speak(body.input, body.speed)
            if samples.size == 0:
                raise silent
            return encode(samples, model.rate, response_format)

        (data, content_type), info.queued_ms = await self._pool(spec, voice).run(work)
        return Speech(content_type=content_type, audio=_chunks(data), format=response_format)

    async def _stream_pcm(
        self, spec: SpeechSpec, voice: str, text: str, speed: float, silent: InvalidRequest, info: CallInfo
    ) -> Speech:
        def produce(model: Synthesizer) -> Iterator[bytes]:
            for part in model.sentences(text, speed):
                yield encode(part, model.rate, "pcm")[0]

        parts, info.queued_ms = await self._pool(spec, voice).stream(produce)
        first = await anext(parts, None)  # before answering: a failure is still an error status, not a cut stream
        if first is None:
            raise silent
        return Speech(content_type=CONTENT_TYPES["pcm"], audio=_then(first, parts), format="pcm")

    async def close_speech(self) -> None:
        for pool in getattr(self, "_voice_pools", {}).values():
            await pool.aclose()
