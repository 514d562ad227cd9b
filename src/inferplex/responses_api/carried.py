"""What the next turn needs back from an answer, carried in the Responses objects a caller holds.

Some upstreams want parts of their answer sent back next turn: Anthropic and Bedrock their signed thinking
blocks (with tool use, a turn without them is refused), Gemini the thought signature of each function call.
Chat keeps them as `thinking_blocks` on the assistant message and `extra_content` on the tool call; the
Responses translation gives them a place in the output items, so they survive both a stored history
(`previous_response_id`) and a client that keeps the conversation itself and sends the items back:

- the thinking blocks ride in the reasoning item's `encrypted_content`, a field opaque to the caller that a
  stateless client returns (`include: ["reasoning.encrypted_content"]`): not encrypted, only marked as ours;
- the thought signature rides on the function call item as `extra_content`, the key Google's own OpenAI
  layer uses.

OpenAI's own encrypted reasoning is not ours and is dropped by the translation; the native pass-through,
replaying a history this translation wrote, drops ours (`for_openai`).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson

_CARRIED = "inferplex.v1:"


def carried(thinking_blocks: list[dict[str, Any]]) -> str:
    """Thinking blocks as a reasoning item's `encrypted_content`."""
    return _CARRIED + base64.urlsafe_b64encode(orjson.dumps(thinking_blocks)).decode()


def for_openai(item: dict[str, Any]) -> dict[str, Any] | None:
    """A stored item as OpenAI's own API takes it back (the native pass-through replaying a history this
    translation wrote): None for a reasoning item carrying our thinking blocks (OpenAI cannot decrypt
    them), a function call without Gemini's `extra_content` (an unknown parameter there)."""
    if item.get("type") == "reasoning" and str(item.get("encrypted_content") or "").startswith(_CARRIED):
        return None
    if item.get("type") == "function_call" and "extra_content" in item:
        return {k: v for k, v in item.items() if k != "extra_content"}
    return item


def uncarried(content: Any) -> list[dict[str, Any]]:
    """The thinking blocks in an `encrypted_content`, [] when it is not one of ours or not readable."""
    if not isinstance(content, str) or not content.startswith(_CARRIED):
        return []
    try:
        blocks = orjson.loads(base64.urlsafe_b64decode(content[len(_CARRIED) :]))
    except (binascii.Error, ValueError):
        return []
    return [b for b in blocks if isinstance(b, dict)] if isinstance(blocks, list) else []
