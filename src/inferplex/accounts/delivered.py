"""Tokens the gateway counts itself, for a stream that ends without the provider's usage (docs/accounts.md).

A stream cut short (its upstream failed mid-way, or its caller hung up) is billed for what it delivered.
The provider never said how many tokens that was, so the gateway counts: the output from the characters
delivered, and the prompt from its text, both at 4 characters a token rounded up (`estimate_output_tokens`,
the ratio the routing policy also prices by). Not the reservation's prompt estimate (a token per 3 JSON
characters plus framing), which is a deliberate over-estimate meant to cover the call, not to bill it.
"""

from __future__ import annotations

import orjson

from inferplex.accounts.pricing import estimate_output_tokens
from inferplex.canonical import ChatRequest


def counted_prompt_tokens(request: ChatRequest) -> int:
    """The prompt's tokens at 4 characters a token: every message's text, the tool calls in the history, and
    the tools offered (name, description, parameter schema), as the provider reads them all."""
    chars = 0
    for m in request.messages:
        chars += len(m.text())
        for call in m.tool_calls or ():
            chars += len(call.function.name) + len(call.function.arguments)
    for tool in request.tools or ():
        fn = tool.function
        if fn is not None:
            chars += len(fn.name) + len(fn.description or "")
            chars += len(orjson.dumps(fn.parameters)) if fn.parameters else 0
    return estimate_output_tokens(chars)
