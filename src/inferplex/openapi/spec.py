"""Building an OpenAPI 3.1 document from operation tables whose bodies are the routes' own types.

An `Operation` names its request body (the pydantic model the route validates with) and its answer (the
TypedDict in the dialect's `*_responses.py`); a `Dialect` says how that route fails (its error body's type)
and how callers authenticate. Every schema comes from pydantic in one pass (`TypeAdapter.json_schemas`),
so shared parts (the canonical `Message`, `Timings`) are one component each, and a type whose name collides
with another's would show up as a module-qualified name, which the tests refuse.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import TypeAdapter
from pydantic.json_schema import JsonSchemaMode

REF = "#/components/schemas/{model}"
# What the HTTP server may answer on any path before a route runs, in that path's dialect (dialects/registry.py).
HEAD_ERRORS = (400, 414, 431)
RETRY_AFTER = {
    "description": "seconds to wait before trying again",
    "schema": {"type": "string", "pattern": "^[0-9]+$"},
}

# What each error status means, whatever the dialect (its body's shape is the dialect's).
STATUS_TEXT = {
    202: "Accepted: still running",
    303: "See Other: the page at `Location` (a console page after a form, or the sign-in page)",
    400: "Bad input (the error names the field), or a malformed request head",
    401: "Missing or bad credentials",
    402: "A monthly spending cap (the account's or the key's) would be passed",
    403: "The key may not do this (scope, model, IP) or its credit does not cover the worst case",
    404: "Unknown model, endpoint or object",
    409: "Cannot be done in the gateway's current state (a part it needs is turned off)",
    413: "The body is larger than `max_body_bytes`",
    414: "The request line is longer than the server's limit (docs/limits.md)",
    415: "The body is not JSON",
    416: "The byte range asked for is outside the file",
    422: "Refused by a processor's policy (OneInfer: a field of the wrong JSON type)",
    429: "Over a rate or concurrency limit; see `Retry-After`",
    431: "A header, or all of them, larger than the server's limit (docs/limits.md)",
    500: "An unexpected failure (a bug: please report the request id)",
    501: "Not yet supported",
    502: "The provider failed; its own message is kept",
    503: "A provider, the database or the limit store is unavailable",
    504: "The provider timed out",
    529: "The provider is overloaded",
}


@dataclass(frozen=True, slots=True)
class Dialect:
    """How the routes of one inbound API fail and authenticate."""

    tag: str
    error: Any  # the error body's type
    security: tuple[str, ...] = ("bearer",)


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    schema: dict[str, Any] = field(default_factory=lambda: {"type": "string"})
    where: Literal["query", "path", "header"] = "query"
    required: bool = False
    description: str | None = None


@dataclass(frozen=True, slots=True)
class Operation:
    method: str
    path: str  # OpenAPI's form: `{name}`, no Starlette convertor
    summary: str
    dialect: Dialect
    ok: Any  # the success body's type; None for a route that cannot succeed yet
    errors: tuple[int, ...]
    body: Any = None  # the request body's type (a pydantic model), if any
    body_required: bool = True
    ok_status: int = 200
    also_ok: tuple[int, ...] = ()  # other success statuses with the same body (a job still running: 202)
    stream: Any = None  # the type of each `data:` frame, when `stream: true` answers SSE
    stream_done: bool = True  # the stream ends with `data: [DONE]` (OpenAI's convention; not Anthropic's)
    form: dict[str, Any] | None = None  # a multipart/form-data schema accepted beside JSON
    form_media: str = "multipart/form-data"  # the form's media type (LanguageTool's is urlencoded)
    params: tuple[Param, ...] = ()
    description: str | None = None
    authenticated: bool = True
    headers: dict[str, Any] = field(default_factory=dict)  # response headers its answers may carry
    ok_media: str | None = None  # a binary success (audio, video, a stored file): its media type, `ok` None
    redirects: tuple[int, ...] = ()  # answers with a `Location` and no body (a console page's 303)
    error_media: str | None = None  # errors may also come in this media type (a console page's HTML)


class _Schemas:
    """Every type of every operation, turned into JSON schema together (one `$defs` for all)."""

    def __init__(self, operations: list[Operation]) -> None:
        wanted: dict[tuple[int, JsonSchemaMode], tuple[int, JsonSchemaMode, TypeAdapter[Any]]] = {}
        for op in operations:
            types: list[tuple[Any, JsonSchemaMode]] = [(op.dialect.error, "serialization")]
            if op.ok is not None:
                types.append((op.ok, "serialization"))
            if op.body is not None:
                types.append((op.body, "validation"))
            if op.stream is not None:
                types.append((op.stream, "serialization"))
            for tp, mode in types:
                wanted.setdefault((id(tp), mode), (id(tp), mode, TypeAdapter(tp)))
        by_key, defs = TypeAdapter.json_schemas(list(wanted.values()), ref_template=REF)
        self.components: dict[str, Any] = dict(defs.get("$defs", {}))
        self._by_key = by_key

    def ref(self, tp: Any, mode: JsonSchemaMode) -> dict[str, Any]:
        return dict(self._by_key[(id(tp), mode)])


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def sse_event(data: dict[str, Any], *, done: bool) -> dict[str, Any]:
    """One server-sent event (OpenAPI before 3.2 describes each event of a `text/event-stream` with `schema`):
    its `data` is JSON fitting `data` (an error frame in the dialect's shape after a mid-stream failure), or
    the literal `[DONE]` that ends an OpenAI-style stream."""
    json_data = {"type": "string", "contentMediaType": "application/json", "contentSchema": data}
    return {
        "type": "object",
        "required": ["data"],
        "properties": {
            "event": {"type": "string"},
            "id": {"type": "string"},
            "data": {"anyOf": [{"const": "[DONE]"}, json_data]} if done else json_data,
        },
    }


def _path_params(path: str) -> list[Param]:
    return [Param(part[1:-1], where="path", required=True) for part in path.split("/") if part.startswith("{")]


def _operation(op: Operation, schemas: _Schemas) -> dict[str, Any]:
    responses: dict[str, Any] = {}
    if op.ok is not None:
        ok_content = _json(schemas.ref(op.ok, "serialization"))
        if op.stream is not None:
            frame = {"anyOf": [schemas.ref(op.stream, "serialization"), schemas.ref(op.dialect.error, "serialization")]}
            ok_content["text/event-stream"] = {"schema": sse_event(frame, done=op.stream_done)}
        responses[str(op.ok_status)] = {"description": "OK", "content": ok_content}
        for status in op.also_ok:
            responses[str(status)] = {"description": STATUS_TEXT[status], "content": ok_content}
    elif op.ok_media is not None:
        binary = {op.ok_media: {"schema": {"type": "string", "format": "binary"}}}
        responses[str(op.ok_status)] = {"description": "OK", "content": binary}
    for status in op.redirects:
        location = {"description": "where to go", "schema": {"type": "string"}}
        responses[str(status)] = {"description": STATUS_TEXT[status], "headers": {"Location": location}}
    error = _json(schemas.ref(op.dialect.error, "serialization"))
    if op.error_media is not None:
        error[op.error_media] = {"schema": {"type": "string"}}
    for status in sorted({*op.errors, *HEAD_ERRORS}):
        responses[str(status)] = {"description": STATUS_TEXT[status], "content": error}
        if status in (429, 503):
            responses[str(status)]["headers"] = {"Retry-After": RETRY_AFTER}
    for answer in responses.values() if op.headers else ():
        answer["headers"] = {**op.headers, **answer.get("headers", {})}
    out: dict[str, Any] = {
        "summary": op.summary,
        "tags": [op.dialect.tag],
        "operationId": op.method + op.path.replace("/", "_").replace("{", "").replace("}", ""),
        "security": [{name: []} for name in op.dialect.security] if op.authenticated else [],
        "responses": responses,
    }
    if op.description:
        out["description"] = op.description
    params = [*_path_params(op.path), *op.params]
    if params:
        out["parameters"] = [
            {"name": p.name, "in": p.where, "required": p.required, "schema": p.schema}
            | ({"description": p.description} if p.description else {})
            for p in params
        ]
    if op.body is not None or op.form is not None:  # a console page's form comes without a JSON body
        content = _json(schemas.ref(op.body, "validation")) if op.body is not None else {}
        if op.form is not None:
            content[op.form_media] = {"schema": op.form}
        out["requestBody"] = {"required": op.body_required, "content": content}
    return out


SECURITY_SCHEMES = {
    "bearer": {"type": "http", "scheme": "bearer", "description": "an API key, a token, or the master key"},
    "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key", "description": "Anthropic's header"},
}


def build_document(title: str, version: str, operations: list[Operation]) -> dict[str, Any]:
    """The OpenAPI 3.1 document describing `operations`."""
    schemas = _Schemas(operations)
    paths: dict[str, Any] = {}
    for op in operations:
        paths.setdefault(op.path, {})[op.method] = _operation(op, schemas)
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version},
        "paths": paths,
        "components": {"schemas": schemas.components, "securitySchemes": SECURITY_SCHEMES},
    }
