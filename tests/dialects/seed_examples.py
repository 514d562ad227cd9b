"""The seeds' own example requests, verbatim, shared by the dialect tests that send them."""

from __future__ import annotations

# Seed 000's example request, verbatim.
SEED_000_EXAMPLE = {
    "provider": "openai",
    "model": "gpt-4o-mini",
    "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Tell me about AI."},
    ],
    "temperature": 0.7,
    "max_tokens": 1000,
    "stream": False,
}

# Seed 001's chat curl example, verbatim.
SEED_001_EXAMPLE = {
    "provider": "anthropic",
    "model": "claude-sonnet-4-6",
    "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Explain transformer attention in two sentences."},
    ],
    "max_tokens": 256,
    "stream": False,
}
