"""OpenAI's speech and transcription requests to Gemini's generateContent, and its answers back (pure).

Speech (the `*-tts` models): the text as the one user part, `generationConfig.responseModalities: ["AUDIO"]`
and `speechConfig.voiceConfig.prebuiltVoiceConfig.voiceName`; OpenAI's `instructions` become the spoken
style before the text ("Say cheerfully: ..."), as Gemini's guide prompts it. The answer is one
`inlineData` part of `audio/L16;codec=pcm;rate=24000`: 16-bit little-endian mono PCM, which is exactly
OpenAI's `pcm` format, and becomes `wav` with a RIFF header. Its usage: text tokens in
(`promptTokenCount`), audio tokens out (`candidatesTokenCount`).

Transcription: an instruction part and the audio as an `inlineData` part; the answer's text is the
transcript, its usage audio and text tokens in (`promptTokensDetails` by modality) and text tokens out.
"""

from __future__ import annotations

import base64
import re
import struct
from typing import Any

from inferplex.families.speech import SpeechRequest, SpeechUsage
from inferplex.families.transcription import TranscriptUsage
from inferplex.providers.failures import ProviderFailure

# Gemini's prebuilt voices (ai.google.dev, speech generation).
VOICES = (
    "Zephyr", "Puck", "Charon", "Kore", "Fenrir", "Leda", "Orus", "Aoede", "Callirrhoe", "Autonoe", "Enceladus",
    "Iapetus", "Umbriel", "Algieba", "Despina", "Erinome", "Algenib", "Rasalgethi", "Laomedeia", "Achernar",
    "Alnilam", "Schedar", "Gacrux", "Pulcherrima", "Achird", "Zubenelgenubi", "Vindemiatrix", "Sadachbia",
    "Sadaltager", "Sulafat",
)  # fmt: skip
FORMATS = frozenset({"wav", "pcm"})
DEFAULT_RATE = 24_000

TRANSCRIBE_PROMPT = "Generate a verbatim transcript of the speech in this audio. Answer with the transcript only."
TRANSLATE_PROMPT = "Translate the speech in this audio into English. Answer with the English text only."


def speech_body(request: SpeechRequest) -> dict[str, Any]:
    text = request.input if not request.instructions else f"{request.instructions}: {request.input}"
    voice = {"prebuiltVoiceConfig": {"voiceName": request.voice_id}}
    return {
        "contents": [{"role": "user", "parts": [{"text": text}]}],
        "generationConfig": {"responseModalities": ["AUDIO"], "speechConfig": {"voiceConfig": voice}},
    }


def _parts(data: Any) -> list[Any]:
    if not isinstance(data, dict):
        raise ProviderFailure("malformed", "sent an answer that is not an object")
    candidates = data.get("candidates")
    if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], dict):
        feedback = data.get("promptFeedback") if isinstance(data.get("promptFeedback"), dict) else {}
        reason = feedback.get("blockReason") if isinstance(feedback, dict) else None
        raise ProviderFailure("invalid", f"answered no candidate{f' (blocked: {reason})' if reason else ''}", 400)
    content = candidates[0].get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    return parts if isinstance(parts, list) else []


def audio_of(data: Any) -> tuple[bytes, int]:
    """The PCM bytes of the answer's audio part and their sample rate."""
    for part in _parts(data):
        inline = part.get("inlineData") if isinstance(part, dict) else None
        if isinstance(inline, dict) and isinstance(inline.get("data"), str):
            mime = str(inline.get("mimeType", ""))
            match = re.search(r"rate=(\d+)", mime)
            try:
                pcm = base64.b64decode(inline["data"], validate=True)
            except ValueError:
                raise ProviderFailure("malformed", "sent audio that is not base64") from None
            return pcm, int(match[1]) if match else DEFAULT_RATE
    raise ProviderFailure("malformed", "sent an answer without audio")


def wav_header(pcm_bytes: int, rate: int, channels: int = 1, width: int = 2) -> bytes:
    """The 44-byte RIFF/WAVE header of `pcm_bytes` of little-endian PCM."""
    return (
        b"RIFF"
        + struct.pack("<I", 36 + pcm_bytes)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, channels, rate, rate * channels * width, channels * width, width * 8)
        + b"data"
        + struct.pack("<I", pcm_bytes)
    )


def encode(pcm: bytes, rate: int, fmt: str) -> bytes:
    """The audio in OpenAI's `fmt`: pcm as it came (24 kHz 16-bit mono), wav with its header."""
    return wav_header(len(pcm), rate) + pcm if fmt == "wav" else pcm


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def speech_usage(data: Any) -> SpeechUsage | None:
    meta = data.get("usageMetadata") if isinstance(data, dict) else None
    if not isinstance(meta, dict):
        return None
    prompt, out = _count(meta.get("promptTokenCount")), _count(meta.get("candidatesTokenCount"))
    return {"input_tokens": prompt, "output_tokens": out, "total_tokens": prompt + out}


# ---- transcription -----------------------------------------------------------------------------------------


def hear_body(audio: bytes, mime: str, task: str, language: str | None, prompt: str | None) -> dict[str, Any]:
    ask = TRANSLATE_PROMPT if task == "translate" else TRANSCRIBE_PROMPT
    if language and task != "translate":
        ask += f" The speech is in the language with ISO-639-1 code {language}."
    if prompt:
        ask += f" Context: {prompt}"
    parts = [{"text": ask}, {"inlineData": {"mimeType": mime, "data": base64.b64encode(audio).decode()}}]
    return {"contents": [{"role": "user", "parts": parts}]}


def text_of(data: Any) -> str:
    texts = [p["text"] for p in _parts(data) if isinstance(p, dict) and isinstance(p.get("text"), str)]
    if not texts:
        raise ProviderFailure("malformed", "sent an answer without text")
    return "".join(texts).strip()


def hear_usage(data: Any) -> TranscriptUsage | None:
    meta = data.get("usageMetadata") if isinstance(data, dict) else None
    if not isinstance(meta, dict):
        return None
    by_modality = {"AUDIO": 0, "TEXT": 0}
    for d in meta.get("promptTokensDetails") or ():
        if isinstance(d, dict) and d.get("modality") in by_modality:
            by_modality[d["modality"]] += _count(d.get("tokenCount"))
    prompt, out = _count(meta.get("promptTokenCount")), _count(meta.get("candidatesTokenCount"))
    if not by_modality["AUDIO"] and not by_modality["TEXT"]:
        by_modality["AUDIO"] = prompt
    return {
        "type": "tokens",
        "input_tokens": prompt,
        "input_token_details": {"audio_tokens": by_modality["AUDIO"], "text_tokens": by_modality["TEXT"]},
        "output_tokens": out,
        "total_tokens": prompt + out,
    }
