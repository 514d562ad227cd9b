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
import math
import threading
import wave
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from time import perf_counter
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from inferplex.errors import GatewayError, InvalidRequest, Unavailable, UpstreamError
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


def decode(path: Path, rate: int, max_seconds: float) -> F32:
    """The audio file at `path` as mono float32 samples at `rate` Hz, read and resampled block by block (so a
    long file never sits in memory at its own rate and channel count); a 400 when it cannot be decoded or is
    longer than `max_seconds`."""
    import soundfile

    try:
        with soundfile.SoundFile(str(path)) as f:
            source_rate = int(f.samplerate)
            if f.frames > max_seconds * source_rate:
                raise InvalidRequest(
                    f"The audio is {f.frames / source_rate:.0f} s long; this model takes at most {max_seconds:.0f} s.",
                    param="file",
                )
            stream = Resampler(source_rate, rate)
            parts = [
                stream.feed(block.mean(axis=1, dtype=np.float32) if block.shape[1] > 1 else block[:, 0])
                for block in f.blocks(blocksize=source_rate * 30, dtype="float32", always_2d=True)
            ]
    except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError) as exc:
        raise InvalidRequest(
            f"The bundled transcription model cannot decode this audio file ({exc}); "
            f"supported formats: {', '.join(DECODABLE)}.",
            param="file",
        ) from None
    parts.append(stream.feed(np.zeros(0, np.float32), last=True))
    out: F32 = np.concatenate(parts)
    return out


class Resampler:
    """Streaming sample-rate conversion: a windowed-sinc low-pass below the new Nyquist frequency when the
    rate drops, then linear interpolation. Fed block by block; each output sample is computed once enough of
    the input around it has arrived, and only that much input is kept between blocks."""

    TAPS = 63

    def __init__(self, rate: int, target: int) -> None:
        self.rate, self.target = rate, target
        self.step = rate / target
        self.kernel: F32 | None = None
        if target < rate:
            n = np.arange(self.TAPS, dtype=np.float64) - (self.TAPS - 1) / 2
            cutoff = 0.45 * target / rate
            kernel = 2 * cutoff * np.sinc(2 * cutoff * n) * np.hamming(self.TAPS)
            self.kernel = (kernel / kernel.sum()).astype(np.float32)
        self.margin = self.TAPS // 2 + 2
        self.buffer = np.zeros(0, np.float32)
        self.start = 0  # the input index of buffer[0]
        self.seen = 0  # input samples fed so far
        self.done = 0  # output samples produced so far

    def feed(self, block: F32, last: bool = False) -> F32:
        self.seen += block.size
        if self.rate == self.target:
            return block.astype(np.float32, copy=False)
        self.buffer = np.concatenate([self.buffer, block.astype(np.float32, copy=False)])
        if last:
            end = round(self.seen * self.target / self.rate)
        else:  # outputs whose input neighbourhood (filter and interpolation) has fully arrived
            end = max(self.done, math.ceil((self.seen - self.margin) / self.step))
        if end <= self.done or self.buffer.size == 0:
            return np.zeros(0, np.float32)
        filtered = self.buffer if self.kernel is None else np.convolve(self.buffer, self.kernel, mode="same")
        positions = np.arange(self.done, end, dtype=np.float64) * self.step - self.start
        out: F32 = np.interp(positions, np.arange(self.buffer.size), filtered).astype(np.float32)
        self.done = end
        keep = max(int(self.done * self.step) - self.margin - self.start, 0)
        self.buffer = self.buffer[keep:]
        self.start += keep
        return out


def resample(samples: F32, rate: int, target: int) -> F32:
    """`samples` at `target` Hz (`Resampler` in one go)."""
    return Resampler(rate, target).feed(samples, last=True)


def _as_gateway_error(name: str, exc: BaseException) -> BaseException:
    """The gateway's own errors as they are; the runtime's (onnxruntime, CTranslate2) the provider's: a 502."""
    if isinstance(exc, GatewayError) or not isinstance(exc, Exception):
        return exc
    return UpstreamError(f"The local model {name} failed: {exc}")


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
        future, queued = await self._start(work)
        try:
            result = await asyncio.shield(future)
        except Exception as exc:
            raise _as_gateway_error(self.name, exc) from None
        return result, queued

    async def stream(self, produce: Callable[[M], Iterator[T]]) -> tuple[AsyncIterator[T], float]:
        """`produce(model)`'s items as they come, from a worker thread, and the ms spent waiting for a slot.
        The slot is held until the items run out; a consumer that stops early stops the worker at its next
        item (the `aclose` of an abandoned async generator)."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[T] | None] = asyncio.Queue()
        stop = threading.Event()

        def work(model: M) -> None:
            for item in produce(model):
                if stop.is_set():
                    return
                loop.call_soon_threadsafe(queue.put_nowait, (item,))

        future, queued = await self._start(work)
        future.add_done_callback(lambda _: queue.put_nowait(None))  # after every item: callbacks run in order

        async def items() -> AsyncIterator[T]:
            try:
                while (got := await queue.get()) is not None:
                    yield got[0]
                failure = future.exception()
                if failure is not None:
                    raise _as_gateway_error(self.name, failure)
            finally:
                stop.set()

        return items(), queued

    async def _start(self, work: Callable[[M], T]) -> tuple[asyncio.Future[T], float]:
        """Wait for a slot, then start `work` on an idle (or newly loaded) model; the slot and the model come
        back when the work ends, whatever happens."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self._parallel)
        slots = self._slots
        busy = slots.locked()
        start = perf_counter()
        await slots.acquire()
        queued = (perf_counter() - start) * 1000 if busy else 0.0
        model = self._idle.pop() if self._idle else None
        used: list[M] = []

        def job() -> T:
            loaded = model if model is not None else self._loaded()
            used.append(loaded)
            return work(loaded)

        def release(_: object) -> None:
            self._idle.extend(used)
            slots.release()

        try:
            future = asyncio.get_running_loop().run_in_executor(self._executor, job)
        except BaseException:
            if model is not None:
                self._idle.append(model)
            slots.release()
            raise
        future.add_done_callback(release)
        return future, queued

    def _loaded(self) -> M:
        try:
            return self._load()
        except Exception as exc:
            raise Unavailable(f"The local model {self.name} could not be loaded: {exc}") from None

    async def aclose(self) -> None:
        await asyncio.to_thread(self._executor.shutdown, wait=True, cancel_futures=True)
        self._idle.clear()
