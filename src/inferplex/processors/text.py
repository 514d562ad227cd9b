"""Reading and rewriting the text a request carries.

A rewrite changes the request's body only and returns it with `GatewayRequest.replace`: the JSON an
OpenAI-compatible upstream is sent is derived from that body, so redacted text cannot reach the model by
another road. These helpers rewrite string contents and text parts, leaving images, tool calls and
everything else untouched, and never mutate the caller's objects.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from inferplex.canonical import ChatRequest, Message
from inferplex.gateway_request import GatewayRequest
from inferplex.responses import ChatCompletion

ALL_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def texts(request: ChatRequest, roles: Collection[str] = ALL_ROLES) -> list[str]:
    return [m.text() for m in request.messages if m.role in roles]


def last_user_text(request: ChatRequest) -> str:
    for m in reversed(request.messages):
        if m.role == "user":
            return m.text()
    return ""


def _rewrite_message(m: Message, fn: Callable[[str], str]) -> Message:
    if isinstance(m.content, str):
        return m.model_copy(update={"content": fn(m.content)})
    if isinstance(m.content, list):
        parts = [p.model_copy(update={"text": fn(p.text)}) if p.type == "text" and p.text else p for p in m.content]
        return m.model_copy(update={"content": parts})
    return m


def rewrite(
    request: GatewayRequest[ChatRequest], fn: Callable[[str], str], roles: Collection[str] = ALL_ROLES
) -> GatewayRequest[ChatRequest]:
    """Apply `fn` to every text of the messages whose role is in `roles`.

    `fn` runs once per distinct text, so what it counts (redactions, corrections) is counted once."""
    seen: dict[str, str] = {}

    def once(text: str) -> str:
        found = seen.get(text)
        if found is None:
            found = seen[text] = fn(text)
        return found

    body = request.body
    messages = [_rewrite_message(m, once) if m.role in roles else m for m in body.messages]
    return request.replace(body.model_copy(update={"messages": messages}))


def map_answer(response: ChatCompletion, fn: Callable[[str], str]) -> ChatCompletion:
    """Apply `fn` to the content of every choice of a buffered completion (in place; it is ours)."""
    for choice in response.get("choices") or ():
        message = choice.get("message") or {}
        content = message.get("content")
        if isinstance(content, str):
            message["content"] = fn(content)
    return response
