"""System prompt assembly: the one system prompt an upstream receives, built once the model is known.

Inferada sends every provider ONE system prompt, in this order: the model's default prompt (config
`system_prompt`, rendered in the model's `template_render_mode`), then the processors' segments, then the
caller's system and developer messages (each rendered with variables only, in `vars` and `logic` modes),
joined by a line `---` with a blank line on each side. It becomes a single `system` message at the front of
the canonical request, so each adapter puts it in its provider's own system field (Anthropic's and
Bedrock's `system`, Gemini's `systemInstruction`) and an OpenAI-compatible upstream gets it first.

The stage runs after the model is resolved (the mode and the default are the model's) and before admission,
so the worst-case estimate counts the prompt that is sent. A model with no default prompt and mode `off`
costs one comparison: the request goes on untouched, its wire still the caller's own JSON. User, assistant
and tool messages are never read here.

`inferada.use_default_prompt: false` leaves the model's default out of one request (Inferada publishes the
option, not its name: the name is inferred; `GatewayOptions.use_default_prompt`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from inferplex.canonical import ChatRequest, Message
from inferplex.config import ModelConfig
from inferplex.errors import InvalidRequest, Unavailable
from inferplex.gateway_request import GatewayRequest
from inferplex.prompting.templates import Mode, TemplateProblem, render, variables_now

SEPARATOR = "\n\n---\n\n"
SYSTEM_ROLES = ("system", "developer")

log = logging.getLogger("inferplex")


def assemble(
    request: GatewayRequest[ChatRequest], model: ModelConfig, segments: Sequence[str] = ()
) -> GatewayRequest[ChatRequest]:
    """The request with its one system prompt in front, or `request` itself when there is nothing to do
    (no default prompt, mode `off`, no segments) or when it already has exactly that prompt."""
    mode = model.template_render_mode
    if model.system_prompt is None and mode == "off" and not segments:
        return request
    values = variables_now()
    parts: list[str] = []
    if model.system_prompt is not None and request.options.use_default_prompt:
        parts.append(_default(model, mode, values))
    parts += segments
    rest: list[Message] = []
    for i, message in enumerate(request.body.messages):
        if message.role in SYSTEM_ROLES:
            parts.append(_caller(i, message, mode, values))
        else:
            rest.append(message)
    text = SEPARATOR.join(p for p in (part.strip() for part in parts) if p)
    if not text or _already(request.body.messages, text):
        return request
    messages = [Message(role="system", content=text), *rest]
    return request.replace(request.body.model_copy(update={"messages": messages}))


def _already(messages: list[Message], text: str) -> bool:
    """Whether the request already is what assembly would make of it (one system message, first, with this
    text): then it is forwarded as the caller sent it, without deriving a new wire."""
    first = messages[0]
    return first.role == "system" and first.content == text and not any(m.role in SYSTEM_ROLES for m in messages[1:])


def _default(model: ModelConfig, mode: Mode, values: Mapping[str, str]) -> str:
    """The model's default prompt, rendered. The config check rendered it already (for a whole week of
    dates), so a failure here is the operator's template misbehaving at run time: the caller is told the
    model cannot be served now (503) and the operator finds the template's error in the log."""
    assert model.system_prompt is not None
    try:
        return render(model.system_prompt, mode, values)
    except TemplateProblem as exc:
        log.error("the system_prompt of model %s failed to render: %s", model.name, exc)
        raise Unavailable(f"The model {model.name!r} is misconfigured: its system prompt cannot be rendered.") from None


def _caller(index: int, message: Message, mode: Mode, values: Mapping[str, str]) -> str:
    """A caller's system or developer message: variables only, in `vars` and `logic` modes alike (a
    caller's text is untrusted), else literal. A template error is the caller's: a 400 naming the message."""
    text = message.text()
    if mode == "off":
        return text
    try:
        return render(text, "vars", values)
    except TemplateProblem as exc:
        raise InvalidRequest(
            f"Invalid template in messages[{index}] (a {message.role} message): {exc}. This model renders "
            "system messages as templates: write {{ variable }} only, or {% raw %}...{% endraw %} for literal "
            "braces.",
            param=f"messages[{index}].content",
            code="invalid_template",
        ) from None
