"""OneInfer's envelope and status table, shared by its chat routes (`oneinfer.py`) and its media routes
(`oneinfer_media.py`): `{"api_details": {"api_status", "api_message"}, "data": {...}, "error": {...}}`.

Status codes are OneInfer's table, read as `oneinfer.py`'s docstring says: a 402 or a credit refusal is its
403 "Insufficient credit balance", a 404 (an unknown model) its 400; a field of the wrong JSON type is its
422 (`validated`), a value that is not allowed its 400. Every other status keeps the gateway's meaning.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.responses import Response

from inferplex.canonical import most_telling, parse
from inferplex.context import Context
from inferplex.dialects.failure import error_headers
from inferplex.edge import json_response
from inferplex.errors import GatewayError, InvalidRequest

M = TypeVar("M", bound=BaseModel)
# Error codes the credit ledger may use for "not enough balance"; OneInfer answers those with a 403.
CREDIT_CODES = frozenset({"insufficient_credit", "insufficient_credits", "insufficient_balance", "insufficient_quota"})


def status_for(err: GatewayError) -> int:
    """The gateway's status read through OneInfer's table (see the module docstring)."""
    if err.status == 402 or err.code in CREDIT_CODES:
        return 403
    if err.status == 404:
        return 400
    return err.status


def error_envelope(err: GatewayError, status: int) -> dict[str, Any]:
    return {
        "api_details": {"api_status": "error", "api_message": err.message},
        "data": {},
        "error": {"status": status, "code": err.code, "type": err.type, "message": err.message, "param": err.param},
    }


def render_error(err: GatewayError, ctx: Context) -> Response:
    status = status_for(err)
    return json_response(error_envelope(err, status), error_headers(err, ctx), status)


def success(message: str, data: Any) -> dict[str, Any]:
    return {"api_details": {"api_status": "success", "api_message": message}, "data": data, "error": {}}


def schema_error(message: str, param: str | None = None) -> InvalidRequest:
    """OneInfer's 422: the body does not fit the schema (not an object, a field of the wrong JSON type)."""
    return InvalidRequest(message, param=param, status=422, code="schema_validation_error")


def _is_type_error(kind: str) -> bool:
    return kind.endswith("_type") or kind in ("int_from_float", "is_instance_of", "union_tag_invalid")


def validated(model: type[M], data: dict[str, Any]) -> M:
    """`data` as `model`, or the first problem as a 400 (bad value) or 422 (wrong type), field named."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        kind = most_telling(exc.errors())["type"]  # the error `parse` reports
    try:
        parse(model, data)  # raises the canonical 400 naming the field
    except InvalidRequest as err:
        if _is_type_error(kind):
            err.status, err.code = 422, "schema_validation_error"
        raise
    raise AssertionError("unreachable: the request failed validation once")  # pragma: no cover
