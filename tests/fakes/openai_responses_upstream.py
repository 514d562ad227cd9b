"""OpenAI's `POST /v1/responses` on the fake OpenAI upstream (tests/fakes/openai_upstream.py serves it).

It validates what OpenAI validates before running anything (the model, `input` as a string or items of
known types with the roles and content parts each allows, tools, `max_output_tokens` >= 16,
`stream_options` only with `stream`, `background` only with `store`) and refuses what an upstream that
keeps nothing cannot do: a `previous_response_id` it never stored, an `item_reference`, a reasoning item
without its `encrypted_content` when `store` is false. It answers with the full `response` object and, when
streamed, OpenAI's event grammar (`event: <type>` + `data:`, `sequence_number` from 0, no `[DONE]`).
Behaviour by model name, as the chat fake's:

- any name: a message echoing the last user text (`echo: <text>`); `max_output_tokens` below the answer's
  word count truncates it, status `incomplete` (`max_output_tokens`)
- `tool-*`: a `function_call` of the first function tool with `{"city": "Paris"}`; once the input ends with
  a `function_call_output`, a message `tool said: <output>`
- `search-*` with a `web_search` tool: a `web_search_call` item (and its events), then the echo
- `reason-*`: a reasoning item first (a summary when `reasoning.summary` is set, `encrypted_content` when
  `include` asks for it), 5 reasoning tokens in the usage
- `error-<status>`: that HTTP status with an OpenAI error body
- `die-midstream`: some text, then the connection dropped; `error-event`: `response.created`, then an
  `error` event; `fail-stream`: `response.created`, then `response.failed`
"""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from tests.fakes.openai_upstream import Recorded, _error

if TYPE_CHECKING:
    from tests.fakes.openai_upstream import FakeOpenAI

ROLES = {"user", "assistant", "system", "developer"}
INPUT_PARTS = {"input_text", "input_image", "input_file"}
OUTPUT_PARTS = {"output_text", "refusal"}
ITEM_TYPES = {
    "message",
    "function_call",
    "function_call_output",
    "reasoning",
    "item_reference",
    "web_search_call",
    "file_search_call",
    "computer_call",
    "computer_call_output",
    "code_interpreter_call",
    "image_generation_call",
    "local_shell_call",
    "local_shell_call_output",
    "mcp_call",
    "mcp_list_tools",
    "mcp_approval_request",
    "mcp_approval_response",
    "custom_tool_call",
    "custom_tool_call_output",
}
_ids = itertools.count(1)


def _id(prefix: str) -> str:
    return f"{prefix}_fake{next(_ids):08d}"


def _bad(message: str, param: str | None = None) -> web.Response:
    return _error(400, message, "invalid_request_error", param=param)


def validate(body: Any) -> web.Response | None:
    """The 400 (or 404) OpenAI answers for this body, else None."""
    if not isinstance(body, dict):
        return _bad("body must be an object")
    if not isinstance(body.get("model"), str) or not body["model"]:
        return _bad("Missing required parameter: 'model'.", "model")
    for key in ("provider", "models", "processors", "tags"):
        if key in body:
            return _bad(f"Unknown parameter: '{key}'.", key)
    store = body.get("store", True) is not False
    previous = body.get("previous_response_id")
    if previous is not None:
        return _error(404, f"Previous response with id '{previous}' not found.", param="previous_response_id")
    if body.get("background") and not store:
        return _bad("Background mode requires store to be true.", "background")
    if "stream_options" in body and not body.get("stream"):
        return _bad("stream_options is only allowed when stream is true", "stream_options")
    limit = body.get("max_output_tokens")
    if limit is not None and (not isinstance(limit, int) or limit < 16):
        return _bad(
            f"Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got {limit}.",
            "max_output_tokens",
        )
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        return _bad("Invalid type for 'tools': expected an array.", "tools")
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
            return _bad(f"Missing required parameter: 'tools[{i}].type'.", f"tools[{i}].type")
        if tool["type"] == "function" and not tool.get("name"):
            return _bad(f"Missing required parameter: 'tools[{i}].name'.", f"tools[{i}].name")
    items = body.get("input")
    if items is None or isinstance(items, str):
        return None
    if not isinstance(items, list):
        return _bad("Invalid type for 'input': expected a string or an array.", "input")
    for i, item in enumerate(items):
        bad = _item(item, f"input[{i}]", store)
        if bad is not None:
            return bad
    return None


def _item(item: Any, at: str, store: bool) -> web.Response | None:
    if not isinstance(item, dict):
        return _bad(f"Invalid type for '{at}': expected an object.", at)
    kind = item.get("type", "message" if "role" in item else None)
    if kind not in ITEM_TYPES:
        return _bad(f"Invalid value: '{kind}'. Supported values are: 'message', 'function_call', ...", f"{at}.type")
    if kind == "item_reference" or (kind == "reasoning" and not store and not item.get("encrypted_content")):
        return _error(
            404,
            f"Item with id '{item.get('id')}' not found. Items are not persisted when `store` is set to false. "
            "Try again with `store` set to true, or remove this item from your input.",
            param="input",
        )
    if kind == "message":
        role = item.get("role")
        if role not in ROLES:
            return _bad(f"Invalid value: '{role}'.", f"{at}.role")
        if role != "assistant" and "id" in item:  # an input message has no id (an output message has one)
            return _bad(f"Unknown parameter: '{at}.id'.", f"{at}.id")
        content = item.get("content")
        if isinstance(content, str):
            return None
        if not isinstance(content, list):
            return _bad(f"Invalid type for '{at}.content'.", f"{at}.content")
        allowed = OUTPUT_PARTS if role == "assistant" else INPUT_PARTS
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") not in allowed:
                got = part.get("type") if isinstance(part, dict) else part
                return _bad(
                    f"Invalid value: '{got}'. Supported values are: {sorted(allowed)}.", f"{at}.content[{j}].type"
                )
    elif kind == "function_call":
        for key in ("call_id", "name", "arguments"):
            if not isinstance(item.get(key), str):
                return _bad(f"Missing required parameter: '{at}.{key}'.", f"{at}.{key}")
    elif kind == "function_call_output":
        if not isinstance(item.get("call_id"), str) or "output" not in item:
            return _bad(f"Missing required parameter: '{at}.call_id'.", f"{at}.call_id")
    elif kind == "reasoning" and not isinstance(item.get("summary"), list):
        return _bad(f"Missing required parameter: '{at}.summary'.", f"{at}.summary")
    return None


def _text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    if item.get("type") == "function_call_output":
        return str(item.get("output"))
    return ""


def _items(body: dict[str, Any]) -> list[dict[str, Any]]:
    items = body.get("input")
    if isinstance(items, str):
        return [{"type": "message", "role": "user", "content": items}]
    return list(items or [])


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool as OpenAI's response echoes it: a function with its defaults filled in."""
    if tool.get("type") != "function":
        return tool
    return {"description": None, "parameters": None, "strict": True, **tool}


def _words(text: str) -> int:
    return max(len(text.split()), 1)


class Answer:
    """One response to one request: its output items, usage and status, and the events that stream it."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.model: str = body["model"]
        self.items = _items(body)
        self.response_id = _id("resp")
        self.events: list[dict[str, Any]] = []
        self.output: list[dict[str, Any]] = []
        self.status = "completed"
        self.incomplete: dict[str, Any] | None = None
        self.reasoning_tokens = 0
        self.output_words = 0

    def _emit(self, kind: str, **fields: Any) -> None:
        self.events.append({"type": kind, "sequence_number": len(self.events), **fields})

    def response(self, status: str, *, final: bool) -> dict[str, Any]:
        body = self.body
        prompt = sum(_words(_text(i)) for i in self.items)
        prompt += _words(body["instructions"]) if body.get("instructions") else 0
        usage = {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": self.output_words + self.reasoning_tokens,
            "output_tokens_details": {"reasoning_tokens": self.reasoning_tokens},
            "total_tokens": prompt + self.output_words + self.reasoning_tokens,
        }
        reasoning = body.get("reasoning") or {}
        return {
            "id": self.response_id,
            "object": "response",
            "created_at": int(time.time()),
            "status": status,
            "background": bool(body.get("background")),
            "error": None,
            "incomplete_details": self.incomplete if final else None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "max_tool_calls": body.get("max_tool_calls"),
            "model": self.model + "-2025-01-01",
            "output": list(self.output) if final else [],
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": None,
            "prompt_cache_key": body.get("prompt_cache_key"),
            "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
            "safety_identifier": body.get("safety_identifier"),
            "service_tier": body.get("service_tier") or "default",
            "store": body.get("store", True) is not False,
            "temperature": body.get("temperature", 1.0),
            "text": body.get("text") or {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": [_tool(t) for t in body.get("tools") or []],
            "top_logprobs": body.get("top_logprobs", 0),
            "top_p": body.get("top_p", 1.0),
            "truncation": body.get("truncation", "disabled"),
            "usage": usage if final else None,
            "user": body.get("user"),
            "metadata": body.get("metadata") or {},
        }

    def run(self) -> Answer:
        """Build the output and the whole event sequence (a buffered answer is the last event's response)."""
        self._emit("response.created", response=self.response("in_progress", final=False))
        self._emit("response.in_progress", response=self.response("in_progress", final=False))
        tools = self.body.get("tools") or []
        if self.model.startswith("reason-"):
            self._reasoning()
        functions = [t for t in tools if t.get("type") == "function"]
        last = self.items[-1] if self.items else {}
        if self.model.startswith("tool-") and functions and last.get("type") != "function_call_output":
            self._function_call(functions[0]["name"])
        elif self.model.startswith("tool-") and last.get("type") == "function_call_output":
            self._message(f"tool said: {last.get('output')}")
        else:
            if self.model.startswith("search-") and any(t.get("type", "").startswith("web_search") for t in tools):
                self._web_search()
            user = next((i for i in reversed(self.items) if i.get("role") == "user"), last)
            self._message("echo: " + _text(user))
        end = "response.completed" if self.status == "completed" else "response.incomplete"
        self._emit(end, response=self.response(self.status, final=True))
        return self

    def _add(self, item: dict[str, Any], done: dict[str, Any], middle: list[tuple[str, dict[str, Any]]]) -> None:
        index = len(self.output)
        self._emit("response.output_item.added", output_index=index, item=item)
        for kind, fields in middle:
            self._emit(kind, output_index=index, item_id=item["id"], **fields)
        self._emit("response.output_item.done", output_index=index, item=done)
        self.output.append(done)

    def _message(self, text: str) -> None:
        words = text.split(" ")
        limit = self.body.get("max_output_tokens")
        if isinstance(limit, int) and limit < len(words):
            words = words[:limit]
            self.status, self.incomplete = "incomplete", {"reason": "max_output_tokens"}
        self.output_words += len(words)
        text = " ".join(words)
        item_id = _id("msg")
        part = {"type": "output_text", "annotations": [], "logprobs": [], "text": text}
        item = {"id": item_id, "type": "message", "status": "in_progress", "content": [], "role": "assistant"}
        status = "completed" if self.status == "completed" else "incomplete"
        done = {**item, "status": status, "content": [part]}
        at = {"content_index": 0}
        middle = [("response.content_part.added", {**at, "part": {**part, "text": ""}})]
        middle += [
            ("response.output_text.delta", {**at, "delta": w if i == 0 else " " + w, "logprobs": []})
            for i, w in enumerate(words)
        ]
        middle += [
            ("response.output_text.done", {**at, "text": text, "logprobs": []}),
            ("response.content_part.done", {**at, "part": part}),
        ]
        self._add(item, done, middle)

    def _function_call(self, name: str) -> None:
        arguments = '{"city": "Paris"}'
        item = {"id": _id("fc"), "type": "function_call", "status": "in_progress", "arguments": "",
                "call_id": "call_fake123", "name": name}  # fmt: skip
        pieces = ['{"city"', ': "Par', 'is"}']
        middle = [("response.function_call_arguments.delta", {"delta": p}) for p in pieces]
        middle.append(("response.function_call_arguments.done", {"arguments": arguments, "name": name}))
        self.output_words += 5
        self._add(item, {**item, "status": "completed", "arguments": arguments}, middle)

    def _web_search(self) -> None:
        action = {"type": "search", "query": "fake query"}
        item = {"id": _id("ws"), "type": "web_search_call", "status": "in_progress", "action": action}
        middle = [(f"response.web_search_call.{s}", {}) for s in ("in_progress", "searching", "completed")]
        done = {**item, "status": "completed"}
        self._add(item, done, middle)

    def _reasoning(self) -> None:
        self.reasoning_tokens = 5
        item: dict[str, Any] = {"id": _id("rs"), "type": "reasoning", "summary": []}
        summary = "thinking about it"
        middle: list[tuple[str, dict[str, Any]]] = []
        wanted = (self.body.get("reasoning") or {}).get("summary")
        done: dict[str, Any] = {**item}
        if wanted:
            at = {"summary_index": 0}
            part = {"type": "summary_text", "text": summary}
            middle = [
                ("response.reasoning_summary_part.added", {**at, "part": {**part, "text": ""}}),
                ("response.reasoning_summary_text.delta", {**at, "delta": summary}),
                ("response.reasoning_summary_text.done", {**at, "text": summary}),
                ("response.reasoning_summary_part.done", {**at, "part": part}),
            ]
            done["summary"] = [part]
        if "reasoning.encrypted_content" in (self.body.get("include") or []):
            done["encrypted_content"] = "gAAAAfake-encrypted"
        self._add(item, done, middle)


def _sse(event: dict[str, Any]) -> bytes:
    return b"event: " + event["type"].encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


async def serve(fake: FakeOpenAI, request: web.Request) -> web.StreamResponse:
    """`POST /v1/responses`: checked, recorded, answered by model name (the module's docstring)."""
    denied = fake._check_auth(request)
    if denied:
        return denied
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        return _error(400, "We could not parse the JSON body of your request.")
    fake.state.requests.append(Recorded(request.path, dict(request.headers), body))
    return await respond(request, body)


async def respond(request: web.Request, body: Any) -> web.StreamResponse:
    """The answer to a decoded body, once the caller's key is checked (Azure's resource reuses it)."""
    bad = validate(body)
    if bad:
        return bad
    model = body["model"]
    if model.startswith("error-") and model != "error-event":
        status = int(model.split("-", 1)[1])
        headers = {"retry-after": "7"} if status == 429 else None
        return _error(status, f"fake upstream failure {status}", "server_error", headers=headers)
    answer = Answer(body).run()
    if not body.get("stream"):
        return web.Response(body=orjson.dumps(answer.events[-1]["response"]), content_type="application/json")
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    events = answer.events
    if model == "error-event":
        events = [events[0], {"type": "error", "sequence_number": 1, "code": "server_error",
                              "message": "The model failed.", "param": None}]  # fmt: skip
    elif model == "fail-stream":
        failed = {**events[0]["response"], "status": "failed",
                  "error": {"code": "server_error", "message": "The model failed."}}  # fmt: skip
        events = [events[0], {"type": "response.failed", "sequence_number": 1, "response": failed}]
    elif model == "die-midstream":
        cut = next(i for i, e in enumerate(events) if e["type"] == "response.output_text.delta")
        for event in events[: cut + 2]:
            await resp.write(_sse(event))
        assert request.transport is not None
        request.transport.close()
        return resp
    for event in events:
        await resp.write(_sse(event))
    await resp.write_eof()
    return resp
