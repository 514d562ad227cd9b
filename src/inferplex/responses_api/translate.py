"""The Responses API translated to and from the gateway's canonical chat request, as pure functions.

A Responses request is a list of items (messages, function calls, their outputs, reasoning) plus options;
the canonical request is chat's list of messages. `to_chat` turns the stored history of earlier turns and
this request's input into one chat body (what `parse_request(ChatRequest, ...)` accepts), so metering,
limits, routing and every provider are chat's, unchanged. `response_object` turns the `chat.completion`
that comes back into OpenAI's `response` object; responses_api/events.py does the same for a stream.

Items are stored as OpenAI lists them (`GET /v1/responses/{id}/input_items`): every item with an id and
every message's content as a list of typed parts. `input_items` normalises this request's input into that
form once, so a later turn reads its history back as ordinary input items.

What chat cannot carry is refused here with a 400 naming the item (`input[2].content[0].type`,
`tools[1].type`): hosted tools no upstream of ours runs, prompt templates, conversations, files by id. The
native pass-through (responses_api/native.py) forwards such requests as they are instead.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from inferplex.errors import InvalidRequest
from inferplex.responses_api.carried import carried, uncarried
from inferplex.responses_api.wire import HOSTED_TOOL_TYPES, ResponsesRequest
from inferplex.translate.reasoning import BUDGETS

NewId = Callable[[str], str]  # a fresh id for a prefix (`msg`, `fc`, ...); tests pass a counter


def new_id(prefix: str) -> str:
    """An id as OpenAI's look: a prefix and 48 hex digits."""
    return f"{prefix}_{secrets.token_hex(24)}"


# OpenAI's effort levels the canonical `reasoning_effort` does not name, as the nearest one it does.
_EFFORT_ALIASES = {"max": "xhigh"}


# ---- input: items as stored -------------------------------------------------------------------------------


def input_items(request: ResponsesRequest, *, make_id: NewId = new_id) -> list[dict[str, Any]]:
    """This request's input as stored items, in order, each with an id (kept when the caller sent one):
    a string is one user message; messages get their content as typed parts."""
    if request.input is None:
        return []
    if isinstance(request.input, str):
        return [_stored_message("user", [{"type": "input_text", "text": request.input}], make_id("msg"))]
    return [_stored(item, f"input[{i}]", make_id) for i, item in enumerate(request.input)]


def _stored(item: Any, param: str, make_id: NewId) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise InvalidRequest(f"Invalid value for '{param}': an input item must be an object.", param=param)
    kind = item.get("type") or "message"
    if kind == "message":
        role = item.get("role")
        if role not in ("user", "assistant", "system", "developer"):
            raise InvalidRequest(
                f"Invalid value for '{param}.role': use one of user, assistant, system, developer.",
                param=f"{param}.role",
            )
        content = item.get("content")
        text_type = "output_text" if role == "assistant" else "input_text"
        if isinstance(content, str):
            parts: list[dict[str, Any]] = [text_part(text_type, content)]
        elif isinstance(content, list) and all(isinstance(p, dict) for p in content):
            parts = [text_part(text_type, p["text"]) if _is_bare_text(p) else dict(p) for p in content]
        else:
            raise InvalidRequest(
                f"Invalid value for '{param}.content': expected a string or a list of content parts.",
                param=f"{param}.content",
            )
        return _stored_message(role, parts, item.get("id") or make_id("msg"))
    prefix = {"function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}.get(kind, "item")
    stored = dict(item)
    stored["type"] = kind
    if kind != "item_reference":
        stored["id"] = stored.get("id") or make_id(prefix)
        stored["status"] = stored.get("status") or "completed"
    return stored


def _is_bare_text(part: dict[str, Any]) -> bool:
    return part.get("type") in ("input_text", "output_text") and isinstance(part.get("text"), str)


def text_part(kind: str, text: str) -> dict[str, Any]:
    """A text content part: `input_text`, or `output_text` with its (empty) annotations and logprobs."""
    if kind == "output_text":
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {"type": "input_text", "text": text}


def _stored_message(role: str, parts: list[dict[str, Any]], item_id: str) -> dict[str, Any]:
    return {"type": "message", "id": item_id, "role": role, "status": "completed", "content": parts}


# ---- input: items as chat messages ------------------------------------------------------------------------


def to_chat(
    request: ResponsesRequest,
    history: list[dict[str, Any]],
    *,
    stream: bool | None = None,
    context_window: int | None = None,
) -> dict[str, Any]:
    """The chat body for this request: `instructions` as a system message first, then the history (earlier
    turns' input and output items, in order) and this request's input as messages, and the options chat has.
    `stream` overrides the request's own (a background run streams to record its events); a streamed body
    always asks for usage, so the stream is metered. With `truncation: "auto"` and a `context_window`, the
    oldest turns are dropped to fit (`truncate`)."""
    _refuse_unsupported(request)
    items = [(item, "previous_response_id") for item in history]
    items += [(item, f"input[{i}]") for i, item in enumerate(input_items(request, make_id=_no_id))]
    messages = messages_from(items, history)
    if request.instructions:
        messages.insert(0, {"role": "system", "content": request.instructions})
    if not messages:
        raise InvalidRequest("Missing required parameter: 'input'.", param="input")
    if request.truncation == "auto" and context_window:
        messages = truncate(messages, context_window - (request.max_output_tokens or 0))
    body: dict[str, Any] = {"model": request.model, "messages": messages}
    if request.tools:
        body["tools"] = [_chat_tool(tool, f"tools[{i}]") for i, tool in enumerate(request.tools)]
        if request.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = request.parallel_tool_calls
    if request.tool_choice is not None:
        body["tool_choice"] = _chat_tool_choice(request.tool_choice)
    fmt = request.text.format if request.text is not None else None
    if fmt is not None and fmt.type != "text":
        if fmt.type == "json_object":
            body["response_format"] = {"type": "json_object"}
        else:
            schema = {"name": fmt.name, "schema": fmt.schema_, "strict": fmt.strict, "description": fmt.description}
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {k: v for k, v in schema.items() if v is not None},
            }
    effort = request.reasoning.effort if request.reasoning is not None else None
    if effort is not None:
        effort = _EFFORT_ALIASES.get(effort, effort)
        if effort not in BUDGETS:
            levels = ", ".join([*BUDGETS, *_EFFORT_ALIASES])
            raise InvalidRequest(
                f"Invalid value for 'reasoning.effort': use one of {levels}.", param="reasoning.effort"
            )
        body["reasoning_effort"] = effort
    if request.max_output_tokens is not None:
        body["max_completion_tokens"] = request.max_output_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.top_p is not None:
        body["top_p"] = request.top_p
    if request.stream if stream is None else stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def _no_id(prefix: str) -> str:
    return ""  # chat needs no item ids: the translation never looks at them


def _refuse_unsupported(request: ResponsesRequest) -> None:
    if request.conversation is not None:
        raise InvalidRequest(
            "Conversations are not supported by this gateway; chain responses with 'previous_response_id'.",
            param="conversation",
        )
    if request.prompt is not None:
        raise InvalidRequest("Prompt templates ('prompt') are not supported by this gateway.", param="prompt")
    for i, tool in enumerate(request.tools or ()):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            hosted = kind in HOSTED_TOOL_TYPES
            what = f"The hosted tool {kind!r}" if hosted else f"The tool type {kind!r}"
            raise InvalidRequest(
                f"{what} is not supported for model {request.model!r}: only 'function' tools can be "
                "used through this gateway's translation to chat.",
                param=f"tools[{i}].type",
            )


def messages_from(items: Iterable[tuple[dict[str, Any], str]], history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages for (item, param) pairs in order: consecutive function calls (and the assistant text
    before them) become one assistant message with `tool_calls`, each output a `tool` message; a reasoning
    item's text rides on the assistant message that follows it as `reasoning_content` (where the canonical
    keeps it), with the signed thinking blocks its `encrypted_content` carries (`carried`), or is dropped
    when none follows. `item_reference`s are looked up in `history`."""
    by_id = {item.get("id"): item for item in history if item.get("id")}
    out: list[dict[str, Any]] = []
    reasoning: dict[str, Any] | None = None
    for item, param in items:
        kind = item.get("type") or "message"
        if kind == "item_reference":
            ref = by_id.get(item.get("id"))
            if ref is None:
                raise InvalidRequest(f"Item with id {item.get('id')!r} not found.", param=f"{param}.id")
            item, kind = ref, ref.get("type") or "message"
        if kind == "reasoning":
            reasoning = _reasoning(item)
            continue
        if kind == "message":
            message = _message(item, param)
        elif kind == "function_call":
            call = {
                "id": _string(item, "call_id", param),
                "type": "function",
                "function": {"name": _string(item, "name", param), "arguments": _string(item, "arguments", param)},
            }
            if isinstance(item.get("extra_content"), dict):  # Gemini's thought signature, wanted back
                call["extra_content"] = item["extra_content"]
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
                continue
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
        elif kind == "function_call_output":
            message = {
                "role": "tool",
                "tool_call_id": _string(item, "call_id", param),
                "content": _tool_output(item.get("output"), f"{param}.output"),
            }
        else:
            raise InvalidRequest(
                f"Input items of type {kind!r} are not supported by this gateway's translation to chat.",
                param=f"{param}.type",
            )
        if message["role"] == "assistant" and reasoning:
            message.update(reasoning)
        reasoning = None
        out.append(message)
    return out


def _string(item: dict[str, Any], key: str, param: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise InvalidRequest(f"Missing required parameter: '{param}.{key}'.", param=f"{param}.{key}")
    return value


def _reasoning(item: dict[str, Any]) -> dict[str, Any]:
    """What a reasoning item gives the assistant message after it: its own text when present, else its
    summaries joined, as `reasoning_content`; the thinking blocks it carries as `thinking_blocks`."""
    parts = item.get("content") or item.get("summary") or []
    text = "".join(p.get("text", "") for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))
    out: dict[str, Any] = {"reasoning_content": text} if text else {}
    blocks = uncarried(item.get("encrypted_content"))
    if blocks:
        out["thinking_blocks"] = blocks
    return out


def _message(item: dict[str, Any], param: str) -> dict[str, Any]:
    role = item["role"]
    content = item["content"]
    if role == "assistant":
        texts: list[str] = []
        refusal: list[str] = []
        for j, part in enumerate(content):
            if part.get("type") in ("output_text", "input_text"):
                texts.append(part.get("text", ""))
            elif part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
                refusal.append(part["refusal"])
            else:
                _bad_part(part, f"{param}.content[{j}]")
        message: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
        if refusal:
            message["refusal"] = "".join(refusal)
            message["content"] = message["content"] or None
        return message
    parts = [_chat_part(p, f"{param}.content[{j}]") for j, p in enumerate(content)]
    if role in ("system", "developer"):
        if any(p["type"] != "text" for p in parts):
            raise InvalidRequest(
                f"Invalid value for '{param}.content': a {role} message takes text only.", param=f"{param}.content"
            )
        return {"role": "system", "content": "".join(p["text"] for p in parts)}
    if all(p["type"] == "text" for p in parts):
        return {"role": "user", "content": "".join(p["text"] for p in parts)}
    return {"role": "user", "content": parts}


def _chat_part(part: dict[str, Any], param: str) -> dict[str, Any]:
    """One input content part as chat's: text, an image by URL (or data URL), a file inline, audio."""
    kind = part.get("type")
    if kind == "input_text" and isinstance(part.get("text"), str):
        return {"type": "text", "text": part["text"]}
    if kind == "input_image":
        url = part.get("image_url")
        if not isinstance(url, str):
            raise InvalidRequest(
                f"Invalid value for '{param}': send the image as 'image_url' (a URL or a data URL), or as "
                "'file_id' (a file uploaded to this gateway's /v1/files).",
                param=f"{param}.image_url",
            )
        image: dict[str, Any] = {"url": url}
        if part.get("detail") in ("low", "high", "auto"):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    if kind == "input_file":
        if part.get("file_url") is not None:
            raise InvalidRequest(
                f"Invalid value for '{param}.file_url': files by URL are not supported by this gateway's "
                "translation to chat; send 'file_data', or 'file_id' (a file uploaded to this gateway's /v1/files).",
                param=f"{param}.file_url",
            )
        file = {k: part[k] for k in ("file_data", "file_id", "filename") if isinstance(part.get(k), str)}
        if "file_data" not in file and "file_id" not in file:
            raise InvalidRequest(f"Missing required parameter: '{param}.file_data'.", param=f"{param}.file_data")
        return {"type": "file", "file": file}
    if kind == "input_audio" and isinstance(part.get("input_audio"), dict):
        return {"type": "input_audio", "input_audio": part["input_audio"]}
    _bad_part(part, param)
    raise AssertionError  # unreachable: _bad_part raises


def _bad_part(part: dict[str, Any], param: str) -> None:
    raise InvalidRequest(
        f"Invalid value for '{param}.type': content parts of type {part.get('type')!r} are not supported here.",
        param=f"{param}.type",
    )


def _tool_output(output: Any, param: str) -> str | list[dict[str, Any]]:
    if isinstance(output, str):
        return output
    if not isinstance(output, list) or not all(isinstance(p, dict) for p in output):
        raise InvalidRequest(f"Missing required parameter: '{param}'.", param=param)
    parts = [_chat_part(p, f"{param}[{j}]") for j, p in enumerate(output)]
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def _chat_tool(tool: dict[str, Any], param: str) -> dict[str, Any]:
    """A Responses function tool (flat: name, parameters, strict) as chat's (nested under `function`)."""
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequest(f"Missing required parameter: '{param}.name'.", param=f"{param}.name")
    function: dict[str, Any] = {"name": name}
    for key in ("description", "parameters", "strict"):
        if tool.get(key) is not None:
            function[key] = tool[key]
    return {"type": "function", "function": function}


def _chat_tool_choice(choice: str | dict[str, Any]) -> str | dict[str, Any]:
    if isinstance(choice, str):
        return choice
    kind = choice.get("type")
    if kind == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    if kind == "allowed_tools" and isinstance(choice.get("tools"), list):
        tools = []
        for i, tool in enumerate(choice["tools"]):
            if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("name"), str):
                raise InvalidRequest(
                    "Invalid value for 'tool_choice.tools': only function tools can be allowed here.",
                    param=f"tool_choice.tools[{i}]",
                )
            tools.append({"type": "function", "function": {"name": tool["name"]}})
        return {"type": "allowed_tools", "allowed_tools": {"mode": choice.get("mode", "auto"), "tools": tools}}
    raise InvalidRequest(
        f"Invalid value for 'tool_choice': tool choices of type {kind!r} are not supported by this gateway's "
        "translation to chat.",
        param="tool_choice.type",
    )


# ---- truncation -------------------------------------------------------------------------------------------


def estimate_tokens(messages: list[dict[str, Any]]) -> int:
    """The gateway's over-estimate, as families/chat.py makes it: a token per 3 JSON characters."""
    return math.ceil(len(orjson.dumps(messages)) / 3) + 8


def truncate(messages: list[dict[str, Any]], context_window: int) -> list[dict[str, Any]]:
    """`truncation: "auto"`: drop the oldest turns (never a system message, never the last turn) until the
    estimate fits the window. An assistant message with tool calls and the tool results answering it go
    together, so no call is left without its output nor an output without its call."""
    system = [m for m in messages if m["role"] == "system"]
    units: list[list[dict[str, Any]]] = []
    for m in messages:
        if m["role"] == "system":
            continue
        if m["role"] == "tool" and units and units[-1][0].get("tool_calls"):
            units[-1].append(m)
        else:
            units.append([m])
    fixed = len(orjson.dumps(system))
    sizes = [len(orjson.dumps(u)) for u in units]  # in JSON characters, as the estimate counts
    total = sum(sizes)
    start = 0
    while math.ceil((fixed + total) / 3) + 8 > context_window and start < len(units) - 1:
        total -= sizes[start]
        start += 1
    if start == 0:
        return messages
    kept = [m for u in units[start:] for m in u]
    return system + kept


# ---- output: the response object ---------------------------------------------------------------------------


def skeleton(
    request: ResponsesRequest,
    *,
    response_id: str,
    created_at: int,
    status: str = "in_progress",
    previous_response_id: str | None = None,
) -> dict[str, Any]:
    """The `response` object before any output: what `response.created` carries, and what a queued
    background response shows. The request's options are echoed with OpenAI's defaults filled in."""
    text: dict[str, Any] = {"format": {"type": "text"}, "verbosity": "medium"}
    if request.text is not None:
        if request.text.format is not None:
            text["format"] = request.text.format.model_dump(by_alias=True, exclude_none=True)
        if request.text.verbosity is not None:
            text["verbosity"] = request.text.verbosity
    reasoning = request.reasoning
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "background": bool(request.background),
        "completed_at": None,
        "error": None,
        "incomplete_details": None,
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "max_tool_calls": request.max_tool_calls,
        "model": request.model,
        "output": [],
        "parallel_tool_calls": True if request.parallel_tool_calls is None else request.parallel_tool_calls,
        "previous_response_id": previous_response_id or request.previous_response_id,
        "prompt_cache_key": request.prompt_cache_key,
        "reasoning": {
            "effort": reasoning.effort if reasoning is not None else None,
            "summary": request.summary,
        },
        "safety_identifier": request.safety_identifier,
        "service_tier": request.service_tier or "auto",
        "store": request.store,
        "temperature": 1.0 if request.temperature is None else request.temperature,
        "text": text,
        "tool_choice": "auto" if request.tool_choice is None else request.tool_choice,
        "tools": [_echo_tool(t) for t in request.tools or ()],
        "top_logprobs": request.top_logprobs or 0,
        "top_p": 1.0 if request.top_p is None else request.top_p,
        "truncation": request.truncation or "disabled",
        "usage": None,
        "user": request.user,
        "metadata": dict(request.metadata or {}),
    }


def _echo_tool(tool: dict[str, Any]) -> dict[str, Any]:
    out = dict(tool)
    if out.get("type") == "function":
        out.setdefault("description", None)
        out.setdefault("parameters", None)
        out.setdefault("strict", None)
    return out


def response_object(
    request: ResponsesRequest,
    *,
    response_id: str,
    created_at: int,
    completion: dict[str, Any],
    status_override: str | None = None,
    completed_at: int | None = None,
    make_id: NewId = new_id,
) -> dict[str, Any]:
    """The full `response` object for a buffered `chat.completion`: output items (reasoning, the message,
    function calls), usage, and the status its finish reason means (`length` and `content_filter` are
    `incomplete`). `status_override` sets another (`cancelled`, `failed`)."""
    response = skeleton(request, response_id=response_id, created_at=created_at)
    choice = (completion.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    output: list[dict[str, Any]] = []
    blocks = message.get("thinking_blocks") or []
    if message.get("reasoning_content") or blocks:
        output.append(reasoning_item(make_id("rs"), message.get("reasoning_content") or "", thinking_blocks=blocks))
    if message.get("content") or message.get("refusal") or not message.get("tool_calls"):
        output.append(message_item(make_id("msg"), message.get("content") or "", message.get("refusal")))
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        item = function_call_item(
            make_id("fc"), call.get("id", ""), function.get("name", ""), function.get("arguments")
        )
        if isinstance(call.get("extra_content"), dict):
            item["extra_content"] = call["extra_content"]
        output.append(item)
    status, reason = finish_status(choice.get("finish_reason"))
    if status == "incomplete":
        for item in output:
            item["status"] = "incomplete"
    response["output"] = output
    response["usage"] = response_usage(completion.get("usage"))
    return finished(response, status_override or status, reason, completed_at or created_at)


def finished(response: dict[str, Any], status: str, reason: str | None, completed_at: int) -> dict[str, Any]:
    """The response with its final status (and, for `incomplete`, why; `completed_at` once completed)."""
    response["status"] = status
    response["incomplete_details"] = {"reason": reason} if status == "incomplete" and reason else None
    response["completed_at"] = completed_at if status == "completed" else None
    return response


def finish_status(finish_reason: str | None) -> tuple[str, str | None]:
    """(status, incomplete reason) for a chat finish reason."""
    if finish_reason == "length":
        return "incomplete", "max_output_tokens"
    if finish_reason == "content_filter":
        return "incomplete", "content_filter"
    return "completed", None


def reasoning_item(
    item_id: str, text: str, status: str = "completed", thinking_blocks: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Reasoning as a summary (what Responses clients show), and the upstream's signed thinking blocks, if
    any, carried in `encrypted_content` (`carried`) so the next turn can send them back."""
    summary = [{"type": "summary_text", "text": text}] if text else []
    item: dict[str, Any] = {"type": "reasoning", "id": item_id, "summary": summary, "status": status}
    if thinking_blocks:
        item["encrypted_content"] = carried(thinking_blocks)
    return item


def message_item(item_id: str, text: str, refusal: str | None = None, status: str = "completed") -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if text or not refusal:
        content.append(text_part("output_text", text))
    if refusal:
        content.append({"type": "refusal", "refusal": refusal})
    return {"type": "message", "id": item_id, "role": "assistant", "status": status, "content": content}


def function_call_item(
    item_id: str, call_id: str, name: str, arguments: Any, status: str = "completed"
) -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else orjson.dumps(arguments or {}).decode()
    item = {"type": "function_call", "id": item_id, "call_id": call_id, "name": name, "arguments": args}
    return {**item, "status": status}


def response_usage(usage: dict[str, Any] | None) -> dict[str, Any] | None:
    """Chat's usage in Responses' names; None when the completion had none."""
    if not usage:
        return None
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    return {
        "input_tokens": prompt,
        "input_tokens_details": {
            "cached_tokens": int(prompt_details.get("cached_tokens") or 0),
            "cache_write_tokens": int(
                prompt_details.get("cache_write_tokens") or usage.get("cache_creation_input_tokens") or 0
            ),
        },
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": int(completion_details.get("reasoning_tokens") or 0)},
        "total_tokens": int(usage.get("total_tokens") or prompt + completion),
    }
