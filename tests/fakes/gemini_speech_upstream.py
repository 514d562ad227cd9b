"""A fake of Gemini's speech models (generativelanguage v1beta generateContent): text to speech and audio to text.

Speech models (`*-tts`): the request must have exactly one user text part, `generationConfig` with
`responseModalities: ["AUDIO"]` and `speechConfig.voiceConfig.prebuiltVoiceConfig.voiceName` a prebuilt
voice (Gemini's 400 INVALID_ARGUMENT otherwise), no unknown fields. The answer is one `inlineData` part,
`audio/L16;codec=pcm;rate=24000`, base64 PCM: 0.05 s of audio a character; usage a token a word in, 25 audio
tokens a word out. Other models hear: a text part and one `inlineData` audio part (audio/* only), answered
with `HEARD` (usage: 25 audio tokens a second of a WAV, 8.47 s for anything else). `*error-<code>*` fails.
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

from tests.fakes.gemini_upstream import error, key_error
from tests.fakes.server import FakeServer

VOICES = {"Zephyr", "Puck", "Charon", "Kore", "Fenrir", "Leda", "Orus", "Aoede"}  # the ones tests use, and more
HEARD = "Hello there. This is a test of the gateway."
TOP = {"contents", "generationConfig", "systemInstruction", "safetySettings"}


def pcm_for(text: str) -> bytes:
    frames = int(len(text) * 0.05 * 24_000)
    return b"".join(struct.pack("<h", (i % 40) * 30) for i in range(frames))


def seconds_of(audio: bytes) -> float:
    try:
        with wave.open(io.BytesIO(audio), "rb") as w:
            return w.getnframes() / w.getframerate()
    except (wave.Error, EOFError):
        return 8.47


class FakeGeminiSpeech(FakeServer):
    def __init__(self, api_key: str = "gm-speech") -> None:
        super().__init__(name="gemini-speech")
        self.api_key = api_key

    @property
    def base_url(self) -> str:
        return self.url + "/v1beta"

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/v1beta/models/{call}", self.call)]

    async def call(self, request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return error(400, "Invalid JSON payload received.")
        self.record(request, body, raw)
        if refused := key_error(request, self.api_key):
            return refused
        model, _, method = request.match_info["call"].partition(":")
        if method != "generateContent":
            return error(404, f"Method {method} not found.")
        if "error-" in model:
            code = int(model.split("error-")[1][:3])
            return error(code, f"fake gemini failure {code}")
        if not isinstance(body, dict) or set(body) - TOP:
            unknown = sorted(set(body) - TOP) if isinstance(body, dict) else ["<body>"]
            return error(400, f'Invalid JSON payload received. Unknown name "{unknown[0]}": Cannot find field.')
        contents = body.get("contents")
        if not isinstance(contents, list) or len(contents) != 1 or contents[0].get("role") != "user":
            return error(400, "contents must be one user turn")
        parts = contents[0].get("parts") or []
        return self._speak(model, body, parts) if model.endswith("-tts") else self._hear(model, parts)

    def _speak(self, model: str, body: dict[str, Any], parts: list[Any]) -> web.Response:
        if len(parts) != 1 or not isinstance(parts[0].get("text"), str) or not parts[0]["text"]:
            return error(400, "A speech model takes one text part.")
        config = body.get("generationConfig") or {}
        if config.get("responseModalities") != ["AUDIO"]:
            return error(400, "The requested combination of response modalities (TEXT) is not supported by the model.")
        if set(config) - {"responseModalities", "speechConfig", "temperature"}:
            return error(400, f'Invalid JSON payload received. Unknown name "{sorted(config)[0]}"')
        try:
            voice = config["speechConfig"]["voiceConfig"]["prebuiltVoiceConfig"]["voiceName"]
        except (KeyError, TypeError):
            voice = "Kore"  # Gemini's default
        if voice not in VOICES:
            return error(400, f"Voice name {voice} is not supported.")
        text = parts[0]["text"]
        pcm = pcm_for(text)
        words = len(text.split())
        inline = {"mimeType": "audio/L16;codec=pcm;rate=24000", "data": base64.b64encode(pcm).decode()}
        return web.json_response({
            "candidates": [{"content": {"role": "model", "parts": [{"inlineData": inline}]}, "finishReason": "STOP",
                            "index": 0}],
            "usageMetadata": {"promptTokenCount": words, "candidatesTokenCount": 25 * words,
                              "totalTokenCount": 26 * words,
                              "promptTokensDetails": [{"modality": "TEXT", "tokenCount": words}],
                              "candidatesTokensDetails": [{"modality": "AUDIO", "tokenCount": 25 * words}]},
            "modelVersion": model,
        })  # fmt: skip

    def _hear(self, model: str, parts: list[Any]) -> web.Response:
        texts = [p for p in parts if isinstance(p.get("text"), str)]
        audio = [p["inlineData"] for p in parts if isinstance(p.get("inlineData"), dict)]
        if len(audio) != 1 or not texts:
            return error(400, "Send one instruction and one audio part.")
        mime = str(audio[0].get("mimeType", ""))
        if not mime.startswith("audio/"):
            return error(400, f"Unsupported MIME type: {mime}")
        try:
            data = base64.b64decode(audio[0].get("data", ""), validate=True)
        except ValueError:
            return error(
                400, "Invalid value at 'contents[0].parts[1].inline_data.data' (TYPE_BYTES), Base64 decoding failed"
            )
        audio_tokens = math.ceil(seconds_of(data) * 25)
        text_tokens = len(" ".join(t["text"] for t in texts).split())
        out = len(HEARD.split())
        return web.json_response({
            "candidates": [{"content": {"role": "model", "parts": [{"text": HEARD}]}, "finishReason": "STOP",
                            "index": 0}],
            "usageMetadata": {"promptTokenCount": audio_tokens + text_tokens, "candidatesTokenCount": out,
                              "totalTokenCount": audio_tokens + text_tokens + out,
                              "promptTokensDetails": [{"modality": "TEXT", "tokenCount": text_tokens},
                                                      {"modality": "AUDIO", "tokenCount": audio_tokens}]},
            "modelVersion": model,
        })  # fmt: skip
