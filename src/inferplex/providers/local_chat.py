"""Pure translation for the local chat models: canonical request in, generation plan out, and back.

Kept apart from llama.cpp so it can be tested without a model. Structured output is guaranteed by
constraining the sampler with a GBNF grammar compiled from a JSON schema (llama.cpp's own converter), not
by asking nicely: a tiny model cannot be trusted to follow instructions, but it cannot leave a grammar.

- `response_format` json_object / json_schema: the whole answer is constrained to the schema.
- `tools` with `tool_choice` "required" or a named function: the answer is constrained to
  `{"name": <one of the tools>, "arguments": <that tool's parameters schema>}` and returned as `tool_calls`.
- `tools` with `tool_choice` "auto" (the default): the grammar allows either such a call (the answer starts
  with `{`) or prose (it does not); a call is returned as `tool_calls`, prose as content.
- `tool_choice` "none": tools are ignored.

One call per answer: `parallel_tool_calls` is accepted, and a model that calls one tool at a time
honours it. The tool list is described to the model in the system message, since small models' chat
templates (SmolLM2's included) have no place for it.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from inferplex.canonical import ChatRequest, Message
from inferplex.capabilities import D, N, ProviderCapabilities
from inferplex.errors import InvalidRequest
from inferplex.responses import (
    ChatCompletion,
    ChatCompletionChunk,
    Choice,
    ChunkChoice,
    Delta,
    FunctionCall,
    ToolCall,
    Usage,
)

Mode = Literal["text", "json", "tool_required", "tool_auto"]

# llama.cpp's JSON-schema converter lets raw control characters into strings; strict JSON forbids them.
_CHAR_RULE = re.compile(r'^char ::= \[\^"\\\\\]', re.M)
_STRICT_CHAR = r'char ::= [^"\\\x00-\x1F\x7F]'
# In auto mode prose is anything that does not start with "{" (or white space that could precede one).
_PROSE_RULES = "prose ::= [^{ \\t\\n\\r] [^\\x00]*\n"

# What the local runtime cannot honour: dropped and named, or refused with `drop_params: false`, decided by
# `capabilities.plan` as for every provider. Everything else it checks itself (`plan_chat`'s 400s name it).
CAPABILITIES = ProviderCapabilities(audio_input=N, logprobs=D, logit_bias=D, thinking=D, top_k=D, cache_control=D)


@dataclass(slots=True)
class ChatPlan:
    """Everything a worker thread needs to run one request, decided on the event loop."""

    messages: list[dict[str, str]]
    mode: Mode = "text"
    grammar: str | None = None
    tool_names: list[str] = field(default_factory=list)
    n: int = 1
    max_tokens: int | None = None
    max_output: int | None = None
    context_limit: int | None = None
    stops: list[str] = field(default_factory=list)
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0


def schema_grammar(schema: dict[str, Any], param: str) -> str:
    """A GBNF grammar for `schema`, or a 400 naming `param` when llama.cpp's converter cannot handle it."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    try:
        gbnf = json_schema_to_gbnf(json.dumps(schema))
    except Exception as exc:  # the converter raises bare Exceptions/ValueErrors/KeyErrors
        raise InvalidRequest(f"This JSON schema is not supported by the local model: {exc}", param=param) from None
    return _CHAR_RULE.sub(lambda _: _STRICT_CHAR, gbnf)


def _message_text(m: Message) -> str:
    if isinstance(m.content, list) and any(p.type not in ("text", "refusal") for p in m.content):
        raise InvalidRequest("The local model accepts text only; this message has non-text content.", param="messages")
    text = m.text()
    if m.role == "assistant" and m.tool_calls:
        calls = []
        for call in m.tool_calls:
            try:
                args: Any = json.loads(call.function.arguments or "{}")
            except ValueError:
                args = call.function.arguments
            calls.append(json.dumps({"name": call.function.name, "arguments": args}))
        text = "\n".join([text, *calls]) if text else "\n".join(calls)
    return text


def _tools_prompt(tools: list[dict[str, Any]], required: bool) -> str:
    lines = ["You can call these functions:"]
    lines += [json.dumps(t) for t in tools]
    lines.append('To call a function, answer with only a JSON object: {"name": <function name>, "arguments": {...}}.')
    if not required:
        lines.append("If no function is needed, answer the user directly in plain text.")
    return "\n".join(lines)


def _tool_grammar(tools: list[dict[str, Any]], auto: bool) -> str:
    alternatives = [
        {
            "type": "object",
            "properties": {
                "name": {"const": t["name"]},
                "arguments": t.get("parameters") or {"type": "object"},
            },
            "required": ["name", "arguments"],
        }
        for t in tools
    ]
    schema: dict[str, Any] = alternatives[0] if len(alternatives) == 1 else {"oneOf": alternatives}
    gbnf = schema_grammar(schema, "tools")
    if not auto:
        return gbnf
    gbnf = re.sub(r"^root ::=", "tool-call ::=", gbnf, count=1, flags=re.M)
    return "root ::= tool-call | prose\n" + _PROSE_RULES + gbnf


def plan_chat(request: ChatRequest, max_output: int | None, context_limit: int | None) -> ChatPlan:
    """Translate a canonical request; raises InvalidRequest for what the local runtime cannot do."""
    plan = ChatPlan(messages=[])
    plan.n = request.n or 1
    plan.max_tokens = request.output_limit
    plan.max_output = max_output
    plan.context_limit = context_limit
    if plan.max_tokens is not None and max_output is not None and plan.max_tokens > max_output:
        param = "max_completion_tokens" if request.max_completion_tokens else "max_tokens"
        raise InvalidRequest(
            f"{param} is too large: {plan.max_tokens}. This model supports at most {max_output} completion tokens.",
            param=param,
        )
    plan.stops = [s for s in request.stop_list if s]
    if len(plan.stops) > 4:
        raise InvalidRequest("At most 4 stop sequences are allowed.", param="stop")
    plan.temperature, plan.top_p, plan.seed = request.temperature, request.top_p, request.seed
    plan.frequency_penalty = request.frequency_penalty or 0.0
    plan.presence_penalty = request.presence_penalty or 0.0

    messages = [
        {"role": {"developer": "system", "function": "tool"}.get(m.role, m.role), "content": _message_text(m)}
        for m in request.messages
    ]
    system_extra: list[str] = []

    choice = request.tool_choice
    tools = [t.function.model_dump(exclude_none=True) for t in request.tools or [] if t.function is not None]
    if request.tools and len(tools) != len(request.tools):
        raise InvalidRequest("The local model supports only tools of type 'function'.", param="tools")
    if tools and choice != "none":
        if request.response_format is not None and request.response_format.type != "text":
            raise InvalidRequest("tools and a JSON response_format cannot be combined here.", param="response_format")
        if choice is not None and not isinstance(choice, str):
            name = (choice.function or {}).get("name")
            if choice.type != "function" or not isinstance(name, str):
                raise InvalidRequest("tool_choice must name a function.", param="tool_choice")
            tools = [t for t in tools if t["name"] == name]
            if not tools:
                raise InvalidRequest(f"tool_choice names an unknown function {name!r}.", param="tool_choice")
            plan.mode = "tool_required"
        else:
            plan.mode = "tool_required" if choice == "required" else "tool_auto"
        plan.tool_names = [t["name"] for t in tools]
        plan.grammar = _tool_grammar(tools, auto=plan.mode == "tool_auto")
        system_extra.append(_tools_prompt(tools, required=plan.mode == "tool_required"))
    elif request.response_format is not None and request.response_format.type != "text":
        fmt = request.response_format
        schema = fmt.json_schema.schema_ if fmt.json_schema is not None else None
        plan.mode = "json"
        plan.grammar = schema_grammar(schema or {"type": "object"}, "response_format")
        hint = "Answer with only a JSON object."
        if schema:
            hint += " It must follow this JSON schema: " + json.dumps(schema)
        system_extra.append(hint)

    if system_extra:
        extra = "\n\n".join(system_extra)
        if messages[0]["role"] == "system":
            messages[0] = {"role": "system", "content": messages[0]["content"] + "\n\n" + extra}
        else:
            messages.insert(0, {"role": "system", "content": extra})
    plan.messages = messages
    return plan


def parse_tool_call(text: str, names: list[str], finished: bool) -> ToolCall | None:
    """The OpenAI `tool_calls` entry for a grammar-constrained answer, or None if the answer is prose.

    A call cut short by max_tokens is returned as far as it got (finish_reason says `length`), as OpenAI does.
    """
    stripped = text.strip()
    if not stripped.startswith("{"):
        return None
    name, arguments = "", stripped
    try:
        obj = json.loads(stripped)
        name, arguments = obj["name"], json.dumps(obj["arguments"], ensure_ascii=False)
    except (ValueError, KeyError, TypeError):
        if finished:
            raise
        found = re.match(r'\{\s*"name"\s*:\s*"([^"]*)"\s*,\s*"arguments"\s*:\s*', stripped)
        if found:
            name, arguments = found.group(1), stripped[found.end() :]
    if name not in names and finished:
        raise ValueError(f"unknown tool {name!r}")
    function: FunctionCall = {"name": name, "arguments": arguments}
    return {"id": "call_" + secrets.token_hex(12), "type": "function", "function": function}


def completion_id() -> str:
    return "chatcmpl-" + secrets.token_hex(12)


def chunk(cid: str, created: int, model: str, choices: list[ChunkChoice]) -> ChatCompletionChunk:
    return {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": choices,
    }


def delta(index: int, body: Delta, finish: str | None = None) -> ChunkChoice:
    return {"index": index, "delta": body, "logprobs": None, "finish_reason": finish}


def usage(prompt: int, completion: int) -> Usage:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def completion(model: str, choices: list[Choice], prompt: int, completion_tokens: int) -> ChatCompletion:
    return {
        "id": completion_id(),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": None,
        "choices": choices,
        "usage": usage(prompt, completion_tokens),
    }
