"""What the bundled speech and transcription models share: audio in and out, and the worker pool they run in.

Audio formats. Speech comes out of the model as float32 samples; `encode` turns them into the format a caller
asked for. WAV and raw PCM (16-bit little-endian, mono, OpenAI's `pcm`) are written with the standard library;
FLAC, MP3 and Ogg Opus through `soundfile`, whose wheels bundle libsndfile (1.2, built with FLAC, LAME/mpg123
and Opus), so no system library is needed. AAC has no encoder in any such package, so `aac` is refused with a
400 naming the formats that work. Uploads for transcription are decoded by the same library: WAV, FLAC, MP3
and Ogg (Vorbis or Opus); MP4/M4A/WebM containers have no decoder here and are refused the same way.

Worker pool. `ModelPool` runs a model in threads of its own, off the event loop: the model is loaded lazily on
first use (one instance per slot, `parallel` slots, default 1), waiters queue fairly on a semaphore and the
wait is reported as `queued_ms`, as the bundled chat model's engine does (`local_llama.ChatEngine`). A caller
that leaves does not stop a synthesis or a transcription already running (each is a few seconds of CPU); its
slot is released when the thread finishes.
"""

from __future__ import annotations

import asyncio
import io
import wave
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from time import perf_counter
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from inferplex.errors import InvalidRequest, Unavailable
from inferplex.families.speech import CONTENT_TYPES

F32 = npt.NDArray[np.float32]
M = TypeVar("M")
T = TypeVar("T")

# response_format -> (soundfile format, soundfile subtype); None: written without soundfile.
_FORMATS: dict[str, tuple[str | None, str | None]] = {
    "wav": (None, None),
    "pcm": (None, None),
    "flac": ("FLAC", "PCM_16"),
    "mp3": ("MP3", "MPEG_LAYER_III"),
    "opus": ("OGG", "OPUS"),
}
# Opus codes at these rates only; another rate is resampled to the next one up.
_OPUS_RATES = (8000, 12000, 16000, 24000, 48000)
DECODABLE = ("flac", "mp3", "ogg", "wav")


def _soundfile_ok() -> bool:
    try:
        import soundfile  # noqa: F401
    except (ImportError, OSError):  # OSError: the bundled libsndfile could not be loaded
        return False
    return True


def speech_formats() -> list[str]:
    """The `response_format`s this installation can write."""
    with_soundfile = _soundfile_ok()
    return [f for f, (sf_format, _) in _FORMATS.items() if sf_format is None or with_soundfile]


def check_format(response_format: str) -> None:
    """A 400 naming the formats that can be written, when `response_format` is not one of them."""
    supported = speech_formats()
    if response_format not in supported:
        raise InvalidRequest(
            f"The bundled speech model cannot produce {response_format!r} audio; "
            f"supported formats: {', '.join(supported)}.",
            param="response_format",
        )


def encode(samples: F32, rate: int, response_format: str) -> tuple[bytes, str]:
    """`samples` (mono float32 in [-1, 1]) as `response_format`; the bytes and their content type."""
    check_format(response_format)
    content_type = CONTENT_TYPES[response_format]
    sf_format, subtype = _FORMATS[response_format]
    pcm16 = (np.clip(samples, -1.0, 1.0) * 32767.0).astype("<i2")
    if response_format == "pcm":
        return pcm16.tobytes(), content_type
    if response_format == "wav":
        out = io.BytesIO()
        with wave.open(out, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(rate)
            w.writeframes(pcm16.tobytes())
        return out.getvalue(), content_type
    import soundfile

    if response_format == "opus" and rate not in _OPUS_RATES:
        target = next((r for r in _OPUS_RATES if r >= rate), 48000)
        samples, rate = resample(samples, rate, target), target
    out = io.BytesIO()
    soundfile.write(out, samples, rate, format=sf_format, subtype=subtype)
    return out.getvalue(), content_type


def decode(path: Path, rate: int) -> F32:
    """The audio file at `path` as mono float32 samples at `rate` Hz; a 400 when it cannot be decoded."""
    import soundfile

    try:
        samples, source_rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError) as exc:
        raise InvalidRequest(
            f"The bundled transcription model cannot decode this audio file ({exc}); "
            f"supported formats: {', '.join(DECODABLE)}.",
            param="file",
        ) from None
    mono: F32 = samples.mean(axis=1, dtype=np.float32) if samples.shape[1] > 1 else samples[:, 0]
    return resample(mono, int(source_rate), rate)


def _lowpass(samples: F32, cutoff: float, taps: int = 63) -> F32:
    """A windowed-sinc low-pass filter; `cutoff` is a fraction of the sample rate (below 0.5)."""
    n = np.arange(taps, dtype=np.float64) - (taps - 1) / 2
    kernel = 2 * cutoff * np.sinc(2 * cutoff * n) * np.hamming(taps)
    kernel /= kernel.sum()
    out: F32 = np.convolve(samples, kernel.astype(np.float32), mode="same").astype(np.float32)
    return out


def resample(samples: F32, rate: int, target: int) -> F32:
    """`samples` at `target` Hz: low-pass below the new Nyquist frequency when rate drops, then interpolate."""
    if rate == target or samples.size == 0:
        return samples.astype(np.float32, copy=False)
    if target < rate:
        samples = _lowpass(samples, 0.45 * target / rate)
    count = round(samples.size * target / rate)
    positions = np.arange(count, dtype=np.float64) * (rate / target)
    out: F32 = np.interp(positions, np.arange(samples.size), samples).astype(np.float32)
    return out


class ModelPool(Generic[M]):
    """One bundled model in `parallel` worker threads: lazily loaded (one instance per slot), fairly queued."""

    def __init__(self, name: str, load: Callable[[], M], parallel: int = 1) -> None:
        self.name = name
        self._load = load
        self._executor = ThreadPoolExecutor(max_workers=parallel, thread_name_prefix=f"local-{name}")
        self._parallel = parallel
        self._slots: asyncio.Semaphore | None = None
        self._idle: list[M] = []

    async def run(self, work: Callable[[M], T]) -> tuple[T, float]:
        """`work(model)` in a worker thread; its result and the milliseconds spent waiting for a slot."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self._parallel)
        slots = self._slots
        busy = slots.locked()
        start = perf_counter()
        await slots.acquire()
        queued = (perf_counter() - start) * 1000 if busy else 0.0
        loop = asyncio.get_running_loop()
        model = self._idle.pop() if self._idle else None

        def job() -> tuple[M, T]:
            loaded = model if model is not None else self._loaded()
            return loaded, work(loaded)

        try:
            future = loop.run_in_executor(self._executor, job)
        except BaseException:
            if model is not None:
                self._idle.append(model)
            slots.release()
            raise

        def release(done: asyncio.Future[tuple[M, T]]) -> None:
            if not done.cancelled() and done.exception() is None:
                self._idle.append(done.result()[0])
            elif model is not None:
                self._idle.append(model)
            slots.release()

        future.add_done_callback(release)
        _, result = await asyncio.shield(future)
        return result, queued

    def _loaded(self) -> M:
        try:
            return self._load()
        except Exception as exc:
            raise Unavailable(f"The local model {self.name} could not be loaded: {exc}") from None

    async def aclose(self) -> None:
        await asyncio.to_thread(self._executor.shutdown, wait=True, cancel_futures=True)
        self._idle.clear()
