"""Reading and rewriting the text a request carries, in both forms the pipeline holds.

The pipeline passes the canonical request and the caller's raw JSON side by side (OpenAI-compatible
upstreams forward the raw JSON), so a processor that rewrites text must rewrite both the same way, or the
redacted text would reach the model by the other road. These helpers do that for string contents and text
parts, leaving images, tool calls and everything else untouched, and never mutating the caller's objects.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from inferplex.canonical import ChatRequest, Message
from inferplex.responses import ChatCompletion

ALL_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def texts(request: ChatRequest, roles: Collection[str] = ALL_ROLES) -> list[str]:
    return [m.text() for m in request.messages if m.role in roles]


def last_user_text(request: ChatRequest) -> str:
    for m in reversed(request.messages):
        if m.role == "user":
            return m.text()
    return ""


def _rewrite_content(content: Any, fn: Callable[[str], str]) -> Any:
    if isinstance(content, str):
        return fn(content)
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                part = {**part, "text": fn(part["text"])}
            out.append(part)
        return out
    return content


def _rewrite_message(m: Message, fn: Callable[[str], str]) -> Message:
    if isinstance(m.content, str):
        return m.model_copy(update={"content": fn(m.content)})
    if isinstance(m.content, list):
        parts = [p.model_copy(update={"text": fn(p.text)}) if p.type == "text" and p.text else p for p in m.content]
        return m.model_copy(update={"content": parts})
    return m


def rewrite(
    request: ChatRequest, raw: dict[str, Any], fn: Callable[[str], str], roles: Collection[str] = ALL_ROLES
) -> tuple[ChatRequest, dict[str, Any]]:
    """Apply `fn` to every text of the messages whose role is in `roles`, in the request and the raw JSON.

    `fn` runs once per distinct text (the raw JSON holds the same texts again), so what it counts is right."""
    seen: dict[str, str] = {}

    def once(text: str) -> str:
        found = seen.get(text)
        if found is None:
            found = seen[text] = fn(text)
        return found

    messages = [_rewrite_message(m, once) if m.role in roles else m for m in request.messages]
    new_request = request.model_copy(update={"messages": messages})
    raw_messages = raw.get("messages")
    if not isinstance(raw_messages, list):
        return new_request, raw
    new_raw_messages = []
    for m in raw_messages:
        if isinstance(m, dict) and m.get("role") in roles and "content" in m:
            m = {**m, "content": _rewrite_content(m["content"], once)}
        new_raw_messages.append(m)
    return new_request, {**raw, "messages": new_raw_messages}


def map_answer(response: ChatCompletion, fn: Callable[[str], str]) -> ChatCompletion:
    """Apply `fn` to the content of every choice of a buffered completion (in place; it is ours)."""
    for choice in response.get("choices") or ():
        message = choice.get("message") or {}
        content = message.get("content")
        if isinstance(content, str):
            message["content"] = fn(content)
    return response
