"""A fake of OpenAI's audio endpoints, as OpenAI, Groq or Azure OpenAI serve them: a real HTTP server that
checks what it is sent and answers like the real API.

`/audio/speech` (JSON): the key, the model, `input` (1-4096 characters), the voice (the model's own, or a
custom `{"id": ...}` on OpenAI), `response_format` (Groq's Orpheus: wav only), `speed`, `stream_format`
(`sse` refused for tts-1 models), unknown fields refused (`additionalProperties: false`). It answers audio
bytes in chunks with the format's Content-Type (a real WAV for wav), or SSE `speech.audio.delta` /
`speech.audio.done` with token usage.

`/audio/transcriptions` and `/audio/translations` (multipart): the key, a `file` with a filename of a
supported extension, at most 25 MB (413 past it), the model, `response_format` as the model takes it (the
gpt-4o models json and text; Groq json, text, verbose_json), `timestamp_granularities[]` only with
verbose_json. The audio "says" `SAID` (translations: the same in English); its duration is read from a
WAV's header, else `DEFAULT_SECONDS`. whisper answers usage `{"type": "duration"}`, the gpt-4o models
`{"type": "tokens"}` (10 audio tokens a second), Groq neither (`x_groq`); `whisper-bare` only its text.

Models `error-<status>` answer that status with the vendor's error body; speech model `die-midstream`
sends some audio and drops the connection; `empty-audio` answers 200 with no bytes; `slow-audio` sends 256
bytes every 50 ms for 30 s, noting when the client hangs up (`hangups`).
"""

from __future__ import annotations

import base64
import io
import math
import struct
import wave
from typing import Any

import orjson
from aiohttp import web

from tests.fakes.server import FakeServer

SAID = "Hello there. This is a test of the gateway."
TRANSLATED = "Hello there. This is a test of the gateway, in English."
DEFAULT_SECONDS = 8.47
MAX_FILE = 25 * 1024 * 1024
EXTENSIONS = ("flac", "m4a", "mp3", "mp4", "mpeg", "mpga", "oga", "ogg", "wav", "webm")
SPEECH_KEYS = {"model", "input", "voice", "instructions", "response_format", "speed", "stream_format"}
OPENAI_VOICES = {"alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer", "verse",
                 "marin", "cedar"}  # fmt: skip
TTS1_VOICES = {"alloy", "ash", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer"}
CONTENT_TYPES = {"mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac", "flac": "audio/flac",
                 "wav": "audio/wav", "pcm": "audio/pcm"}  # fmt: skip

VENDORS: dict[str, dict[str, Any]] = {
    "openai": {
        "speech": {"tts-1": TTS1_VOICES, "tts-1-hd": TTS1_VOICES, "gpt-4o-mini-tts": OPENAI_VOICES},
        "speech_formats": set(CONTENT_TYPES),
        "stt": {"whisper-1": {"json", "text", "srt", "verbose_json", "vtt"},
                "gpt-4o-transcribe": {"json", "text"}, "gpt-4o-mini-transcribe": {"json", "text"},
                "whisper-bare": {"json", "text", "srt", "verbose_json", "vtt"}},
    },
    "groq": {
        "speech": {"canopylabs/orpheus-v1-english": {"autumn", "diana", "hannah", "austin", "daniel", "troy"}},
        "speech_formats": {"wav"},
        "stt": {"whisper-large-v3": {"json", "text", "verbose_json"},
                "whisper-large-v3-turbo": {"json", "text", "verbose_json"}},
    },
}  # fmt: skip


def error(status: int, message: str, param: str | None = None, code: str | None = None) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


def wav_bytes(seconds: float, rate: int = 24_000) -> bytes:
    """A real mono 16-bit WAV of `seconds` of a quiet tone."""
    frames = int(seconds * rate)
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"".join(struct.pack("<h", (i % 50) * 20) for i in range(frames)))
    return out.getvalue()


def fake_audio(text: str, fmt: str) -> bytes:
    """The audio the fake "speaks": a real WAV (0.05 s a character, capped) for wav, else marked bytes."""
    if fmt == "wav":
        return wav_bytes(min(len(text) * 0.05, 5.0))
    return f"{fmt}-audio:".encode() + text.encode() * 40


def duration_of(data: bytes) -> float:
    try:
        with wave.open(io.BytesIO(data), "rb") as w:
            return w.getnframes() / w.getframerate()
    except (wave.Error, EOFError):
        return DEFAULT_SECONDS


class FakeOpenAIAudio(FakeServer):
    """`vendor`: openai (under /v1), groq (under /openai/v1) or azure (deployments, `api-key`, `api-version`;
    OpenAI's models, by deployment name)."""

    def __init__(self, vendor: str = "openai", api_key: str = "sk-audio") -> None:
        super().__init__(name=f"{vendor}-audio")
        self.vendor = vendor
        self.api_key = api_key
        self.table = VENDORS["openai" if vendor == "azure" else vendor]

    @property
    def base_url(self) -> str:
        return self.url + {"openai": "/v1", "groq": "/openai/v1", "azure": ""}[self.vendor]

    def routes(self) -> list[web.RouteDef]:
        if self.vendor == "azure":
            prefix = "/openai/deployments/{deployment}/audio"
        else:
            prefix = {"openai": "/v1", "groq": "/openai/v1"}[self.vendor] + "/audio"
        return [
            web.post(prefix + "/speech", self.speech),
            web.post(prefix + "/transcriptions", self.transcriptions),
            web.post(prefix + "/translations", self.translations),
        ]

    def _denied(self, request: web.Request) -> web.Response | None:
        if self.vendor == "azure":
            if request.headers.get("api-key") != self.api_key:
                return error(401, "Access denied due to invalid subscription key or wrong API endpoint.", code="401")
            if "api-version" not in request.query:
                return error(404, "Resource not found", code="404")
            return None
        if request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return error(401, "Incorrect API key provided.", code="invalid_api_key")
        return None

    def _model(self, request: web.Request, body: dict[str, Any]) -> Any:
        return request.match_info["deployment"] if self.vendor == "azure" else body.get("model")

    # ---- speech ----------------------------------------------------------------------------------------

    async def speech(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return error(400, "We could not parse the JSON body of your request.")
        self.record(request, body, raw)
        denied = self._denied(request)
        if denied is not None:
            return denied
        if request.content_type != "application/json" or not isinstance(body, dict):
            return error(400, "The body must be a JSON object.")
        problem = self._check_speech(body, self._model(request, body))
        if problem is not None:
            return problem
        model, fmt = self._model(request, body), body.get("response_format", "mp3")
        audio = fake_audio(body["input"], fmt)
        if body.get("stream_format") == "sse":
            return await self._speech_sse(request, body, audio)
        if model == "empty-audio":
            return web.Response(body=b"", content_type=CONTENT_TYPES[fmt])
        if model == "slow-audio":
            resp = web.StreamResponse(headers={"Content-Type": CONTENT_TYPES[fmt]})
            await resp.prepare(request)
            return await self.tick(resp, b"\x00" * 256)
        resp = web.StreamResponse(headers={"Content-Type": CONTENT_TYPES[fmt]})
        await resp.prepare(request)
        step = max(len(audio) // 4, 1)
        for i in range(0, len(audio), step):
            await resp.write(audio[i : i + step])
            if model == "die-midstream":
                request.transport.close()  # type: ignore[union-attr]
                return resp
        await resp.write_eof()
        return resp

    def _check_speech(self, body: dict[str, Any], model: Any) -> web.Response | None:
        unknown = sorted(set(body) - SPEECH_KEYS)
        if unknown:
            return error(400, f"Unrecognized request argument supplied: {unknown[0]}", param=unknown[0])
        if isinstance(model, str) and model.startswith("error-"):
            return error(int(model.removeprefix("error-")), f"fake failure {model}")
        voices = self.table["speech"].get(
            model,
            self.table["speech"].get("tts-1") if model in ("die-midstream", "empty-audio", "slow-audio") else None,
        )
        if voices is None:
            return error(404, f"The model `{model}` does not exist or you do not have access to it.",
                         code="model_not_found")  # fmt: skip
        text = body.get("input")
        if not isinstance(text, str) or not text:
            return error(400, "Missing required parameter: 'input'.", param="input")
        if len(text) > 4096:
            return error(400, "String should have at most 4096 characters", param="input", code="string_too_long")
        voice = body.get("voice")
        custom = isinstance(voice, dict) and isinstance(voice.get("id"), str) and self.vendor != "groq"
        if not custom and voice not in voices:
            return error(400, f"Invalid value for 'voice': '{voice}'.", param="voice")
        fmt = body.get("response_format", "mp3")
        if fmt not in self.table["speech_formats"]:
            return error(400, f"Invalid value for 'response_format': '{fmt}'.", param="response_format")
        speed = body.get("speed", 1.0)
        if not isinstance(speed, int | float) or not 0.25 <= speed <= 4.0:
            return error(400, "Invalid value for 'speed'.", param="speed")
        if body.get("stream_format", "audio") not in ("audio", "sse"):
            return error(400, "Invalid value for 'stream_format'.", param="stream_format")
        if body.get("stream_format") == "sse" and str(model).startswith("tts-1"):
            return error(400, f"stream_format 'sse' is not supported for model {model}.", param="stream_format")
        return None

    async def _speech_sse(self, request: web.Request, body: dict[str, Any], audio: bytes) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        step = max(len(audio) // 3, 1)
        for i in range(0, len(audio), step):
            event = {"type": "speech.audio.delta", "audio": base64.b64encode(audio[i : i + step]).decode()}
            await resp.write(b"data: " + orjson.dumps(event) + b"\n\n")
        usage = speech_usage(body["input"])
        await resp.write(b"data: " + orjson.dumps({"type": "speech.audio.done", "usage": usage}) + b"\n\n")
        await resp.write_eof()
        return resp

    # ---- transcription ---------------------------------------------------------------------------------

    async def transcriptions(self, request: web.Request) -> web.Response:
        return await self._hear(request, "transcribe")

    async def translations(self, request: web.Request) -> web.Response:
        return await self._hear(request, "translate")

    async def _hear(self, request: web.Request, task: str) -> web.Response:
        denied = self._denied(request)
        if denied is not None:
            return denied
        if request.content_type != "multipart/form-data":
            return error(400, "Expected a multipart/form-data body.")
        if request.content_length is not None and request.content_length > MAX_FILE + 64 * 1024:
            return error(413, "Maximum content size limit (26214400) exceeded.")
        fields, files = await self._form(request)
        self.record(request, {**fields, "file": {n: (f[0], len(f[1]), f[2]) for n, f in files.items()}})
        if "file" not in files:
            return error(400, "Missing required parameter: 'file'.", param="file")
        filename, data, _ = files["file"]
        if len(data) > MAX_FILE:
            return error(413, "Maximum content size limit (26214400) exceeded.")
        if filename.rsplit(".", 1)[-1].lower() not in EXTENSIONS:
            return error(400, f"Invalid file format. Supported formats: {list(EXTENSIONS)}", param="file")
        model = self._model(request, fields)
        if isinstance(model, str) and model.startswith("error-"):
            return error(int(model.removeprefix("error-")), f"fake failure {model}")
        formats = self.table["stt"].get(model)
        if formats is None:
            return error(404, f"The model `{model}` does not exist or you do not have access to it.",
                         code="model_not_found")  # fmt: skip
        problem = check_hear_fields(fields, formats, model)
        if problem is not None:
            return problem
        return self._transcript(fields, model, task, duration_of(data))

    async def _form(self, request: web.Request) -> tuple[dict[str, Any], dict[str, tuple[str, bytes, str]]]:
        fields: dict[str, Any] = {}
        files: dict[str, tuple[str, bytes, str]] = {}
        reader = await request.multipart()
        async for part in reader:
            if part.filename is not None:  # type: ignore[union-attr]
                data = await part.read()  # type: ignore[union-attr]
                files[part.name or ""] = (part.filename, bytes(data), part.headers.get("Content-Type", ""))  # type: ignore[union-attr]
            else:
                value = await part.text()  # type: ignore[union-attr]
                name = part.name or ""
                if name.endswith("[]"):
                    fields.setdefault(name, []).append(value)
                else:
                    fields[name] = value
        return fields, files

    def _transcript(self, fields: dict[str, Any], model: str, task: str, seconds: float) -> web.Response:
        text = TRANSLATED if task == "translate" else SAID
        fmt = fields.get("response_format", "json")
        if fmt == "text":
            return web.Response(text=text + "\n", content_type="text/plain")
        if fmt in ("srt", "vtt"):
            return web.Response(text="not rendered by the fake", content_type="text/plain")
        usage = self._usage(model, seconds, fields.get("prompt", ""))
        if model == "whisper-bare":  # a vendor whose answer says neither usage nor duration
            return web.json_response({"text": text})
        if fmt == "json":
            out: dict[str, Any] = {"text": text}
            if usage is not None:
                out["usage"] = usage
            else:
                out["x_groq"] = {"id": "req_fake"}
            return web.json_response(out)
        out = {"task": task, "language": "english", "duration": seconds, "text": text}
        granularities = fields.get("timestamp_granularities[]") or ["segment"]
        if "segment" in granularities:
            out["segments"] = segments(text, seconds)
        if "word" in granularities:
            out["words"] = word_stamps(text, seconds)
        if usage is not None:
            out["usage"] = usage
        else:
            out["x_groq"] = {"id": "req_fake"}
        return web.json_response(out)

    def _usage(self, model: str, seconds: float, prompt: str) -> dict[str, Any] | None:
        if self.vendor == "groq":
            return None
        if model.startswith("gpt-4o"):
            audio, text_tokens = math.ceil(seconds * 10), len(prompt.split())
            output = len(SAID.split()) + 2
            return {"type": "tokens", "input_tokens": audio + text_tokens,
                    "input_token_details": {"text_tokens": text_tokens, "audio_tokens": audio},
                    "output_tokens": output, "total_tokens": audio + text_tokens + output}  # fmt: skip
        return {"type": "duration", "seconds": math.ceil(seconds)}


def check_hear_fields(fields: dict[str, Any], formats: set[str], model: str) -> web.Response | None:
    fmt = fields.get("response_format", "json")
    if fmt not in {"json", "text", "srt", "verbose_json", "vtt"}:
        return error(400, f"Invalid value for 'response_format': '{fmt}'.", param="response_format")
    if fmt not in formats:
        return error(400, f"response_format '{fmt}' is not compatible with model '{model}'. Use "
                          f"{' or '.join(sorted(formats))} instead.", param="response_format")  # fmt: skip
    granularities = fields.get("timestamp_granularities[]")
    if granularities is not None:
        if fmt != "verbose_json":
            return error(400, "timestamp_granularities requires response_format verbose_json.",
                         param="timestamp_granularities")  # fmt: skip
        if any(g not in ("word", "segment") for g in granularities):
            return error(400, "Invalid value for 'timestamp_granularities'.", param="timestamp_granularities")
    if "temperature" in fields:
        try:
            t = float(fields["temperature"])
        except ValueError:
            return error(400, "Invalid value for 'temperature'.", param="temperature")
        if not 0 <= t <= 1:
            return error(400, "Invalid value for 'temperature'.", param="temperature")
    if "stream" in fields or "user" in fields:
        return error(400, "Unrecognized request argument supplied.", param="stream" if "stream" in fields else "user")
    return None


def segments(text: str, seconds: float) -> list[dict[str, Any]]:
    first, _, rest = text.partition(". ")
    parts = [first + ".", " " + rest]
    half = round(seconds / 2, 3)
    spans = [(0.0, half), (half, round(seconds, 3))]
    return [
        {
            "id": i,
            "seek": 0,
            "start": s,
            "end": e,
            "text": p,
            "tokens": [50364 + i],
            "temperature": 0.0,
            "avg_logprob": -0.28,
            "compression_ratio": 1.23,
            "no_speech_prob": 0.01,
        }
        for i, (p, (s, e)) in enumerate(zip(parts, spans, strict=True))
    ]


def word_stamps(text: str, seconds: float) -> list[dict[str, Any]]:
    words = text.split()
    step = seconds / len(words)
    return [
        {"word": w.strip(".,"), "start": round(i * step, 3), "end": round((i + 1) * step, 3)}
        for i, w in enumerate(words)
    ]


def speech_usage(text: str) -> dict[str, int]:
    """gpt-4o-mini-tts's usage for `text`: a token a word in, 25 audio tokens a word out."""
    words = len(text.split())
    return {"input_tokens": words, "output_tokens": 25 * words, "total_tokens": 26 * words}
