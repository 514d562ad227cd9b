"""`multipart/form-data` bodies, for dialects whose APIs accept a form where others send JSON (OneInfer).

A form carries only strings, so a dialect declares what each field holds (`FieldKind`) and gets back the
dict the JSON body would have been; a value that cannot be read as its kind is a 422 (the body does not fit
the schema), a body that is not a valid form a 400. The body is read within the gateway's size limit
before it is parsed, exactly as a JSON body is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import orjson
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.types import Message

from inferplex.edge import read_bytes
from inferplex.errors import InvalidRequest
from inferplex.json_limits import DEFAULT_LIMITS, JsonLimits, check_field

FieldKind = Literal["json", "json_or_text", "float", "int", "bool"]
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _schema_error(name: str, message: str) -> InvalidRequest:
    return InvalidRequest(
        f"Invalid value for form field '{name}': {message}.", param=name, status=422, code="schema_validation_error"
    )


def coerce(name: str, text: str, kind: FieldKind, limits: JsonLimits = DEFAULT_LIMITS) -> Any:
    """One form value read as the kind its field holds; a JSON value within the same `limits` as a body."""
    try:
        if kind == "json" or (kind == "json_or_text" and text.lstrip().startswith(("[", "{"))):
            value = orjson.loads(text)
            check_field(text, name, value, limits)
            return value
        if kind == "float":
            return float(text)
        if kind == "int":
            return int(text)
    except (ValueError, orjson.JSONDecodeError):
        raise _schema_error(name, f"expected {'JSON' if kind.startswith('json') else kind}") from None
    if kind == "bool":
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise _schema_error(name, "expected true or false")
    return text


async def read_form(
    request: Request, max_bytes: int, kinds: Mapping[str, FieldKind], limits: JsonLimits = DEFAULT_LIMITS
) -> dict[str, Any]:
    """The form's fields as a JSON-like dict; fields not in `kinds` stay strings, files are refused."""
    body = await read_bytes(request, max_bytes)

    async def replay() -> Message:
        return {"type": "http.request", "body": body, "more_body": False}

    try:
        form = await Request(request.scope, replay).form()
    except (HTTPException, MultiPartException) as exc:
        detail = exc.detail if isinstance(exc, HTTPException) else exc.message
        raise InvalidRequest(f"We could not parse the form body of your request: {detail}.") from None
    out: dict[str, Any] = {}
    try:
        for name, value in form.multi_items():
            if isinstance(value, UploadFile):
                raise _schema_error(name, "files are not accepted here")
            kind = kinds.get(name)
            out[name] = value if kind is None else coerce(name, value, kind, limits)
    finally:
        await form.close()
    return out
