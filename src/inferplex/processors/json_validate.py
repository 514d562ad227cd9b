"""`json_validate`: check the answer is JSON matching the request's schema; retry once, then fail clearly.

The schema is the request's `response_format.json_schema.schema` (or the `schema` option); with
`response_format: json_object` and no schema, the answer only has to parse as a JSON object. It needs the
whole answer, so it turns streaming off for the request (the caller still gets the stream it asked for,
replayed from the validated answer).

On a failure the model is called once more with its own answer and the validation error appended, through
the `again` callable the pipeline hands to `post` (same routing, same admission; the retry's usage is added
to the request's). If the second answer fails too, the request is refused with a 422 naming the error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import jsonschema  # type: ignore[import-untyped]

from inferplex.canonical import ChatRequest, Message
from inferplex.errors import InvalidRequest, ProcessorRejected
from inferplex.gateway_request import GatewayRequest
from inferplex.processors.base import Again, Env, Exchange, Step, check_options
from inferplex.responses import ChatCompletion

RETRY_PROMPT = (
    "Your previous answer was not valid: {error}. Answer again with only the JSON value, no prose and no code fence."
)


def problem(text: str | None, schema: dict[str, Any] | None) -> str | None:
    """Why `text` is not acceptable JSON for `schema`, or None."""
    if text is None:
        return "the answer has no text content"
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`").removeprefix("json").strip()
    try:
        value = json.loads(body)
    except json.JSONDecodeError as exc:
        return f"not JSON ({exc.msg} at position {exc.pos})"
    if schema is None:
        return None if isinstance(value, dict) else "not a JSON object"
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        return f"schema violation at {where}: {exc.message}"
    return None


def _content(response: ChatCompletion) -> str | None:
    choices = response.get("choices") or [{}]
    content = (choices[0].get("message") or {}).get("content")
    return content if isinstance(content, str) else None


class JsonValidate(Step):
    name = "json_validate"
    order = 70
    buffered = True

    def __init__(self, schema: dict[str, Any] | None) -> None:
        super().__init__()
        self.schema = schema
        self.request: GatewayRequest[ChatRequest] | None = None

    async def pre(self, ex: Exchange, request: GatewayRequest[ChatRequest]) -> GatewayRequest[ChatRequest]:
        if self.schema is None:
            rf = request.body.response_format
            if rf is not None and rf.json_schema is not None:
                self.schema = rf.json_schema.schema_
        self.request = request
        return request

    async def post(self, ex: Exchange, response: ChatCompletion, again: Again) -> ChatCompletion:
        first = problem(_content(response), self.schema)
        self.metadata.update(schema=self.schema is not None, attempts=1)
        if first is None:
            self.metadata["valid"] = True
            return response
        assert self.request is not None
        answer = _content(response) or ""
        extra = [
            {"role": "assistant", "content": answer},
            {"role": "user", "content": RETRY_PROMPT.format(error=first)},
        ]
        body = self.request.body
        messages = [*body.messages, *(Message.model_validate(m) for m in extra)]
        # The retry is a buffered call like the first, whatever the caller asked for.
        retry = body.model_copy(update={"messages": messages, "stream": None, "stream_options": None})
        retried = await again(self.request.replace(retry))
        second = problem(_content(retried), self.schema)
        self.metadata.update(attempts=2, first_error=first)
        if second is not None:
            self.metadata["valid"] = False
            raise ProcessorRejected(
                f"Processor `json_validate` rejected the answer after one retry: {second}.", param="response_format"
            )
        self.metadata["valid"] = True
        return retried


def create(options: Mapping[str, Any], env: Env) -> JsonValidate:
    check_options("json_validate", options, {"schema"})
    schema = options.get("schema")
    if schema is not None:
        if not isinstance(schema, dict):
            raise InvalidRequest(
                "Processor `json_validate`: `schema` must be a JSON Schema object.", param="processors"
            )
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise InvalidRequest(
                f"Processor `json_validate`: invalid schema: {exc.message}.", param="processors"
            ) from None
    return JsonValidate(schema)
