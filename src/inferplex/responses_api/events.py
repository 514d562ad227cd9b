"""A chat stream (`chat.completion.chunk` dicts) as the Responses API's stream of events, exactly.

OpenAI's Responses stream is a grammar, not a list of deltas: `response.created` and
`response.in_progress` first; then each output item opened (`response.output_item.added`), its content
opened (`response.content_part.added` / `response.reasoning_summary_part.added`), its deltas, the matching
`.done` events closing it in reverse order, then the next item; last `response.completed` (or
`response.incomplete`, `response.failed`) carrying the whole response. Every event has a `sequence_number`
counting from 0, and the deltas name their `item_id`, `output_index` and `content_index`. Clients (the
openai SDK's stream accumulator, the Agents SDK) build their state from exactly this order: a function
call's `output_item.added` carries empty `arguments` that the deltas then extend.

One `ResponseEvents` is made per response, so the state of the stream (the open item, the text and the
arguments so far, the usage seen) lives on it. Chat streams give reasoning, text and tool calls one after
another; each kind starting closes the item before it, as OpenAI streams them. A tool call whose deltas
come after a later call started (no provider of ours interleaves them) still ends up whole in the final
response, without events of its own.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any

from inferplex.responses_api import translate
from inferplex.responses_api.translate import NewId, new_id

Event = dict[str, Any]

# The codes OpenAI's `ResponseError` takes; any other error is reported as a server error.
ERROR_CODES = frozenset(
    {
        "server_error",
        "rate_limit_exceeded",
        "invalid_prompt",
        "data_residency_mismatch",
        "bio_policy",
        "vector_store_timeout",
        "invalid_image",
        "invalid_image_format",
        "invalid_base64_image",
        "invalid_image_url",
        "image_too_large",
        "image_too_small",
        "image_parse_error",
        "image_content_policy_violation",
        "invalid_image_mode",
        "image_file_too_large",
        "unsupported_image_media_type",
        "empty_image_file",
        "failed_to_download_image",
        "image_file_not_found",
    }
)


@dataclass(slots=True)
class _Item:
    """The item being streamed: its kind, its place in `output`, and what its deltas built so far."""

    kind: str  # "reasoning" | "message" | "function_call"
    index: int
    item_id: str
    text: str = ""  # reasoning text, message text, or function call arguments
    refusal: str = ""
    part: str | None = None  # the open content part of a message: "output_text" | "refusal" | None
    parts: list[dict[str, Any]] = field(default_factory=list)  # a message's closed parts
    call_id: str = ""
    name: str = ""
    signature: str = ""  # a thinking block's signature (Anthropic, Bedrock), sent back next turn
    extra: dict[str, Any] | None = None  # a call's `extra_content` (Gemini's thought signature)
    status: str | None = None  # set when closed: "completed" or "incomplete"


class ResponseEvents:
    """The events of one streamed response. `start()` first, then `feed(chunk)` for each chunk, then
    `finish()` or `fail(error)`; each returns the events to send, in order. `.response` is the response
    object as it stands: after `finish`/`fail`, the final one to store."""

    def __init__(self, skeleton: dict[str, Any], *, make_id: NewId = new_id) -> None:
        self.response = copy.deepcopy(skeleton)
        self.response["status"] = "in_progress"
        self.response["output"] = []
        self._make_id = make_id
        self._seq = 0
        self._items: list[_Item] = []
        self._open: _Item | None = None
        self._calls: dict[int, _Item] = {}  # by the chat tool call's index
        self._finish_reason: str | None = None
        self._usage: dict[str, Any] | None = None

    # ---- the lifecycle --------------------------------------------------------------------------------------

    def start(self, *, queued: bool = False) -> list[Event]:
        """`response.created` and `response.in_progress`; a background response (`queued`) was created
        queued, so `response.queued` comes between, as OpenAI streams one."""
        if not queued:
            return [
                self._event("response.created", response=self._snapshot()),
                self._event("response.in_progress", response=self._snapshot()),
            ]
        self.response["status"] = "queued"
        opening = [
            self._event("response.created", response=self._snapshot()),
            self._event("response.queued", response=self._snapshot()),
        ]
        self.response["status"] = "in_progress"
        return [*opening, self._event("response.in_progress", response=self._snapshot())]

    def feed(self, chunk: dict[str, Any]) -> list[Event]:
        """The events one chunk makes: none for a chunk with nothing in it (a role, the usage)."""
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        out: list[Event] = []
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue  # Responses has no `n`: only the first choice is an answer
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                out += self._reasoning(delta["reasoning_content"])
            if delta.get("reasoning_signature") and self._open is not None and self._open.kind == "reasoning":
                self._open.signature += delta["reasoning_signature"]
            if delta.get("content"):
                out += self._text(delta["content"])
            if delta.get("refusal"):
                out += self._refusal(delta["refusal"])
            for call in delta.get("tool_calls") or ():
                out += self._tool_call(call)
            if choice.get("finish_reason"):
                self._finish_reason = choice["finish_reason"]
        return out

    def finish(self, completed_at: int | None = None) -> list[Event]:
        """Close what is open (an answer with no output at all gets an empty message, as a buffered one
        does), then `response.completed`, or `response.incomplete` when the answer was cut short."""
        status, reason = translate.finish_status(self._finish_reason)
        item_status = "incomplete" if status == "incomplete" else "completed"
        out: list[Event] = []
        if not self._items:
            out += self._open_message()
            out += self._open_part("output_text")
        out += self._close(item_status)
        for call in self._calls.values():
            if call.status is None:  # only when a call's deltas came after a later call started
                out += self._close_item(call, item_status)
        self.response["output"] = [self._item_dict(item, item.status) for item in self._items]
        self.response["usage"] = translate.response_usage(self._usage)
        when = completed_at if completed_at is not None else int(time.time())
        translate.finished(self.response, status, reason, when)
        kind = "response.completed" if status == "completed" else "response.incomplete"
        out.append(self._event(kind, response=self._snapshot()))
        return out

    def fail(self, error: dict[str, Any]) -> list[Event]:
        """`response.failed`, the response carrying the error (`{"code", "message"}`, or an OpenAI error
        body) and the output so far, marked incomplete; open items get no `.done` events, as OpenAI's."""
        body = error.get("error", error) if isinstance(error.get("error"), dict) else error
        code = body.get("code")
        self.response["status"] = "failed"
        self.response["error"] = {
            "code": code if code in ERROR_CODES else "server_error",
            "message": str(body.get("message") or "The response failed."),
        }
        self.response["output"] = [self._item_dict(item, item.status or "incomplete") for item in self._items]
        self.response["usage"] = translate.response_usage(self._usage)
        return [self._event("response.failed", response=self._snapshot())]

    def cancel(self, usage: dict[str, Any] | None) -> list[Event]:
        """A run stopped by its caller (a background response cancelled): the open item closed with its
        `.done` events, marked incomplete, as OpenAI's cancelled response ends its stream, and the response as
        it stands: status `cancelled`, the output so far, and `usage` (chat's, as the stream was settled: what
        was charged). There is no terminal event for a cancel; the stream ends with the closed item."""
        out = self._close("incomplete")
        for call in self._calls.values():
            if call.status is None:
                out += self._close_item(call, "incomplete")
        self.response["status"] = "cancelled"
        self.response["output"] = [self._item_dict(item, item.status) for item in self._items]
        self.response["usage"] = translate.response_usage(usage)
        return out

    # ---- deltas ---------------------------------------------------------------------------------------------

    def _reasoning(self, delta: str) -> list[Event]:
        out: list[Event] = []
        item = self._open
        if item is None or item.kind != "reasoning":
            out += self._close()
            item = self._new("reasoning", "rs")
            out.append(self._added(item))
            out.append(
                self._event(
                    "response.reasoning_summary_part.added",
                    item_id=item.item_id,
                    output_index=item.index,
                    summary_index=0,
                    part={"type": "summary_text", "text": ""},
                )
            )
        item.text += delta
        out.append(
            self._event(
                "response.reasoning_summary_text.delta",
                item_id=item.item_id,
                output_index=item.index,
                summary_index=0,
                delta=delta,
            )
        )
        return out

    def _text(self, delta: str) -> list[Event]:
        out = self._message_part("output_text")
        item = self._open
        assert item is not None
        item.text += delta
        out.append(self._event("response.output_text.delta", **self._where(item), delta=delta, logprobs=[]))
        return out

    def _refusal(self, delta: str) -> list[Event]:
        out = self._message_part("refusal")
        item = self._open
        assert item is not None
        item.refusal += delta
        out.append(self._event("response.refusal.delta", **self._where(item), delta=delta))
        return out

    def _message_part(self, part: str) -> list[Event]:
        """The open message with `part` open in it: a new message if none is open, the other part closed."""
        out: list[Event] = []
        item = self._open
        if item is None or item.kind != "message":
            out += self._close()
            out += self._open_message()
            item = self._open
            assert item is not None
        if item.part != part:
            out += self._close_part(item)
            out += self._open_part(part)
        return out

    def _tool_call(self, call: dict[str, Any]) -> list[Event]:
        out: list[Event] = []
        index = call.get("index", 0)
        function = call.get("function") or {}
        item = self._calls.get(index)
        if item is None:
            out += self._close()
            item = self._new("function_call", "fc")
            item.call_id = call.get("id") or self._make_id("call")
            item.name = function.get("name") or ""
            self._calls[index] = item
            if isinstance(call.get("extra_content"), dict):
                item.extra = call["extra_content"]
            out.append(self._added(item))
        elif function.get("name") and not item.name:
            item.name = function["name"]
        arguments = function.get("arguments")
        if arguments:
            if not isinstance(arguments, str):  # a provider's arguments as an object: chat sends a string
                arguments = translate.function_call_item("", "", "", arguments)["arguments"]
            item.text += arguments
            if item.status is None:
                out.append(
                    self._event(
                        "response.function_call_arguments.delta",
                        item_id=item.item_id,
                        output_index=item.index,
                        delta=arguments,
                    )
                )
        return out

    # ---- opening and closing ----------------------------------------------------------------------------------

    def _new(self, kind: str, prefix: str) -> _Item:
        item = _Item(kind=kind, index=len(self._items), item_id=self._make_id(prefix))
        self._items.append(item)
        self._open = item
        return item

    def _added(self, item: _Item) -> Event:
        return self._event("response.output_item.added", output_index=item.index, item=self._item_dict(item))

    def _open_message(self) -> list[Event]:
        return [self._added(self._new("message", "msg"))]

    def _open_part(self, part: str) -> list[Event]:
        item = self._open
        assert item is not None
        item.part = part
        # each part holds only its own deltas: a kind opened again (text, refusal, text) starts empty
        if part == "output_text":
            item.text = ""
        else:
            item.refusal = ""
        empty = translate.text_part("output_text", "") if part == "output_text" else {"type": "refusal", "refusal": ""}
        return [self._event("response.content_part.added", **self._where(item), part=empty)]

    def _close_part(self, item: _Item) -> list[Event]:
        if item.part is None:
            return []
        where = self._where(item)
        if item.part == "output_text":
            part = translate.text_part("output_text", item.text)
            done = self._event("response.output_text.done", **where, text=item.text, logprobs=[])
        else:
            part = {"type": "refusal", "refusal": item.refusal}
            done = self._event("response.refusal.done", **where, refusal=item.refusal)
        item.parts.append(part)
        item.part = None
        return [done, self._event("response.content_part.done", **where, part=part)]

    def _close(self, status: str = "completed") -> list[Event]:
        """Close the open item, if any."""
        item, self._open = self._open, None
        return [] if item is None else self._close_item(item, status)

    def _close_item(self, item: _Item, status: str) -> list[Event]:
        out: list[Event] = []
        if item.kind == "reasoning":
            where = {"item_id": item.item_id, "output_index": item.index, "summary_index": 0}
            part = {"type": "summary_text", "text": item.text}
            out.append(self._event("response.reasoning_summary_text.done", **where, text=item.text))
            out.append(self._event("response.reasoning_summary_part.done", **where, part=part))
        elif item.kind == "message":
            out += self._close_part(item)
        else:
            out.append(
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item.item_id,
                    output_index=item.index,
                    name=item.name,
                    arguments=item.text,
                )
            )
        item.status = status
        out.append(
            self._event("response.output_item.done", output_index=item.index, item=self._item_dict(item, status))
        )
        return out

    # ---- shapes ---------------------------------------------------------------------------------------------

    def _item_dict(self, item: _Item, status: str | None = None) -> dict[str, Any]:
        """The item as OpenAI shows it: in progress (as added: empty) until a status is given."""
        if status is None:
            if item.kind == "reasoning":
                return translate.reasoning_item(item.item_id, "", "in_progress")
            if item.kind == "message":
                message = translate.message_item(item.item_id, "", status="in_progress")
                message["content"] = []
                return message
            return translate.function_call_item(item.item_id, item.call_id, item.name, "", "in_progress")
        if item.kind == "reasoning":
            blocks = (
                [{"type": "thinking", "thinking": item.text, "signature": item.signature}] if item.signature else None
            )
            return translate.reasoning_item(item.item_id, item.text, status, blocks)
        if item.kind == "message":
            message = translate.message_item(item.item_id, "", status=status)
            parts = list(item.parts)
            if item.part == "output_text":
                parts.append(translate.text_part("output_text", item.text))
            elif item.part == "refusal":
                parts.append({"type": "refusal", "refusal": item.refusal})
            message["content"] = parts
            return message
        done = translate.function_call_item(item.item_id, item.call_id, item.name, item.text, status)
        if item.extra is not None:
            done["extra_content"] = item.extra
        return done

    @staticmethod
    def _where(item: _Item) -> dict[str, Any]:
        return {"item_id": item.item_id, "output_index": item.index, "content_index": len(item.parts)}

    def _snapshot(self) -> dict[str, Any]:
        return copy.deepcopy(self.response)

    def _event(self, kind: str, **fields: Any) -> Event:
        event = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return event
