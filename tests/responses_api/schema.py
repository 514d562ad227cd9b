"""What OpenAI's Responses API owes a client, checked: its published schemas, and its stream grammar.

The schemas are OpenAI's own (tests/fixtures/openai_response_schemas.json, copied unchanged from
openai/openai-openapi), so a client generated from OpenAI's document, or an SDK typed from it, reads what the
gateway sends. A schema alone cannot say that events come in the right order or add up, so `check_stream`
also checks the grammar OpenAI's stream follows and its SDKs' stream helpers rely on:

- `sequence_number` counts 0, 1, 2, ... with no gap;
- `response.created` first (then `response.queued` for a background response), `response.in_progress`, and
  exactly one terminal event last (`response.completed`, `response.incomplete` or `response.failed`; an
  `error` event may only come right before `response.failed` or last);
- output items one at a time: `response.output_item.added` at `output_index` 0, 1, 2, ..., every event about
  an item carries its `item_id` and `output_index` while it is open, then `response.output_item.done`;
- a message's parts likewise (`content_part.added` / `.done`, `content_index` 0, 1, ...), a reasoning
  item's summary parts (`summary_index`), and the deltas of a text, a refusal, a summary or a function's
  arguments add up to what the matching `.done` event, the part, and the finished item say;
- the terminal response's `output` is the finished items in order, its `status` is the terminal event's,
  and it is `response.created`'s response (same id, and the same about the request: model, tools, ...).

Usage: `check_event(event)`, `check_response(response)`, `check_stream(events) -> final response`, and
`check_cancelled_stream(events) -> finished items` for a background response's stream cut by a cancel.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import orjson
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

FIXTURE = Path(__file__).parents[1] / "fixtures" / "openai_response_schemas.json"
TERMINAL = {"response.completed": "completed", "response.incomplete": "incomplete", "response.failed": "failed"}
# what a response says about its request: the same in every event of one stream (status, output, usage and
# the service tier actually used are what change)
STABLE = (
    "id",
    "object",
    "created_at",
    "model",
    "instructions",
    "tools",
    "tool_choice",
    "text",
    "reasoning",
    "parallel_tool_calls",
    "previous_response_id",
    "max_output_tokens",
    "temperature",
    "top_p",
    "truncation",
    "store",
    "background",
    "metadata",
)


def _as_json_schema(node: Any) -> Any:
    """OpenAI's document says OpenAPI 3.1 (JSON Schema 2020-12) but keeps two older habits; read them as
    their authors meant: 3.0's `nullable: true` (the value may also be null), and draft 2019-09's
    `$recursiveRef: "#"` (CompoundFilter nests itself), which 2020-12 would silently ignore."""
    if isinstance(node, list):
        return [_as_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    if node.get("$recursiveRef") == "#":
        return {"$ref": "#/components/schemas/CompoundFilter"}
    out = {k: _as_json_schema(v) for k, v in node.items() if k not in ("nullable", "$recursiveAnchor")}
    return {"anyOf": [out, {"type": "null"}]} if node.get("nullable") is True else out


@cache
def components() -> dict[str, Any]:
    converted: dict[str, Any] = _as_json_schema(orjson.loads(FIXTURE.read_bytes())["components"])
    # A response's `user` and `usage` are null until known, as OpenAI's API sends them (its reference's own
    # `response.created` example) and its SDKs type them (`Optional`); the document forgets the null.
    schemas = converted["schemas"]
    _or_null(schemas["ModelResponseProperties"]["properties"], "user")
    _or_null(next(p for p in schemas["Response"]["allOf"] if "usage" in p.get("properties", {}))["properties"], "usage")
    return converted


def _or_null(properties: dict[str, Any], name: str) -> None:
    properties[name] = {"anyOf": [properties[name], {"type": "null"}]}


@cache
def _validator(name: str) -> Draft202012Validator:
    if name not in components()["schemas"]:
        raise KeyError(f"{name} is not in {FIXTURE.name}")
    return Draft202012Validator({"$ref": f"#/components/schemas/{name}", "components": components()})


@cache
def event_schemas() -> dict[str, str]:
    """Event `type` -> the name of its schema, from the members of OpenAI's `ResponseStreamEvent`."""
    schemas = components()["schemas"]
    out: dict[str, str] = {}
    for member in schemas["ResponseStreamEvent"]["anyOf"]:
        name = member["$ref"].rsplit("/", 1)[1]
        for kind in schemas[name]["properties"]["type"]["enum"]:
            out[kind] = name
    return out


def problems(name: str, value: Any) -> list[str]:
    """Where `value` breaks OpenAI's schema `name`: one line per problem (path: message), [] if it fits."""
    found = sorted(_validator(name).iter_errors(value), key=lambda e: [str(p) for p in e.absolute_path])
    return [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message[:300]}" for e in found]


def check(name: str, value: Any) -> None:
    """`value` fits OpenAI's schema `name` (any of the fixture's components), else an assertion naming where."""
    found = problems(name, value)
    assert not found, f"not a valid {name}: {found}"


def check_response(response: Any) -> None:
    """A response object (buffered answer, GET, cancel, or inside a stream event) fits OpenAI's `Response`."""
    check("Response", response)


def check_event(event: Any) -> None:
    """One stream event fits the schema of its own type (picked by `type`, so a problem is reported against
    that schema, not as "matches none of the 60 event kinds")."""
    assert isinstance(event, dict) and isinstance(event.get("type"), str), event
    name = event_schemas().get(event["type"])
    assert name is not None, f"unknown event type {event['type']!r}"
    check(name, event)


class _Item:
    """An output item while it is open: what its events said so far, to compare with what it ends as."""

    def __init__(self, index: int, item: dict[str, Any]) -> None:
        self.index = index
        self.id = item.get("id")
        self.type = item.get("type")
        self.added = item
        self.parts: dict[int, str] = {}  # content_index or summary_index -> text so far
        self.open_part: int | None = None
        self.arguments = ""
        self.arguments_done: str | None = None
        self.texts_done: dict[int, str] = {}


class _Grammar:
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []  # finished items, in output order
        self.open: _Item | None = None
        self.response_id: str | None = None

    def feed(self, i: int, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind in ("response.created", "response.queued", "response.in_progress"):
            return
        handler = getattr(self, "_" + kind.removeprefix("response.").replace(".", "_"), None)
        assert handler is not None, f"event {i}: {kind} is not one the gateway's translation may send"
        handler(i, event)

    def _current(self, i: int, event: dict[str, Any]) -> _Item:
        item = self.open
        assert item is not None, f"event {i}: {event['type']} outside an open output item"
        assert event["output_index"] == item.index, f"event {i}: output_index {event['output_index']} != {item.index}"
        if "item_id" in event:
            assert event["item_id"] == item.id, f"event {i}: item_id {event['item_id']!r} != {item.id!r}"
        return item

    def _output_item_added(self, i: int, event: dict[str, Any]) -> None:
        assert self.open is None, f"event {i}: output item {event['output_index']} added while {self.open} is open"
        assert event["output_index"] == len(self.items), f"event {i}: output_index {event['output_index']}"
        item = event["item"]
        assert item.get("id"), f"event {i}: an output item without an id"
        assert item.get("status", "in_progress") == "in_progress", f"event {i}: added item status {item['status']}"
        if item["type"] == "message":
            assert item["content"] == [], f"event {i}: a message is added empty, its parts come after"
        if item["type"] == "function_call":
            assert item["call_id"] and item["name"], f"event {i}: a function call is added with call_id and name"
        self.open = _Item(event["output_index"], item)

    def _part_added(self, i: int, event: dict[str, Any], index_key: str) -> None:
        item = self._current(i, event)
        assert item.open_part is None, f"event {i}: a part added while part {item.open_part} is open"
        assert event[index_key] == len(item.parts), f"event {i}: {index_key} {event[index_key]} != {len(item.parts)}"
        item.open_part = event[index_key]
        item.parts[event[index_key]] = ""

    def _delta(self, i: int, event: dict[str, Any], index_key: str) -> None:
        item = self._current(i, event)
        assert item.open_part == event[index_key], f"event {i}: delta for part {event[index_key]}, not the open one"
        item.parts[event[index_key]] += event["delta"]

    def _text_done(self, i: int, event: dict[str, Any], index_key: str, field: str) -> None:
        item = self._current(i, event)
        index = event[index_key]
        assert item.open_part == index, f"event {i}: {event['type']} for part {index}, not the open one"
        assert event[field] == item.parts[index], f"event {i}: {field} {event[field]!r} != deltas {item.parts[index]!r}"
        item.texts_done[index] = event[field]

    def _part_done(self, i: int, event: dict[str, Any], index_key: str) -> None:
        item = self._current(i, event)
        index = event[index_key]
        assert item.open_part == index, f"event {i}: part {index} done, not the open one"
        text = event["part"].get("text", event["part"].get("refusal"))
        assert text == item.parts[index], f"event {i}: done part {text!r} != deltas {item.parts[index]!r}"
        assert index in item.texts_done, f"event {i}: part {index} done before its text's .done event"
        item.open_part = None

    def _content_part_added(self, i: int, event: dict[str, Any]) -> None:
        self._part_added(i, event, "content_index")

    def _output_text_delta(self, i: int, event: dict[str, Any]) -> None:
        self._delta(i, event, "content_index")

    def _output_text_done(self, i: int, event: dict[str, Any]) -> None:
        self._text_done(i, event, "content_index", "text")

    def _refusal_delta(self, i: int, event: dict[str, Any]) -> None:
        self._delta(i, event, "content_index")

    def _refusal_done(self, i: int, event: dict[str, Any]) -> None:
        self._text_done(i, event, "content_index", "refusal")

    def _content_part_done(self, i: int, event: dict[str, Any]) -> None:
        self._part_done(i, event, "content_index")

    def _reasoning_text_delta(self, i: int, event: dict[str, Any]) -> None:
        self._delta(i, event, "content_index")

    def _reasoning_text_done(self, i: int, event: dict[str, Any]) -> None:
        self._text_done(i, event, "content_index", "text")

    def _reasoning_summary_part_added(self, i: int, event: dict[str, Any]) -> None:
        self._part_added(i, event, "summary_index")

    def _reasoning_summary_text_delta(self, i: int, event: dict[str, Any]) -> None:
        self._delta(i, event, "summary_index")

    def _reasoning_summary_text_done(self, i: int, event: dict[str, Any]) -> None:
        self._text_done(i, event, "summary_index", "text")

    def _reasoning_summary_part_done(self, i: int, event: dict[str, Any]) -> None:
        self._part_done(i, event, "summary_index")

    def _function_call_arguments_delta(self, i: int, event: dict[str, Any]) -> None:
        item = self._current(i, event)
        assert item.type == "function_call", f"event {i}: arguments for a {item.type} item"
        assert item.arguments_done is None, f"event {i}: arguments delta after their .done"
        item.arguments += event["delta"]

    def _function_call_arguments_done(self, i: int, event: dict[str, Any]) -> None:
        item = self._current(i, event)
        assert item.type == "function_call", f"event {i}: arguments for a {item.type} item"
        assert event["arguments"] == item.arguments, f"event {i}: {event['arguments']!r} != deltas {item.arguments!r}"
        assert event["name"] == item.added["name"], f"event {i}: name {event['name']!r} != {item.added['name']!r}"
        item.arguments_done = event["arguments"]

    def _output_item_done(self, i: int, event: dict[str, Any]) -> None:
        item = self._current(i, event)
        done = event["item"]
        assert item.open_part is None, f"event {i}: item done with part {item.open_part} still open"
        assert done.get("id") == item.id and done["type"] == item.type, f"event {i}: done item is another item"
        assert done.get("status", "completed") in ("completed", "incomplete"), f"event {i}: status {done['status']}"
        if item.type == "message":
            texts = [p.get("text", p.get("refusal")) for p in done["content"]]
            assert texts == [item.parts[k] for k in sorted(item.parts)], f"event {i}: {texts} != the parts streamed"
        if item.type == "reasoning" and item.parts:
            texts = [p["text"] for p in done.get("summary") or []] or [p["text"] for p in done.get("content") or []]
            assert texts == [item.parts[k] for k in sorted(item.parts)], f"event {i}: {texts} != the parts streamed"
        if item.type == "function_call":
            assert item.arguments_done is not None, f"event {i}: a function call done without arguments .done"
            assert done["arguments"] == item.arguments, f"event {i}: {done['arguments']!r} != {item.arguments!r}"
            assert (done["call_id"], done["name"]) == (item.added["call_id"], item.added["name"]), f"event {i}"
        self.items.append(done)
        self.open = None


def _opening(events: list[dict[str, Any]]) -> int:
    """Every event fits its schema, the sequence numbers count from 0, the stream opens as OpenAI's do;
    the index of `response.in_progress`."""
    assert events, "an empty stream"
    for i, event in enumerate(events):
        check_event(event)
        assert event["sequence_number"] == i, f"event {i}: sequence_number {event['sequence_number']}"
    kinds = [e["type"] for e in events]
    assert kinds[0] == "response.created", kinds[:3]
    start = 2 if kinds[1] == "response.queued" else 1
    assert kinds[start] == "response.in_progress", kinds[:3]
    for event in events[: start + 1]:
        assert event["response"]["id"] == events[0]["response"]["id"], "the opening events name other responses"
        assert event["response"]["status"] in ("queued", "in_progress"), event["response"]["status"]
    return start


def check_cancelled_stream(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stream of a background response cancelled while it ran: OpenAI's grammar has no terminal event
    for a cancel, so it ends once the open item is closed; all before is as `check_stream` wants. Returns
    the items it finished."""
    start = _opening(events)
    kinds = [e["type"] for e in events]
    assert not TERMINAL.keys() & set(kinds), f"a cancelled stream with a terminal event: {kinds[-3:]}"
    grammar = _Grammar()
    for i, event in enumerate(events[start + 1 :], start + 1):
        grammar.feed(i, event)
    assert grammar.open is None, f"the stream ended with output item {grammar.open.index} open"
    return grammar.items


def check_stream(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Every event fits its schema and the whole stream follows OpenAI's grammar (module docstring); returns
    the response of the terminal event."""
    start = _opening(events)
    kinds = [e["type"] for e in events]
    assert kinds[-1] in TERMINAL, f"the stream ends with {kinds[-1]}, not a terminal event"
    terminal = [i for i, k in enumerate(kinds) if k in TERMINAL]
    assert terminal == [len(kinds) - 1], f"terminal events at {terminal} of {len(kinds)}"
    errors = [i for i, k in enumerate(kinds) if k == "error"]
    assert all(i == len(kinds) - 2 for i in errors), f"an error event at {errors} of {len(kinds)}"
    created = events[0]["response"]
    grammar = _Grammar()
    for i, event in enumerate(events[start + 1 : -1], start + 1):
        if event["type"] != "error":
            grammar.feed(i, event)
    final: dict[str, Any] = events[-1]["response"]
    assert final["id"] == created["id"], "the terminal event names another response"
    changed = [k for k in STABLE if k in created and k in final and created[k] != final[k]]
    assert not changed, f"the terminal response says otherwise than response.created about {changed}"
    assert final["status"] == TERMINAL[kinds[-1]], f"{kinds[-1]} carries status {final['status']}"
    if kinds[-1] != "response.failed":
        assert grammar.open is None, f"the stream ended with output item {grammar.open.index} open"
        assert final["output"] == grammar.items, "the final output is not the items the stream finished"
        assert final.get("usage"), "a finished response without usage"
    return final


def sse_events(body: str) -> list[dict[str, Any]]:
    """The events of an SSE body as OpenAI writes it (`event: <type>` then `data: <json>`, no `[DONE]`);
    each `event:` name must be its data's `type`."""
    out: list[dict[str, Any]] = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        fields = [line.split(":", 1) for line in block.split("\n") if line and not line.startswith(":")]
        named = [v.strip() for k, v in fields if k == "event"]
        data = "\n".join(v.removeprefix(" ") for k, v in fields if k == "data")
        if not data:
            continue
        assert data != "[DONE]", "a Responses stream ends with its terminal event, not [DONE]"
        event = orjson.loads(data)
        assert named == [event["type"]], f"event name {named} for data of type {event['type']!r}"
        out.append(event)
    return out
