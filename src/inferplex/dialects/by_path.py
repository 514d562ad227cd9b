"""An error in the dialect a path belongs to, for answers made before any route runs.

Routes render their own errors. Some answers come before a route is chosen: Starlette's 404 and 405, and the
HTTP server's refusals of a malformed or oversized request head (`http_server.py`). A client reads those
with the same parser it uses for every other error, so they take the dialect of the path asked for:
Anthropic's shape under `/v1/messages`, OneInfer's envelope under `/v1/ula/`, OpenAI's error object
elsewhere (the OpenAI routes, and the Unify and InferExchange seeds, whose errors are OpenAI's).
"""

from __future__ import annotations

from typing import Any

from inferplex.dialects.anthropic import error_shape
from inferplex.dialects.oneinfer import error_envelope
from inferplex.errors import GatewayError
from inferplex.translate.anthropic_to_openai import error_body


def error_payload(path: str, err: GatewayError) -> dict[str, Any]:
    """`err` as the JSON body the dialect of `path` gives its errors, at `err.status`."""
    if path.startswith("/v1/messages"):
        return error_body(error_shape(err)[1], err.message)
    if path.startswith("/v1/ula/"):
        return error_envelope(err, err.status)
    return err.to_openai()


def plain_error(message: str, status: int, code: str) -> GatewayError:
    """An error about the request itself, at `status`, of OpenAI's type `invalid_request_error`."""
    err = GatewayError(message, status=status, code=code)
    err.type = "invalid_request_error"
    return err
