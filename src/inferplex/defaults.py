"""The embedded configuration used when no config file is given: the bundled local models, no keys."""

from __future__ import annotations

from typing import Any

DEFAULT_CHAT_MODEL = "smollm2-135m"
DEFAULT_EMBEDDING_MODEL = "minilm-l6"
DEFAULT_SPEECH_MODEL = "hibari-tts"
DEFAULT_TRANSCRIPTION_MODEL = "whisper-tiny-en"

DEFAULT_CONFIG: dict[str, Any] = {
    "providers": [{"name": "local", "kind": "local"}],
    "models": [
        {
            "name": DEFAULT_CHAT_MODEL,
            "display_name": "SmolLM2 135M Instruct (bundled, Q4_1)",
            "description": "A tiny chat model that runs in-process on the CPU: answers offline, with no key.",
            "deployments": [{"provider": "local", "model": "smollm2-135m-instruct"}],
            "context_window": 8192,
            "max_output": 2048,
            "capabilities": {"tools": True, "vision": False, "json_schema": True, "streaming": True},
            "pricing": {"free": True},
        },
        {
            "name": DEFAULT_EMBEDDING_MODEL,
            "type": "embedding",
            "display_name": "all-MiniLM-L6-v2 (bundled)",
            "description": "A 384-dimension sentence embedding model that runs in-process on the CPU.",
            "deployments": [{"provider": "local", "model": "all-minilm-l6-v2"}],
            "context_window": 256,
            "capabilities": {"tools": False, "vision": False, "json_schema": False, "streaming": False},
            "pricing": {"free": True},
        },
        {
            "name": DEFAULT_SPEECH_MODEL,
            "type": "speech",
            "display_name": "hibari (bundled, American English, voice heart)",
            "description": "A 7.9 MB text-to-speech model that runs in-process on the CPU: 24 kHz speech, offline.",
            "deployments": [{"provider": "local", "model": "hibari-tts"}],
            "capabilities": {"tools": False, "vision": False, "json_schema": False, "streaming": False},
            "pricing": {"free": True},
        },
        {
            "name": DEFAULT_TRANSCRIPTION_MODEL,
            "type": "transcription",
            "display_name": "Whisper tiny.en (bundled, English, CTranslate2 int8)",
            "description": "A speech-to-text model that runs in-process on the CPU: English audio to text, offline.",
            "deployments": [{"provider": "local", "model": "whisper-tiny-en"}],
            "capabilities": {"tools": False, "vision": False, "json_schema": False, "streaming": False},
            "pricing": {"free": True},
        },
    ],
}
