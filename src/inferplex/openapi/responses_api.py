"""OpenAI's Responses API routes (dialects/openai_responses_api.py) in `/openapi.json`."""

from __future__ import annotations

from inferplex.dialects import openai_responses as oa
from inferplex.dialects import openai_responses_api_wire as rw
from inferplex.openapi.spec import Dialect, Operation, Param
from inferplex.responses_api import wire
from inferplex.responses_api.wire import ResponsesRequest


class ResponseStreamOptions(wire.StreamOptions):
    """`stream_options` of a Responses request (named apart from chat's `StreamOptions` in the document)."""


class CreateResponse(ResponsesRequest):
    """The body of `POST /v1/responses`: `ResponsesRequest`, its `stream_options` under their own name."""

    stream_options: ResponseStreamOptions | None = None


_OPENAI = Dialect("OpenAI", oa.OpenAIError)
_CALL = (400, 401, 402, 403, 404, 413, 415, 429, 500, 502, 503, 504)
_READ = (400, 401, 403, 404, 500, 503)

_CREATE = (
    "Creates a model response on any provider: translated through the gateway's chat pipeline (metered, "
    "limited, routed and retried as chat), or passed through to an upstream that speaks Responses. With "
    "`stream: true` the answer is OpenAI's event stream (`event:` and `data:` lines, no `[DONE]`). With "
    "`store` (the default) the response is kept for its account before it is answered, so "
    "`previous_response_id` works at once on any replica. `background: true` answers the queued response "
    "at once and runs it as a durable job."
)
_RETRIEVE = (
    "A stored response. With `stream=true` a background response's events are streamed, those after "
    "`starting_after` first, then the new ones as they come, until it has finished."
)
_CANCEL = (
    "Cancels a queued or running background response (charged for what it produced); a finished one is "
    "answered as it is; any other response is a 400."
)
_STREAM = (
    Param("stream", {"type": "boolean"}, description="stream a background response's events"),
    Param("starting_after", {"type": "integer"}, description="the sequence number to stream after"),
)
_PAGE = (
    Param("after", description="the id of the last item of the previous page"),
    Param("limit", {"type": "integer", "minimum": 1, "maximum": 100}, description="at most this many (20)"),
    Param("order", {"type": "string", "enum": ["asc", "desc"]}, description="input order (desc)"),
)

OPERATIONS: tuple[Operation, ...] = (
    Operation("post", "/v1/responses", "Create a response", _OPENAI, rw.Response, _CALL, CreateResponse,
              stream=rw.ResponseStreamEvent, stream_done=False, description=_CREATE),
    Operation("post", "/v1/responses/input_tokens", "Count a response's input tokens (the gateway's estimate)",
              _OPENAI, rw.InputTokens, _READ, CreateResponse),
    Operation("get", "/v1/responses/{response_id}", "A stored response", _OPENAI, rw.Response, _READ,
              params=_STREAM, stream=rw.ResponseStreamEvent, stream_done=False, description=_RETRIEVE),
    Operation("delete", "/v1/responses/{response_id}", "Delete a stored response", _OPENAI, rw.ResponseDeleted,
              _READ),
    Operation("get", "/v1/responses/{response_id}/input_items", "A stored response's input items", _OPENAI,
              rw.ResponseItemList, _READ, params=_PAGE),
    Operation("post", "/v1/responses/{response_id}/cancel", "Cancel a background response", _OPENAI,
              rw.Response, _READ, body_required=False, description=_CANCEL),
)  # fmt: skip
